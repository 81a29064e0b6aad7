"""Pure builders for what a kubelet writes: its Node (registration + status), its Lease, configz.

Why pure: the heartbeat loops decide *when* to write; these functions decide *what*, from the
node's spec (cluster file) and the config the process actually runs - so ``maxPods`` and the
reserved resources of a rolled-out config show up in ``capacity``/``allocatable`` like on a
real node, and ``configz`` shows exactly the effective config (flags and defaults included).
"""

from __future__ import annotations

import hashlib
import uuid
from datetime import datetime, timezone
from decimal import Decimal
from typing import Any, Optional

from kubesim.clusterfile import NodeSpec
from kubesim.kubelet import schema
from kubesim.kubelet.kubeletconfig import Config
from kubesim.kubelet.units import UnitError, parse_quantity

LEASE_NAMESPACE = "kube-node-lease"
CONDITIONS = (
    ("MemoryPressure", "False", "KubeletHasSufficientMemory", "kubelet has sufficient memory available"),
    ("DiskPressure", "False", "KubeletHasNoDiskPressure", "kubelet has no disk pressure"),
    ("PIDPressure", "False", "KubeletHasSufficientPID", "kubelet has sufficient PID available"),
    ("Ready", "True", "KubeletReady", "kubelet is posting ready status"),
)


def now_rfc3339() -> str:
    return datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def now_micro() -> str:
    return datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def _stable_uuid(spec: NodeSpec, what: str) -> str:
    return str(uuid.UUID(hashlib.md5(f"{spec.name}/{what}".encode()).hexdigest()))  # noqa: S324 - ids only


def node_ip(spec: NodeSpec) -> str:
    digest = int(hashlib.md5(spec.name.encode()).hexdigest(), 16)  # noqa: S324
    return f"10.{(digest >> 16) % 250 + 1}.{(digest >> 8) % 256}.{digest % 254 + 1}"


def _format_quantity(value: Decimal, unit: str) -> str:
    if unit == "cpu":  # else memory: Ki
        milli = int(value * 1000)
        return str(milli // 1000) if milli % 1000 == 0 else f"{milli}m"
    ki = int(value) // 1024
    return f"{ki}Ki"


def capacity(spec: NodeSpec, cfg: Config) -> dict[str, str]:
    cap = {"cpu": "4", "memory": "16Gi", "ephemeral-storage": "100Gi", "hugepages-1Gi": "0", "hugepages-2Mi": "0"}
    cap.update(spec.capacity)
    pods = int(cfg.get("maxPods") or 110)
    per_core = int(cfg.get("podsPerCore") or 0)
    if per_core > 0:  # the effective limit never exceeds maxPods
        try:
            pods = min(pods, int(parse_quantity(cap["cpu"])) * per_core)
        except UnitError:
            pass
    cap["pods"] = str(pods)
    return cap


_EVICTION_SIGNAL = {"memory": "memory.available", "ephemeral-storage": "nodefs.available"}


def allocatable(spec: NodeSpec, cfg: Config) -> dict[str, str]:
    """capacity - kubeReserved - systemReserved - hard eviction threshold (``GetNodeAllocatableAbsolute``)."""
    cap = capacity(spec, cfg)
    out = dict(cap)
    for resource in ("cpu", "memory", "ephemeral-storage"):
        try:
            total = parse_quantity(cap[resource])
            reserved = sum(
                (parse_quantity((cfg.get(f) or {}).get(resource, "0")) for f in ("kubeReserved", "systemReserved")),
                Decimal(0),
            )
            reserved += _hard_threshold(cfg, resource, total)
        except UnitError:
            continue
        left = max(total - reserved, Decimal(0))
        # as a real node shows it: cpu in cores/millicores, memory in Ki, ephemeral-storage in bytes
        out[resource] = str(int(left)) if resource == "ephemeral-storage" else _format_quantity(left, resource)
    return out


def _hard_threshold(cfg: Config, resource: str, total: Decimal) -> Decimal:
    signal = _EVICTION_SIGNAL.get(resource)
    value = (cfg.get("evictionHard") or {}).get(signal or "", "")
    if not value:
        return Decimal(0)
    if value.endswith("%"):
        return total * Decimal(value[:-1]) / 100
    return parse_quantity(value)


# the eviction manager's condition while free memory is below the hard threshold
MEMORY_PRESSURE = ("MemoryPressure", "True", "KubeletHasInsufficientMemory", "kubelet has insufficient memory available")


def _conditions(memory_pressure: bool) -> tuple[tuple[str, str, str, str], ...]:
    return (MEMORY_PRESSURE, *CONDITIONS[1:]) if memory_pressure else CONDITIONS


def conditions(
    now: str, previous: Optional[list[dict[str, Any]]] = None, *, memory_pressure: bool = False
) -> list[dict[str, Any]]:
    """The conditions (healthy but for MemoryPressure when told); lastTransitionTime kept from
    ``previous`` when the status is unchanged."""
    before = {c.get("type"): c for c in previous or []}
    out = []
    for kind, status, reason, message in _conditions(memory_pressure):
        old = before.get(kind) or {}
        transition = old.get("lastTransitionTime") if old.get("status") == status else now
        out.append(
            {
                "type": kind,
                "status": status,
                "lastHeartbeatTime": now,
                "lastTransitionTime": transition or now,
                "reason": reason,
                "message": message,
            }
        )
    return out


def node_status(spec: NodeSpec, cfg: Config, now: str, previous: Optional[dict[str, Any]] = None) -> dict[str, Any]:
    return dict(static_status(spec, cfg), conditions=conditions(now, (previous or {}).get("conditions")))


def static_status(spec: NodeSpec, cfg: Config) -> dict[str, Any]:
    """Everything of the status a running process reports that does not depend on time."""
    return {
        "capacity": capacity(spec, cfg),
        "allocatable": allocatable(spec, cfg),
        "addresses": [{"type": "InternalIP", "address": node_ip(spec)}, {"type": "Hostname", "address": spec.name}],
        "daemonEndpoints": {"kubeletEndpoint": {"Port": int(cfg.get("port") or 10250)}},
        "nodeInfo": {
            "machineID": _stable_uuid(spec, "machine").replace("-", ""),
            "systemUUID": _stable_uuid(spec, "system"),
            "bootID": _stable_uuid(spec, "boot"),
            "kernelVersion": spec.host.kernel_version,
            "osImage": spec.host.os_image,
            "containerRuntimeVersion": spec.host.container_runtime,
            "kubeletVersion": spec.kubelet.version,
            "kubeProxyVersion": spec.kubelet.version,
            "operatingSystem": "linux",
            "architecture": "amd64",
        },
    }


def registration(spec: NodeSpec, cfg: Config) -> dict[str, Any]:
    """The Node a kubelet POSTs at start (``initialNode``)."""
    now = now_rfc3339()
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": spec.name,
            "labels": dict(spec.labels),
            "annotations": {
                "node.alpha.kubernetes.io/ttl": "0",
                "volumes.kubernetes.io/controller-managed-attach-detach": "true",
            },
        },
        # registerWithTaints (1.23) applies only when the Node is first created
        "spec": {"taints": [dict(t) for t in cfg["registerWithTaints"]]} if cfg.get("registerWithTaints") else {},
        "status": node_status(spec, cfg, now),
    }


