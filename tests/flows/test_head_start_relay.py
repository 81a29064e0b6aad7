"""The head start's shell relays every engine call, in order, to the flow run once it attaches;
a gate asked before then waits for it, or for a stop, and nothing is lost at the engine's end."""

from __future__ import annotations

import threading
from concurrent.futures import Future
from datetime import datetime, timezone
from typing import Any

from flows.head_start import RelayShell
from rollout.actions import AwaitApproval, Wait
from rollout.engine import Answer, RunResult
from rollout.journal import ApprovalOutcome

T0 = datetime(2026, 11, 23, 10, 0, tzinfo=timezone.utc)
GATE = AwaitApproval(reason="gate", batch=0, next_batch=1, deadline=T0)


class _Shell:
    def __init__(self) -> None:
        self.calls: list[str] = []

    def decided(self, action: Any, journal: Any, observations: Any) -> None:
        self.calls.append(action.reason)

    def batch_finished(self, index: int, journal: Any, observations: Any) -> None:
        self.calls.append(f"batch {index} finished")

    def approve(self, gate: Any, journal: Any) -> Answer:
        self.calls.append("approve")
        return Answer(ApprovalOutcome.APPROVED, by="jo")

    def defer(self, wait: Any, journal: Any) -> bool:
        return False


def test_the_flow_run_makes_every_call_in_order_the_last_ones_too() -> None:
    relay, ended, shell = RelayShell(threading.Event()), Future[RunResult](), _Shell()
    answers: list[Answer] = []

    def engine() -> None:
        relay.decided(Wait(reason="first", until=T0), None, {})  # type: ignore[arg-type]
        answers.append(relay.approve(GATE, None))  # type: ignore[arg-type]
        relay.batch_finished(1, None, {})  # type: ignore[arg-type]
        relay.decided(Wait(reason="last", until=T0), None, {})  # type: ignore[arg-type]
        ended.set_result("the end")  # type: ignore[arg-type]

    thread = threading.Thread(target=engine)
    thread.start()
    assert relay.serve(shell, ended) == "the end"  # type: ignore[comparison-overlap]
    thread.join()
    assert shell.calls == ["first", "approve", "batch 1 finished", "last"]
    assert answers == [Answer(ApprovalOutcome.APPROVED, by="jo")]


def test_a_gate_asked_before_the_flow_run_attaches_gives_way_to_a_stop() -> None:
    stop = threading.Event()
    relay, shell = RelayShell(stop), _Shell()
    answers: list[Answer] = []
    thread = threading.Thread(target=lambda: answers.append(relay.approve(GATE, None)))  # type: ignore[arg-type]
    thread.start()
    stop.set()
    thread.join(timeout=5)
    assert answers == [Answer(ApprovalOutcome.TIMED_OUT, by="timeout")]  # left unanswered: the engine sees the stop
    ended = Future[RunResult]()
    ended.set_result("stopped")  # type: ignore[arg-type]
    relay.serve(shell, ended)
    assert shell.calls == [], "a gate the engine gave up on is never asked"
