"""The rollout lock: the Lease verbs, and LockKeeper, which holds the lock for a ``with`` block.

Who may take, renew and release the Lease is decided in ``rollout.lock``; :class:`LeaseLockVerbs`
applies it with compare-and-swaps on the resourceVersion and the holder's full identity, so
nobody renews or releases a lock it does not hold.

:class:`LockKeeper` renews the lease from a background thread every ``renew_every_s``
(``rollout.lock.RENEW_EVERY_S``). The run may act until ``rollout.lock.act_window_s(outage_tolerance_s)``
after its last successful renewal (an API outage is ridden out that long) and the lease lasts
longer than that (``rollout.lock.lease_seconds``), so it never lapses under a run that still
writes. The keeper fences the gateway's node and journal writes with :meth:`LockKeeper.check`,
which raises once another holder took the lease over, renewal was refused (403), or the act
window passed without a renewal: the run stops before its next write instead of racing a second
orchestrator. Leaving the block stops the thread and releases the lease, if this holder still
holds it.
"""

from __future__ import annotations

import logging
import threading
import time
from datetime import datetime
from typing import Any, Callable, Mapping

from rollout.errors import ConflictError, ForbiddenError, GatewayError, LockHeldError, NotFoundError, RolloutError
from rollout.lock import (
    LEASE_GRACE_S,
    RENEW_EVERY_S,
    Holder,
    LockInfo,
    act_window_s,
    as_holder,
    describe,
    lease_seconds,
    mark_ended,
    mark_held,
    takeover_reason,
)
from rollout.names import ANN_LOCK_HOLDER, ANN_ROLLOUT, COMPONENT, LABEL_MANAGED_BY, LOCK_NAME
from rollout.ports import LockStore

from . import _wire
from ._client import ClusterClient

logger = logging.getLogger("rollout.gateway")


def lock_info(obj: Mapping[str, Any]) -> LockInfo:
    """The lock as the core reads it, from the Lease object."""
    try:
        lease = _wire.from_object(_wire.Lease, obj)
    except ValueError as exc:
        raise GatewayError(f"lease {LOCK_NAME}: unexpected object: {exc}") from exc
    identity = lease.spec.holder_identity or ""
    rollout = lease.metadata.annotations.get(ANN_ROLLOUT, "")
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


def lease_body(namespace: str, *, holder: Holder | None, rollout: str, duration_s: float, acquired: datetime,
               renewed: datetime, transitions: int, resource_version: str | None) -> dict[str, Any]:
    """The lock Lease held by ``holder`` (None: released), as it is written."""
    annotations = {ANN_ROLLOUT: rollout}
    if holder is not None:
        annotations[ANN_LOCK_HOLDER] = holder.details()
    meta: dict[str, Any] = {"name": LOCK_NAME, "namespace": namespace, "annotations": annotations,
                            "labels": {LABEL_MANAGED_BY: COMPONENT}}
    if resource_version:
        meta["resourceVersion"] = resource_version
    return {
        "apiVersion": "coordination.k8s.io/v1", "kind": "Lease", "metadata": meta,
        "spec": {"holderIdentity": holder.identity if holder is not None else None,
                 "leaseDurationSeconds": max(1, int(round(duration_s))),
                 "acquireTime": _wire.micro_time(acquired), "renewTime": _wire.micro_time(renewed),
                 "leaseTransitions": transitions},
    }


