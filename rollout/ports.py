"""The ports: what the core asks of a cluster, as small Protocols.

The engine, the use cases, the flows and the CLI reach the cluster only through these.
``rollout.gateway.KubeGateway`` implements every one (``mypy --strict`` proves it where
:func:`rollout.gateway.open_gateway` returns it as a :class:`Gateway`); tests pass small fakes.
Each port is a few verbs on one resource, and each caller is typed with the narrowest port or
composition it uses, so its signature says what it may touch:

| port                 | holds                                             | used by                          |
|----------------------|---------------------------------------------------|----------------------------------|
| :class:`Informer`    | the live view of the nodes and their Leases        | the engine                       |
| :class:`NodeWatch`   | ``listing`` once, then ``informer``: a live view   | the rollout flow, the engine     |
| :class:`NodeReader`  | ``list_nodes``: every node, once                   | diff, plan, status, the flows    |
| :class:`NodeWriter`  | ``assign``: one node's config source (one PATCH)   | the engine                       |
| :class:`ClusterProbe`| ``probe_cluster``: can config reach the nodes?     | prepare, plan                    |
| :class:`RunningConfigs` | ``configz``: a kubelet's running config         | export, diff, the review         |
| :class:`ConfigReader`| ``read_configmap``: a published config, read       | drift                            |
| :class:`ConfigStore` | published ConfigMaps: read, resolve, publish       | prepare, plan, publish           |
| :class:`JournalReader` | ``load_journal``                                 | prepare, rollback, status, drift |
| :class:`JournalStore`| the journal written, and the requests on it read   | the engine                       |
| :class:`LifecycleRequests` | requests posted, journals listed             | ``rollout list/pause/...``       |
| :class:`LockReader`  | ``read_lock``: the rollout Lease as it stands      | status, ``rollout list``         |
| :class:`LockStore`   | the Lease taken, renewed, released; writes fenced  | ``rollout.gateway.LockKeeper``   |
| :class:`Lock`        | ``check``: may the run still act?                  | the engine                       |
| :class:`DisruptionBudget` | a fleet's nodes changing at once: taken, given back | the engine                 |
| :class:`NodeEvents`  | ``record_node_event``                              | the engine                       |
| :class:`Interruptible` | ``cut_short_by``: a thread's calls end on an event | the engine, the lock keeper, the CLI |
| :class:`MetricsSource` | ``instant``: a PromQL query's answer (Prometheus)  | the analysis run                 |
| :class:`EvidenceReader` | ``load_evidence``: a batch's analysis evidence  | status, the analysis run         |
| :class:`EvidenceStore` | ``save_evidence``: written by compare-and-swap    | the analysis run                 |

Compositions: :class:`Cluster` (the engine's run), :class:`ClusterForPrepare`,
:class:`ClusterForDiff`, :class:`ClusterForVerdict`, :class:`ClusterForPlan`, :class:`ClusterForStatus`,
:class:`ClusterForDrift`, and
:class:`Gateway`, all of them, which the flows and the CLI hold.

No ``Any`` crosses this seam (``tests/test_gateway_seam.py``): a document the API answers with
is a :data:`JsonObject`, or typed where callers read into it (:class:`ConfigMapObject`).
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable, Mapping
from contextlib import AbstractContextManager
from dataclasses import dataclass
from datetime import datetime
from typing import Protocol, Self, TypedDict

from rollout.drain import Eviction, PodOnNode
from rollout.analysis import BatchEvidence, Sample
from rollout.identity import ClusterIdentity
from rollout.journal import JournalDocument
from rollout.lock import Holder, LockInfo
from rollout.model import ClusterFacts, ConfigRef, NodeObservation

JsonObject = Mapping[str, object]
"""A JSON object as the API server answers or takes it (a configz answer, a manifest)."""


class ObjectMeta(TypedDict, total=False):
    """The metadata of an API object, as far as the core reads it."""

    name: str
    namespace: str
    uid: str
    resourceVersion: str
    labels: dict[str, str]
    annotations: dict[str, str]


class ConfigMapObject(TypedDict, total=False):
    """A ConfigMap as the API spells it."""

    apiVersion: str
    kind: str
    metadata: ObjectMeta
    data: dict[str, str]
    binaryData: dict[str, str]
    immutable: bool


# ------------------------------------------------------------------------------ nodes


class Signal(Protocol):
    """Whether to stop waiting: a ``threading.Event``, or the engine's either-of-two."""

    def is_set(self) -> bool: ...


