"""NodeInformer: a live, always-fresh view of every node and its Lease, kept by two watches.

The run loop decides on what it sees; a verdict from an old observation reverts healthy nodes
(a node "not renewed for 86 s" when the orchestrator simply had not looked for 86 s). So the
orchestrator does not sample nodes: like client-go's informers it lists once, then follows one
node watch and one Lease watch in background threads for the whole run - through approval
pauses, window waits and API outages - and the engine reads a snapshot whenever it decides.

Guarantees the engine relies on:

* **Monotonic per node.** An event older than the version already held (a watch resumed from an
  old resourceVersion, a replay after a reconnect) is dropped, as is one older than a PATCH
  response fed in with :meth:`NodeInformer.observe_written`. So the engine never concludes "my
  write did not land" from a stale copy, and never writes twice because of one.
* **Freshness is known.** ``synced`` is set while both watches are connected; it is cleared the
  moment a stream ends, for whatever reason, so a snapshot taken while a watch reconnects (a
  429 retried for seconds) is never mistaken for a live one. ``watched_since`` is when both last
  became connected: events replayed on a resume land just after it, so evidence that needs time
  (a NotReady lasting ``notReadyFor``, a stale Lease) counts only from then: time the API server
  was out of reach, or before this process started, never counts against a node.
* **Refusals are final.** A 403 on the list or the watch is not an outage to ride out: no
  retry will grant the permission. The watch stops and :meth:`NodeInformer.wait_synced` raises
  the :class:`~rollout.errors.ForbiddenError` naming it, instead of the engine waiting out
  ``apiOutageTolerance`` to report an unreachable API server.
* **Waking is cheap.** Every applied node change bumps ``version`` and notifies waiters (Lease
  renewals do not: they change no decision); the engine sleeps on :meth:`wait_for_change` and
  decides on one snapshot however many events arrived.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from contextlib import AbstractContextManager
from dataclasses import replace
from datetime import datetime
from typing import Any, Callable, Iterator, Protocol, TypeVar

from kubernetes.watch.watch import iter_resp_lines
from pydantic import BaseModel

from rollout.errors import ForbiddenError, GatewayError, NotFoundError
from rollout.model import NodeObservation

from . import _wire
from ._errors import translated

logger = logging.getLogger("rollout.gateway")

T = TypeVar("T")
W = TypeVar("W", bound=BaseModel)

RESYNC_BACKOFF_CAP_S = 5.0


def _rv_int(rv: str) -> int | None:
    """resourceVersions are opaque by contract but integers on every real server (etcd revision)
    and in kubesim; when one is not, ordering is unknown and the newer arrival wins."""
    try:
        return int(rv)
    except (TypeError, ValueError):
        return None


def is_older(candidate: str, held: str) -> bool:
    """True when ``candidate`` is known to be an older version of the object than ``held``."""
    a, b = _rv_int(candidate), _rv_int(held)
    return a is not None and b is not None and a < b


class InformerSource(Protocol):
    """What the informer uses of :class:`~rollout.gateway.KubeGateway` (named here so the
    gateway module, which builds informers, is not imported back)."""

    core: Any
    coordination: Any
    lease_namespace: str
    _now: Callable[[], datetime]

    def _call(self, what: str, fn: Callable[..., T], *args: Any, **kwargs: Any) -> T: ...

    def _parsed(self, model: type[W], what: str, fn: Callable[..., Any], *args: Any,
                **kwargs: Any) -> W: ...

    def _list_wire_nodes(self, selector: str | None) -> tuple[list[_wire.Node], str]: ...

    def note_backend(self, obs: NodeObservation) -> None: ...

    def cut_short_by(self, event: threading.Event) -> AbstractContextManager[None]: ...


class NodeInformer:
    """Background-maintained cache of nodes (with their Lease renewal) for one rollout run.

    Use as a context manager (threads start on enter, stop on exit), or call :meth:`start` and
    :meth:`stop`. ``selector`` limits the nodes watched (a label selector text).
    """

    def __init__(self, gateway: InformerSource, *, selector: str | None = None,
                 now: Callable[[], datetime] | None = None) -> None:
        self._gw = gateway
        self._selector = selector or None
        self._now = now or gateway._now
        self._lock = threading.Condition()
        self._nodes: dict[str, NodeObservation] = {}
        self._leases: dict[str, _wire.LeaseInfo] = {}
        self._stop = threading.Event()
        self._threads: list[threading.Thread] = []
        self._node_synced = threading.Event()
        self._lease_synced = threading.Event()
        self._watched_since: datetime | None = None
        self._responses: dict[str, Any] = {}
        self.version = 0
        self.relists = 0
        self.reconnects = 0
        self.events = 0
        self.last_error: str = ""
        self.refused: ForbiddenError | None = None

    # -- lifecycle -------------------------------------------------------------------------

    def __enter__(self) -> "NodeInformer":
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def start(self) -> None:
        for target, name in ((self._run_nodes, "node-informer"), (self._run_leases, "lease-informer")):
            thread = threading.Thread(target=self._until_stopped, args=(target,), name=name, daemon=True)
            thread.start()
            self._threads.append(thread)

    def _until_stopped(self, follow: Callable[[], None]) -> None:
        with self._gw.cut_short_by(self._stop):  # stop() ends a reconnect under way too
            follow()

    def stop(self) -> None:
        self._stop.set()
        for resp in list(self._responses.values()):
            _shutdown(resp)
        with self._lock:
            self._lock.notify_all()
        for thread in self._threads:
            thread.join(timeout=5)

    # -- reading ---------------------------------------------------------------------------

    @property
    def synced(self) -> bool:
        return self._node_synced.is_set() and self._lease_synced.is_set()

    @property
    def watched_since(self) -> datetime | None:
        """Since when both watches have been live without a gap (None while not synced)."""
        return self._watched_since if self.synced else None

    def wait_synced(self, timeout_s: float, *, stop: threading.Event | None = None) -> bool:
        """Block until both watches are live (True) or ``timeout_s`` passes (False).

        Raises the :class:`ForbiddenError` that stopped a watch: waiting cannot end it.
        """
        deadline = time.monotonic() + timeout_s
        while not self.synced:
            if self.refused is not None:
                raise self.refused
            remaining = deadline - time.monotonic()
            if remaining <= 0 or (stop is not None and stop.is_set()):
                return False
            with self._lock:
                self._lock.wait(min(remaining, 0.2))
        return True

    def snapshot(self) -> dict[str, NodeObservation]:
        """Every node as last seen (a copy; the values are frozen)."""
        with self._lock:
            return dict(self._nodes)

    def get(self, name: str) -> NodeObservation | None:
        with self._lock:
            return self._nodes.get(name)

    def wait_for_change(self, seen_version: int, timeout_s: float,
                        *, stop: threading.Event | None = None) -> int:
        """Block until ``version`` moves past ``seen_version``, ``timeout_s`` passes or ``stop``."""
        deadline = time.monotonic() + max(0.0, timeout_s)
        with self._lock:
            while self.version == seen_version and not self._stop.is_set():
                remaining = deadline - time.monotonic()
                if remaining <= 0 or (stop is not None and stop.is_set()):
                    break
                self._lock.wait(min(remaining, 0.25))
            return self.version

    def observe_written(self, obs: NodeObservation) -> None:
        """Fold in a write's response: it is at least as new as anything the watch delivered."""
        self._apply(obs)

    # -- applying --------------------------------------------------------------------------

    def _apply(self, obs: NodeObservation, *, deleted: bool = False) -> bool:
        with self._lock:
            held = self._nodes.get(obs.name)
            if held is not None and is_older(obs.resource_version, held.resource_version):
                return False  # a replayed, older version: never let it hide a newer one
            if deleted:
                self._nodes.pop(obs.name, None)
            else:
                self._gw.note_backend(obs)
                lease = self._leases.get(obs.name)
                if lease is not None:
                    obs = replace(obs, lease_renewed=_wire._utc(lease.renewed),
                                  lease_duration_s=lease.duration_s)
                self._nodes[obs.name] = obs
            self._bump()
            return True

    def _apply_lease(self, name: str, lease: _wire.LeaseInfo) -> None:
        with self._lock:
            self._leases[name] = lease
            held = self._nodes.get(name)
            if held is not None:
                self._nodes[name] = replace(held, lease_renewed=_wire._utc(lease.renewed),
                                            lease_duration_s=lease.duration_s)
            # no wake-up: renewals arrive every 10 s per node and change no decision by
            # themselves; a Lease going stale is a matter of time, which the engine's waits bound

    def _bump(self) -> None:
        self.version += 1
        self._lock.notify_all()

    def _set_synced(self, which: threading.Event, value: bool) -> None:
        with self._lock:
            was = self.synced
            if value:
                which.set()
            else:
                which.clear()
            if self.synced and not was:
                self._watched_since = self._now()
            self._bump()

    # -- node watch ------------------------------------------------------------------------

    def _run_nodes(self) -> None:
        failures = 0
        rv = ""
        while not self._stop.is_set():
            try:
                if not rv:
                    rv = self._relist_nodes()
                rv = self._follow_nodes(rv)
                failures = 0
            except _Gone:
                rv = ""
            except ForbiddenError as exc:
                self._refuse(self._node_synced, exc)
                return
            except GatewayError as exc:
                failures += 1
                self._broken(self._node_synced, "node watch", exc, failures)
            except Exception as exc:  # noqa: BLE001 - the informer must outlive any one bad stream
                failures += 1
                self._broken(self._node_synced, "node watch", exc, failures)

    def _relist_nodes(self) -> str:
        nodes, rv = self._gw._list_wire_nodes(self._selector)
        now = self._now()
        fresh = {n.metadata.name: _wire.to_observation(n, lease=None, observed_at=now) for n in nodes}
        with self._lock:
            for name in set(self._nodes) - set(fresh):
                self._nodes.pop(name, None)
        for obs in fresh.values():
            self._apply(obs)
        self.relists += 1
        logger.info("node informer listed %d nodes at rv %s", len(fresh), rv)
        return rv

    def _follow_nodes(self, rv: str) -> str:
        kwargs: dict[str, Any] = {"label_selector": self._selector} if self._selector else {}
        resp = self._connect("watch nodes", self._gw.core.list_node, watch=True,
                             allow_watch_bookmarks=True, resource_version=rv, timeout_seconds=290,
                             _preload_content=False, _request_timeout=(10.0, 320.0), **kwargs)
        self._set_synced(self._node_synced, True)
        for kind, obj in self._stream("nodes", resp):
            meta = obj.get("metadata") or {}
            rv = meta.get("resourceVersion") or rv
            if kind == "BOOKMARK":
                continue
            node = _wire.Node.model_validate(obj)
            self.events += 1
            self._apply(_wire.to_observation(node, lease=None, observed_at=self._now()),
                        deleted=kind == "DELETED")
        self._set_synced(self._node_synced, False)  # not live until the next watch connects
        self.reconnects += 1
        return rv

    # -- lease watch -----------------------------------------------------------------------

    def _run_leases(self) -> None:
        failures = 0
        rv = ""
        while not self._stop.is_set():
            try:
                if not rv:
                    rv = self._relist_leases()
                rv = self._follow_leases(rv)
                failures = 0
            except _Gone:
                rv = ""
            except ForbiddenError as exc:
                self._refuse(self._lease_synced, exc)
                return
            except NotFoundError:  # no kube-node-lease namespace: nothing to watch
                self._set_synced(self._lease_synced, True)
                self._stop.wait(30)
            except Exception as exc:  # noqa: BLE001
                failures += 1
                self._broken(self._lease_synced, "lease watch", exc, failures)

    def _relist_leases(self) -> str:
        leases = self._gw._parsed(_wire.LeaseList, f"list leases in {self._gw.lease_namespace}",
                                  self._gw.coordination.list_namespaced_lease, self._gw.lease_namespace)
        for name, info in _wire.lease_infos(leases).items():
            self._apply_lease(name, info)
        return leases.metadata.resource_version

    def _follow_leases(self, rv: str) -> str:
        resp = self._connect("watch leases", self._gw.coordination.list_namespaced_lease,
                             self._gw.lease_namespace, watch=True, allow_watch_bookmarks=True,
                             resource_version=rv, timeout_seconds=290, _preload_content=False,
                             _request_timeout=(10.0, 320.0))
        self._set_synced(self._lease_synced, True)
        for kind, obj in self._stream("leases", resp):
            meta = obj.get("metadata") or {}
            rv = meta.get("resourceVersion") or rv
            if kind in ("BOOKMARK", "DELETED"):
                continue
            spec = obj.get("spec") or {}
            duration = spec.get("leaseDurationSeconds")
            self._apply_lease(meta.get("name", ""), _wire.LeaseInfo(
                renewed=_wire._time(spec.get("renewTime")),
                duration_s=float(duration) if duration is not None else None))
        self._set_synced(self._lease_synced, False)
        self.reconnects += 1
        return rv

    # -- shared stream plumbing ------------------------------------------------------------

    def _connect(self, what: str, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        """Open a watch stream (retried like any call); a 410 answer means list again."""
        try:
            return self._gw._call(what, fn, *args, **kwargs)
        except GatewayError as exc:
            if getattr(exc, "status", None) == 410:  # retrying the same RV would get 410 forever
                raise _Gone() from exc
            raise

    def _stream(self, what: str, resp: Any) -> Iterator[tuple[str, dict[str, Any]]]:
        self._responses[what] = resp
        try:
            if self._stop.is_set():  # stop() ran while this stream was connecting: it missed it
                return
            with translated(f"watch {what}"):
                for line in iter_resp_lines(resp):  # type: ignore[no-untyped-call]
                    if self._stop.is_set():
                        return
                    if not line:
                        continue
                    raw = json.loads(line)
                    kind, obj = raw.get("type", ""), raw.get("object") or {}
                    if kind == "ERROR":
                        if obj.get("code") == 410:
                            raise _Gone()
                        raise GatewayError(f"watch {what}: ERROR event {obj.get('code')}: "
                                           f"{obj.get('message', '')}")
                    yield kind, obj
        finally:
            self._responses.pop(what, None)
            _shutdown(resp)

    def _refuse(self, which: threading.Event, exc: ForbiddenError) -> None:
        """A 403: stop this watch for good and let the next wait raise it (see the module doc).
        Logged quietly: the raised error is what reaches the operator, once."""
        logger.info("watch stopped for good: %s", exc)
        self.last_error = str(exc)
        self.refused = exc
        self._set_synced(which, False)

    def _broken(self, which: threading.Event, what: str, exc: BaseException, failures: int) -> None:
        if self._stop.is_set():
            return
        self._set_synced(which, False)
        self.last_error = f"{what}: {exc}"
        logger.warning("%s interrupted (attempt %d): %s", what, failures, exc)
        self._stop.wait(min(RESYNC_BACKOFF_CAP_S, 0.1 * 2 ** min(failures, 6)))


class _Gone(Exception):
    """410: the resourceVersion is too old to resume from; list again."""


def _shutdown(resp: Any) -> None:
    for method in ("shutdown", "close", "release_conn"):
        fn = getattr(resp, method, None)
        if fn is not None:
            try:
                fn()
            except Exception:  # noqa: BLE001 - closing a dead stream may fail; it is gone anyway
                pass


__all__ = ["NodeInformer", "is_older"]
