"""What real clusters do that scripts do not (issue 16): a run resumed long after it stopped in
the middle of a batch's writes, a rollback cut short and run again, a node that failed on its own
just before its write went out, a node deleted in the middle of a rollout or before its rollback.

Each node's clocks start when *its* write was acknowledged, a write that never landed is written
again however old its intent, and a node that is gone is named, never blamed, never waited for.
Writes are counted from kubesim's audit log: one assignment PATCH per node, one revert per node
put back, nothing written by a rollback that has nothing left to do.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path
from typing import Any

import pytest
import scenario as sc
from test_kill_moments import Runner
from test_run_loop import successful_patches

from rollout.names import ANN_ROLLOUT

pytestmark = [pytest.mark.usefixtures("prefect_api"), pytest.mark.slow]
# one write a second: a batch's writes take long enough to be cut in the middle (at 4 a second a
# loaded machine's poll missed the moment: ci-35, the run finished first)
SLOW_API = {"apiQps": 1, "apiBurst": 1}
DEADLINE = "20s"


def _carrying(gw: Any, name: str, batch: int) -> int:
    """How many nodes of ``batch`` carry rollout ``name``'s assignment."""
    if gw.load_journal(name) is None:
        return 0
    observed = sc.nodes(gw)
    return sum(1 for n in sc.journal(gw, name).plan.batches[batch].nodes
               if observed[n].annotations.get(ANN_ROLLOUT) == name)


def test_a_run_resumed_after_its_progress_deadline_judges_each_node_from_its_own_write(
        tmp_path: Path, prefect_api: str) -> None:
    """Killed while batch 2's writes go out, run again later than progressDeadline: the writes
    that did not land go out then and are judged from then, so the rollout completes."""
    with sc.cluster(tmp_path, general=6) as c:
        gw = sc.gateway(c)
        policy = sc.policy(steps=[1, "100%"], maxUnavailable=6, progressDeadline=DEADLINE, **SLOW_API)
        run = Runner(c, tmp_path, prefect_api, name="late", config=sc.config_text(gw, maxPods=93), policy=policy)
        run.start()
        run.kill_when("mid-assignment of batch 2", lambda: 1 <= _carrying(gw, "late", 1) < 4)
        time.sleep(25)  # longer than progressDeadline
        run.start()
        assert run.finish() == 0
        j = sc.journal(gw, "late")
        assert j.shown_status == "complete" and not j.reverting_nodes()
        assert successful_patches(c) == {n: 1 for n in j.plan.nodes}


def test_a_rollback_cut_short_is_finished_by_running_it_again_and_again_writes_nothing(
        tmp_path: Path, prefect_api: str) -> None:
    with sc.cluster(tmp_path, general=6) as c:
        gw = sc.gateway(c)
        # one write a second: the moment between a batch's first and fourth revert lasts seconds
        # (at 4 a second a loaded machine's poll missed it: ci-32, the rollback finished first)
        policy = sc.policy(steps=[1, "100%"], maxUnavailable=6, progressDeadline=DEADLINE, apiQps=1, apiBurst=1)
        outcome = sc.run(name="back", config=sc.config_text(gw, maxPods=94), policy=policy,
                         kubeconfig=str(c.kubeconfig))
        assert outcome.outcome == "completed", outcome.message
        rollback = Runner(c, tmp_path, prefect_api, name="back", config="", policy=policy)
        rollback.args = [sys.executable, "-m", "rollout_cli", "rollback", "back", "--policy",
                         str(tmp_path / "back-policy.yaml"), "--kubeconfig", str(c.kubeconfig)]
        assigned = set(sc.journal(gw, "back").assigned_nodes())

        def mid_rollback() -> bool:
            j = sc.journal(gw, "back")
            observed = sc.nodes(gw)
            reverting = [n for n in j.reverting_nodes() if n in j.plan.batches[1].nodes]
            back = [n for n in reverting if observed[n].spec_source is None]
            return len(reverting) == 5 and 1 <= len(back) < 4

        rollback.start()
        rollback.kill_when("mid-rollback of batch 2", mid_rollback)
        time.sleep(25)  # longer than progressDeadline: the reverts not written must still go out
        rollback.start()
        assert rollback.finish() == 0
        j = sc.journal(gw, "back")
        assert j.shown_status == "rolled-back" and not j.failed_nodes
        observed = sc.nodes(gw)
        assert all(observed[n].spec_source is None for n in assigned)
        written = successful_patches(c)
        assert written == {n: 2 for n in assigned}, written  # the assignment and one revert each
        rollback.start()
        assert rollback.finish() == 0
        assert successful_patches(c) == written  # a rollback with nothing left to do writes nothing


# kubesim renews every Lease four times per duration, as a kubelet does, only when the duration
# is scaled like its clock: a 1 s Lease on the 40x clock is the real 40 s Lease renewed every 10 s
SCALED_LEASES = sc.CLUSTER.replace(
    'host: {{cgroups: ["/", "/kubepods", "/system.slice"]}}',
    'host: {{cgroups: ["/", "/kubepods", "/system.slice"]}}\n    kubelet: {{config: {{nodeLeaseDurationSeconds: 1}}}}',
)


