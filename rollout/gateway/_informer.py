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
* **Freshness is known.** ``synced`` is set while both watches are connected and delivering; it
  is cleared the moment a stream ends, whatever ended it (the server closing it, a 410 in the
  stream or on connecting, an error, or silence), and stays cleared until the next watch is
  connected, after a relist where one is due; so a snapshot taken while a watch reconnects or
  relists (a 429 retried for seconds) is never mistaken for a live one. ``watched_since`` is when
  both last became connected after a gap: events replayed on a resume land just after it, so
  evidence that needs time (a NotReady lasting ``notReadyFor``, a stale Lease) counts only from
  then: time the API server was out of reach, or before this process started, never counts
  against a node.
* **Silence is death.** A connection can stop delivering without closing (a load balancer that
  died, a dropped NAT entry). Both watches ask for BOOKMARKs, which API servers send about once a
  minute to a watch that asked (1.19 and later), so a live watch is never quiet for long; one that
  delivers nothing for longer than its bound is taken for dead and ends like any other. The
  node watch's bound is :data:`NODE_WATCH_SILENCE_S`. The Lease watch's is half the shortest
  Lease duration (20 s for the kubelet's 40 s): a live kubelet renews every quarter of it, and a
  Lease counts as stale only after its whole duration at least (``rollout.machine.phases.node_down``),
  so a frozen Lease watch is replaced before its frozen copy could make any node look stale. A
  Lease watch can also be quiet because no kubelet renews at all (a one-node cluster whose
  kubelet crash-loops): so a silent Lease watch is checked with a list before it is called dead.
  If the list holds nothing the watch missed, it was only quiet: it is resumed and the evidence
  stays continuous. If it does, its connection was dead, and so, probably, is the node watch's:
  that one is resumed at once too. A silent watch also drops the client's idle connections.
* **Refusals are final.** A 403 on the list or the watch is not an outage to ride out: no
  retry will grant the permission. The watch stops and :meth:`NodeInformer.wait_synced` raises
  the :class:`~rollout.errors.ForbiddenError` naming it, instead of the engine waiting out
  ``apiOutageTolerance`` to report an unreachable API server.
* **Waking is cheap.** Every applied node change bumps ``version`` and notifies waiters (Lease
  renewals do not: they change no decision); the engine sleeps on :meth:`wait_for_change` and
  decides on one snapshot however many events arrived.

Here is what the informer decides; one stream's plumbing (connect, read, end) is ``_watch``.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import Counter
from dataclasses import replace
from datetime import datetime
from typing import Any, Callable

from rollout.errors import ForbiddenError, NotFoundError
from rollout.model import NodeObservation
from rollout.ports import NodeListing, Signal

from . import _wire
from ._watch import Gone, InformerSource, Silent, Watch, connect, events, shutdown

logger = logging.getLogger("rollout.gateway")

RESYNC_BACKOFF_CAP_S = 5.0
# over two BOOKMARK periods: only a dead node watch is this quiet (an API server older than
# 1.19 sends a BOOKMARK only before the watch's timeout: its quiet watch is simply resumed)
NODE_WATCH_SILENCE_S = 150.0
LEASE_WATCH_SILENCE_SHARE = 0.5  # of the shortest Lease duration (see the module doc)
KUBELET_LEASE_DURATION_S = 40.0  # until a Lease says otherwise
# a list while the run goes on comes in pages of this many: one 20,000-Lease response held 70 MiB
# more at once than the run needs; client-go's 500 is 40 requests at that size (bench/README.md)
RELIST_PAGE = 5000


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


class NodeInformer:
    """Background-maintained cache of nodes (with their Lease renewal) for one rollout run.

    Use as a context manager (threads start on enter, stop on exit), or call :meth:`start` and
    :meth:`stop`. ``selector`` limits the nodes watched (a label selector text).
    ``node_silence_s``: how long the node watch may deliver nothing before it is taken for dead.
    """

    def __init__(self, gateway: InformerSource, *, selector: str | None = None,
                 now: Callable[[], datetime] | None = None,
                 node_silence_s: float = NODE_WATCH_SILENCE_S, seed: NodeListing | None = None) -> None:
        self._gw = gateway
        self._selector = selector or None
        self._now = now or gateway._now
        self._node_silence_s = node_silence_s
        self._lock = threading.Condition()
        self._nodes: dict[str, NodeObservation] = {}
        self._leases: dict[str, _wire.LeaseInfo] = {}
        # how many held Leases have each duration: the Lease watch's silence bound is the shortest,
        # asked at every read, and a min over 20,000 Leases at each was a hot path
        self._durations: Counter[float] = Counter()
        self._stop = threading.Event()
        self._threads: list[threading.Thread] = []
        self._node_watch = Watch("nodes")
        self._lease_watch = Watch("leases")
        self._evidence_gap = True  # watched_since moves on the next time both are live
        self._watched_since: datetime | None = None
        self._responses: dict[str, Any] = {}
        self.version = 0
        self.relists = 0
        self.reconnects = 0
        self.events = 0
        self.last_error: str = ""
        self.refused: ForbiddenError | None = None
        if seed is not None:
            self._seed(seed)

    def _seed(self, listing: NodeListing) -> None:
        """Start from a list the caller made (start-up lists the nodes once, not twice): both
        watches resume from its resourceVersions; one too old by then is listed again (410)."""
        if listing.selector != self._selector:
            raise ValueError(f"a listing of {listing.selector!r} cannot seed a view of {self._selector!r}")
        for obs in listing.nodes:
            if obs.lease_renewed is not None or obs.lease_duration_s is not None:
                self._hold_lease(obs.name, _wire.LeaseInfo(renewed=obs.lease_renewed, duration_s=obs.lease_duration_s))
            self._apply(obs)
        self._node_watch.rv = listing.resource_version
        self._lease_watch.rv = listing.lease_resource_version

    # -- lifecycle -------------------------------------------------------------------------

    def __enter__(self) -> "NodeInformer":
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def start(self) -> None:
        """Start both watches (once: a view started early is started again harmlessly)."""
        if self._threads:
            return
        for watch, name in ((self._node_watch, "node-informer"), (self._lease_watch, "lease-informer")):
            thread = threading.Thread(target=self._until_stopped, args=(watch,), name=name, daemon=True)
            thread.start()
            self._threads.append(thread)

    def _until_stopped(self, watch: Watch) -> None:
        # stop() ends a reconnect under way too; a reconnect or relist is not queued behind writes
        with self._gw.cut_short_by(self._stop), self._gw.ahead_of_the_queue():
            self._run(watch)

    def stop(self) -> None:
        self._stop.set()
        for resp in list(self._responses.values()):
            shutdown(resp)
        with self._lock:
            self._lock.notify_all()
        for thread in self._threads:
            thread.join(timeout=5)

    # -- reading ---------------------------------------------------------------------------

    @property
    def synced(self) -> bool:
        """Both watches live. One that has delivered nothing for longer than its bound while its
        thread has not noticed means this process was frozen (SIGSTOP, a suspended VM) or starved:
        what it holds is old, so it is not live; its stream is ended and resumed, and the evidence
        counts again from then (a frozen orchestrator once reverted a healthy node whose Lease it
        had simply not heard renewed for 110 s)."""
        now = time.monotonic()
        for watch in (self._node_watch, self._lease_watch):
            if watch.synced.is_set() and now - watch.heard > self._silence_bound(watch):
                logger.warning("the %s watch delivered nothing for %.0fs unnoticed: this process was frozen or "
                               "starved; watching again before judging any node", watch.name, now - watch.heard)
                # a quiet Lease watch (no kubelet renewing) is told from a missed one by a list, as
                # when its thread finds it silent: only a miss breaks the evidence
                watch.verify = watch is self._lease_watch
                self._recycle(watch)
        return self._live()

    def _live(self) -> bool:
        return self._node_watch.synced.is_set() and self._lease_watch.synced.is_set()

    @property
    def watched_since(self) -> datetime | None:
        """Since when both watches have been live without a gap in what they delivered (None
        while not synced)."""
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
                        *, stop: Signal | None = None) -> int:
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

    def _hold_lease(self, name: str, lease: _wire.LeaseInfo) -> None:
        """Keep ``lease`` as ``name``'s (the caller holds the lock, or is the constructor)."""
        held = self._leases.get(name)
        if held is not None and held.duration_s:
            self._durations[held.duration_s] -= 1
            if not self._durations[held.duration_s]:
                del self._durations[held.duration_s]
        if lease.duration_s:
            self._durations[lease.duration_s] += 1
        self._leases[name] = lease

    def _apply_lease(self, name: str, lease: _wire.LeaseInfo) -> None:
        with self._lock:
            self._hold_lease(name, lease)
            held = self._nodes.get(name)
            if held is not None:
                self._nodes[name] = replace(held, lease_renewed=_wire._utc(lease.renewed),
                                            lease_duration_s=lease.duration_s)
            # no wake-up: renewals arrive every 10 s per node and change no decision by
            # themselves; a Lease going stale is a matter of time, which the engine's waits bound

    def _bump(self) -> None:
        self.version += 1
        self._lock.notify_all()

    def _set_synced(self, watch: Watch, value: bool) -> None:
        with self._lock:
            was = self._live()
            if value:
                self._evidence_gap = self._evidence_gap or not watch.continuous
                watch.continuous = False
                watch.synced.set()
            else:
                watch.synced.clear()
            if self._live() and not was and self._evidence_gap:
                self._watched_since = self._now()
                self._evidence_gap = False
            self._bump()

    # -- the watches -----------------------------------------------------------------------

    def _run(self, watch: Watch) -> None:
        """Keep one watch live for the whole run. Every end of a stream passes through
        :meth:`_follow`'s ``finally`` (not live from that moment on); here only what comes next
        is decided: resume, list again (410), check a silent Lease watch, or back off."""
        failures = 0
        while not self._stop.is_set():
            try:
                if not watch.rv or watch.verify:
                    self._relist(watch)
                self._follow(watch)
                failures = 0
                self.reconnects += 1
            except Gone:
                watch.rv = ""
            except Silent as silent:
                self._silent(watch, silent)
            except ForbiddenError as exc:
                self._refuse(watch, exc)
                return
            except NotFoundError as exc:
                if watch is self._lease_watch:  # no kube-node-lease namespace: nothing to watch
                    self._set_synced(watch, True)
                    self._stop.wait(30)
                    continue
                failures += 1
                self._broken(watch, exc, failures)
            except Exception as exc:  # noqa: BLE001 - the informer must outlive any one bad stream
                if watch.recycled:
                    watch.recycled = False
                    self.reconnects += 1
                    continue
                failures += 1
                self._broken(watch, exc, failures)

    def _relist(self, watch: Watch) -> None:
        if watch is self._node_watch:
            watch.rv = self._relist_nodes()
            return
        watch.rv, missed = self._relist_leases()
        if watch.verify:
            watch.verify = False
            if missed:
                logger.warning("the lease watch had stopped delivering while Leases were renewed: its "
                               "connection was dead; watching again (the node watch too)")
                self._recycle(self._node_watch)
            else:  # nobody renewed: it was only quiet, and what we hold is still current
                watch.continuous = True

    def _follow(self, watch: Watch) -> None:
        """One watch stream, from ``watch.rv`` until it ends (normally: the server's timeout)."""
        resp = connect(self._gw, watch, selector=self._selector, silence_s=self._silence_bound(watch))
        watch.heard = time.monotonic()
        watch.recycled = False
        self._set_synced(watch, True)
        try:
            model = _wire.Node if watch is self._node_watch else _wire.Lease
            for kind, rv, obj in events(watch, resp, model, stop=self._stop, responses=self._responses,
                                        silence_s=lambda: self._silence_bound(watch)):
                watch.rv = rv or watch.rv
                if kind == "BOOKMARK" or obj is None:
                    continue
                if isinstance(obj, _wire.Node):
                    self.events += 1
                    self._apply(_wire.to_observation(obj, lease=None, observed_at=self._now()),
                                deleted=kind == "DELETED")
                elif isinstance(obj, _wire.Lease) and kind != "DELETED":
                    self._apply_lease(obj.metadata.name, _wire.lease_info(obj))
        finally:
            self._set_synced(watch, False)  # the one way out: not live until the next one connects

    def _silence_bound(self, watch: Watch) -> float:
        """How long this watch may deliver nothing before it counts as dead (see the module doc)."""
        if watch is self._node_watch:
            return self._node_silence_s
        with self._lock:
            shortest = min(self._durations, default=KUBELET_LEASE_DURATION_S)
        return LEASE_WATCH_SILENCE_SHARE * shortest

    def _silent(self, watch: Watch, silent: Silent) -> None:
        """A watch delivered nothing for its bound: its connection is taken for dead, and the
        client's other idle connections are suspect too. A silent Lease watch is checked first."""
        self._gw.drop_idle_connections()
        if watch is self._lease_watch:
            logger.info("%s; checking with a list whether Leases were renewed meanwhile", silent)
            watch.verify = True
        else:
            logger.warning("%s; taking its connection for dead and watching again", silent)
            self.reconnects += 1

    def _recycle(self, watch: Watch) -> None:
        """End a watch's stream on purpose: not live from now, resumed at once by its thread."""
        watch.recycled = True
        self._set_synced(watch, False)
        resp = self._responses.get(watch.name)
        if resp is not None:
            shutdown(resp)

    # -- node watch ------------------------------------------------------------------------

    def _relist_nodes(self) -> str:
        nodes, rv = self._gw._list_wire_nodes(self._selector, page_size=RELIST_PAGE)
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

    # -- lease watch -----------------------------------------------------------------------

    def _relist_leases(self) -> tuple[str, bool]:
        """Every Lease now, and whether any was renewed (or created) since we last saw it."""
        pages, rv = self._gw._pages(_wire.LeaseList, f"list leases in {self._gw.lease_namespace}",
                                    self._gw.coordination.list_namespaced_lease, self._gw.lease_namespace,
                                    page_size=RELIST_PAGE)
        listed = _wire.lease_infos(*pages)
        with self._lock:
            missed = any(_renewed_since(info, self._leases.get(name)) for name, info in listed.items())
        for name, info in listed.items():
            self._apply_lease(name, info)
        return rv, missed

    def _refuse(self, watch: Watch, exc: ForbiddenError) -> None:
        """A 403: stop this watch for good and let the next wait raise it (see the module doc).
        Logged quietly: the raised error is what reaches the operator, once."""
        logger.info("watch stopped for good: %s", exc)
        self.last_error = str(exc)
        self.refused = exc
        self._set_synced(watch, False)

    def _broken(self, watch: Watch, exc: BaseException, failures: int) -> None:
        if self._stop.is_set():
            return
        self._set_synced(watch, False)
        what = "node watch" if watch is self._node_watch else "lease watch"
        self.last_error = f"{what}: {exc}"
        logger.warning("%s interrupted (attempt %d): %s", what, failures, exc)
        self._stop.wait(min(RESYNC_BACKOFF_CAP_S, 0.1 * 2 ** min(failures, 6)))


def _renewed_since(listed: _wire.LeaseInfo, held: _wire.LeaseInfo | None) -> bool:
    if held is None:
        return True
    return listed.renewed is not None and (held.renewed is None or listed.renewed > held.renewed)


__all__ = ["NODE_WATCH_SILENCE_S", "NodeInformer", "is_older"]
