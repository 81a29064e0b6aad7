"""Real kubelet-rollout-agent code on kubesim's simulated hosts, one thread per node (as
``kubelet-rollout-agent run --kubesim-fleet`` runs them), for the agent's and the flows' tests."""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, TypeVar

import yaml

from kubelet_rollout_agent.agent import Agent, Timing
from kubelet_rollout_agent.api import NodeApi, RawApi, client_from_kubeconfig
from kubelet_rollout_agent.decide import Settings
from kubelet_rollout_agent.install import Layout
from kubelet_rollout_agent.kubesim_host import NODE_KUBECONFIG, KubesimHost
from rollout.errors import GatewayError


class AgentFleet:
    """Agents started and stopped per node; the admin API (``admin``) for the test's own reads."""

    def __init__(self, cluster: Any, *, settings: Settings, timing: Timing, layout: Layout,
                 configmap_prefix: str = "kubelet-config") -> None:
        self.cluster = cluster
        self.settings, self.timing, self.layout = settings, timing, layout
        self.admin = RawApi(client_from_kubeconfig(str(cluster.kubeconfig)))
        self.running: dict[str, tuple[threading.Event, threading.Thread]] = {}
        self.configmap_prefix, self.published = configmap_prefix, 0

    def publish(self, text: str) -> dict[str, str]:
        """A ConfigMap of ``text`` (``PREFIX-N``), as a desired-config reference to it."""
        self.published += 1
        cm = self.admin.request("POST", "/api/v1/namespaces/kube-system/configmaps",
                                body={"metadata": {"name": f"{self.configmap_prefix}-{self.published}"},
                                      "data": {"kubelet": text}})
        meta = cm["metadata"]
        return {"namespace": "kube-system", "name": meta["name"], "uid": meta["uid"],
                "resourceVersion": meta["resourceVersion"], "key": "kubelet"}

    def status(self, node: str, key: str) -> Any:
        """The node's annotation ``key``, parsed when it holds a JSON object."""
        annotations = self.admin.request("GET", f"/api/v1/nodes/{node}")["metadata"].get("annotations") or {}
        value = annotations.get(key)
        return json.loads(value) if value and value.startswith("{") else value

    def configz(self, node: str) -> dict[str, Any]:
        """The running config; {} while the kubelet is down (503)."""
        try:
            return dict(self.admin.request("GET", f"/api/v1/nodes/{node}/proxy/configz", retry=False)["kubeletconfig"])
        except GatewayError:
            return {}

    def root(self, node: str) -> Path:
        return Path(self.cluster.host(node).root)

    def agent(self, node: str, settings: Settings | None = None) -> Agent:
        """The agent of ``node``, not running: ``start`` runs one, a test may also step one."""
        root = self.root(node)
        raw = RawApi(client_from_kubeconfig(str(root / NODE_KUBECONFIG.lstrip("/"))))
        return Agent(api=NodeApi(self.admin, node), host=KubesimHost(node, root=root, raw=raw), layout=self.layout,
                     settings=settings or self.settings, timing=self.timing)

    def start(self, node: str) -> None:
        agent = self.agent(node)
        stop = threading.Event()
        thread = threading.Thread(target=agent.run, args=(stop,), name=f"agent-{node}", daemon=True)
        thread.start()
        self.running[node] = (stop, thread)

    def stop(self, node: str) -> None:
        """The agent process gone (and kept down): its thread ends, nothing of it runs."""
        stop, thread = self.running.pop(node)
        stop.set()
        thread.join(timeout=60)

    def stop_all(self) -> None:
        for node in list(self.running):
            self.stop(node)


F = TypeVar("F", bound=AgentFleet)


@contextmanager
def fleet_on_kubesim(start_cluster: Callable[..., Any], tmp_path_factory: Any, cluster_file: dict[str, Any],
                     make: Callable[[Any], F]) -> Iterator[F]:
    """A 1.31 kubesim of ``cluster_file`` at x20 (``start_cluster``: the module's cluster factory),
    its fleet made by ``make``; every agent stopped after."""
    path = tmp_path_factory.mktemp("cluster") / "cluster.yaml"
    path.write_text(yaml.safe_dump(cluster_file))
    fleet = make(start_cluster(kubernetes_version="1.31", cluster_file=path, time_scale=20))
    try:
        yield fleet
    finally:
        fleet.stop_all()
