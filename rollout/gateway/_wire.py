"""Small structs of exactly the API fields the orchestrator reads, decoded with ``msgspec``.

Reading a 5,000-node ``NodeList`` through the typed client costs ~3.5 s and ~470 MB (reference:
prefect-and-kubernetes-client.md §7). Decoding the raw bytes into these structs skips everything
else in the objects (images, managedFields, capacity, ...): a 20,000-node list (47 MB) takes
0.1 to 0.15 s, where pydantic models of the same fields took 1.5 to 1.8 s, most of start-up at
that size (bench/README.md).

These structs stay inside the gateway package: :func:`to_observation` turns them into the core's
frozen :class:`~rollout.model.NodeObservation`.
"""

from __future__ import annotations

import json
from datetime import datetime, timezone
from types import MappingProxyType
from typing import Any, Optional, TypeVar

import msgspec

from rollout.model import ConfigRef, NodeObservation
from rollout.names import (
    ANN_AGENT,
    ANN_CONFIG_ACTIVE,
    ANN_CONFIG_ASSIGNED,
    ANN_CONFIG_ERROR,
    ANN_CONFIG_LAST_KNOWN_GOOD,
    ANN_DESIRED_CONFIG,
)


class Wire(msgspec.Struct, rename="camel"):
    """Unknown fields are skipped; field names are the API's camelCase spelling."""


S = TypeVar("S", bound=msgspec.Struct)


def decode(model: type[S], data: bytes | str | msgspec.Raw) -> S:
    """An API response's JSON as ``model`` (ValueError: not JSON, or not that shape)."""
    return msgspec.json.decode(data, type=model)


def from_object(model: type[S], obj: Any) -> S:
    """An already-parsed JSON object as ``model`` (ValueError: not that shape)."""
    return msgspec.convert(obj, model)


class Meta(Wire):
    name: str = ""
    namespace: str = ""
    uid: str = ""
    resource_version: str = ""
    labels: dict[str, str] = {}
    annotations: dict[str, str] = {}


class ListMeta(Wire):
    resource_version: str = ""
    continue_: Optional[str] = msgspec.field(default=None, name="continue")


class NodeConfigStatus(Wire):
    assigned: Optional[dict[str, Any]] = None
    active: Optional[dict[str, Any]] = None
    last_known_good: Optional[dict[str, Any]] = None
    error: str = ""


class Condition(Wire):
    # times stay text here: only the Ready condition's are parsed (to_observation)
    type: str = ""
    status: str = ""
    last_transition_time: Optional[str] = None
    last_heartbeat_time: Optional[str] = None


class NodeSpec(Wire):
    unschedulable: bool = False
    config_source: Optional[dict[str, Any]] = None


class NodeSystemInfo(Wire):
    kubelet_version: str = ""  # "v1.31.2", as the kubelet reports itself


class NodeStatus(Wire):
    # None = no ``config`` key at all (DKC off, or stripped by a gate-off API server);
    # an empty NodeConfigStatus = ``config: {}`` (DKC on, nothing assigned)
    config: Optional[NodeConfigStatus] = None
    conditions: list[Condition] = []
    node_info: NodeSystemInfo = msgspec.field(default_factory=NodeSystemInfo)


class Object(Wire):
    """An API object's metadata (a BOOKMARK carries no more)."""

    metadata: Meta = msgspec.field(default_factory=Meta)


class _Version(Wire):
    resource_version: str = ""


class Versioned(Wire):
    """Only an object's resourceVersion: where a watch resumes past an object it could not read."""

    metadata: _Version = msgspec.field(default_factory=_Version)


class Node(Object):
    spec: NodeSpec = msgspec.field(default_factory=NodeSpec)
    status: NodeStatus = msgspec.field(default_factory=NodeStatus)


class WireList(Wire):
    """One page of a list call (the whole list when it was not paged)."""

    metadata: ListMeta = msgspec.field(default_factory=ListMeta)


class NodeList(WireList):
    items: list[Node] = []


class LeaseSpec(Wire):
    holder_identity: Optional[str] = None
    lease_duration_seconds: Optional[int] = None
    acquire_time: Optional[datetime] = None
    renew_time: Optional[datetime] = None
    lease_transitions: Optional[int] = None


class Lease(Object):
    spec: LeaseSpec = msgspec.field(default_factory=LeaseSpec)


class LeaseList(WireList):
    items: list[Lease] = []


class WatchEvent(msgspec.Struct):
    """One line of a watch stream. Its object stays raw until the type is known: an ERROR's
    object is a Status, every other one the watched kind."""

    type: str = ""
    object: msgspec.Raw = msgspec.Raw(b"{}")


class LeaseInfo(Wire):
    """A node lease reduced to what liveness needs."""

    renewed: Optional[datetime] = None
    duration_s: Optional[float] = None