def test_a_node_that_stopped_just_before_its_write_is_not_blamed(tmp_path: Path) -> None:
    """Partitioned during the canary's soak, still Ready when its batch starts (the node monitor
    grace has not passed), assigned, then NotReady: its kubelet stopped renewing before the write,
    so the config is not blamed and the rollout completes without it."""
    with sc.cluster(tmp_path, general=5, text=SCALED_LEASES, node_monitor_grace="400s") as c:
        gw = sc.gateway(c)
        name = "blame"
        victim: list[str] = []

        def partition_during_canary() -> bool:
            if gw.load_journal(name) is None or not sc.journal(gw, name).assigned_nodes(batch=0):
                return False
            victim.append(sc.journal(gw, name).plan.batches[1].nodes[0])
            c.faults.partition(victim[0])
            return True

        with sc.Background(partition_during_canary, every=0.05):
            outcome = sc.run(name=name, config=sc.config_text(gw, maxPods=95), kubeconfig=str(c.kubeconfig),
                             policy=sc.policy(steps=[1, "100%"], maxUnavailable=5, done={"soak": "3s"}))
        assert victim
        j = sc.journal(gw, name)
        assert outcome.outcome == "completed", outcome.message
        assert j.nodes[victim[0]].assigned and not j.reverting_nodes()
        assert j.nodes[victim[0]].phase.value == "unavailable"
        assert victim[0] in outcome.report and "before its assignment landed" in outcome.report


def test_a_node_deleted_mid_rollout_is_gone_and_its_rollback_is_not_held_up(tmp_path: Path) -> None:
    with sc.cluster(tmp_path, general=5) as c:
        gw = sc.gateway(c)
        name = "gone"
        deleted: list[str] = []

        def delete_after_its_write() -> bool:
            if gw.load_journal(name) is None:
                return False
            j = sc.journal(gw, name)
            carrying = [n for n in j.plan.batches[1].nodes if sc.nodes(gw)[n].annotations.get(ANN_ROLLOUT)]
            if not carrying:
                return False
            gw.core.delete_node(carrying[0])
            deleted.append(carrying[0])
            return True

        # an hour: a gone node waited out to its deadline would hold the test past its timeout
        policy = sc.policy(steps=[1, "100%"], maxUnavailable=5, done={"soak": "3s"}, progressDeadline="1h")
        with sc.Background(delete_after_its_write, every=0.05):
            outcome = sc.run(name=name, config=sc.config_text(gw, maxPods=96), policy=policy,
                             kubeconfig=str(c.kubeconfig))
        assert deleted
        assert outcome.outcome == "completed", outcome.message
        assert "1 gone" in outcome.message and deleted[0] in outcome.message
        status = {n["name"]: n for n in _status(gw, name)["nodes"]}
        assert status[deleted[0]]["phase"] == "gone"

        # a second node, of the canary, deleted after the rollout and before its rollback
        canary = sc.journal(gw, name).plan.batches[0].nodes[0]
        gw.core.delete_node(canary)
        back = sc.run_rollback(name=name, policy=policy, kubeconfig=str(c.kubeconfig))
        assert back.outcome == "rolled-back", back.message
        assert "2 gone" in back.message
        observed = sc.nodes(gw)
        put_back = set(sc.journal(gw, name).assigned_nodes()) - {canary, deleted[0]}
        assert put_back and all(observed[n].spec_source is None for n in put_back)


def _status(gw: Any, name: str) -> dict[str, Any]:
    from rollout.usecases.status import rollout_status

    return rollout_status(gw, name)


def test_a_node_cut_off_after_its_write_is_unreachable_not_crash_looping(tmp_path: Path) -> None:
    """Partitioned as soon as its assignment lands: the canary goes Unknown, is counted against the
    budget and reverted like a crash loop, but named for what was seen: it never reported the
    config, so nothing says its kubelet crashed (issue 19: a partitioned node was reported as
    crash-looping). The kubelets sync every 3 s here, so the partition (within 50 ms of the
    write) always comes before the kubelet could take the config."""
    with sc.cluster(tmp_path, general=3, sync_period="120s") as c:
        gw = sc.gateway(c)
        name = "cutoff"
        canary: list[str] = []

        def partition_the_canary_once_written() -> bool:
            written = [n for n, o in sc.nodes(gw).items() if o.spec_source is not None]
            if not written:
                return False
            canary.extend(written)
            c.faults.partition(canary[0])
            return True

        def heal_once_reverted() -> bool:
            if not canary or sc.nodes(gw)[canary[0]].spec_source is not None:
                return False
            c.faults.heal(canary[0])
            return True

        with sc.Background(partition_the_canary_once_written, every=0.05), sc.Background(heal_once_reverted):
            outcome = sc.run(name=name, config=sc.config_text(gw, maxPods=93), kubeconfig=str(c.kubeconfig),
                             policy=sc.policy())
        assert canary
        assert canary == list(sc.journal(gw, name).plan.batches[0].nodes)
        assert outcome.outcome == "reverted", outcome.message
        assert canary[0] in outcome.message and "unreachable" in outcome.message
        assert "crash-looping" not in outcome.message and "crash-looping" not in outcome.report
        assert "before the kubelet took the config" in outcome.report
        assert set(sc.assignment_patches(c)) == set(canary)  # nothing beyond the canary was written
