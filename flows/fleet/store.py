"""Where a fleet's own state lives: Prefect Variables (``rollout.fleet.journal`` says why).

- ``kubelet-rollout-fleet__<rollout>``: the fleet journal and its holder, the one process that
  drives the fleet now. :class:`FleetKeeper` takes it (refused with exit 4 while another process
  holds it and lives; at once when that process is gone, as seen from its machine; by anyone once
  it stopped renewing for 90 s), renews it every 10 s from a thread (through approval pauses
  too), writes the journal before each action and lets the holder go at the end.
- ``kubelet-rollout-fleet-abort__<rollout>``: the last ``rollout fleet abort`` request, written
  by the person asking, read by the fleet: two writers never share one value.

A Variable has no compare-and-swap: taking the holder is a write followed by a read-back, and a
process that finds another holder in its place at a renewal stops. Two processes starting the
same fleet in the same instant are still harmless to the clusters: each cluster's run is started
once (its idempotency key) and each cluster's lock admits one run.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from datetime import datetime, timezone
from typing import Any

from rollout.errors import LockHeldError, NotFoundError
from rollout.fleet import AbortRequest, FleetJournal, from_data, to_data
from rollout.lock import (
    LEASE_GRACE_S,
    LIVE_WITHIN_S,
    RENEW_EVERY_S,
    Holder,
    LockInfo,
    describe,
    mark_ended,
    mark_held,
    takeover_reason,
    this_process,
)

JOURNAL_PREFIX = "kubelet-rollout-fleet__"
ABORT_PREFIX = "kubelet-rollout-fleet-abort__"
# a holder silent this long is taken over by anyone: nothing it still does can hurt a cluster
HOLD_S = LIVE_WITHIN_S + LEASE_GRACE_S
READ_BACK_S = 0.5  # a second writer in the same instant shows by then


def journal_variable(rollout: str) -> str:
    return JOURNAL_PREFIX + rollout


def abort_variable(rollout: str) -> str:
    return ABORT_PREFIX + rollout


def _utcnow() -> datetime:
    return datetime.now(timezone.utc)


def _read(name: str) -> Any:
    from prefect.client.orchestration import get_client

    with get_client(sync_client=True) as client:
        variable = client.read_variable_by_name(name)
    return variable.value if variable is not None else None


def _write(name: str, value: Any) -> None:
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.actions import VariableCreate, VariableUpdate

    with get_client(sync_client=True) as client:
        if client.read_variable_by_name(name) is None:
            client.create_variable(VariableCreate(name=name, value=value))
        else:
            client.update_variable(VariableUpdate(name=name, value=value))


def read_journal(rollout: str) -> tuple[FleetJournal, LockInfo | None] | None:
    """The fleet's journal and holder; None when no fleet rollout has that name."""
    data = _read(journal_variable(rollout))
    if not isinstance(data, dict):
        return None
    try:
        return from_data(data)
    except (ValueError, KeyError):
        return None


def read_abort(rollout: str) -> AbortRequest | None:
    return AbortRequest.from_data(_read(abort_variable(rollout)))


def post_abort(rollout: str, *, by: str, request_id: str) -> AbortRequest:
    """What `rollout fleet abort` writes; the fleet applies it within a poll."""
    if read_journal(rollout) is None:
        raise NotFoundError(f"no fleet rollout named {rollout!r}")
    request = AbortRequest(request_id=request_id, by=by, at=_utcnow())
    _write(abort_variable(rollout), request.to_data())
    return request


class FleetKeeper:
    """The fleet journal in its Variable, held by this process for the length of a fleet run."""

    def __init__(self, rollout: str, *, start: Callable[[datetime], FleetJournal]) -> None:
        self.rollout = rollout
        self.holder: Holder = this_process(rollout)
        self._start = start  # the journal of a fleet rollout this name never had
        self._journal: FleetJournal | None = None
        self._acquired = _utcnow()
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._lost = ""
        self._thread: threading.Thread | None = None

    @property
    def journal(self) -> FleetJournal:
        assert self._journal is not None
        return self._journal

    def __enter__(self) -> FleetKeeper:
        now = _utcnow()
        loaded = read_journal(self.rollout)
        journal, info = loaded if loaded is not None else (self._start(now), None)
        if info is not None and info.held_by is not None and info.holder != self.holder.identity:
            if takeover_reason(info, self.holder, now) is None:
                raise LockHeldError(describe(info, now), lease=f"fleet {self.rollout}", rollout=self.rollout)
        self._journal = journal
        self._put()
        time.sleep(READ_BACK_S)
        mine = read_journal(self.rollout)
        if mine is None or mine[1] is None or mine[1].holder != self.holder.identity:
            theirs = mine[1] if mine is not None else None
            raise LockHeldError(describe(theirs, _utcnow()) if theirs else "another process",
                                lease=f"fleet {self.rollout}", rollout=self.rollout)
        mark_held(self.holder.identity)
        self._thread = threading.Thread(target=self._renew, name="fleet-holder", daemon=True)
        self._thread.start()
        return self

    def save(self, journal: FleetJournal) -> None:
        """Write the journal (before the action it records is carried out)."""
        self.check()
        with self._lock:
            self._journal = journal
            self._put()

    def check(self) -> None:
        """Raise when another process took the fleet over while this one was silent."""
        if self._lost:
            raise LockHeldError(self._lost, lease=f"fleet {self.rollout}", rollout=self.rollout)

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=15)
        mark_ended(self.holder.identity)
        if not self._lost:
            with self._lock:
                self._put(holding=False)

    def _put(self, *, holding: bool = True) -> None:
        now = _utcnow()
        info = LockInfo(holder=self.holder.identity, rollout=self.rollout, acquired=self._acquired, renewed=now,
                        duration_s=HOLD_S, resource_version="", held_by=self.holder) if holding else None
        _write(journal_variable(self.rollout), to_data(self.journal, info))

    def _renew(self) -> None:
        while not self._stop.wait(RENEW_EVERY_S):
            try:
                current = read_journal(self.rollout)
                info = current[1] if current is not None else None
                if info is not None and info.holder != self.holder.identity:
                    self._lost = f"another process took fleet {self.rollout} over: {describe(info, _utcnow())}"
                    return
                with self._lock:
                    self._put()
            except Exception:  # noqa: BLE001 - a missed renewal is retried; 9 in a row lose the fleet
                continue

