"""The engine's drain rounds (``Engine._drain``): the next look comes ``poll`` after a round began,
not after it ended: a round of thousands of evictions outlasts ``poll``, and then the next one
starts at once; a round that leaves every node empty waits for nothing."""

from __future__ import annotations

import threading
import time
from datetime import timedelta
from typing import Any

import pytest
from test_machine_support import T0, make_plan, nodes, policy

from rollout.drain import DrainRules
from rollout.journal import Journal
from rollout.loop.engine import Engine
from rollout.machine.actions import DrainNodes


class _Waits(threading.Event):
    """The run's stop event, recording how long the engine waits on it (never waiting)."""

    def __init__(self) -> None:
        super().__init__()
        self.waits: list[float] = []

    def wait(self, timeout: float | None = None) -> bool:
        self.waits.append(float(timeout or 0.0))
        return False


class _Cluster:
    def informer(self, selector: str | None = None) -> Any:
        return object()


class _Round:
    """A drain round that takes ``seconds`` and leaves each node ``drained`` or not."""

    def __init__(self, seconds: float, drained: bool) -> None:
        self.seconds = seconds
        self.drained = drained

    def drain(self, action: DrainNodes, journal: Journal, progress: dict[str, tuple[bool, str]]) -> None:
        time.sleep(self.seconds)
        for node in action.nodes:
            progress[node] = (self.drained, "" if self.drained else "pod shop/web-1: terminating")


def _engine(round_: _Round) -> tuple[Engine, _Waits, DrainNodes]:
    journal = Journal.start(make_plan(nodes(2), policy()), now=T0)
    stop = _Waits()
    engine = Engine(cluster=_Cluster(), journal=journal, journal_rv=None, watcher=None, lock=None,  # type: ignore[arg-type]
                    stop=stop)
    engine.drainer = round_  # type: ignore[assignment]
    engine._save = lambda **_: None  # type: ignore[method-assign]
    action = DrainNodes(reason="draining", nodes=tuple(journal.plan.batches[0].nodes), cordon=(), rules=DrainRules(),
                        poll=timedelta(seconds=1))
    return engine, stop, action


def test_the_next_look_comes_poll_after_the_round_began() -> None:
    engine, stop, action = _engine(_Round(0.4, drained=False))
    engine._drain(action)
    assert len(stop.waits) == 1 and 0.3 < stop.waits[0] <= 0.6 + 0.05, stop.waits  # 1 s less the round's 0.4 s


def test_a_round_longer_than_poll_is_followed_by_the_next_at_once() -> None:
    engine, stop, action = _engine(_Round(0.3, drained=False))
    action = DrainNodes(reason=action.reason, nodes=action.nodes, cordon=(), rules=action.rules,
                        poll=timedelta(seconds=0.2))
    engine._drain(action)
    assert stop.waits == [0.0]  # looks again at once


@pytest.mark.parametrize("seconds", [0.0, 0.2])
def test_a_round_that_leaves_every_node_empty_waits_for_nothing(seconds: float) -> None:
    engine, stop, action = _engine(_Round(seconds, drained=True))
    engine._drain(action)
    assert stop.waits == []