class Informer(Protocol):
    """A live view of the nodes (``rollout.gateway.NodeInformer``)."""

    version: int

    @property
    def synced(self) -> bool: ...

    @property
    def watched_since(self) -> datetime | None: ...

    def start(self) -> None: ...

    def stop(self) -> None: ...

    def wait_synced(self, timeout_s: float, *, stop: threading.Event | None = None) -> bool: ...

    def snapshot(self) -> dict[str, NodeObservation]: ...

    def get(self, name: str) -> NodeObservation | None: ...

    def wait_for_change(self, seen_version: int, timeout_s: float, *, stop: Signal | None = None) -> int: ...

    def observe_written(self, obs: NodeObservation) -> None: ...


@dataclass(frozen=True)
class NodeListing:
    """Every node a selector picks (with its Lease) as of one list, and where a watch of the nodes
    and one of the Leases resume from it: a live view seeded with it needs no list of its own."""

    nodes: tuple[NodeObservation, ...]  # sorted by name
    selector: str | None
    resource_version: str
    lease_resource_version: str  # "" when there is no Lease namespace to watch


class NodeWatch(Protocol):
    def listing(self, selector: str | None = None) -> NodeListing:
        """Every node ``selector`` picks, and its Lease, in one list each (every node: None)."""

    def informer(self, selector: str | None = None, *, seed: NodeListing | None = None) -> Informer:
        """A live view of the nodes ``selector`` picks (every node: None); not started. Seeded with
        a ``listing`` of the same selector, it watches on from there instead of listing again."""


class NodeReader(Protocol):
    def list_nodes(self, selector: str | None = None) -> tuple[list[NodeObservation], str]:
        """Every node ``selector`` picks, sorted by name, and the list's resourceVersion."""


class NodeWriter(Protocol):
    def assign(self, node: str, source: ConfigRef | None, *, annotations: Mapping[str, str | None],
               labels: Mapping[str, str | None] = ...) -> NodeObservation:
        """Point ``node`` at ``source`` (None: its local config) with these annotations and labels
        (a None value removes one) in one write; the node as the write left it."""


class NodeDrains(Protocol):
    """A drain's verbs (``rollout.machine.drains`` decides, the engine calls)."""

    def cordon(self, node: str, *, rollout: str) -> NodeObservation:
        """``spec.unschedulable: true`` and ``ANN_CORDONED_BY`` = ``rollout``, in one write."""

    def uncordon(self, node: str, *, rollout: str, cordoned_by_us: bool) -> NodeObservation:
        """The drain's annotations removed, and the node uncordoned where ``cordoned_by_us``."""

    def pods_on(self, node: str) -> list[PodOnNode]:
        """Every pod bound to ``node``."""

    def evict(self, pod: PodOnNode, *, grace_period_s: int | None) -> Eviction:
        """One eviction through the Eviction API (never a delete), answered, never retried."""


class ClusterProbe(Protocol):
    def probe_cluster(self, nodes: Iterable[NodeObservation] | None = None) -> ClusterFacts:
        """Can config reach every one of ``nodes``? Zero writes; ``ClusterNotReadyError`` if not."""


class RunningConfigs(Protocol):
    def configz(self, node: str) -> JsonObject:
        """The node's kubelet's running config: ``{"kubeletconfig": {...}}``."""

    def impatient(self) -> Self:
        """The same, giving up after two quick attempts: a sample must not wait for one slow kubelet."""


# ------------------------------------------------------------------------------ ConfigMaps and the journal


class ConfigReader(Protocol):
    def read_configmap(self, name: str, *, namespace: str | None = None) -> ConfigMapObject: ...


