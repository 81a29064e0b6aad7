"""A real Prometheus on loopback, scraping every kubelet of a cluster through the API server's
node proxy: what ``rollout demo`` starts, and the tests.

Debian's ``prometheus`` (2.42, installed by ``make system-deps``) is built without
``kubernetes_sd_configs``, so the nodes are discovered through ``http_sd_configs`` from
:class:`NodeTargets`, a small HTTP service-discovery endpoint of ours that lists the cluster's
nodes through the API server (with the scraping ServiceAccount's own token: it may list nodes)
and labels each target as ``kubernetes_sd_configs`` (role ``node``) would. The relabelling is
then the same for both (``deployments/prometheus/``): ``__address__`` becomes the API server,
``__metrics_path__`` ``/api/v1/nodes/NODE/proxy/metrics``, and the scrape carries the bearer
token of the ServiceAccount of ``deployments/kubernetes/prometheus-rbac.yaml``.

Prometheus runs as its own process with a temporary data directory and a free port, never as the
system service; it is stopped (and its directory removed) when the context ends.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import tempfile
import threading
import time
import urllib.parse
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, Callable
from urllib.parse import urlsplit

import yaml

from rollout_cli.local_processes import free_port

NODE_NAME_LABEL = "__meta_kubernetes_node_name"
SCRAPER = ("kubelet-rollout-prometheus", "kubelet-rollout")  # ServiceAccount, namespace
# deployments/kubernetes/prometheus-rbac.yaml as data (the demo runs from an installed package;
# tests/flows/test_analysis.py keeps the two equal)
SCRAPER_RBAC: list[dict[str, Any]] = [
    {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "kubelet-rollout"}},
    {"apiVersion": "v1", "kind": "ServiceAccount",
     "metadata": {"name": "kubelet-rollout-prometheus", "namespace": "kubelet-rollout"}},
    {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
     "metadata": {"name": "kubelet-rollout-prometheus"},
     "rules": [{"apiGroups": [""], "resources": ["nodes"], "verbs": ["list", "watch"]},
               {"apiGroups": [""], "resources": ["nodes/proxy"], "verbs": ["get"]}]},
    {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
     "metadata": {"name": "kubelet-rollout-prometheus"},
     "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "kubelet-rollout-prometheus"},
     "subjects": [{"kind": "ServiceAccount", "name": "kubelet-rollout-prometheus", "namespace": "kubelet-rollout"}]},
]


def grant_scraper(admin_kubeconfig: Path) -> None:
    """Create the scraping ServiceAccount and its RBAC (what ``kubectl apply -f`` of the manifest does)."""
    from kubernetes import client, config, utils
    from kubernetes.utils import FailToCreateError

    api = config.new_client_from_config(str(admin_kubeconfig))  # type: ignore[no-untyped-call]
    for doc in SCRAPER_RBAC:
        try:
            utils.create_from_dict(api, doc)  # type: ignore[no-untyped-call]
        except FailToCreateError as exc:  # already there: the same objects
            if not all(getattr(e, "status", 0) == 409 for e in exc.api_exceptions):
                raise
    client.CoreV1Api(api).api_client.close()
READY_TIMEOUT_S = 60.0


def relabel_configs() -> list[dict[str, Any]]:
    """The relabelling of ``deployments/prometheus/*.yml``: scrape each node through the node proxy."""
    return [
        {"source_labels": [NODE_NAME_LABEL], "target_label": "node"},
        {"source_labels": [NODE_NAME_LABEL], "target_label": "instance"},
        {"target_label": "__address__", "replacement": "API_SERVER"},
        {"source_labels": [NODE_NAME_LABEL], "regex": "(.+)", "target_label": "__metrics_path__",
         "replacement": "/api/v1/nodes/${1}/proxy/metrics"},
    ]


class NodeTargets:
    """``http_sd_configs`` for Prometheus: every node of the cluster, listed when asked."""

    def __init__(self, list_nodes: Callable[[], list[dict[str, Any]]]) -> None:
        self.list_nodes = list_nodes
        self.port = free_port()
        handler = self._handler()
        self.server = ThreadingHTTPServer(("127.0.0.1", self.port), handler)
        self.thread = threading.Thread(target=self.server.serve_forever, name="node-targets", daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/targets"

    def groups(self) -> list[dict[str, Any]]:
        """One target group per node, labelled as kubernetes_sd_configs' role node labels it."""
        out = []
        for node in self.list_nodes():
            meta = node.get("metadata") or {}
            labels = {NODE_NAME_LABEL: meta.get("name", "")}
            for key, value in (meta.get("labels") or {}).items():
                clean = "".join(c if c.isalnum() else "_" for c in key)
                labels[f"__meta_kubernetes_node_label_{clean}"] = value
            out.append({"targets": [meta.get("name", "")], "labels": labels})
        return out

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        targets = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:  # noqa: N802 - http.server's name
                try:
                    body = json.dumps(targets.groups()).encode()
                    self.send_response(200)
                except Exception as exc:  # noqa: BLE001 - Prometheus keeps its last targets on an error
                    body = str(exc).encode()
                    self.send_response(503)
                self.send_header("Content-Type", "application/json")
                self.end_headers()
                try:
                    self.wfile.write(body)
                except OSError:
                    pass  # Prometheus gave up on this refresh (or is stopping): it asks again

            def log_message(self, format: str, *args: Any) -> None:
                return None

        return Handler

    def start(self) -> NodeTargets:
        self.thread.start()
        return self

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def kubeconfig_endpoint(kubeconfig: Path) -> tuple[str, str, str]:
    """The API server URL, the CA (PEM) and the bearer token of a kubeconfig's current context."""
    import base64

    doc = yaml.safe_load(kubeconfig.read_text())
    context = next(c["context"] for c in doc["contexts"] if c["name"] == doc["current-context"])
    cluster = next(c["cluster"] for c in doc["clusters"] if c["name"] == context["cluster"])
    user = next(u["user"] for u in doc["users"] if u["name"] == context["user"])
    ca = base64.b64decode(cluster["certificate-authority-data"]).decode()
    return cluster["server"], ca, user["token"]


def nodes_lister(server: str, ca_file: Path, token: str) -> Callable[[], list[dict[str, Any]]]:
    """GET /api/v1/nodes with the token (the ServiceAccount may list nodes)."""
    import ssl

    context = ssl.create_default_context(cafile=str(ca_file))

    def list_nodes() -> list[dict[str, Any]]:
        request = urllib.request.Request(f"{server}/api/v1/nodes", headers={"Authorization": f"Bearer {token}"})
        with urllib.request.urlopen(request, timeout=10, context=context) as response:
            return list(json.loads(response.read()).get("items") or [])

    return list_nodes


def _duration(seconds: float) -> str:
    """Prometheus' duration syntax (whole units: ``800ms``, not ``0.8s``)."""
    return f"{int(round(seconds * 1000))}ms"


def scrape_config(*, server: str, ca_file: Path, token_file: Path, sd_url: str, interval_s: float) -> dict[str, Any]:
    relabel = relabel_configs()
    relabel[2]["replacement"] = urlsplit(server).netloc
    return {
        "global": {"scrape_interval": _duration(interval_s), "scrape_timeout": _duration(max(interval_s * 0.8, 0.5)),
                   "evaluation_interval": _duration(interval_s)},
        "scrape_configs": [{
            "job_name": "kubelet",
            "scheme": "https",
            "tls_config": {"ca_file": str(ca_file)},
            "authorization": {"credentials_file": str(token_file)},
            "http_sd_configs": [{"url": sd_url, "refresh_interval": _duration(max(interval_s, 1.0))}],
            "relabel_configs": relabel,
        }],
    }


class LocalPrometheus:
    """``with LocalPrometheus(kubeconfig) as prom: prom.url`` - Prometheus scraping every node.

    ``kubeconfig``: credentials of the scraping ServiceAccount (``kubelet-rollout-prometheus``).
    """

    def __init__(self, kubeconfig: Path, *, scrape_interval_s: float = 1.0, binary: str = "prometheus") -> None:
        self.kubeconfig = Path(kubeconfig)
        self.interval = scrape_interval_s
        self.binary = shutil.which(binary) or binary
        self.dir = Path(tempfile.mkdtemp(prefix="kubelet-rollout-prometheus-"))
        self.port = 0
        self.process: subprocess.Popen[bytes] | None = None
        self.targets: NodeTargets | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> LocalPrometheus:
        server, ca, token = kubeconfig_endpoint(self.kubeconfig)
        ca_file, token_file = self.dir / "ca.crt", self.dir / "token"
        ca_file.write_text(ca)
        token_file.write_text(token)
        token_file.chmod(0o600)
        self.targets = NodeTargets(nodes_lister(server, ca_file, token)).start()
        config = scrape_config(server=server, ca_file=ca_file, token_file=token_file, sd_url=self.targets.url,
                               interval_s=self.interval)
        (self.dir / "prometheus.yml").write_text(yaml.safe_dump(config, sort_keys=False))
        self.launch()
        return self

    def launch(self, port: int | None = None) -> None:
        """Start the process (again, after :meth:`kill`: same data, same port)."""
        self.port = port or self.port or free_port()
        log = open(self.dir / "prometheus.log", "ab")  # noqa: SIM115 - the child keeps it
        self.process = subprocess.Popen(
            [self.binary, f"--config.file={self.dir / 'prometheus.yml'}", f"--storage.tsdb.path={self.dir / 'data'}",
             f"--web.listen-address=127.0.0.1:{self.port}", "--storage.tsdb.retention.time=2h", "--log.level=warn"],
            stdout=log, stderr=log, start_new_session=True)
        log.close()
        deadline = time.monotonic() + READY_TIMEOUT_S
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"prometheus exited at start: {(self.dir / 'prometheus.log').read_text()[-2000:]}")
            try:
                with urllib.request.urlopen(f"{self.url}/-/ready", timeout=2) as response:
                    if response.status == 200:
                        return
            except OSError:
                time.sleep(0.2)
        raise RuntimeError(f"prometheus not ready within {READY_TIMEOUT_S:g}s")

    def kill(self) -> None:
        """``kill -9`` the Prometheus process (the tests' outage)."""
        if self.process is not None and self.process.poll() is None:
            self.process.kill()
            self.process.wait(10)

    def query(self, promql: str) -> list[dict[str, Any]]:
        url = f"{self.url}/api/v1/query?" + urllib.parse.urlencode({"query": promql})
        with urllib.request.urlopen(url, timeout=10) as response:
            return list(json.loads(response.read())["data"]["result"])

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(10)
        if self.targets is not None:
            self.targets.stop()
        shutil.rmtree(self.dir, ignore_errors=True)

    def __enter__(self) -> LocalPrometheus:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