def up_to_date(current: dict[str, Any], static: dict[str, Any], *, memory_pressure: bool = False) -> bool:
    """``!nodeStatusHasChanged``: the same conditions and static parts (times ignored)."""
    conds = {c.get("type"): c for c in current.get("conditions") or []}
    for kind, status, reason, message in _conditions(memory_pressure):
        cond = conds.get(kind)
        if cond is None or (cond.get("status"), cond.get("reason"), cond.get("message")) != (status, reason, message):
            return False
    return all(current.get(key) == value for key, value in static.items())


def lease(spec: NodeSpec, node_uid: str, duration: int) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": spec.name, "namespace": LEASE_NAMESPACE}
    if node_uid:
        meta["ownerReferences"] = [{"apiVersion": "v1", "kind": "Node", "name": spec.name, "uid": node_uid}]
    return {
        "apiVersion": "coordination.k8s.io/v1",
        "kind": "Lease",
        "metadata": meta,
        "spec": {"holderIdentity": spec.name, "leaseDurationSeconds": duration, "renewTime": now_micro()},
    }


def _omit(spec: schema.FieldSpec, value: Any) -> bool:
    """json ``omitempty`` on a non-pointer field (structs and durations are never omitted)."""
    if spec.pointer:
        return value is None
    if not spec.omitempty or spec.type in ("duration", "object"):
        return False
    return value in (None, "", 0, False) or value == {} or value == []


def render(cfg: Config, specs: Optional[dict[str, schema.FieldSpec]] = None) -> dict[str, Any]:
    """The config as ``configz`` prints it (v1beta1 JSON, no kind/apiVersion)."""
    out: dict[str, Any] = {}
    for name, spec in (specs or schema.fields(schema.NEWEST_MINOR)).items():
        value = cfg.get(name)
        if _omit(spec, value):
            continue
        if spec.type == "object" and isinstance(value, dict):
            value = render(value, spec.children)
        elif spec.type == "list<object>" and isinstance(value, list):
            value = [render(item, spec.children) for item in value]
        out[name] = value
    return out