class ConfigStore(ConfigReader, Protocol):
    """Published kubelet configs: immutable ConfigMaps with content-hash names."""

    def resolve(self, ref: ConfigRef) -> ConfigRef:
        """``ref`` with the ConfigMap's uid and resourceVersion (what node status shows)."""

    def publish_configmap(self, manifest: JsonObject) -> ConfigRef:
        """Create it, or reuse one with the same content; ``ConflictError`` on other content."""


class JournalReader(Protocol):
    def load_journal(self, rollout: str) -> tuple[JournalDocument, str] | None:
        """The journal's ConfigMaps' data (head and parts, as last committed) and the head's
        resourceVersion; None when there is none."""


class JournalStore(JournalReader, Protocol):
    def save_journal(self, rollout: str, document: JournalDocument, *, resource_version: str | None) -> str:
        """Commit it: create (``resource_version`` None) or replace the one at that version, the
        parts and the head together (a process dying midway leaves the previous one whole); the
        head's new version. ``ConflictError`` when someone else wrote it in between."""

    def read_request(self, rollout: str) -> dict[str, str] | None:
        """The lifecycle request (pause, resume, abort, promote) pending on the journal, if any."""


class LifecycleRequests(Protocol):
    def post_request(self, rollout: str, action: str, *, by: str, request_id: str) -> None:
        """Ask the running rollout to pause/resume/abort/promote (an annotation on its journal)."""

    def list_journals(self) -> list[JournalDocument]:
        """Every rollout's journal."""


# ------------------------------------------------------------------------------ the lock


class Lock(Protocol):
    def check(self) -> None:
        """Raise when the run may no longer act (the lease was lost, or could lapse)."""


class HeldLock(Lock, Protocol):
    """The lock as the run holding it keeps it (``rollout.gateway.LockKeeper``)."""

    @property
    def info(self) -> LockInfo | None:
        """The Lease as its latest renewal left it: a run's own status shows it."""


class DisruptionBudget(Protocol):
    """Nodes changing at once across a fleet of clusters (``flows.budget``: a Prefect global
    concurrency limit). A run holds a batch's nodes in it from before the batch's first write until
    the batch is done; while the fleet's other clusters hold the rest, the batch waits."""

    @property
    def name(self) -> str:
        """What people call it (the limit's name)."""

    @property
    def limit(self) -> int:
        """Nodes at once, across the fleet: no batch is planned larger."""

    def take(self, key: str, slots: int) -> bool:
        """Hold ``slots`` under ``key`` (a batch); True when held (again: a key held is held)."""

    def release(self, key: str) -> None:
        """Give ``key``'s slots back (nothing when it holds none)."""

    def close(self) -> None:
        """Give every slot back: the run ended."""


class LockReader(Protocol):
    def read_lock(self) -> LockInfo | None:
        """The rollout Lease as it stands; None when it was never taken."""


class Interruptible(Protocol):
    def cut_short_by(self, event: threading.Event) -> AbstractContextManager[None]:
        """Calls this thread makes inside the block give up once ``event`` is set."""


class LockStore(Interruptible, Protocol):
    """The Lease verbs (``rollout.lock`` decides who may take it) and the fence on writes."""

    def acquire_lock(self, holder: Holder | str, *, rollout: str = "", duration_s: float = 60.0) -> LockInfo: ...

    def renew_lock(self, holder: Holder | str, *, rollout: str = "", duration_s: float = 60.0) -> LockInfo: ...

    def release_lock(self, holder: Holder | str) -> bool: ...

    def fence_writes(self, check: Callable[[], None] | None) -> None:
        """Node and journal writes call ``check`` first (None lifts the fence)."""


# ------------------------------------------------------------------------------ events


class NodeEvents(Protocol):
    def record_node_event(self, node: str, reason: str, message: str, type: str = "Normal", *,
                          at: datetime | None = None) -> bool:
        """An Event on the node, best effort: False when it was not recorded."""


# ------------------------------------------------------------------------------ compositions


