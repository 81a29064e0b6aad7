"""What a run tells whoever shows it (``rollout.run.run``): every notice in order, the last ones
too, a gate decided again and again read once; a gate's answer handed to the loop; and the gate a
person is asked at closed once it no longer waits, so the asking ends with it."""

from __future__ import annotations

import threading
from datetime import datetime, timezone

from rollout.machine.actions import AssignBatch, AwaitApproval, Wait
from rollout.journal import ApprovalOutcome
from rollout.loop.seams import Answer
from rollout.model import ConfigRef
from rollout.run.run import BatchFinished, Decided, _Gates, _Notices

T0 = datetime(2026, 11, 23, 10, 0, tzinfo=timezone.utc)
TARGET = ConfigRef("kube-system", "kubelet-config-x")
GATE = AwaitApproval(reason="gate", batch=0, next_batch=1, deadline=T0)


def _decided(reason: str) -> Decided:
    return Decided(Wait(reason=reason, until=T0), None, {})  # type: ignore[arg-type]


def test_every_notice_is_read_in_order_the_last_ones_too() -> None:
    notices = _Notices()
    read: list[str] = []
    reader = threading.Thread(target=lambda: read.extend(
        n.action.reason if isinstance(n, Decided) else f"batch {n.index}" for n in notices))
    reader.start()
    notices.put(_decided("first"))
    notices.put(BatchFinished(1, None, {}))  # type: ignore[arg-type]
    notices.put(_decided("last"))
    notices.close()
    reader.join(timeout=5)
    assert not reader.is_alive()
    assert read == ["first", "batch 1", "last"]


def test_a_wait_not_read_yet_gives_way_to_the_same_wait_but_nothing_that_acts_is_dropped() -> None:
    """A gate is decided again every few seconds for hours while its flow run asks a person: one
    notice, the latest; a batch's writes and a batch's end are never dropped (a flow run that
    attaches late still logs every step, in order)."""
    notices = _Notices()
    notices.put(_decided("soaking"))
    notices.put(Decided(AssignBatch(reason="starting batch 2", batch=1, nodes=("n2",), target=TARGET,
                                    previous={}, annotations={}), None, {}))  # type: ignore[arg-type]
    notices.put(_decided("waiting for n2"))
    notices.put(BatchFinished(1, None, {}))  # type: ignore[arg-type]
    for i in range(1000):
        notices.put(Decided(AwaitApproval(reason=f"gate {i}", batch=1, next_batch=2, deadline=T0), None, {}))  # type: ignore[arg-type]
    notices.put(_decided("a pause: waiting"))
    notices.close()
    read = [n.action.reason if isinstance(n, Decided) else f"batch {n.index}" for n in notices]
    assert read == ["soaking", "starting batch 2", "waiting for n2", "batch 1", "gate 999", "a pause: waiting"]


def test_an_answer_reaches_the_loop_once_and_wakes_it() -> None:
    gates = _Gates()
    assert gates.answer(GATE) is None and not gates.answered.is_set()
    gates.give(0, Answer(ApprovalOutcome.APPROVED, by="alice"))
    assert gates.answered.is_set()  # the loop's wait ends at once
    assert gates.answer(GATE) == Answer(ApprovalOutcome.APPROVED, by="alice")
    assert gates.answer(GATE) is None  # applied once


def test_the_gate_asked_closes_when_the_loop_decides_anything_else_or_the_run_ends() -> None:
    gates = _Gates()
    gates.track(GATE)
    asked = gates.closed(0)
    gates.track(GATE)  # decided again: the same gate, still open
    assert not asked.is_set() and gates.closed(0) is asked
    gates.track(Wait(reason="an abort: reverting", until=T0))  # a request ended the gate
    assert asked.is_set()
    assert gates.closed(0).is_set()  # a gate that no longer waits is closed to whoever asks late

    gates.track(GATE)
    again = gates.closed(0)
    assert not again.is_set()
    gates.close_all()  # the run ended (a stop): nobody is asked any longer
    assert again.is_set()
