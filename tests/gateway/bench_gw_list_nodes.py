"""Measure ``KubeGateway.list_nodes`` against typed ``list_node()`` on N realistic nodes.

    .venv/bin/python tests/gateway/bench_gw_list_nodes.py [N]

Serves a pre-encoded NodeList (8 KiB/node: labels, annotations, managedFields, conditions, 25
images, configSource, status.config) from a loopback server, so only the client side is timed.

Measured on the project VM (2 cores, 3 runs): 5,000 nodes (38.6 MB) -> gateway ``list_nodes``
(nodes + node Leases, joined into observations) 0.69-0.74 s, peak RSS 281 MB; typed
``CoreV1Api.list_node()`` of the same list 3.4 s, peak RSS 557 MB. 1,000 nodes: 0.16 s.
"""

from __future__ import annotations

import json
import resource
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from kubernetes import client as k8s

sys.path.insert(0, __file__.rsplit("/", 1)[0])
from gw_helpers import make_gateway  # noqa: E402


def realistic_node(i: int) -> dict:
    name = f"node-{i:05d}"
    cm = {"namespace": "kube-system", "name": "kc-abc", "kubeletConfigKey": "kubelet"}
    return {
        "metadata": {"name": name, "uid": f"uid-{i}", "resourceVersion": str(1000 + i),
                     "labels": {"kubernetes.io/hostname": name, "topology.kubernetes.io/zone": f"z{i % 3}",
                                "node.kubernetes.io/instance-type": "m5.xlarge", "kubernetes.io/os": "linux"},
                     "annotations": {"node.alpha.kubernetes.io/ttl": "0",
                                     "volumes.kubernetes.io/controller-managed-attach-detach": "true"},
                     "managedFields": [{"manager": "kubelet", "operation": "Update", "apiVersion": "v1",
                                        "fieldsType": "FieldsV1",
                                        "fieldsV1": {"f:status": {"f:conditions": {}}}}] * 3},
        "spec": {"podCIDR": "10.0.0.0/24", "providerID": f"aws:///z/i-{i:08x}",
                 "configSource": {"configMap": cm}},
        "status": {
            "capacity": {"cpu": "4", "memory": "16Gi", "pods": "110"},
            "allocatable": {"cpu": "3900m", "memory": "15Gi", "pods": "110"},
            "conditions": [{"type": t, "status": "False" if t != "Ready" else "True",
                            "lastHeartbeatTime": "2026-11-22T10:00:00Z",
                            "lastTransitionTime": "2026-11-22T09:00:00Z",
                            "reason": "KubeletReady", "message": "kubelet is posting ready status"}
                           for t in ("MemoryPressure", "DiskPressure", "PIDPressure", "Ready")],
            "addresses": [{"type": "InternalIP", "address": f"10.1.{i // 256}.{i % 256}"},
                          {"type": "Hostname", "address": name}],
            "nodeInfo": {"kubeletVersion": "v1.23.17", "osImage": "Ubuntu 22.04", "machineID": "x" * 32,
                         "systemUUID": "y" * 36, "bootID": "z" * 36, "kernelVersion": "5.15",
                         "containerRuntimeVersion": "containerd://1.6", "kubeProxyVersion": "v1.23.17",
                         "operatingSystem": "linux", "architecture": "amd64"},
            "images": [{"names": [f"registry.example.com/team/image-{j}@sha256:{'a' * 64}",
                                  f"registry.example.com/team/image-{j}:v1.2.{j}"], "sizeBytes": 123456789}
                       for j in range(25)],
            "config": {"assigned": {"configMap": cm | {"uid": "u", "resourceVersion": "5"}},
                       "active": {"configMap": cm | {"uid": "u", "resourceVersion": "5"}},
                       "lastKnownGood": {"configMap": cm | {"uid": "u", "resourceVersion": "5"}}},
        },
    }


def serve(n: int) -> tuple[ThreadingHTTPServer, int]:
    nodes = json.dumps({"kind": "NodeList", "apiVersion": "v1", "metadata": {"resourceVersion": "9"},
                        "items": [realistic_node(i) for i in range(n)]}).encode()
    leases = json.dumps({"kind": "LeaseList", "apiVersion": "coordination.k8s.io/v1",
                         "metadata": {"resourceVersion": "9"},
                         "items": [{"metadata": {"name": f"node-{i:05d}"},
                                    "spec": {"renewTime": "2026-11-22T10:00:00.000000Z",
                                             "leaseDurationSeconds": 40}} for i in range(n)]}).encode()

    class H(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"
        disable_nagle_algorithm = True

        def log_message(self, *a):
            pass

        def do_GET(self):
            body = leases if "leases" in self.path else nodes
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

    srv = ThreadingHTTPServer(("127.0.0.1", 0), H)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    return srv, len(nodes)


def main() -> None:
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 5000
    srv, size = serve(n)
    url = f"http://127.0.0.1:{srv.server_address[1]}"
    gw = make_gateway(url)
    gw.list_nodes()  # warm up
    t = time.perf_counter()
    nodes, _ = gw.list_nodes()
    gw_s = time.perf_counter() - t
    rss_gw = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(f"{n} nodes, {size / 1e6:.1f} MB: gateway list_nodes (nodes + leases, raw + small model) "
          f"{gw_s:.2f}s, peak RSS {rss_gw:.0f} MB, {len(nodes)} observations")
    if "--typed" in sys.argv:
        core = k8s.CoreV1Api(k8s.ApiClient(k8s.Configuration(host=url)))
        t = time.perf_counter()
        core.list_node()
        print(f"typed list_node(): {time.perf_counter() - t:.2f}s, peak RSS "
              f"{resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024:.0f} MB")


if __name__ == "__main__":
    main()
