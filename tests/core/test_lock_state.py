"""What a reader of the lock may conclude (``rollout.lock``), and the state `rollout status` shows
from it (``rollout.usecases.status.run_state``): a journal that says running is believed only while a live
process of that rollout holds the lock. Liveness of a process is injected (``gone``)."""

from __future__ import annotations

from datetime import timedelta

import pytest
from test_machine_support import T0, make_plan, nodes, policy

from rollout.journal import Journal, RolloutStatus
from rollout.lock import (
    LIVE_WITHIN_S,
    Holder,
    Liveness,
    LockInfo,
    act_window_s,
    lease_seconds,
    liveness,
    takeover_reason,
)
from rollout.usecases.status import run_state, status_dict

X = Holder(identity="x@h1:4711/aaaa", rollout="x", host="h1", pid=4711, run="aaaa", started="99", machine="m")


def lock(holder: Holder | None = X, *, renewed_ago: float = 1.0, duration: float = 390.0) -> LockInfo:
    return LockInfo(holder=holder.identity if holder else "", rollout=holder.rollout if holder else "x",
                    acquired=T0 - timedelta(minutes=5), renewed=T0 - timedelta(seconds=renewed_ago),
                    duration_s=duration, resource_version="7", held_by=holder)


def alive(_: Holder) -> bool:
    return False


def dead(_: Holder) -> bool:
    return True


def test_the_lease_outlasts_every_outage_the_run_rides_out() -> None:
    for tolerance in (0.0, 60.0, 300.0, 3600.0):
        assert act_window_s(tolerance) > tolerance
        assert lease_seconds(tolerance) > act_window_s(tolerance)


@pytest.mark.parametrize(("info", "gone", "expected"), [
    (lock(None), alive, Liveness.FREE),
    (lock(renewed_ago=1), alive, Liveness.LIVE),
    (lock(renewed_ago=LIVE_WITHIN_S + 1), alive, Liveness.SILENT),
    (lock(renewed_ago=1), dead, Liveness.GONE),
    (lock(renewed_ago=391), alive, Liveness.LAPSED),
])
def test_liveness(info: LockInfo, gone, expected: Liveness) -> None:
    assert liveness(info, T0, gone=gone) is expected


def test_only_the_same_rollout_takes_over_from_a_gone_process_at_once() -> None:
    rerun = Holder(identity="x@h1:5000/bbbb", rollout="x")
    other = Holder(identity="y@h1:5001/cccc", rollout="y")
    assert takeover_reason(lock(), rerun, T0, gone=alive) is None  # live: never displaced
    assert takeover_reason(lock(renewed_ago=LIVE_WITHIN_S + 1), rerun, T0, gone=alive) is None  # silent
    assert "is gone" in (takeover_reason(lock(), rerun, T0, gone=dead) or "")
    assert takeover_reason(lock(), other, T0, gone=dead) is None
    assert "lapsed" in (takeover_reason(lock(renewed_ago=391), other, T0, gone=alive) or "")


def running_journal(name: str = "x") -> Journal:
    return Journal.start(make_plan(nodes(3), policy(), rollout=name), now=T0)


@pytest.mark.parametrize(("info", "gone", "state", "why"), [
    (lock(), alive, "running", ""),
    (lock(), dead, "stopped", "not running: rollout x (pid 4711 on host h1, run aaaa)"),
    (lock(renewed_ago=LIVE_WITHIN_S + 5), alive, "unresponsive", "its process has not renewed the lock"),
    (lock(renewed_ago=391), alive, "stopped", "its lease lapsed"),
    (lock(None), alive, "stopped", "the lock is free"),
    (None, alive, "stopped", "the lock is free"),
    (lock(Holder(identity="y-run", rollout="y")), alive, "stopped", "the lock is held by y-run (rollout y)"),
])
def test_a_running_journal_is_believed_only_with_a_live_holder(info, gone, state: str, why: str) -> None:
    shown, reason = run_state(running_journal(), info, T0, gone=gone)
    assert shown == state and why in reason, reason
    assert (reason == "") == (state == "running")


def test_an_ended_or_stopped_journal_reads_as_it_says_whatever_the_lock() -> None:
    done = running_journal().with_status(RolloutStatus.COMPLETE, at=T0, reason="done")
    assert run_state(done, None, T0) == ("completed", "")
    stopped = running_journal().with_stopped(at=T0)
    assert run_state(stopped, lock(), T0, gone=dead) == ("stopped", "")


def test_status_shows_the_lock_and_why_the_rollout_is_not_running() -> None:
    data = status_dict(running_journal(), {}, T0, lock=lock(), gone=dead)
    assert data["state"] == "stopped" and data["reason"].startswith("not running: rollout x (pid 4711")
    assert data["lock"] == {"holder": X.identity, "rollout": "x", "host": "h1", "pid": 4711, "run": "aaaa",
                            "since": "2026-11-23T09:55:00Z", "renewed_at": "2026-11-23T09:59:59Z",
                            "expires_at": "2026-11-23T10:06:29Z", "liveness": "gone"}