class MetricsSource(Protocol):
    """A Prometheus-compatible query API; not the cluster: its own address and credentials."""

    def instant(self, promql: str, *, at: datetime) -> list[Sample]:
        """The instant vector ``promql`` evaluates to at ``at`` (a scalar is one sample without
        labels). Raises ``MetricsUnreachableError`` (ride it out) or ``MetricsQueryError``."""
        ...

    @property
    def address(self) -> str: ...


class EvidenceReader(Protocol):
    def load_evidence(self, rollout: str, batch: int) -> tuple[BatchEvidence, str] | None:
        """A batch's analysis evidence and its resourceVersion; None when it has none."""
        ...


class EvidenceStore(EvidenceReader, Protocol):
    def save_evidence(self, evidence: BatchEvidence, *, resource_version: str | None) -> str:
        """Create (None) or compare-and-swap the evidence; returns the new resourceVersion
        (``ConflictError`` when someone else wrote it since)."""
        ...


class Cluster(NodeWatch, NodeWriter, NodeDrains, JournalStore, NodeEvents, Interruptible, Protocol):
    """What the engine needs to run a journal to its end."""

    def within(self, seconds: float) -> Self:
        """The same cluster, each call retried for at most ``seconds`` whatever the stop."""


class ClusterForPrepare(JournalReader, RunningConfigs, ClusterProbe, ConfigStore, Protocol):
    """Everything before the first batch: probe, review, publish (``rollout.usecases.prepare``)."""


class ClusterForDiff(NodeReader, RunningConfigs, Protocol):
    """The config against each node's running one (``rollout diff``)."""


class ClusterForVerdict(ClusterForDiff, ClusterProbe, Protocol):
    """Would ``start`` take a config here (``rollout validate``, ``diff``, ``publish``)?"""


class ClusterForPlan(ClusterForVerdict, ConfigStore, Protocol):
    """The batches a rollout would run, with the changes (``rollout plan``)."""


class ClusterForDrift(NodeReader, JournalReader, ConfigReader, RunningConfigs, NodeEvents, Protocol):
    """Every node's running config against what its last completed rollout proved (``rollout drift``)."""


class ClusterForStatus(JournalReader, NodeReader, LockReader, EvidenceReader, Protocol):
    """A rollout's status from the cluster alone (``rollout status``)."""

    @property
    def namespace(self) -> str:
        """Where the journals live."""

    def journal_name(self, rollout: str) -> str: ...


class KnowsItsCluster(Protocol):
    """Which cluster the credentials reach (``rollout.identity``)."""

    def cluster_identity(self) -> ClusterIdentity:
        """The server URL and CA the connection uses, and ``kube-system``'s UID (one GET)."""

    def node_count(self) -> int:
        """How many Node objects the cluster has (one small list, where the server estimates the rest)."""


class Gateway(Cluster, ClusterForPrepare, ClusterForPlan, ClusterForStatus, LifecycleRequests, LockStore,
              EvidenceStore, KnowsItsCluster,
              Protocol):
    """The whole cluster, as ``rollout.gateway.open_gateway`` opens it for a run or a command."""

    def tolerate_outages(self, seconds: float, *, stop: threading.Event | None = None) -> None:
        """Ride out transient errors for ``seconds`` (``stop`` cuts that short, in every thread)."""

    def limit_rate(self, qps: float, burst: int) -> None:
        """Every request from now on within ``qps`` (``burst`` at once)."""

    def close(self) -> None: ...


__all__ = [
    "Cluster", "ClusterForDiff", "ClusterForDrift", "ClusterForPlan", "ClusterForPrepare", "ClusterForStatus",
    "ClusterProbe", "ConfigMapObject", "ConfigReader", "ConfigStore", "DisruptionBudget", "Gateway", "HeldLock", "Informer", "Interruptible", "JournalReader", "JournalStore", "KnowsItsCluster",
    "JsonObject", "LifecycleRequests", "Lock", "LockReader", "LockStore", "NodeDrains", "NodeEvents", "NodeListing", "NodeReader",
    "NodeWatch", "NodeWriter", "ObjectMeta", "RunningConfigs", "Signal",
]
