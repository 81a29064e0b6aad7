"""LockKeeper: hold the rollout Lease for as long as a ``with`` block runs.

A background thread renews the lease every ``renew_every_s`` (a third of its duration by
default, as leader election does). If renewal fails for good - another holder took the lease
over, or the API stayed unreachable until the lease expired - ``lost`` is set and
:meth:`LockKeeper.check` raises, so the rollout stops before its next write instead of racing a
second orchestrator. Leaving the block stops the thread and releases the lease.
"""

from __future__ import annotations

import logging
import threading
from typing import TYPE_CHECKING

from rollout.errors import ForbiddenError, GatewayError, LockHeldError, RolloutError

if TYPE_CHECKING:
    from ._gateway import KubeGateway, LockInfo

logger = logging.getLogger("rollout.gateway")


class LockKeeper:
    """Context manager: acquire on enter, renew in a daemon thread, release on exit.

    Example::

        with LockKeeper(gateway, holder="ci-42", rollout="kubelet-maxpods") as lock:
            for batch in plan.batches:
                lock.check()          # raises if the lease was lost
                ...
    """

    def __init__(self, gateway: "KubeGateway", holder: str, *, rollout: str,
                 duration_s: float = 60.0, renew_every_s: float | None = None,
                 outage_tolerance_s: float = 300.0) -> None:
        self.gateway = gateway
        self.outage_tolerance_s = outage_tolerance_s
        self.holder = holder
        self.rollout = rollout
        self.duration_s = duration_s
        self.renew_every_s = renew_every_s if renew_every_s is not None else duration_s / 3
        self.info: "LockInfo | None" = None
        self.lost = threading.Event()
        self.error: RolloutError | None = None
        self.renewals = 0
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def __enter__(self) -> "LockKeeper":
        self.info = self.gateway.acquire_lock(self.holder, rollout=self.rollout,
                                              duration_s=self.duration_s)
        self._thread = threading.Thread(target=self._run, name=f"lock-keeper-{self.rollout}",
                                        daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=self.renew_every_s + 30)
        if not self.lost.is_set():
            try:
                self.gateway.release_lock(self.holder)
            except GatewayError as err:  # it will expire on its own
                logger.warning("could not release rollout lock of %s: %s", self.rollout, err)

    def check(self) -> None:
        """Raise the renewal error if the lease was lost."""
        if self.lost.is_set():
            raise self.error or LockHeldError("unknown (lease lost)")

    def renew_now(self) -> None:
        """One renewal, as the thread does it (tests call this instead of waiting)."""
        try:
            self.info = self.gateway.renew_lock(self.holder, rollout=self.rollout,
                                                duration_s=self.duration_s)
            self.renewals += 1
        except (LockHeldError, ForbiddenError) as err:
            # a 403 is no outage: without the right to renew, the lease would lapse under us
            logger.error("rollout %s lost its lock: %s", self.rollout, err)
            self.error = err
            self.lost.set()
        except GatewayError as err:
            # API trouble (a control plane restarting): keep trying. The lease may expire
            # meanwhile, but it stays ours unless another orchestrator takes it over - which the
            # next successful renewal reports as LockHeldError. Give up only past the outage
            # tolerance the rollout rides out anyway.
            info = self.info
            now = self.gateway._now()
            renewed = info.renewed if info is not None else None
            if renewed is not None and (now - renewed).total_seconds() > self.outage_tolerance_s:
                logger.error("rollout %s: lock not renewed for %.0fs: %s", self.rollout,
                             (now - renewed).total_seconds(), err)
                self.error = err
                self.lost.set()
            else:
                logger.warning("rollout %s: lock renewal failed, will retry: %s", self.rollout, err)

    def _run(self) -> None:
        with self.gateway.cut_short_by(self._stop):  # leaving the block ends a renewal under way
            while not self._stop.wait(self.renew_every_s):
                self.renew_now()
                if self.lost.is_set():
                    return
