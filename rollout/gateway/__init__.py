"""The cluster gateway: the only package of the rollout that imports ``kubernetes``.

``KubeGateway`` implements every port of ``rollout.ports``; its verbs live in one module per
resource, all sending through one client (see ``_gateway.py`` for the contracts: raw reads, one
translation of errors, retries, rate limit, connections, stops). Public surface::

    # _client.py: construction and the call policy (ClusterClient, beneath every verb)
    KubeGateway(api_client, *, core=None, coordination=None, version=None, retrying=None,
                rate_limiter=None, namespace="kube-system", lease_namespace="kube-node-lease",
                event_namespace="default", request_timeout_s=10.0, list_timeout_s=30.0,
                pool_size=POOL_SIZE, now=...)   # keep-alive sockets, urllib3 retries off
    KubeGateway.from_kubeconfig(path=None, *, context=None, **options)   # or in-cluster in a pod
    open_gateway(kubeconfig=None, context=None) -> rollout.ports.Gateway  # what the composition roots use
    KubeGateway.in_cluster(**options)
    gw.close()  /  with KubeGateway.from_kubeconfig(...) as gw: ...
    gw.tolerate_outages(seconds, *, stop=None)       # retry transient errors for that long
    gw.limit_rate(qps, burst)                        # the policy's client-side rate limit
    gw.impatient() -> KubeGateway                    # two quick attempts (best-effort reads)
    gw.drop_idle_connections()                       # after one was found silent
    gw.within(seconds) -> KubeGateway                # a last word: retried that long at most
    with gw.cut_short_by(event): ...                 # this thread's calls give up once it is set
    gw.fence_writes(check | None)                    # node and journal writes call check() first

    # _nodes.py: nodes (with _informer.py and _watch.py: the live view)
    gw.server_facts() -> ClusterFacts
    gw.list_nodes(selector=None, *, page_size=None) -> (list[NodeObservation], resource_version)
    gw.informer(selector=None) -> NodeInformer       # live node + Lease cache (two watches)
    gw.read_node(name) -> NodeObservation
    KubeGateway.check_dkc_usable(nodes) -> None                   # pure; ClusterNotReadyError
    gw.probe_cluster(nodes=None) -> ClusterFacts                  # zero writes; ClusterNotReadyError
    gw.assign(node, source | None, *, annotations, labels=None) -> NodeObservation   # one PATCH + read-back
    gw.would_keep_assignment(node, source) -> bool                # dryRun=All, nothing persisted
    gw.backend_of(node) -> "dkc" | "agent" | ""                   # as last listed, read or watched
    gw.configz(node) -> dict                                      # {"kubeletconfig": {...}}

    # _configmaps.py: published configs
    gw.publish_configmap(manifest) -> ConfigRef                   # resolved; idempotent
    gw.read_configmap(name, *, namespace=None) -> ConfigMapObject
    gw.resolve(ref) -> ConfigRef

    # _journals.py: journals (a head and its parts, committed together), lifecycle requests
    gw.journal_name(rollout) -> str
    gw.load_journal(rollout) -> (JournalDocument, head resource_version) | None
    gw.save_journal(rollout, document, *, resource_version) -> resource_version   # 409: ConflictError
    gw.list_journals() -> list[JournalDocument]
    gw.delete_journal(rollout) -> None
    gw.read_request(rollout) -> dict | None                       # rollout pause/resume/abort/promote
    gw.post_request(rollout, action, *, by, request_id) -> None

    # _lock.py: the lock Lease and its keeper (LockInfo, Holder: rollout.lock)
    gw.read_lock() -> LockInfo | None
    gw.acquire_lock(holder, *, rollout="", duration_s=60.0) -> LockInfo   # LockHeldError naming the holder
    gw.renew_lock(holder, *, rollout="", duration_s=60.0) -> LockInfo
    gw.release_lock(holder) -> bool                                # only this very holder's
    LockKeeper(gw, holder, *, outage_tolerance_s=300.0, duration_s=None, renew_every_s=10.0)

    # _events.py: node Events
    gw.record_node_event(node, reason, message, type="Normal", *, at=None) -> bool   # best effort

    # values the node agent shares
    translated(what)                          # _errors.py: SDK/transport errors -> rollout.errors
    is_retryable(exc) / parse_retry_after(header) -> seconds | None                       # _retry.py
    is_older(resource_version, held) -> bool  # _informer.py: known to be an older version
    default_retrying(*, attempts=8, initial_s=0.2, cap_s=30.0, sleep=time.sleep, rng=...)   # _retry.py
    TokenBucket(qps=20.0, burst=40, *, clock=time.monotonic, sleep=time.sleep)              # _ratelimit.py
        .acquire(*, stop=None) / .acquire_spare(*, stop=None)   # in turn / only a token nobody waits for
    AdaptiveRate(ceiling_qps=20.0, burst=40, ...)   # a run's: the rate follows the server's answers
        .answered(latency_s) / .throttled(retry_after_s)        # fed by every attempt

Also re-exported for the gateway's callers: ``LockInfo`` (``rollout.lock``), ``EVENT_*``,
``JOURNAL_PREFIX``, ``LABEL_ROLLOUT``, ``LOCK_NAME`` (``rollout.names``), ``POOL_SIZE``.
"""

from rollout.lock import LockInfo
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
from ._gateway import POOL_SIZE, KubeGateway, open_gateway
from ._informer import NodeInformer, is_older
from ._lock import LockKeeper
from ._ratelimit import AdaptiveRate, TokenBucket
from ._retry import default_retrying, is_retryable, parse_retry_after

__all__ = [
    "EVENT_ASSIGNED", "EVENT_FAILED", "EVENT_HALTED", "EVENT_REVERTED", "JOURNAL_PREFIX",
    "LABEL_ROLLOUT", "LOCK_NAME", "POOL_SIZE", "AdaptiveRate", "KubeGateway", "LockInfo", "LockKeeper", "NodeInformer",
    "TokenBucket", "default_retrying", "is_older", "is_retryable", "open_gateway", "parse_retry_after",
    "translated",
]
