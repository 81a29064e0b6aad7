"""KubeGateway: every cluster read and write the rollout makes, as domain verbs.

This is the only place (with its sibling modules) that imports ``kubernetes``. Its contracts:

* **No SDK types leave it.** Nodes come back as :class:`rollout.model.NodeObservation`, config
  sources as :class:`rollout.model.ConfigRef`, everything else as plain dicts/strings.
* **Errors are translated once**, per attempt, into :mod:`rollout.errors`; the retry policy (a
  ``tenacity.Retrying`` value) retries only :class:`TransientGatewayError` (429/5xx/connection),
  honouring ``Retry-After``.
* **Every attempt takes a token** from one client-side :class:`TokenBucket`, so a big batch cannot
  burst the API server; node Events take only the tokens no other request waits for.
* **Connections are watched, not trusted.** TCP keep-alive probes every connection (a peer that
  vanished is noticed in about 30 s, as with client-go); small requests wait at most
  ``request_timeout_s`` for an answer, lists ``list_timeout_s``; an attempt that timed out drops
  the pool's idle connections (a blackhole freezes them all at once), so its retry and every later
  request open new ones. The pool keeps :data:`POOL_SIZE` connections: one for each request the
  engine sends at once, so none is thrown away and rebuilt with a TLS handshake.
* **Stops are seen everywhere.** The run's stop (:meth:`KubeGateway.tolerate_outages`) and a
  thread's own (:meth:`KubeGateway.cut_short_by`: a worker told to end) end retries and rate-limit
  waits alike, so no thread outlives its owner by more than the request it has on the wire.
* **Reads are raw.** Responses are read with ``_preload_content=False`` and parsed into small
  pydantic models (``_wire``) or ``json.loads``; the typed models are never built for responses.
* **Writes are read back.** :meth:`KubeGateway.assign` checks the returned Node: an API server
  with the ``DynamicKubeletConfig`` gate off answers 200 and silently drops a new
  ``spec.configSource``; that is reported as :class:`ClusterNotReadyError`.

Logging: ``logging.getLogger("rollout.gateway")``; lines about one node start with ``node NAME:``.
"""

from __future__ import annotations

import contextlib
import copy
import json
import logging
import os
import re
import threading
import time
from datetime import datetime, timezone
from typing import Any, Callable, Iterable, Iterator, Mapping, Sequence, TypeVar

import tenacity
from kubernetes import client as k8s
from kubernetes import config as k8s_config
from kubernetes.client import rest as k8s_rest
from kubernetes.config.config_exception import ConfigException
from kubernetes.utils.keepalive import tcp_keepalive_socket_options
from pydantic import BaseModel

from rollout.errors import (
    ClusterNotReadyError,
    ConflictError,
    ForbiddenError,
    GatewayError,
    LockHeldError,
    NotFoundError,
    TransientGatewayError,
)
from rollout.lock import Holder, LockInfo, as_holder, describe, takeover_reason
from rollout.model import ClusterFacts, ConfigRef, NodeObservation
from rollout.names import (
    ANN_DESIRED_CONFIG,
    ANN_LOCK_HOLDER,
    ANN_REQUEST,
    ANN_ROLLOUT,
    COMPONENT,
    JOURNAL_PREFIX,
    LABEL_MANAGED_BY,
    LABEL_ROLLOUT,
    LOCK_NAME,
    journal_configmap_name,
)
from rollout.publish import same_published_content

from . import _wire
from ._errors import translated
from ._informer import NodeInformer
from ._ratelimit import TokenBucket
from ._retry import cut_short, default_retrying

logger = logging.getLogger("rollout.gateway")

T = TypeVar("T")
W = TypeVar("W", bound=BaseModel)

MERGE_PATCH = "application/merge-patch+json"
LABEL_COMPONENT = LABEL_MANAGED_BY
ANN_LOCK_ROLLOUT = ANN_ROLLOUT
# a node Event is information: a few quick tries, each given this long, never an outage ridden out
EVENT_ATTEMPTS = 3
EVENT_TIMEOUT_S = 5.0

# the event that ends the current thread's calls early (KubeGateway.cut_short_by), if any
_thread_scope = threading.local()


def _own_stop() -> threading.Event | None:
    return getattr(_thread_scope, "stop", None)

# the engine's fan-out (32 PATCHes at once, rollout.engine.DEFAULT_CONCURRENCY) and its 8 node Event
# senders beside the two watches, lock renewals and the run loop's own reads, with room to spare
POOL_SIZE = 64
CONNECT_TIMEOUT_S = 10.0
# a GET, PATCH or PUT of one object is answered in milliseconds by a live server
REQUEST_TIMEOUT_S = 10.0
# a list of 20,000 nodes takes the server seconds to start answering
LIST_TIMEOUT_S = 30.0
# keep-alive probes after 15 s of quiet, every 5 s: a peer that vanished is dropped after 3 misses
KEEPALIVE_IDLE_S, KEEPALIVE_INTERVAL_S, KEEPALIVE_PROBES = 15, 5, 3



def _utcnow() -> datetime:
    return datetime.now(timezone.utc)


