"""ClusterClient: the gateway's one way in to the API server, shared by every resource's verbs.

Building a request is the resource modules' job (``_nodes``, ``_configmaps``, ``_lock``,
``_events``); sending it is this module's, and only this one's:

* **One attempt** (:meth:`ClusterClient._attempt`): its errors translated into
  :mod:`rollout.errors` (``_errors``); one that timed out drops the pool's idle connections.
* **One call** (:meth:`ClusterClient._call` and the raw variants): every attempt takes a token
  from the rate limit, then the retry policy (``_retry``) decides on our error types.
* **Stops**: the run's (:meth:`ClusterClient.tolerate_outages`) and a thread's own
  (:meth:`ClusterClient.cut_short_by`) end retries and rate-limit waits alike.
* **Views**: :meth:`ClusterClient.within` and :meth:`ClusterClient.impatient` are the same
  cluster under another call policy; :meth:`ClusterClient.fence_writes` puts the lock's check in
  front of every node and journal write.
* **Connections** (:func:`_tuned`): urllib3's hidden retries off, TCP keep-alive on, a pool of
  :data:`POOL_SIZE`.
"""

from __future__ import annotations

import contextlib
import copy
import json
import logging
import os
import threading
import time
from datetime import datetime, timezone
from typing import Any, Callable, Iterator, Self, TypeVar

import tenacity
import yaml
from kubernetes import client as k8s
from kubernetes import config as k8s_config
from kubernetes.client import rest as k8s_rest
from kubernetes.config.config_exception import ConfigException
from kubernetes.utils.keepalive import tcp_keepalive_socket_options

from rollout.errors import FlagError, GatewayError, TransientGatewayError

from ._errors import translated
from ._ratelimit import AdaptiveRate, TokenBucket
from ._wire import Wire, WireList, decode
from ._retry import cut_short, default_retrying

T = TypeVar("T")
W = TypeVar("W", bound=Wire)
WL = TypeVar("WL", bound=WireList)
logger = logging.getLogger("rollout.gateway")

# the engine's fan-out (64 PATCHes at once, rollout.loop.engine.DEFAULT_CONCURRENCY) and its 8 node Event
# senders beside the two watches, lock renewals and the run loop's own reads, with room to spare
POOL_SIZE = 96
CONNECT_TIMEOUT_S = 10.0
# a GET, PATCH or PUT of one object is answered in milliseconds by a live server
REQUEST_TIMEOUT_S = 10.0
# a list of 20,000 nodes takes the server seconds to start answering
LIST_TIMEOUT_S = 30.0
# how the kubernetes client says a kubeconfig (or a file it names) cannot be read as one
UNREADABLE_KUBECONFIG = ("Invalid kube-config", "File does not exist")
NO_KUBECONFIG_ADVICE = "give --kubeconfig FILE or set $KUBECONFIG (or run in a pod); nothing was started"
BAD_KUBECONFIG_ADVICE = "fix the kubeconfig (`kubectl config view` reads it the same way); nothing was started"
# keep-alive probes after 15 s of quiet, every 5 s: a peer that vanished is dropped after 3 misses
KEEPALIVE_IDLE_S, KEEPALIVE_INTERVAL_S, KEEPALIVE_PROBES = 15, 5, 3

# the event that ends the current thread's calls early (ClusterClient.cut_short_by), if any
_thread_scope = threading.local()


@contextlib.contextmanager
def _in_thread_scope(name: str, value: object) -> Iterator[None]:
    """``_thread_scope.<name>`` is ``value`` for the block's length, in this thread only."""
    outer = getattr(_thread_scope, name, None)
    setattr(_thread_scope, name, value)
    try:
        yield
    finally:
        setattr(_thread_scope, name, outer)


def own_stop() -> threading.Event | None:
    """The event that ends this thread's calls early, if it is inside a ``cut_short_by`` block."""
    return getattr(_thread_scope, "stop", None)


def _utcnow() -> datetime:
    return datetime.now(timezone.utc)


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


