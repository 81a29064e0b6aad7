"""Helpers for tests of the simulated kubelets against a running cluster (Python client side).

The DKC, node-lifecycle and process tests need the same few things: bounded polling (never a fixed
sleep as an assertion), the raw ``status.config`` (the generated client renames keys to
snake_case), the on-disk store of a node, and KubeletConfiguration payloads. Test code, so it
lives with the tests and does not ship in the package.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any, Callable, Optional, TypeVar

import yaml

T = TypeVar("T")
HEAD = {"kind": "KubeletConfiguration", "apiVersion": "kubelet.config.k8s.io/v1beta1"}


def payload(**fields: Any) -> str:
    """A JSON KubeletConfiguration with kind/apiVersion and the given fields."""
    return json.dumps({**HEAD, **fields}, indent=2)


def wait_for(
    probe: Callable[[], Optional[T]], *, timeout: float = 20.0, interval: float = 0.1, what: str = "condition"
) -> T:
    """Poll ``probe`` until it returns something truthy; fail with the last value seen."""
    deadline = time.monotonic() + timeout
    last: Any = None
    while True:
        try:
            last = probe()
        except Exception as exc:  # noqa: BLE001 - transient API errors while polling
            last = exc
        if last and not isinstance(last, Exception):
            return last
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}; last: {last!r}")
        time.sleep(interval)


def raw_node(api: Any, name: str) -> dict[str, Any]:
    """The Node as JSON (camelCase keys, ``status.config`` as the server sends it)."""
    response = api.read_node(name, _preload_content=False)
    return json.loads(response.data)


def config_status(api: Any, name: str) -> Optional[dict[str, Any]]:
    return (raw_node(api, name).get("status") or {}).get("config")


def ready_status(api: Any, name: str) -> str:
    for cond in (raw_node(api, name).get("status") or {}).get("conditions") or []:
        if cond.get("type") == "Ready":
            return str(cond.get("status"))
    return "Missing"


def ready_condition(api: Any, name: str) -> dict[str, Any]:
    for cond in (raw_node(api, name).get("status") or {}).get("conditions") or []:
        if cond.get("type") == "Ready":
            return dict(cond)
    return {}


def node_events(api: Any, name: str, reason: Optional[str] = None) -> list[dict[str, Any]]:
    """Events about a node (``involvedObject.uid`` is the node name), oldest first."""
    selector = f"involvedObject.name={name}" + (f",reason={reason}" if reason else "")
    response = api.list_namespaced_event("default", field_selector=selector, _preload_content=False)
    items = json.loads(response.data).get("items") or []
    return sorted(items, key=lambda e: (e.get("firstTimestamp") or "", e["metadata"]["name"]))


def cm_ref(name: str, *, namespace: str = "kube-system", key: str = "kubelet") -> dict[str, Any]:
    return {"configMap": {"name": name, "namespace": namespace, "kubeletConfigKey": key}}


def resolved(api: Any, name: str, *, namespace: str = "kube-system", key: str = "kubelet") -> dict[str, Any]:
    """The fully resolved source (uid + current rv) a node should report for ConfigMap ``name``."""
    cm = api.read_namespaced_config_map(name, namespace)
    return {
        "configMap": {
            "kubeletConfigKey": key,
            "name": name,
            "namespace": namespace,
            "resourceVersion": cm.metadata.resource_version,
            "uid": cm.metadata.uid,
        }
    }


def assign(api: Any, node: str, source: Optional[dict[str, Any]]) -> None:
    """Admin PATCH of ``spec.configSource`` (merge patch; None removes it)."""
    api.patch_node(node, {"spec": {"configSource": source}})


def lease_renew_time(coordination: Any, node: str) -> str:
    lease = coordination.read_namespaced_lease(node, "kube-node-lease")
    return str(lease.spec.renew_time)


class NodeStore:
    """Read-only view of ``<node_dir>/dynamic-config/store``."""

    def __init__(self, node_dir: Path):
        self.root = Path(node_dir) / "dynamic-config" / "store"

    def meta(self, which: str) -> Optional[dict[str, Any]]:
        text = (self.root / "meta" / which).read_text()
        return (yaml.safe_load(text) or {}).get("source") if text else None

    @property
    def assigned(self) -> Optional[dict[str, Any]]:
        return self.meta("assigned")

    @property
    def last_known_good(self) -> Optional[dict[str, Any]]:
        return self.meta("last-known-good")

    def assigned_mtime(self) -> float:
        return (self.root / "meta" / "assigned").stat().st_mtime

    def checkpoints(self) -> set[tuple[str, str]]:
        base = self.root / "checkpoints"
        return {(u.name, r.name) for u in base.iterdir() if u.is_dir() for r in u.iterdir() if r.is_dir()}

    def checkpoint_file(self, source: dict[str, Any]) -> Path:
        cm = source["configMap"]
        return self.root / "checkpoints" / cm["uid"] / cm["resourceVersion"] / cm["kubeletConfigKey"]
