"""The analysis loop (``rollout.loop.analysis_run``) measures a check again when its last
measurement failed (rule 6): the batch waits for that measurement, past the check's ``count``
and past the soak, and its verdict is the one the extra measurement gives. Driven as the engine
drives it: the machine's steps on scripted nodes, the analysis told the time, a scripted
Prometheus answering each measurement in turn."""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

import pytest
from test_machine_support import T0, World, make_plan, nodes, policy

from rollout.analysis import BatchEvidence, Sample
from rollout.journal import AnalysisVerdict, Journal
from rollout.loop.analysis_run import AnalysisRun
from rollout.machine import step
from rollout.machine.actions import Complete, Halt, Wait

CHECK = {"name": "relists", "query": 'sum by (node) (relists{node=~"{{nodes}}"})', "condition": "< 1",
         "noData": "inconclusive", "interval": "1m", "count": 3, "failureLimit": 1}


class ScriptedPrometheus:
    """Answers the batch's query with the next value of ``values``, one per measurement."""

    address = "http://prometheus.test"

    def __init__(self, values: list[float]) -> None:
        self.values = list(values)
        self.asked: list[datetime] = []

    def instant(self, promql: str, *, at: datetime) -> list[Sample]:
        self.asked.append(at)
        node = promql.split('node=~"')[1].split('"')[0]
        return [Sample({"node": node}, self.values[len(self.asked) - 1])]


class Evidence:
    def __init__(self) -> None:
        self.saved: BatchEvidence | None = None

    def load_evidence(self, rollout: str, batch: int) -> tuple[BatchEvidence, str] | None:
        return None

    def save_evidence(self, evidence: BatchEvidence, *, resource_version: str | None) -> str:
        self.saved = evidence
        return "1"


def canary_verdict(values: list[float]) -> tuple[Journal, ScriptedPrometheus, Evidence, datetime]:
    """Run a one-node canary under the check until its analysis has a verdict."""
    pool = nodes(2)
    journal = Journal.start(make_plan(pool, policy(steps=[1, "100%"], done={"until": "active", "soak": "2m"},
                                                    analysis={"checks": [CHECK]})), now=T0)
    world, prometheus, store = World.of(pool), ScriptedPrometheus(values), Evidence()
    analysis = AnalysisRun(metrics=prometheus, evidence=store)
    now = T0
    for _ in range(200):
        journal = analysis.advance(journal, now)
        if journal.batches[0].analysis is not None:
            return journal, prometheus, store, now
        journal, action = step(journal, world.observations(), now=now)
        assert not isinstance(action, (Complete, Halt)), action
        world.apply(action)
        due = analysis.next_due(journal, now)
        later: Any = action.until if isinstance(action, Wait) else now + timedelta(seconds=5)
        now = max(min(later, due or later), now + timedelta(seconds=1))
        world.tick(now)
    raise AssertionError("no verdict")


@pytest.mark.parametrize(("values", "verdict"), [
    pytest.param([0, 0, 5, 5], AnalysisVerdict.FAILED, id="the failed last measurement confirmed"),
    pytest.param([0, 0, 5, 0], AnalysisVerdict.PASSED, id="the failed last measurement not confirmed"),
])
def test_a_failed_last_measurement_is_measured_again_before_the_batch_is_judged(values, verdict) -> None:
    journal, prometheus, store, now = canary_verdict(values)
    assert journal.batches[0].analysis is not None and journal.batches[0].analysis.verdict is verdict
    # four measurements, one a minute from the window's start: the fourth past count (3) and the soak (2m)
    assert len(prometheus.asked) == 4, prometheus.asked
    assert [b - a for a, b in zip(prometheus.asked, prometheus.asked[1:])] == [timedelta(minutes=1)] * 3
    assert store.saved is not None
    evidence = store.saved.checks["relists"]
    assert (evidence.taken, evidence.failures) == (4, 2 if verdict is AnalysisVerdict.FAILED else 1)
    assert [m.verdict.value for m in evidence.measurements] == ["pass", "pass", "fail", "fail" if values[3] else "pass"]


def test_three_passing_measurements_end_the_check_at_its_count() -> None:
    journal, prometheus, _, _ = canary_verdict([0, 0, 0, 5])
    assert journal.batches[0].analysis is not None
    assert journal.batches[0].analysis.verdict is AnalysisVerdict.PASSED and len(prometheus.asked) == 3