class ClusterClient:
    """The connection to one cluster and the policy every call follows. Resource verbs build on it
    (``KubeGateway`` is all of them); construct with :meth:`from_kubeconfig` in production.

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
        self._write_fence: Callable[[], None] | None = None
        self._init_resource_state()

    def _init_resource_state(self) -> None:
        """Each resource's verbs set up what they remember here (calling ``super()`` first)."""

    # -- construction ----------------------------------------------------------------------

    @classmethod
    def from_kubeconfig(cls, path: str | os.PathLike[str] | None = None, *,
                        context: str | None = None, **options: Any) -> Self:
        """Build from a kubeconfig file (``$KUBECONFIG``/``~/.kube/config`` when ``path`` is None).

        When no path is given, no kubeconfig exists and the process runs in a pod, the
        in-cluster service account is used instead. ``options`` go to the constructor. A
        kubeconfig that is missing or unreadable is bad input (:class:`FlagError`, exit 2): no
        cluster was asked anything; what loading it otherwise refuses (its credentials) is the
        cluster's (:class:`GatewayError`).
        """
        # an empty $KUBECONFIG is unset, as kubectl reads it
        kubeconfig = str(path or os.environ.get("KUBECONFIG") or os.path.expanduser("~/.kube/config"))
        files = [f for f in kubeconfig.split(os.pathsep) if f]
        in_pod = bool(os.environ.get("KUBERNETES_SERVICE_HOST"))
        if path is None and in_pod and not os.path.exists(files[0]):
            return cls.in_cluster(**options)
        where = f"kubeconfig {kubeconfig}" + (f" (context {context})" if context else "")
        if not any(os.path.isfile(f) for f in files):
            named = "--kubeconfig" if path is not None else "$KUBECONFIG" if os.environ.get("KUBECONFIG") else ""
            said = f"{named} names no kubeconfig file" if named else "no kubeconfig: neither --kubeconfig nor $KUBECONFIG is given"
            raise FlagError(f"{said} ({kubeconfig} does not exist)", advice=NO_KUBECONFIG_ADVICE)
        try:
            with translated(f"load {where}"):
                api_client = k8s_config.new_client_from_config(  # type: ignore[no-untyped-call]
                    config_file=kubeconfig, context=context)
        except (ConfigException, OSError, yaml.YAMLError) as exc:
            if isinstance(exc, ConfigException) and not str(exc).startswith(UNREADABLE_KUBECONFIG):
                raise GatewayError(f"cannot load {where}: {exc}") from exc
            reason = " ".join(str(exc).split())  # a YAML error's lines, on one
            raise FlagError(f"cannot load {where}: {reason}", advice=BAD_KUBECONFIG_ADVICE) from exc
        return cls(api_client, **options)

    @classmethod
    def in_cluster(cls, **options: Any) -> Self:
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

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- the one way in --------------------------------------------------------------------

    @contextlib.contextmanager
    def _attempt(self, what: str, *, one_object: bool = True) -> Iterator[None]:
        """One attempt's errors, translated; one that timed out drops the idle connections. The
        answer tells the rate limit how the server copes (a request for one object: how fast;
        any request: whether it was throttled)."""
        started = time.monotonic()
        try:
            with translated(what):
                yield
        except TransientGatewayError as exc:
            if getattr(exc, "reason", "") == "Timeout":
                self.drop_idle_connections()
            status, retry_after = getattr(exc, "status", None), getattr(exc, "retry_after", None)
            if status == 429 or (status == 503 and retry_after is not None):
                self.rate_limiter.throttled(retry_after)
            elif one_object:
                self.rate_limiter.answered(time.monotonic() - started)
            raise
        except GatewayError:
            if one_object:
                self.rate_limiter.answered(time.monotonic() - started)
            raise
        if one_object:
            self.rate_limiter.answered(time.monotonic() - started)

    def drop_idle_connections(self) -> None:
        """Close every pooled connection not in use (the next requests open new ones): after one
        connection was found silent, the others opened before it are suspect too."""
        self.api_client.rest_client.pool_manager.clear()

    def _policy(self) -> tenacity.Retrying:
        """The retry policy of a call made now: the gateway's, ended early by the calling thread's
        own stop too (:meth:`cut_short_by`)."""
        own = own_stop()
        return cut_short(self.retrying, own) if own is not None else self.retrying.copy()

    def _take_token(self, what: str) -> None:
        """Wait for the rate limit. A thread told to end (:meth:`cut_short_by`) sends nothing more;
        the run's stop only ends the wait (a last word, such as releasing the lock, still goes)."""
        own = own_stop()
        if getattr(_thread_scope, "first", False):
            self.rate_limiter.acquire_first(stop=own or self._stop)
        else:
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
            with self._attempt(what, one_object=timeout is None):
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
        """A raw call whose body is decoded straight into a small ``_wire`` struct."""
        data = self._raw(what, fn, *args, **kwargs)
        try:
            return decode(model, data)
        except ValueError as exc:  # msgspec's DecodeError is a ValueError
            raise GatewayError(f"{what}: unexpected response: {exc}") from exc

    def _pages(self, model: type[WL], what: str, fn: Callable[..., Any], *args: Any, page_size: int | None,
               **kwargs: Any) -> tuple[list[WL], str]:
        """A list call's pages of at most ``page_size`` items (None: one response), and the list's
        resourceVersion; an expired continue token (410) lists again from the start, three times at most."""
        if page_size:
            kwargs["limit"] = page_size
        for _ in range(3):
            pages: list[WL] = []
            kwargs.pop("_continue", None)
            try:
                while True:
                    page = self._parsed(model, what, fn, *args, timeout=self.list_timeout, **kwargs)
                    pages.append(page)
                    if not page.metadata.continue_:
                        return pages, pages[0].metadata.resource_version
                    kwargs["_continue"] = page.metadata.continue_
            except GatewayError as exc:
                if getattr(exc, "status", None) != 410 or "_continue" not in kwargs:
                    raise
                logger.info("%s: continue token expired; listing again from the start", what)
        raise GatewayError(f"{what}: continue tokens kept expiring; use a bigger page_size")

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
            return decode(model, data)
        except ValueError as exc:
            raise GatewayError(f"{what}: unexpected response: {exc}") from exc

    # -- the call policy -------------------------------------------------------------------

    def tolerate_outages(self, seconds: float, *, stop: threading.Event | None = None) -> None:
        """From now on retry transient errors for up to ``seconds`` (a control plane restart)
        instead of a fixed number of attempts; ``stop`` (the run's Ctrl-C) cuts the retrying and
        every wait for the rate limit short, in every thread."""
        self.retrying = default_retrying(deadline_s=seconds, stop_event=stop)
        self._stop = stop

    def cut_short_by(self, event: threading.Event) -> contextlib.AbstractContextManager[None]:
        """Calls this thread makes inside the block give up once ``event`` is set, as at the
        run's stop: no further attempt, no further wait for the rate limit (the request already
        on the wire still ends by its timeout). For worker threads whose owner may end them: the
        batch's writers, the Event senders, the watches, the lock keeper."""
        return _in_thread_scope("stop", event)

    def ahead_of_the_queue(self) -> contextlib.AbstractContextManager[None]:
        """Calls this thread makes inside the block go ahead of every call waiting for the rate
        limit (``TokenBucket.acquire_first``): for the watches, which every decision waits on."""
        return _in_thread_scope("first", True)

    def within(self, seconds: float) -> Self:
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

    def impatient(self) -> Self:
        """The same cluster, giving up after two quick attempts: for best-effort reads such as
        sampling a few nodes' running config, where one slow kubelet must not hold anything up."""
        return type(self)(self.api_client, core=self.core, coordination=self.coordination,
                          version=self.version_api, retrying=default_retrying(attempts=2, cap_s=1.0),
                          rate_limiter=self.rate_limiter, namespace=self.namespace,
                          lease_namespace=self.lease_namespace, event_namespace=self.event_namespace,
                          request_timeout_s=self.request_timeout[1], list_timeout_s=self.list_timeout[1],
                          pool_size=self.pool_size, now=self._now)

    def limit_rate(self, qps: float, burst: int) -> None:
        """Every request from now on within ``qps`` (``burst`` at once), the policy's ceiling: the
        rate follows the server's answers beneath it (:class:`AdaptiveRate`)."""
        self.rate_limiter = AdaptiveRate(ceiling_qps=qps, burst=burst)

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