def lease_info(lease: Lease) -> LeaseInfo:
    """What liveness needs of one node Lease."""
    duration = lease.spec.lease_duration_seconds
    return LeaseInfo(renewed=lease.spec.renew_time, duration_s=float(duration) if duration is not None else None)


def lease_infos(*pages: LeaseList) -> dict[str, LeaseInfo]:
    """Node name -> renewal time and duration, from a ``kube-node-lease`` LeaseList's pages."""
    return {lease.metadata.name: lease_info(lease) for page in pages for lease in page.items}


def _utc(ts: datetime | None) -> datetime | None:
    return ts.astimezone(timezone.utc) if ts is not None else None


def _time(text: str | None) -> datetime | None:
    """An RFC 3339 API timestamp (``2026-11-22T10:00:00Z``) as an aware UTC datetime."""
    if not text:
        return None
    try:
        ts = datetime.fromisoformat(text)
    except ValueError:
        return None
    return ts.replace(tzinfo=timezone.utc) if ts.tzinfo is None else ts.astimezone(timezone.utc)


def micro_time(ts: datetime) -> str:
    """A MicroTime as the API server writes it (Lease times, the lifecycle request's stamp)."""
    return ts.astimezone(timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def _agent_ref(annotations: dict[str, str], key: str) -> ConfigRef | None:
    """A ConfigRef from the agent's JSON annotation ({namespace, name, uid, resourceVersion, key})."""
    raw = annotations.get(key)
    if not raw:
        return None
    try:
        body = json.loads(raw)
    except ValueError:
        return None
    if not isinstance(body, dict) or not body.get("name"):
        return None
    return ConfigRef(namespace=str(body.get("namespace", "")), name=str(body["name"]),
                     kubelet_config_key=str(body.get("key") or body.get("kubeletConfigKey") or "kubelet"),
                     uid=body.get("uid") or None, resource_version=body.get("resourceVersion") or None)


def to_observation(node: Node, *, lease: LeaseInfo | None, observed_at: datetime | None
                   ) -> NodeObservation:
    """The core's view of one node (frozen, SDK-free).

    A node whose agent advertises itself (``kubelet-rollout.io/agent``) is seen through the agent's
    annotations, which mirror ``status.config``: the desired-config annotation plays the part of
    ``spec.configSource``. The core decides on the same fields either way.
    """
    config = _agent_config(node) if ANN_AGENT in node.metadata.annotations else _dkc_config(node)
    ready = next((c for c in node.status.conditions if c.type == "Ready"), None)
    return NodeObservation(
        name=node.metadata.name,
        uid=node.metadata.uid,
        resource_version=node.metadata.resource_version,
        labels=MappingProxyType(dict(node.metadata.labels)),
        annotations=MappingProxyType(dict(node.metadata.annotations)),
        unschedulable=node.spec.unschedulable,
        kubelet_version=node.status.node_info.kubelet_version,
        ready=ready.status if ready else "",
        ready_transition=_time(ready.last_transition_time) if ready else None,
        ready_heartbeat=_time(ready.last_heartbeat_time) if ready else None,
        lease_renewed=_utc(lease.renewed) if lease else None,
        lease_duration_s=lease.duration_s if lease else None,
        observed_at=observed_at,
        **config,
    )


def _dkc_config(node: Node) -> dict[str, Any]:
    """Dynamic Kubelet Config: ``spec.configSource`` and ``status.config``."""
    cfg = node.status.config
    return {
        "spec_source": ConfigRef.from_api(node.spec.config_source),
        "has_config_status": cfg is not None,
        "assigned": ConfigRef.from_api(cfg.assigned) if cfg else None,
        "active": ConfigRef.from_api(cfg.active) if cfg else None,
        "last_known_good": ConfigRef.from_api(cfg.last_known_good) if cfg else None,
        "error": cfg.error if cfg else "",
        "backend": "dkc" if cfg is not None else "",
    }


def _agent_config(node: Node) -> dict[str, Any]:
    """The node agent: desired-config (our write) and the agent's mirror of ``status.config``."""
    ann = node.metadata.annotations
    desired = _agent_ref(ann, ANN_DESIRED_CONFIG)
    try:
        advertised = json.loads(ann.get(ANN_AGENT) or "")
    except ValueError:
        advertised = None
    writes = advertised.get("backend") if isinstance(advertised, dict) else None
    return {
        "spec_source": desired.unresolved() if desired else None,
        "has_config_status": True,
        "assigned": _agent_ref(ann, ANN_CONFIG_ASSIGNED),
        "active": _agent_ref(ann, ANN_CONFIG_ACTIVE),
        "last_known_good": _agent_ref(ann, ANN_CONFIG_LAST_KNOWN_GOOD),
        "error": ann.get(ANN_CONFIG_ERROR, ""),
        "backend": "agent",
        "writes": writes if writes in ("drop-in", "main-file") else "",
    }
