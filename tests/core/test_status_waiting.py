"""`rollout status` always says what a rollout waits for, until when, and the command that ends a
wait a person must end (rollout.usecases.status.waiting); and a rollout exists as soon as its process holds
the lock. No cluster (stubs); only the last test reads the clock, as `status` itself does."""

from __future__ import annotations

from dataclasses import replace
from datetime import datetime, timedelta, timezone
from typing import Any

import pytest
from test_machine_support import T0, make_plan, nodes, policy

from rollout.errors import RolloutNotFoundError
from rollout.journal import BatchStatus, Journal, RolloutStatus
from rollout.lock import Holder, LockInfo
from rollout.machine.requests import apply_request
from rollout.usecases.status import rollout_status, starting_dict, status_dict

R1 = Holder(identity="r1@h1:4711/aaaa", rollout="r1", host="h1", pid=4711, run="aaaa", started="99", machine="m")
LIVE = LockInfo(holder=R1.identity, rollout="r1", acquired=T0 - timedelta(minutes=1), renewed=T0,
                duration_s=390.0, resource_version="7", held_by=R1)
POOL = nodes(3)


def _status(j: Journal, *, lock: LockInfo | None = LIVE) -> dict[str, Any]:
    return status_dict(j, {o.name: o for o in POOL}, T0 + timedelta(seconds=1), lock=lock, gone=lambda _: False)


def test_outside_its_window_it_says_when_it_may_start() -> None:
    """Before: outside a window status said "running... 0/1 nodes" with a blank reason."""
    closed = policy(maintenanceWindows={"windows": [{"days": ["tue"], "start": "10:00", "end": "11:00"}]})  # T0: a Monday
    status = _status(Journal.start(make_plan(POOL, closed), now=T0))
    assert status["waiting"]["for"] == "window" and status["waiting"]["until"] is not None
    assert status["reason"] and status["reason"] == status["waiting"]["reason"]


def test_paused_it_says_who_paused_it_and_the_command_that_resumes_it() -> None:
    j = Journal.start(make_plan(POOL, policy()), now=T0)
    j = j.with_batch_status(0, BatchStatus.IN_PROGRESS, at=T0).with_batch_status(0, BatchStatus.DONE, at=T0)
    j = apply_request(j, "p1", "pause", by="ann", at=T0)
    status = _status(j)
    assert status["state"] == "paused" and status["waiting"]["command"] == "rollout resume r1"
    assert "ann" in status["reason"]
    assert any(d["kind"] == "Request" for d in status["decisions"])  # the request, in status


def test_stopped_it_says_the_command_that_runs_it_again() -> None:
    j = Journal.start(make_plan(POOL, policy()), now=T0).with_stopped(at=T0)
    status = _status(j, lock=None)
    assert status["state"] == "stopped" and status["waiting"]["command"] == "rollout start --name r1"
    assert status["reason"]


def test_a_rollout_exists_while_its_process_prepares_it() -> None:
    """Before: for 5-12 s after `start`, status said "no rollout named"."""
    starting = starting_dict("r1", LIVE, T0)
    assert starting["state"] == "starting" and starting["waiting"]["for"] == "preparation"
    assert "h1" in starting["reason"] or R1.identity in starting["reason"]


def test_a_reverted_node_keeps_the_error_that_reverted_it() -> None:
    """Before: after a revert the node's error column was empty (the node itself is fine again)."""
    failed = POOL[0].name
    j = Journal.start(make_plan(POOL, policy()), now=T0).with_status(
        RolloutStatus.HALTED, at=T0, reason="crash-looping", failed={failed: "crash-looping: Ready=Unknown"})
    rows = {n["name"]: n for n in _status(j, lock=None)["nodes"]}
    assert rows[failed]["error"] == "crash-looping: Ready=Unknown"


def test_a_node_cordoned_for_its_write_shows_draining_then_drained_with_what_holds_it() -> None:
    """Before: pending, as a node no batch had reached (the live screen's lie mid-drain)."""
    j = Journal.start(make_plan(POOL, policy()), now=T0)
    node = j.plan.batches[0].nodes[0]
    held = "pod shop/web-1: its PodDisruptionBudget allows no disruption now"
    j = j.with_cordoned([node], at=T0).with_drain_progress({node: (False, held)}, at=T0)
    row = {n["name"]: n for n in _status(j)["nodes"]}[node]
    assert (row["phase"], row["reason"]) == ("draining", f"held: {held}")
    row = {n["name"]: n for n in _status(j.with_drain_progress({node: (True, "")}, at=T0))["nodes"]}[node]
    assert row["phase"] == "drained"
    given_back = j.with_uncordoned([node], at=T0)
    assert {n["name"]: n for n in _status(given_back)["nodes"]}[node]["phase"] == "pending"


class _Starting:
    """A cluster where r1's process holds the lock and has not written its journal yet."""

    namespace = "kube-system"

    def __init__(self, lock: LockInfo) -> None:
        self.lock = lock

    def load_journal(self, rollout: str) -> None:
        return None

    def read_lock(self) -> LockInfo:
        return self.lock

    def journal_name(self, rollout: str) -> str:
        return f"kubelet-rollout-journal-{rollout}"


def test_status_reads_starting_from_the_lock_before_the_journal_exists() -> None:
    now = datetime.now(timezone.utc)
    live = replace(LIVE, acquired=now - timedelta(seconds=3), renewed=now)
    assert rollout_status(_Starting(live), "r1")["state"] == "starting"  # type: ignore[arg-type]
    with pytest.raises(RolloutNotFoundError):
        rollout_status(_Starting(live), "r2")  # type: ignore[arg-type]
