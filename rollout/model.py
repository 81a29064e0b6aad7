"""Frozen values the rollout core passes around: what a node looks like to the orchestrator.

These are the contract between the gateway (which fills them from the API) and the pure core
(which decides from them). They carry only what a decision needs, so a 5,000-node observation is
small, and they never hold SDK objects: the core must not know which client produced them.

Timestamps are timezone-aware UTC ``datetime`` values; nothing here reads a clock.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from datetime import datetime
from types import MappingProxyType
from typing import Any, Mapping

from rollout.names import CONFIG_KEY

__all__ = ["ClusterFacts", "ConfigRef", "NodeObservation", "NodePhase"]

_EMPTY: Mapping[str, str] = MappingProxyType({})


@dataclass(frozen=True)
class ConfigRef:
    """A ConfigMap node config source.

    In ``spec.configSource`` only namespace/name/key are set; in ``status.config`` the kubelet
    resolves uid and resourceVersion too. Two refs name *the same config* only if all five match
    (reference section 12.3: compare uid and resourceVersion, not names).
    """

    namespace: str
    name: str
    kubelet_config_key: str = CONFIG_KEY
    uid: str | None = None
    resource_version: str | None = None

    @property
    def path(self) -> str:
        return f"/api/v1/namespaces/{self.namespace}/configmaps/{self.name}"

    def unresolved(self) -> "ConfigRef":
        """The spec form (no uid/resourceVersion)."""
        return ConfigRef(self.namespace, self.name, self.kubelet_config_key)

    def same_reference(self, other: "ConfigRef | None") -> bool:
        """Same namespace/name/key (what ``spec.configSource`` can express)."""
        return (
            other is not None
            and self.namespace == other.namespace
            and self.name == other.name
            and self.kubelet_config_key == other.kubelet_config_key
        )

    def matches(self, reported: "ConfigRef | None") -> bool:
        """``reported`` (a kubelet's ``status.config``) is this config: the same reference and,
        where this one knows them, the same uid and resourceVersion."""
        if reported is None or not self.same_reference(reported):
            return False
        if self.uid is not None and reported.uid != self.uid:
            return False
        return self.resource_version is None or reported.resource_version == self.resource_version

    def to_api(self) -> dict[str, Any]:
        """The ``configSource.configMap`` dict as the API spells it."""
        body: dict[str, Any] = {
            "namespace": self.namespace,
            "name": self.name,
            "kubeletConfigKey": self.kubelet_config_key,
        }
        if self.uid is not None:
            body["uid"] = self.uid
        if self.resource_version is not None:
            body["resourceVersion"] = self.resource_version
        return body

    @classmethod
    def from_api(cls, source: Mapping[str, Any] | None) -> "ConfigRef | None":
        """From a ``NodeConfigSource`` dict (``{"configMap": {...}}``); None when absent."""
        if not source:
            return None
        cm = source.get("configMap")
        if not cm:
            return None
        return cls(
            namespace=cm.get("namespace", ""),
            name=cm.get("name", ""),
            kubelet_config_key=cm.get("kubeletConfigKey", ""),
            uid=cm.get("uid") or None,
            resource_version=cm.get("resourceVersion") or None,
        )

    def __str__(self) -> str:
        suffix = f" (uid {self.uid}, rv {self.resource_version})" if self.uid else ""
        return f"{self.namespace}/{self.name}:{self.kubelet_config_key}{suffix}"


@dataclass(frozen=True)
class NodeObservation:
    """One node as last seen through the API: spec, DKC status, health and our annotations."""

    name: str
    uid: str = ""
    resource_version: str = ""
    labels: Mapping[str, str] = field(default_factory=lambda: _EMPTY)
    annotations: Mapping[str, str] = field(default_factory=lambda: _EMPTY)
    unschedulable: bool = False
    kubelet_version: str = ""  # status.nodeInfo.kubeletVersion ("v1.31.2"); "" when not reported
    # spec.configSource.configMap; None = local config
    spec_source: ConfigRef | None = None
    # status.config present at all? (absent => DKC off on that kubelet, or stripped by the API)
    has_config_status: bool = False
    assigned: ConfigRef | None = None
    active: ConfigRef | None = None
    last_known_good: ConfigRef | None = None
    error: str = ""
    # Ready condition: "True" / "False" / "Unknown"; "" when the node has no Ready condition
    ready: str = ""
    ready_transition: datetime | None = None
    ready_heartbeat: datetime | None = None
    # kube-node-lease/<name>: last renewal and its duration (seconds)
    lease_renewed: datetime | None = None
    lease_duration_s: float | None = None
    observed_at: datetime | None = None
    # how config reaches this node: "dkc" (Node.spec.configSource), "agent" (kubelet-rollout-agent
    # writing a drop-in; it mirrors status.config in annotations), "" (neither: cannot take part)
    backend: str = ""
    # with the agent, the file it writes, as it advertises: "drop-in" (--config-dir) or "main-file"
    # (the whole --config, on a kubelet without a drop-in directory); "" = not said (older agent)
    writes: str = ""

    @property
    def is_ready(self) -> bool:
        return self.ready == "True"

    def points_at(self, source: ConfigRef | None) -> bool:
        """Its spec names ``source`` (None: the kubelet's local config)."""
        return self.spec_source is None if source is None else source.same_reference(self.spec_source)


class NodePhase(str, enum.Enum):
    """Where a node stands in a rollout, derived from one observation (see ``rollout.machine.phases``)."""

    PENDING = "pending"  # not assigned the target yet
    ASSIGNED = "assigned"  # spec points at the target; the kubelet has not resolved it yet
    RESTARTING = "restarting"  # kubelet resolved the target (assigned) and is restarting onto it
    ACTIVE = "active"  # active == assigned == target, no error, Ready
    PROMOTED = "promoted"  # ... and lastKnownGood == target
    FAILED_TO_LOAD = "failed-to-load"  # kubelet fell back: payload could not be loaded
    FAILED_TO_VALIDATE = "failed-to-validate"  # kubelet fell back: config failed validation
    SYNC_ERROR = "sync-error"  # "failed to sync: ..." - download/checkpoint problem, no restart
    CRASH_LOOPING = "crash-looping"  # took the target, then NotReady / lease stale (no error string)
    UNREACHABLE = "unreachable"  # stopped reporting after its assignment, before it took the target
    UNAVAILABLE = "unavailable"  # down since before its assignment: not the config's doing
    GONE = "gone"  # deleted (or no longer selected): nothing to wait for, put back or blame
    TIMED_OUT = "timed-out"  # no verdict within the per-node progress deadline
    REVERTING = "reverting"  # we re-pointed it at its previous source; not converged there yet
    REVERTED = "reverted"  # put back to its previous source by us, and converged there
    SKIPPED = "skipped"  # down when its batch started: not assigned


@dataclass(frozen=True)
class ClusterFacts:
    """Server facts the gateway learns once: version and whether DKC can work at all."""

    server_version: str = ""
    extra: Mapping[str, str] = field(default_factory=dict)
