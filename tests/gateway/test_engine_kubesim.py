"""The engine's loop against kubesim through the real gateway: what a reader of the journal in
the cluster sees at the moment the watcher is told a batch ended."""

from __future__ import annotations

from datetime import datetime, timezone
from typing import Any

from test_gw_kubesim import config_text, gateway, publish_config

from rollout.machine.actions import Action
from rollout.loop.engine import Engine
from rollout.gateway import KubeGateway, LockKeeper
from rollout.journal import BatchStatus, Journal
from rollout.model import NodeObservation
from rollout.outcome import Outcome
from rollout.planner import plan_batches
from rollout.policy import load_policy_text
from rollout.usecases.status import load_journal

POLICY = """
name: two-batches
steps: [1, "100%"]
done: {until: active, soak: 0s}
progressDeadline: 2m
maxUnavailable: 3
"""


class _ReadsTheClusterOnBatchEnd:
    """A watcher that, told a batch ended, reads the journal a person would read at that moment."""

    def __init__(self, gw: KubeGateway, rollout: str) -> None:
        self.gw, self.rollout = gw, rollout
        self.seen: list[tuple[int, list[BatchStatus], int]] = []  # batch, stored statuses, nodes assigned

    def batch_finished(self, index: int, journal: Journal, observations: Any) -> None:
        loaded = load_journal(self.gw, self.rollout)
        assert loaded is not None
        stored = loaded[0]
        assigned = sum(1 for r in stored.nodes.values() if r.assigned_at is not None)
        self.seen.append((index, [b.status for b in stored.batches], assigned))

    def decided(self, action: Action, journal: Journal, observations: Any) -> None:
        return None

    def cluster_away(self, since: Any, until: Any) -> None:
        return None


def test_a_batchs_end_is_in_the_cluster_before_the_next_batch_is_planned(kubesim_cluster: Any) -> None:
    cluster = kubesim_cluster(nodes=4)
    gw = gateway(cluster)
    target = publish_config(gw, config_text(maxPods=91))
    listed, _ = gw.list_nodes()
    observations: dict[str, NodeObservation] = {o.name: o for o in listed}
    now = datetime.now(timezone.utc)
    plan = plan_batches(list(observations.values()), load_policy_text(POLICY), rollout="first-things", target=target,
                        now=now)
    assert [len(b.nodes) for b in plan.batches] == [1, 3]
    shell = _ReadsTheClusterOnBatchEnd(gw, "first-things")
    with LockKeeper(gw, "engine-test", rollout="first-things", outage_tolerance_s=0) as lock:
        result = Engine(cluster=gw, journal=Journal.start(plan, now=now), journal_rv=None, watcher=shell,
                        lock=lock).run()
    assert result.outcome is Outcome.COMPLETED, result.message
    # the canary's end is stored while the next batch is not yet planned: one node assigned
    assert shell.seen == [(0, [BatchStatus.DONE, BatchStatus.PENDING], 1),
                          (1, [BatchStatus.DONE, BatchStatus.DONE], 4)]