class LeaseLockVerbs(ClusterClient):
    """The lock Lease ``<namespace>/kubelet-rollout-lock``: read, taken, renewed, released."""

    def read_lock(self) -> LockInfo | None:
        """The lock Lease as it stands; None if it was never created."""
        try:
            obj = self._json(f"get lease {self.namespace}/{LOCK_NAME}",
                             self.coordination.read_namespaced_lease, LOCK_NAME, self.namespace)
        except NotFoundError:
            return None
        return lock_info(obj)

    def _write_lock(self, body: dict[str, Any], *, create: bool) -> LockInfo:
        what = f"{'create' if create else 'update'} lease {self.namespace}/{LOCK_NAME}"
        if create:
            obj = self._json(what, self.coordination.create_namespaced_lease, self.namespace, body)
        else:
            obj = self._json(what, self.coordination.replace_namespaced_lease, LOCK_NAME,
                             self.namespace, body)
        return lock_info(obj)

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
                    taken = self._write_lock(lease_body(
                        self.namespace, holder=me, rollout=me.rollout, duration_s=duration_s, acquired=now,
                        renewed=now, transitions=0, resource_version=None), create=True)
                elif info.holder == me.identity:
                    taken = self._write_lock(lease_body(
                        self.namespace, holder=me, rollout=me.rollout, duration_s=duration_s,
                        acquired=info.acquired or now, renewed=now, transitions=info.transitions,
                        resource_version=info.resource_version), create=False)
                elif (why := takeover_reason(info, me, now)) is not None:
                    taken = self._write_lock(lease_body(
                        self.namespace, holder=me, rollout=me.rollout, duration_s=duration_s, acquired=now,
                        renewed=now, transitions=info.transitions + 1, resource_version=info.resource_version),
                        create=False)
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
            body = lease_body(self.namespace, holder=me, rollout=me.rollout, duration_s=duration_s,
                              acquired=info.acquired or now, renewed=now, transitions=info.transitions,
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
        body = lease_body(self.namespace, holder=None, rollout=info.rollout, duration_s=info.duration_s or 1,
                          acquired=info.acquired or now, renewed=now, transitions=info.transitions,
                          resource_version=info.resource_version)
        try:
            self._write_lock(body, create=False)
        except ConflictError:
            return False
        logger.info("rollout lock released by %s", info.held_by)
        return True


class LockKeeper:
    """Context manager: acquire on enter, renew in a daemon thread, release on exit.

    Example::

        with LockKeeper(gateway, this_process("kubelet-maxpods"), outage_tolerance_s=300) as lock:
            for batch in plan.batches:
                lock.check()          # raises if the lease was lost or may have lapsed
                ...

    ``duration_s`` (the lease) defaults to ``lease_seconds(outage_tolerance_s)`` and may not be
    shorter; ``clock`` is the monotonic clock the act window is measured with.
    """

    def __init__(self, gateway: LockStore, holder: Holder | str, *, rollout: str = "",
                 outage_tolerance_s: float = 300.0, duration_s: float | None = None,
                 renew_every_s: float = RENEW_EVERY_S, clock: Callable[[], float] = time.monotonic) -> None:
        self.gateway = gateway
        self.holder = as_holder(holder, rollout)
        self.rollout = self.holder.rollout
        self.act_within_s = act_window_s(outage_tolerance_s)
        self.duration_s = lease_seconds(outage_tolerance_s) if duration_s is None else duration_s
        if self.duration_s < self.act_within_s + LEASE_GRACE_S:
            raise ValueError(f"a lease of {self.duration_s:.0f}s could lapse while the run may still act "
                             f"({self.act_within_s:.0f}s after its last renewal); give at least "
                             f"{self.act_within_s + LEASE_GRACE_S:.0f}s")
        self.renew_every_s = renew_every_s
        self.info: LockInfo | None = None
        self.lost = threading.Event()
        self.error: RolloutError | None = None
        self.last_failure: GatewayError | None = None
        self.renewals = 0
        self._clock = clock
        self._acting_until = 0.0
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def __enter__(self) -> "LockKeeper":
        asked = self._clock()
        self.info = self.gateway.acquire_lock(self.holder, duration_s=self.duration_s)
        self._acting_until = asked + self.act_within_s
        mark_held(self.holder.identity)
        self.gateway.fence_writes(self.check)
        self._thread = threading.Thread(target=self._run, name=f"lock-keeper-{self.rollout}",
                                        daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=self.renew_every_s + 30)
        self.gateway.fence_writes(None)
        mark_ended(self.holder.identity)
        if not self.lost.is_set():
            try:
                self.gateway.release_lock(self.holder)
            except GatewayError as err:  # it lapses on its own; a re-run here sees this process gone
                logger.warning("could not release rollout lock of %s: %s", self.rollout, err)

    def check(self) -> None:
        """Raise if the lease was lost, or if it went unrenewed so long it could lapse soon."""
        if not self.lost.is_set() and self._clock() >= self._acting_until:
            why = f" (last failure: {self.last_failure})" if self.last_failure else ""
            self._lose(GatewayError(
                f"rollout {self.rollout}: the lock could not be renewed for {self.act_within_s:.0f}s{why}; "
                "stopping before its lease can lapse. The journal is in the cluster: run the same rollout "
                "again to resume"))
        if self.lost.is_set():
            raise self.error or LockHeldError("unknown (lease lost)")

    def renew_now(self) -> None:
        """One renewal, as the thread does it (tests call this instead of waiting)."""
        asked = self._clock()
        try:
            self.info = self.gateway.renew_lock(self.holder, duration_s=self.duration_s)
        except (LockHeldError, ForbiddenError) as err:
            # a 403 is no outage: without the right to renew, the lease would lapse under us
            logger.error("rollout %s lost its lock: %s", self.rollout, err)
            self._lose(err)
        except GatewayError as err:
            # API trouble (a control plane restarting): keep trying. The lease stays ours unless
            # someone takes it over (the next renewal says so); check() ends the run once the
            # act window has passed without a renewal.
            self.last_failure = err
            logger.warning("rollout %s: lock renewal failed, will retry: %s", self.rollout, err)
        else:
            self.renewals += 1
            self._acting_until = asked + self.act_within_s

    def _lose(self, err: RolloutError) -> None:
        if not self.lost.is_set():
            self.error = err
            self.lost.set()

    def _run(self) -> None:
        with self.gateway.cut_short_by(self._stop):  # leaving the block ends a renewal under way
            while not self._stop.wait(self.renew_every_s):
                self.renew_now()
                if self.lost.is_set():
                    return