def _micro(ts: datetime) -> str:
    """A MicroTime as the API server writes it."""
    return ts.astimezone(timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def _selector_text(selector: str | Mapping[str, str] | None) -> str | None:
    if selector is None or isinstance(selector, str):
        return selector or None
    return ",".join(f"{k}={v}" for k, v in sorted(selector.items())) or None


def _names(names: Sequence[str], limit: int = 10) -> str:
    shown = ", ".join(names[:limit])
    return shown + (f" and {len(names) - limit} more" if len(names) > limit else "")


def _landed(node: _wire.Node, source: ConfigRef | None,
            annotations: Mapping[str, str | None]) -> bool:
    """The node already carries this exact assignment (spec and every annotation asked for)."""
    got = ConfigRef.from_api(node.spec.config_source)
    spec_ok = got is None if source is None else source.same_reference(got)
    held = node.metadata.annotations
    return spec_ok and all(held.get(k) == v if v is not None else k not in held
                           for k, v in annotations.items())


def _annotated(node: _wire.Node, wanted: Mapping[str, str | None]) -> bool:
    held = node.metadata.annotations
    return all(held.get(k) == v if v is not None else k not in held for k, v in wanted.items())


def _desired_text(ref: ConfigRef) -> str:
    """The desired-config annotation: the agent's contract (rollout.names)."""
    return json.dumps({"namespace": ref.namespace, "name": ref.name, "uid": ref.uid or "",
                       "resourceVersion": ref.resource_version or "", "key": ref.kubelet_config_key},
                      sort_keys=True)


def _parse_version(git_version: str) -> tuple[int, int] | None:
    m = re.match(r"v?(\d+)\.(\d+)", git_version or "")
    return (int(m.group(1)), int(m.group(2))) if m else None


def _tuned(api_client: Any, *, pool_size: int) -> Any:
    """The client's connections as the gateway needs them; its REST client is rebuilt once when
    anything changed (a client already tuned is left as it is, pool and all).

    * urllib3's own retries off (3 by default, sleeping on Retry-After for GETs): otherwise they
      run hidden beneath our policy: real sleeps, doubled attempts, no logging;
    * TCP keep-alive on every socket (see the module doc);
    * a pool of at least ``pool_size`` connections.
    """
    cfg = getattr(api_client, "configuration", None)
    if cfg is None:
        return api_client
    wanted = {
        "retries": False if getattr(cfg, "retries", None) is None else cfg.retries,
        "socket_options": tcp_keepalive_socket_options(
            idle=KEEPALIVE_IDLE_S, interval=KEEPALIVE_INTERVAL_S, count=KEEPALIVE_PROBES),
        "connection_pool_maxsize": max(pool_size, getattr(cfg, "connection_pool_maxsize", None) or 0),
    }
    if any(getattr(cfg, key, None) != value for key, value in wanted.items()):
        for key, value in wanted.items():
            setattr(cfg, key, value)
        api_client.rest_client = k8s_rest.RESTClientObject(cfg)
    return api_client


class KubeGateway:
    """The cluster, as the rollout needs it. Construct with :meth:`from_kubeconfig` in production.

    Args:
        api_client: a configured ``kubernetes.client.ApiClient`` (admin credentials: the node's
            own credentials cannot assign configs, NodeRestriction forbids it).
        core, coordination, version: API objects to use instead of ones built on ``api_client``.
        retrying: the retry policy (default :func:`default_retrying`).
        rate_limiter: shared :class:`TokenBucket` (default 20 qps, burst 40).
        namespace: where ConfigMaps, the journal and the lock live (``kube-system``).
        event_namespace: where node events go (``default``, like the kubelet's own).
        request_timeout_s: how long a request for one object waits for its answer (the connect
            timeout is 10 s); ``list_timeout_s`` the same for lists.
        pool_size: connections kept for reuse (at least; see :data:`POOL_SIZE`).
        now: wall clock for lock expiry, events and ``observed_at`` (UTC-aware).
    """

    def __init__(
        self,
        api_client: Any,
        *,
        core: Any = None,
        coordination: Any = None,
        version: Any = None,
        retrying: tenacity.Retrying | None = None,
        rate_limiter: TokenBucket | None = None,
        namespace: str = "kube-system",
        lease_namespace: str = "kube-node-lease",
        event_namespace: str = "default",
        request_timeout_s: float = REQUEST_TIMEOUT_S,
        list_timeout_s: float = LIST_TIMEOUT_S,
        pool_size: int = POOL_SIZE,
        now: Callable[[], datetime] = _utcnow,
    ) -> None:
        self.api_client = _tuned(api_client, pool_size=pool_size)
        self.pool_size = pool_size
        self.core = core or k8s.CoreV1Api(api_client)
        self.coordination = coordination or k8s.CoordinationV1Api(api_client)
        self.version_api = version or k8s.VersionApi(api_client)
        self.retrying = retrying or default_retrying()
        self.rate_limiter = rate_limiter or TokenBucket()
        self.namespace = namespace
        self.lease_namespace = lease_namespace
        self.event_namespace = event_namespace
        self.request_timeout = (CONNECT_TIMEOUT_S, request_timeout_s)
        self.list_timeout = (CONNECT_TIMEOUT_S, list_timeout_s)
        self._now = now
        self._stop: threading.Event | None = None
        self._backends: dict[str, str] = {}
        self._resolved: dict[tuple[str, str, str], ConfigRef] = {}
        self._events_refused = False
        self._write_fence: Callable[[], None] | None = None

    # -- construction ----------------------------------------------------------------------

    @classmethod
    def from_kubeconfig(cls, path: str | os.PathLike[str] | None = None, *,
                        context: str | None = None, **options: Any) -> "KubeGateway":
        """Build from a kubeconfig file (``$KUBECONFIG``/``~/.kube/config`` when ``path`` is None).

        When no path is given, no kubeconfig exists and the process runs in a pod, the
        in-cluster service account is used instead. ``options`` go to the constructor.
        """
        kubeconfig = path or os.environ.get("KUBECONFIG") or os.path.expanduser("~/.kube/config")
        in_pod = bool(os.environ.get("KUBERNETES_SERVICE_HOST"))
        if path is None and in_pod and not os.path.exists(str(kubeconfig).split(os.pathsep)[0]):
            return cls.in_cluster(**options)
        where = f"kubeconfig {path or kubeconfig}" + (f" (context {context})" if context else "")
        try:
            with translated(f"load {where}"):
                api_client = k8s_config.new_client_from_config(  # type: ignore[no-untyped-call]
                    config_file=str(path) if path is not None else None, context=context)
        except (ConfigException, OSError) as exc:
            raise GatewayError(f"cannot load {where}: {exc}") from exc
        return cls(api_client, **options)

    @classmethod
    def in_cluster(cls, **options: Any) -> "KubeGateway":
        """Build from the pod's service account (``load_incluster_config``)."""
        configuration = k8s.Configuration()
        try:
            k8s_config.load_incluster_config(  # type: ignore[no-untyped-call]
                client_configuration=configuration)
        except (ConfigException, OSError) as exc:
            raise GatewayError(f"cannot load the in-cluster service account config: {exc}") from exc
        return cls(k8s.ApiClient(configuration), **options)

    def close(self) -> None:
        self.api_client.close()

    def __enter__(self) -> "KubeGateway":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- the one way in --------------------------------------------------------------------

    @contextlib.contextmanager
    def _attempt(self, what: str) -> Iterator[None]:
        """One attempt's errors, translated; one that timed out drops the idle connections."""
        try:
            with translated(what):
                yield
        except TransientGatewayError as exc:
            if getattr(exc, "reason", "") == "Timeout":
                self.drop_idle_connections()
            raise

    def drop_idle_connections(self) -> None:
        """Close every pooled connection not in use (the next requests open new ones): after one
        connection was found silent, the others opened before it are suspect too."""
        self.api_client.rest_client.pool_manager.clear()

    def _policy(self) -> tenacity.Retrying:
        """The retry policy of a call made now: the gateway's, ended early by the calling thread's
        own stop too (:meth:`cut_short_by`)."""
        own = _own_stop()
        return cut_short(self.retrying, own) if own is not None else self.retrying.copy()

    def _take_token(self, what: str) -> None:
        """Wait for the rate limit. A thread told to end (:meth:`cut_short_by`) sends nothing more;
        the run's stop only ends the wait (a last word, such as releasing the lock, still goes)."""
        own = _own_stop()
        self.rate_limiter.acquire(stop=own or self._stop)
        if own is not None and own.is_set():
            raise TransientGatewayError(f"{what}: not sent: the run is ending")

    def _call(self, what: str, fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        """One logical API call: rate-limited, translated and retried attempts."""

        def attempt() -> T:
            self._take_token(what)
            with self._attempt(what):
                return fn(*args, **kwargs)

        return self._policy()(attempt)

    def _raw(self, what: str, fn: Callable[..., Any], *args: Any,
             timeout: tuple[float, float] | None = None, **kwargs: Any) -> bytes:
        """Like :meth:`_call` for a ``_preload_content=False`` call; returns the body bytes.

        The body is read inside the attempt, so a connection dropped mid-body is retried too.
        ``timeout``: (connect, read) seconds, :attr:`request_timeout` unless given (lists).
        """

        def attempt() -> bytes:
            self._take_token(what)
            with self._attempt(what):
                resp = fn(*args, _preload_content=False,
                          _request_timeout=timeout or self.request_timeout, **kwargs)
                try:
                    return bytes(resp.data)
                finally:
                    resp.release_conn()

        return self._policy()(attempt)

    def _json(self, what: str, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        data = self._raw(what, fn, *args, **kwargs)
        try:
            return json.loads(data) if data else {}
        except ValueError as exc:
            raise GatewayError(f"{what}: unreadable response: {exc}") from exc

    def _parsed(self, model: type[W], what: str, fn: Callable[..., Any], *args: Any,
                **kwargs: Any) -> W:
        """A raw call whose body is validated straight into a small ``_wire`` model."""
        data = self._raw(what, fn, *args, **kwargs)
        try:
            return model.model_validate_json(data)
        except ValueError as exc:  # pydantic.ValidationError is a ValueError
            raise GatewayError(f"{what}: unexpected response: {exc}") from exc

    def _single(self, model: type[W], what: str, fn: Callable[..., Any], *args: Any,
                **kwargs: Any) -> W:
        """ONE attempt (no retry) of a raw call parsed into ``model``; for callers that decide
        themselves what a retry must check first."""
        self._take_token(what)
        with self._attempt(what):
            resp = fn(*args, _preload_content=False, _request_timeout=self.request_timeout, **kwargs)
            try:
                data = bytes(resp.data)
            finally:
                resp.release_conn()
        try:
            return model.model_validate_json(data)
        except ValueError as exc:
            raise GatewayError(f"{what}: unexpected response: {exc}") from exc

    def tolerate_outages(self, seconds: float, *, stop: threading.Event | None = None) -> None:
        """From now on retry transient errors for up to ``seconds`` (a control plane restart)
        instead of a fixed number of attempts; ``stop`` (the run's Ctrl-C) cuts the retrying and
        every wait for the rate limit short, in every thread."""
        self.retrying = default_retrying(deadline_s=seconds, stop_event=stop)
        self._stop = stop

    @contextlib.contextmanager
    def cut_short_by(self, event: threading.Event) -> Iterator[None]:
        """Calls this thread makes inside the block give up once ``event`` is set, as at the
        run's stop: no further attempt, no further wait for the rate limit (the request already
        on the wire still ends by its timeout). For worker threads whose owner may end them: the
        batch's writers, the Event senders, the watches, the lock keeper."""
        outer = _own_stop()
        _thread_scope.stop = event
        try:
            yield
        finally:
            _thread_scope.stop = outer

    def within(self, seconds: float) -> "KubeGateway":
        """The same cluster for a last word that must not wait long (the journal marked stopped
        after a Ctrl-C, while the API server may be away): each call retries transient errors for
        at most ``seconds`` in all, whatever stop was set, and no request waits longer than that."""
        view = copy.copy(self)
        view.retrying = default_retrying(deadline_s=seconds, cap_s=min(1.0, seconds))
        view.request_timeout = (min(self.request_timeout[0], seconds), min(self.request_timeout[1], seconds))
        view._stop = None
        # not queued behind the run's abandoned requests (a few attempts cannot burst anything)
        view.rate_limiter = TokenBucket(qps=0)
        return view

    def fence_writes(self, check: Callable[[], None] | None) -> None:
        """From now on every attempt to write a node or a journal first calls ``check`` (the rollout
        lock's, which raises once the run may no longer act), so a write retried through an outage
        never lands after the lock could have passed to someone else. None lifts the fence."""
        self._write_fence = check

    def _fenced(self, write: Callable[..., T]) -> Callable[..., T]:
        fence = self._write_fence
        if fence is None:
            return write

        def checked(*args: Any, **kwargs: Any) -> T:
            fence()
            return write(*args, **kwargs)

        return checked

    def limit_rate(self, qps: float, burst: int) -> None:
        """Every request from now on within ``qps`` (``burst`` at once): the policy's rate limit."""
        self.rate_limiter = TokenBucket(qps=qps, burst=burst)

    def impatient(self) -> "KubeGateway":
        """The same cluster, giving up after two quick attempts: for best-effort reads such as
        sampling a few nodes' running config, where one slow kubelet must not hold anything up."""
        return KubeGateway(self.api_client, core=self.core, coordination=self.coordination,
                           version=self.version_api, retrying=default_retrying(attempts=2, cap_s=1.0),
                           rate_limiter=self.rate_limiter, namespace=self.namespace,
                           lease_namespace=self.lease_namespace, event_namespace=self.event_namespace,
                           request_timeout_s=self.request_timeout[1], list_timeout_s=self.list_timeout[1],
                           pool_size=self.pool_size, now=self._now)

    def informer(self, selector: str | Mapping[str, str] | None = None) -> NodeInformer:
        """A live cache of the nodes and their Leases (see :class:`NodeInformer`); not started."""
        return NodeInformer(self, selector=_selector_text(selector))

    # -- cluster facts -------------------------------------------------------------------

    def server_facts(self) -> ClusterFacts:
        """The API server's version (``GET /version``)."""
        info = self._json("get /version", self.version_api.get_code)
        return ClusterFacts(
            server_version=str(info.get("gitVersion", "")),
            extra={k: str(v) for k, v in info.items() if isinstance(v, (str, int))},
        )

    # -- nodes -----------------------------------------------------------------------------

    def _list_wire_nodes(self, selector: str | Mapping[str, str] | None, *,
                         page_size: int | None = None) -> tuple[list[_wire.Node], str]:
        kwargs: dict[str, Any] = {}
        text = _selector_text(selector)
        if text:
            kwargs["label_selector"] = text
        if page_size:
            kwargs["limit"] = page_size
        for _ in range(3):
            nodes: list[_wire.Node] = []
            rv = ""
            kwargs.pop("_continue", None)
            try:
                while True:
                    page = self._parsed(_wire.NodeList, "list nodes", self.core.list_node,
                                        timeout=self.list_timeout, **kwargs)
                    nodes.extend(page.items)
                    rv = rv or page.metadata.resource_version
                    if not page.metadata.continue_:
                        return nodes, rv
                    kwargs["_continue"] = page.metadata.continue_
            except GatewayError as exc:
                if getattr(exc, "status", None) != 410 or "_continue" not in kwargs:
                    raise
                logger.info("node list continue token expired; listing again from the start")
        raise GatewayError("list nodes: continue tokens kept expiring; use a bigger page_size")

    def _lease_infos(self) -> dict[str, _wire.LeaseInfo]:
        """Node leases in one list call; empty when the namespace does not exist."""
        try:
            leases = self._parsed(_wire.LeaseList, f"list leases in {self.lease_namespace}",
                                  self.coordination.list_namespaced_lease, self.lease_namespace,
                                  timeout=self.list_timeout)
        except NotFoundError:
            return {}
        return _wire.lease_infos(leases)

    def list_nodes(self, selector: str | Mapping[str, str] | None = None, *,
                   page_size: int | None = None) -> tuple[list[NodeObservation], str]:
        """All nodes matching a label selector, joined with their kube-node-lease Lease.

        Two API calls (nodes, leases) whatever the cluster size, unless ``page_size`` asks for
        paging (less memory, more calls). Returns the observations sorted by name and the list's
        resourceVersion.
        """
        started = time.perf_counter()
        nodes, rv = self._list_wire_nodes(selector, page_size=page_size)
        leases = self._lease_infos()
        now = self._now()
        observations = sorted(
            (_wire.to_observation(n, lease=leases.get(n.metadata.name), observed_at=now)
             for n in nodes),
            key=lambda o: o.name,
        )
        for obs in observations:
            self.note_backend(obs)
        logger.info("listed %d nodes at rv %s in %.3fs", len(observations), rv,
                    time.perf_counter() - started)
        return observations, rv

    def read_node(self, name: str) -> NodeObservation:
        """One node (and its Lease). Prefer :meth:`informer` for following many nodes."""
        node = self._parsed(_wire.Node, f"get node/{name}", self.core.read_node, name)
        lease: _wire.LeaseInfo | None = None
        with contextlib.suppress(NotFoundError):
            found = self._parsed(_wire.Lease, f"get lease {self.lease_namespace}/{name}",
                                 self.coordination.read_namespaced_lease, name,
                                 self.lease_namespace)
            lease = _wire.lease_infos(_wire.LeaseList(items=[found])).get(name)
        obs = _wire.to_observation(node, lease=lease, observed_at=self._now())
        self.note_backend(obs)
        return obs

    # -- DKC prerequisites -----------------------------------------------------------------

    @staticmethod
    def check_dkc_usable(nodes: Iterable[NodeObservation]) -> None:
        """Refuse (``ClusterNotReadyError``) if any node reports no ``status.config``.

        A kubelet running Dynamic Kubelet Config always reports ``status.config`` (at least
        ``{}``) within ~12 s of starting. Its absence means DKC is off on that kubelet, or the API
        server's gate is off and strips it - either way an assignment would be ignored or dropped.
        Pure: makes no API call.
        """
        missing = sorted(n.name for n in nodes if not n.has_config_status)
        if missing:
            raise ClusterNotReadyError(
                f"Dynamic Kubelet Config is not usable on {len(missing)} node(s): "
                f"{_names(missing)} report no status.config and run no kubelet-rollout agent. Their "
                "kubelets run without --dynamic-config-dir / the DynamicKubeletConfig gate, or the API "
                "server has the gate off (default since 1.22) and strips the field; install the agent "
                "(deployments/kubernetes/agent-daemonset.yaml) on such nodes. Nothing was written.")

    def probe_cluster(self, nodes: Iterable[NodeObservation] | None = None) -> ClusterFacts:
        """Can config reach every target node? Checks with ZERO writes; ``ClusterNotReadyError`` if not.

        Per node, the backend: the node agent where it advertises itself (``kubelet-rollout.io/agent``,
        any Kubernetes version), else Dynamic Kubelet Config, which needs an API server before
        1.26 (``GET /version``; later ones always drop a new ``spec.configSource``) and a kubelet
        reporting ``status.config`` (:meth:`check_dkc_usable`; this also catches a gate-off
        1.22-1.25 API server, which strips it). A node with neither is refused by name, before
        anything is written. A gate-off API server that keeps an *existing* configSource is caught
        by reading back each assignment in :meth:`assign`. Uses :meth:`list_nodes` when ``nodes``
        is None.
        """
        facts = self.server_facts()
        version = _parse_version(facts.server_version)
        if nodes is None:
            nodes, _ = self.list_nodes()
        nodes = list(nodes)
        dkc_server = version is None or version < (1, 26)
        by_dkc = [n for n in nodes if n.backend != "agent"]
        if by_dkc and not dkc_server:
            names = sorted(n.name for n in by_dkc)
            raise ClusterNotReadyError(
                f"API server {facts.server_version} has no Dynamic Kubelet Config (removed in 1.26; "
                f"kubelets dropped it in 1.24) and {len(names)} target node(s) run no kubelet-rollout "
                f"agent: {_names(names)}. Install the agent (deployments/kubernetes/agent-daemonset.yaml) "
                "or leave those nodes out (nodes.excludeNames / excludeSelector). Nothing was written.")
        self.check_dkc_usable(by_dkc)
        return facts

    # -- assignment ------------------------------------------------------------------------

    def assign(self, node: str, source: ConfigRef | None, *, annotations: Mapping[str, str | None],
               labels: Mapping[str, str | None] | None = None) -> NodeObservation:
        """Point ``node`` at ``source`` (None = back to its local config) and annotate it.

        ONE JSON merge PATCH sets ``spec.configSource.configMap`` (namespace, name,
        kubeletConfigKey only; uid/resourceVersion are forbidden in spec) - or removes
        ``spec.configSource`` when ``source`` is None - together with ``annotations`` (a None
        value removes that annotation) and ``labels`` (likewise), so the journal on the node can
        never disagree with the assignment. The returned Node is read back: if the configSource did not stick (an API
        server with the DynamicKubeletConfig gate off answers 200 and drops it),
        ``ClusterNotReadyError`` is raised. Idempotent: repeating it is harmless.
        """
        if self.backend_of(node) == "agent":
            return self._assign_via_agent(node, source, annotations, labels)
        config_source = ({"configMap": source.unresolved().to_api()}
                         if source is not None else None)
        metadata: dict[str, Any] = {"annotations": dict(annotations)}
        if labels:
            metadata["labels"] = dict(labels)
        body = {"metadata": metadata, "spec": {"configSource": config_source}}
        result = self._patch_once(node, body, lambda current: _landed(current, source, annotations))
        got = ConfigRef.from_api(result.spec.config_source)
        if source is not None and not source.same_reference(got):
            logger.error("node %s: API server dropped spec.configSource (asked %s, got %s)",
                         node, source, got)
            raise ClusterNotReadyError(
                f"node {node}: the API server accepted the assignment of {source.unresolved()} "
                f"but the node's spec.configSource is {got or 'absent'} on read-back. The API "
                "server's DynamicKubeletConfig feature gate is off (default since 1.22), so new "
                "configSources are silently dropped. Enable the gate (--feature-gates="
                "DynamicKubeletConfig=true on kube-apiserver) before rolling out.")
        if source is None and got is not None:
            raise GatewayError(f"node {node}: spec.configSource is still {got} after unassigning it")
        logger.info("node %s: assigned %s", node,
                    source.unresolved() if source else "local config (configSource removed)")
        return _wire.to_observation(result, lease=None, observed_at=self._now())

    def _patch_once(self, node: str, body: Mapping[str, Any], landed: Callable[[_wire.Node], bool]) -> _wire.Node:
        """One merge PATCH of a node, retried like any call - but a retry first reads the node: an
        earlier attempt whose answer was lost may have landed, and must not be written twice."""
        tries = 0

        def attempt() -> _wire.Node:
            nonlocal tries
            tries += 1
            if tries > 1:
                current = self._single(_wire.Node, f"get node/{node}", self.core.read_node, node)
                if landed(current):
                    logger.info("node %s: the earlier attempt landed; not writing again", node)
                    return current
            return self._single(_wire.Node, f"patch node/{node}", self._fenced(self.core.patch_node), node,
                                body, _content_type=MERGE_PATCH)

        return self._policy()(attempt)

    def _assign_via_agent(self, node: str, source: ConfigRef | None, annotations: Mapping[str, str | None],
                          labels: Mapping[str, str | None] | None) -> NodeObservation:
        """The same assignment for a node run by kubelet-rollout-agent: the desired-config
        annotation (resolved: the agent refuses a ConfigMap whose uid/resourceVersion moved)."""
        desired = None if source is None else _desired_text(self.resolve_cached(source))
        wanted = {**annotations, ANN_DESIRED_CONFIG: desired}
        metadata: dict[str, Any] = {"annotations": wanted}
        if labels:
            metadata["labels"] = dict(labels)
        result = self._patch_once(node, {"metadata": metadata}, lambda current: _annotated(current, wanted))
        logger.info("node %s: desired config %s (agent)", node, source or "none: back to its base config")
        return _wire.to_observation(result, lease=None, observed_at=self._now())

    def resolve_cached(self, ref: ConfigRef) -> ConfigRef:
        """``resolve`` once per ConfigMap (published configs are immutable)."""
        key = (ref.namespace, ref.name, ref.kubelet_config_key)
        if key not in self._resolved:
            self._resolved[key] = self.resolve(ref.unresolved())
        return self._resolved[key]

    def backend_of(self, node: str) -> str:
        """How config reaches ``node`` ("dkc", "agent", ""), as last listed, read or watched. A
        node never seen is taken for DKC: the orchestrator always looks before it writes."""
        return self._backends.get(node, "dkc")

    def note_backend(self, obs: NodeObservation) -> None:
        self._backends[obs.name] = obs.backend

    def would_keep_assignment(self, node: str, source: ConfigRef) -> bool:
        """Ask the API server, with ``dryRun=All``, whether it would keep this assignment.

        Nothing is persisted, but the request is a PATCH and shows as such in audit logs, so
        :meth:`probe_cluster` does not use it. It answers the one case the status probe cannot:
        a node that still reports ``status.config`` but has no ``spec.configSource`` on an API
        server whose gate is now off (a *new* configSource would be dropped).
        """
        body = {"spec": {"configSource": {"configMap": source.unresolved().to_api()}}}
        result = self._parsed(_wire.Node, f"node {node}: dry-run assign", self.core.patch_node,
                              node, body, dry_run="All", _content_type=MERGE_PATCH)
        got = ConfigRef.from_api(result.spec.config_source)
        return source.same_reference(got)

    # -- ConfigMaps ------------------------------------------------------------------------

    def publish_configmap(self, manifest: Mapping[str, Any]) -> ConfigRef:
        """Create the (immutable) ConfigMap and return its resolved reference (uid, rv).

        Idempotent: if a ConfigMap of that name exists with the same ``data``/``binaryData``
        (a re-run, or a create whose response was lost) it is reused. The same name with
        different content is a :class:`ConflictError` - a hashed name must never change meaning.
        The config key is ``kubelet`` when present, else the only data key.
        """
        meta = manifest.get("metadata") or {}
        name = meta.get("name", "")
        namespace = meta.get("namespace") or self.namespace
        body = dict(manifest)
        body["metadata"] = {**meta, "namespace": namespace}
        what = f"create configmap {namespace}/{name}"
        try:
            obj = self._json(what, self.core.create_namespaced_config_map, namespace, body)
            logger.info("published ConfigMap %s/%s", namespace, name)
        except ConflictError as exc:
            if getattr(exc, "reason", "") != "AlreadyExists":
                raise
            obj = self.read_configmap(name, namespace=namespace)
            if not same_published_content(obj, manifest):
                why = ("is not immutable, so it could change under the nodes"
                       if obj.get("immutable") is not True and
                       (obj.get("data") or {}) == (manifest.get("data") or {})
                       else "holds different data")
                raise ConflictError(
                    f"ConfigMap {namespace}/{name} already exists but {why}; a published "
                    "kubelet config must never change under the same name") from exc
            logger.info("ConfigMap %s/%s already published with the same content; reusing it",
                        namespace, name)
        data = manifest.get("data") or {}
        key = "kubelet" if "kubelet" in data or not data else next(iter(data))
        m = obj.get("metadata") or {}
        return ConfigRef(namespace=namespace, name=name, kubelet_config_key=key,
                         uid=m.get("uid"), resource_version=m.get("resourceVersion"))

    def read_configmap(self, name: str, *, namespace: str | None = None) -> dict[str, Any]:
        """A ConfigMap as the API spells it (a plain dict)."""
        namespace = namespace or self.namespace
        return dict(self._json(f"get configmap {namespace}/{name}",
                               self.core.read_namespaced_config_map, name, namespace))

    def resolve(self, ref: ConfigRef) -> ConfigRef:
        """``ref`` with the ConfigMap's current uid and resourceVersion (what status will show)."""
        obj = self.read_configmap(ref.name, namespace=ref.namespace)
        m = obj.get("metadata") or {}
        return ConfigRef(ref.namespace, ref.name, ref.kubelet_config_key,
                         uid=m.get("uid"), resource_version=m.get("resourceVersion"))

    def configz(self, node: str) -> dict[str, Any]:
        """The running kubelet's effective config: ``GET /api/v1/nodes/NODE/proxy/configz``.

        Returns the endpoint's JSON as is: ``{"kubeletconfig": {...}}``.
        """
        return dict(self._json(f"node {node}: get configz",
                               self.core.connect_get_node_proxy_with_path, node, "configz"))

    # -- journal ---------------------------------------------------------------------------

    @staticmethod
    def journal_name(rollout: str) -> str:
        """``kubelet-rollout-journal-<rollout>`` (``rollout.names``)."""
        return journal_configmap_name(rollout)

    def load_journal(self, rollout: str) -> tuple[dict[str, str], str] | None:
        """The rollout's journal ConfigMap data and resourceVersion; None if there is none."""
        try:
            obj = self.read_configmap(self.journal_name(rollout))
        except NotFoundError:
            return None
        return dict(obj.get("data") or {}), str((obj.get("metadata") or {}).get("resourceVersion", ""))

    def save_journal(self, rollout: str, data: Mapping[str, str], *,
                     resource_version: str | None) -> str:
        """Write the journal; returns its new resourceVersion.

        ``resource_version=None`` creates it (exists already -> ``ConflictError``); otherwise it
        replaces the ConfigMap only if it is still at ``resource_version`` (optimistic
        concurrency: another writer -> ``ConflictError``; re-load and decide again). A conflict
        caused by our own retried write (the first attempt landed, its answer was lost) is
        recognised by reading back identical data, and reported as success.
        """
        name = self.journal_name(rollout)
        body: dict[str, Any] = {
            "apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": name, "namespace": self.namespace,
                         "labels": {LABEL_ROLLOUT: rollout, LABEL_COMPONENT: COMPONENT}},
            "data": dict(data),
        }
        try:
            if resource_version is None:
                obj = self._json(f"create journal {self.namespace}/{name}",
                                 self._fenced(self.core.create_namespaced_config_map), self.namespace, body)
            else:
                body["metadata"]["resourceVersion"] = resource_version
                obj = self._json(f"update journal {self.namespace}/{name}",
                                 self._fenced(self.core.replace_namespaced_config_map), name, self.namespace, body)
        except ConflictError:
            current = self.load_journal(rollout)
            if current is not None and current[0] == dict(data):
                return current[1]
            raise
        return str((obj.get("metadata") or {}).get("resourceVersion", ""))

    def read_request(self, rollout: str) -> dict[str, str] | None:
        """The pending lifecycle request on the rollout's journal (``rollout pause`` ...), if any."""
        try:
            obj = self.read_configmap(self.journal_name(rollout))
        except NotFoundError:
            return None
        raw = ((obj.get("metadata") or {}).get("annotations") or {}).get(ANN_REQUEST)
        try:
            request = json.loads(raw) if raw else None
        except ValueError:
            return None
        return {str(k): str(v) for k, v in request.items()} if isinstance(request, dict) else None

    def post_request(self, rollout: str, action: str, *, by: str, request_id: str) -> None:
        """Ask the running rollout to pause/resume/abort/promote: an annotation on its journal.

        The journal's data is left alone (the running engine owns it); the engine reads the
        annotation within a few seconds, applies it once (by id) and journals the result.
        """
        name = self.journal_name(rollout)
        body = json.dumps({"id": request_id, "action": action, "by": by, "at": _micro(self._now())})
        for _ in range(5):
            obj = self.read_configmap(name)
            meta = obj.setdefault("metadata", {})
            meta.setdefault("annotations", {})[ANN_REQUEST] = body
            try:
                self._json(f"update journal {self.namespace}/{name}", self.core.replace_namespaced_config_map,
                           name, self.namespace, obj)
                return
            except ConflictError:
                continue  # the engine wrote the journal meanwhile: read again
        raise ConflictError(f"could not annotate {self.namespace}/{name}: it keeps changing")

    def list_journals(self) -> list[dict[str, str]]:
        """Every rollout's journal ConfigMap data (``rollout list``), by the label its saves carry."""
        body = self._json(f"list journals in {self.namespace}", self.core.list_namespaced_config_map,
                          self.namespace, label_selector=f"{LABEL_MANAGED_BY}={COMPONENT}",
                          timeout=self.list_timeout)
        return [dict(item.get("data") or {}) for item in body.get("items") or []
                if str((item.get("metadata") or {}).get("name", "")).startswith(JOURNAL_PREFIX)]

    def delete_journal(self, rollout: str) -> None:
        """Remove the journal (missing is fine)."""
        name = self.journal_name(rollout)
        with contextlib.suppress(NotFoundError):
            self._raw(f"delete journal {self.namespace}/{name}",
                      self.core.delete_namespaced_config_map, name, self.namespace)

    # -- lock ------------------------------------------------------------------------------
    # Who may take, renew and release it is decided in rollout.lock; these verbs apply it.

    @staticmethod
    def _lock_info(obj: Mapping[str, Any]) -> LockInfo:
        try:
            lease = _wire.Lease.model_validate(obj)
        except ValueError as exc:
            raise GatewayError(f"lease {LOCK_NAME}: unexpected object: {exc}") from exc
        identity = lease.spec.holder_identity or ""
        rollout = lease.metadata.annotations.get(ANN_LOCK_ROLLOUT, "")
        return LockInfo(
            holder=identity,
            rollout=rollout,
            acquired=lease.spec.acquire_time,
            renewed=lease.spec.renew_time,
            duration_s=float(lease.spec.lease_duration_seconds or 0),
            resource_version=lease.metadata.resource_version,
            transitions=lease.spec.lease_transitions or 0,
            held_by=(Holder.from_lease(identity, rollout, lease.metadata.annotations.get(ANN_LOCK_HOLDER))
                     if identity else None),
        )

    def read_lock(self) -> LockInfo | None:
        """The lock Lease as it stands; None if it was never created."""
        try:
            obj = self._json(f"get lease {self.namespace}/{LOCK_NAME}",
                             self.coordination.read_namespaced_lease, LOCK_NAME, self.namespace)
        except NotFoundError:
            return None
        return self._lock_info(obj)

    def _lease_body(self, *, holder: Holder | None, rollout: str, duration_s: float, acquired: datetime,
                    renewed: datetime, transitions: int, resource_version: str | None
                    ) -> dict[str, Any]:
        annotations = {ANN_LOCK_ROLLOUT: rollout}
        if holder is not None:
            annotations[ANN_LOCK_HOLDER] = holder.details()
        meta: dict[str, Any] = {"name": LOCK_NAME, "namespace": self.namespace, "annotations": annotations,
                                "labels": {LABEL_COMPONENT: COMPONENT}}
        if resource_version:
            meta["resourceVersion"] = resource_version
        return {
            "apiVersion": "coordination.k8s.io/v1", "kind": "Lease", "metadata": meta,
            "spec": {"holderIdentity": holder.identity if holder is not None else None,
                     "leaseDurationSeconds": max(1, int(round(duration_s))),
                     "acquireTime": _micro(acquired), "renewTime": _micro(renewed),
                     "leaseTransitions": transitions},
        }

    def _write_lock(self, body: dict[str, Any], *, create: bool) -> LockInfo:
        what = f"{'create' if create else 'update'} lease {self.namespace}/{LOCK_NAME}"
        if create:
            obj = self._json(what, self.coordination.create_namespaced_lease, self.namespace, body)
        else:
            obj = self._json(what, self.coordination.replace_namespaced_lease, LOCK_NAME,
                             self.namespace, body)
        return self._lock_info(obj)

    def _held_error(self, info: LockInfo) -> LockHeldError:
        return LockHeldError(describe(info, self._now()), lease=f"{self.namespace}/{LOCK_NAME}",
                             expires=info.expires, rollout=info.rollout)

    def acquire_lock(self, holder: Holder | str, *, rollout: str = "", duration_s: float = 60.0) -> LockInfo:
        """Take the cluster-wide rollout lock (Lease ``<namespace>/kubelet-rollout-lock``).

        Re-entrant for the same holder identity (one process). Taken when it is free or lapsed,
        or held by a process of the same rollout that is gone (``rollout.lock.takeover_reason``);
        otherwise refused with :class:`LockHeldError` describing the holder. Races are settled by
        resourceVersion: of two processes taking it at once, one gets a conflict, re-reads and
        is refused. Expiry is judged with this process's clock against the stored renewTime
        (``rollout.lock.LEASE_GRACE_S`` allows for skew).
        """
        me = as_holder(holder, rollout)
        for _ in range(3):
            now = self._now()
            info = self.read_lock()
            try:
                if info is None:
                    taken = self._write_lock(self._lease_body(
                        holder=me, rollout=me.rollout, duration_s=duration_s, acquired=now,
                        renewed=now, transitions=0, resource_version=None), create=True)
                elif info.holder == me.identity:
                    taken = self._write_lock(self._lease_body(
                        holder=me, rollout=me.rollout, duration_s=duration_s, acquired=info.acquired or now,
                        renewed=now, transitions=info.transitions, resource_version=info.resource_version),
                        create=False)
                elif (why := takeover_reason(info, me, now)) is not None:
                    taken = self._write_lock(self._lease_body(
                        holder=me, rollout=me.rollout, duration_s=duration_s, acquired=now, renewed=now,
                        transitions=info.transitions + 1, resource_version=info.resource_version), create=False)
                    if info.holder:
                        logger.warning("took over the rollout lock from %s: %s", info.held_by, why)
                else:
                    raise self._held_error(info)
            except ConflictError:
                continue  # somebody wrote in between: re-read and decide again
            logger.info("rollout lock held by %s", me)
            return taken
        info = self.read_lock()
        if info is not None and info.holder != me.identity:
            raise self._held_error(info)
        raise ConflictError(f"could not take lease {self.namespace}/{LOCK_NAME}: it keeps changing")

    def renew_lock(self, holder: Holder | str, *, rollout: str = "", duration_s: float = 60.0) -> LockInfo:
        """Extend our lease. :class:`LockHeldError` if this holder does not hold it any more.

        A conflict (our own earlier write whose answer was lost, or a racing writer) re-reads
        and, if we still hold the lease, tries again (at most three times).
        """
        me = as_holder(holder, rollout)
        for _ in range(3):
            info = self.read_lock()
            if info is None or not info.holder:
                gone = "the lease was deleted" if info is None else "the lease was released"
                raise LockHeldError(f"nobody: {gone} while {me} held it",
                                    lease=f"{self.namespace}/{LOCK_NAME}")
            if info.holder != me.identity:
                raise self._held_error(info)
            now = self._now()
            body = self._lease_body(holder=me, rollout=me.rollout, duration_s=duration_s,
                                    acquired=info.acquired or now, renewed=now,
                                    transitions=info.transitions,
                                    resource_version=info.resource_version)
            try:
                return self._write_lock(body, create=False)
            except ConflictError:
                continue
        raise ConflictError(f"could not renew lease {self.namespace}/{LOCK_NAME}: it keeps changing")

    def release_lock(self, holder: Holder | str) -> bool:
        """Give the lock up (holder cleared, so the next rollout need not wait for expiry).

        Returns False (and changes nothing) when ``holder`` (this very identity) does not hold it.
        """
        identity = holder.identity if isinstance(holder, Holder) else holder
        info = self.read_lock()
        if info is None or info.holder != identity:
            return False
        now = self._now()
        body = self._lease_body(holder=None, rollout=info.rollout, duration_s=info.duration_s or 1,
                                acquired=info.acquired or now, renewed=now,
                                transitions=info.transitions,
                                resource_version=info.resource_version)
        try:
            self._write_lock(body, create=False)
        except ConflictError:
            return False
        logger.info("rollout lock released by %s", info.held_by)
        return True

    # -- events ----------------------------------------------------------------------------

    def record_node_event(self, node: str, reason: str, message: str, type: str = "Normal", *,
                          at: datetime | None = None) -> bool:
        """Record a core/v1 Event on ``node`` (shown by ``kubectl describe node``). Best effort.

        ``reason`` should be one of the ``EVENT_*`` constants; anything not starting with
        ``Kubelet`` is prefixed ``KubeletRollout``. Source component ``kubelet-rollout``; ``at``:
        when it happened (default now: an Event sent late keeps the time of what it reports).
        Below every other request: it takes only a token no other request waits for
        (:meth:`TokenBucket.acquire_spare`), gets :data:`EVENT_ATTEMPTS` quick tries of
        :data:`EVENT_TIMEOUT_S` each, and none once the run's or the thread's stop is set.
        Returns False (after logging) when it was not recorded: events must never stop a rollout.
        """
        if not reason.startswith("Kubelet"):
            reason = "KubeletRollout" + reason[:1].upper() + reason[1:]
        stamp = (at or self._now()).astimezone(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
        body = {
            "apiVersion": "v1", "kind": "Event",
            "metadata": {"name": f"{node}.{time.time_ns():x}", "namespace": self.event_namespace},
            # involvedObject.uid is the node *name*, as the kubelet itself does (kubectl
            # describe node finds node events by name and by uid=name)
            "involvedObject": {"kind": "Node", "name": node, "uid": node, "apiVersion": "v1"},
            "reason": reason, "message": message, "type": type,
            "source": {"component": COMPONENT},
            "reportingComponent": COMPONENT, "reportingInstance": COMPONENT,
            "firstTimestamp": stamp, "lastTimestamp": stamp, "count": 1,
        }
        what = f"node {node}: create event {reason}"
        stop = _own_stop() or self._stop
        create: Callable[..., Any] = self.core.create_namespaced_event

        def attempt() -> None:
            if not self.rate_limiter.acquire_spare(stop=stop):
                raise _NotSent()
            with translated(what):
                resp = create(self.event_namespace, body, _preload_content=False,
                              _request_timeout=(EVENT_TIMEOUT_S, EVENT_TIMEOUT_S))
                try:
                    resp.data  # read to the end: the connection goes back to the pool reusable
                finally:
                    resp.release_conn()

        retrying = default_retrying(attempts=EVENT_ATTEMPTS, cap_s=1.0, sleep=self.retrying.sleep, stop_event=stop)
        try:
            retrying(attempt)
        except _NotSent:
            logger.debug("node %s: event %s not sent: the run is ending", node, reason)
            return False
        except ForbiddenError as exc:
            # a missing permission refuses every event alike: say so once, not once per node
            level = logging.DEBUG if self._events_refused else logging.WARNING
            self._events_refused = True
            logger.log(level, "node %s: could not record event %s: %s", node, reason, exc)
            return False
        except GatewayError as exc:
            logger.warning("node %s: could not record event %s: %s", node, reason, exc)
            return False
        logger.info("node %s: event %s: %s", node, reason, message)
        return True


class _NotSent(Exception):
    """An Event given up before it was sent: the stop came while it waited for a spare token."""
