"""The cluster gateway: the only package of the rollout that imports ``kubernetes``.

Public surface::

    KubeGateway(api_client, *, core=None, coordination=None, version=None, retrying=None,
                rate_limiter=None, namespace="kube-system", lease_namespace="kube-node-lease",
                event_namespace="default", request_timeout_s=30.0, now=...)
    KubeGateway.from_kubeconfig(path=None, *, context=None, **options)   # or in-cluster in a pod
    KubeGateway.in_cluster(**options)
    gw.server_facts() -> ClusterFacts
    gw.list_nodes(selector=None, *, page_size=None) -> (list[NodeObservation], resource_version)
    gw.informer(selector=None) -> NodeInformer       # live node + Lease cache (two watches)
    gw.tolerate_outages(seconds, *, stop=None)       # retry transient errors for that long
    gw.limit_rate(qps, burst)                        # the policy's client-side rate limit
    gw.impatient() -> KubeGateway                    # two quick attempts (best-effort reads)
    gw.within(seconds) -> KubeGateway                # a last word: retried that long at most
    with gw.cut_short_by(event): ...                 # this thread's calls give up once it is set
    gw.read_node(name) -> NodeObservation
    KubeGateway.check_dkc_usable(nodes) -> None                   # pure; ClusterNotReadyError
    gw.probe_cluster(nodes=None) -> ClusterFacts                  # zero writes; ClusterNotReadyError
    gw.assign(node, source | None, *, annotations) -> NodeObservation   # one PATCH + read-back
    gw.would_keep_assignment(node, source) -> bool                # dryRun=All, nothing persisted
    gw.publish_configmap(manifest) -> ConfigRef                   # resolved; idempotent
    gw.read_configmap(name, *, namespace=None) -> dict
    gw.resolve(ref) -> ConfigRef
    gw.configz(node) -> dict                                      # {"kubeletconfig": {...}}
    gw.journal_name(rollout) -> str
    gw.load_journal(rollout) -> (data, resource_version) | None
    gw.save_journal(rollout, data, *, resource_version) -> resource_version   # 409: ConflictError
    gw.delete_journal(rollout) -> None
    gw.read_lock() -> LockInfo | None
    gw.acquire_lock(holder, *, rollout, duration_s=60.0) -> LockInfo         # LockHeldError
    gw.renew_lock(holder, *, rollout, duration_s=60.0) -> LockInfo
    gw.release_lock(holder) -> bool
    LockKeeper(gw, holder, *, rollout, duration_s=60.0, renew_every_s=None)  # context manager
    gw.record_node_event(node, reason, message, type="Normal", *, at=None) -> bool   # best effort
    translated(what)                          # context: SDK/transport errors -> rollout.errors
    default_retrying(*, attempts=8, initial_s=0.2, cap_s=30.0, sleep=time.sleep, rng=...)
    TokenBucket(qps=20.0, burst=40, *, clock=time.monotonic, sleep=time.sleep)
        .acquire(*, stop=None) / .acquire_spare(*, stop=None)   # in turn / only a token nobody waits for

See ``_gateway.py`` for the contracts (raw reads, one translation of errors, retries, rate limit).
"""

from rollout.names import (
    EVENT_ASSIGNED,
    EVENT_FAILED,
    EVENT_HALTED,
    EVENT_REVERTED,
    JOURNAL_PREFIX,
    LABEL_ROLLOUT,
    LOCK_NAME,
)

from ._errors import translated
from ._gateway import KubeGateway, LockInfo
from ._informer import NodeInformer, is_older
from ._lock import LockKeeper
from ._ratelimit import TokenBucket
from ._retry import default_retrying, is_retryable, parse_retry_after

__all__ = [
    "EVENT_ASSIGNED", "EVENT_FAILED", "EVENT_HALTED", "EVENT_REVERTED", "JOURNAL_PREFIX",
    "LABEL_ROLLOUT", "LOCK_NAME", "KubeGateway", "LockInfo", "LockKeeper", "NodeInformer",
    "TokenBucket", "default_retrying", "is_older", "is_retryable", "parse_retry_after",
    "translated",
]
