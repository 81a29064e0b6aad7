"""LockKeeper: hold the rollout Lease for as long as a ``with`` block runs.

A background thread renews the lease every ``renew_every_s`` (``rollout.lock.RENEW_EVERY_S``).
The run may act until ``rollout.lock.act_window_s(outage_tolerance_s)`` after its last successful
renewal (an API outage is ridden out that long) and the lease lasts longer than that
(``rollout.lock.lease_seconds``), so it never lapses under a run that still writes. The keeper
fences the gateway's node and journal writes with :meth:`LockKeeper.check`, which raises once
another holder took the lease over, renewal was refused (403), or the act window passed without a
renewal: the run stops before its next write instead of racing a second orchestrator. Leaving
the block stops the thread and releases the lease, if this holder still holds it.
"""

from __future__ import annotations

import logging
import threading
import time
from typing import TYPE_CHECKING, Callable

from rollout.errors import ForbiddenError, GatewayError, LockHeldError, RolloutError
from rollout.lock import (
    LEASE_GRACE_S,
    RENEW_EVERY_S,
    Holder,
    LockInfo,
    act_window_s,
    as_holder,
    lease_seconds,
    mark_ended,
    mark_held,
)

if TYPE_CHECKING:
    from ._gateway import KubeGateway

logger = logging.getLogger("rollout.gateway")


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

    def __init__(self, gateway: "KubeGateway", holder: Holder | str, *, rollout: str = "",
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
