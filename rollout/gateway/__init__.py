"""The cluster gateway: the only package of the rollout that imports ``kubernetes``.

Public surface::

    KubeGateway.from_kubeconfig(path=None, *, context=None, **options) -> KubeGateway
    gw.list_nodes(selector=None) -> (list[NodeObservation], resource_version)
    gw.watch_nodes(*, resource_version=None, timeout_s=None, ...) -> NodeWatch (iterates NodeEvent)
    gw.read_node(name) -> NodeObservation
    gw.probe_cluster(nodes=None) -> ClusterFacts          # zero writes; ClusterNotReadyError
    KubeGateway.check_dkc_usable(nodes) -> None            # pure
    gw.assign(node, source | None, *, annotations) -> NodeObservation   # one PATCH + read-back
    gw.would_keep_assignment(node, source) -> bool         # dryRun=All PATCH, nothing persisted
    gw.publish_configmap(manifest) -> ConfigRef            # idempotent
    gw.read_configmap(name, *, namespace=None) -> dict; gw.resolve(ref) -> ConfigRef
    gw.configz(node) -> dict
    gw.load_journal(rollout) -> (data, rv) | None; gw.save_journal(rollout, data, *, resource_version) -> rv
    gw.acquire_lock / renew_lock / release_lock / read_lock; LockKeeper(gw, holder, rollout=...)
    gw.record_node_event(node, reason, message, type="Normal") -> bool

See ``_gateway.py`` for the contracts (raw reads, one translation of errors, retries, rate limit).
"""

from ._gateway import (
    EVENT_ASSIGNED,
    EVENT_FAILED,
    EVENT_HALTED,
    EVENT_REVERTED,
    JOURNAL_PREFIX,
    LABEL_ROLLOUT,
    LOCK_NAME,
    KubeGateway,
    LockInfo,
)
from ._lock import LockKeeper
from ._ratelimit import TokenBucket
from ._retry import default_retrying, is_retryable, parse_retry_after
from ._watch import NodeEvent, NodeWatch

__all__ = [
    "EVENT_ASSIGNED", "EVENT_FAILED", "EVENT_HALTED", "EVENT_REVERTED", "JOURNAL_PREFIX",
    "LABEL_ROLLOUT", "LOCK_NAME", "KubeGateway", "LockInfo", "LockKeeper", "NodeEvent",
    "NodeWatch", "TokenBucket", "default_retrying", "is_retryable", "parse_retry_after",
]
