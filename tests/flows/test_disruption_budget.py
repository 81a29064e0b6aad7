"""A fleet's disruption budget, end to end: two kubesim clusters rolling at once, each run taking
its batches' nodes from one real Prefect global concurrency limit (the session's Prefect server),
through the real client; the clusters' audit logs and journals say how many nodes changed at once.

The runs are begun as a fleet's cluster runs begin them (``flows.cluster.begin_run`` with the
budget named in the request); the fleet flow's own part (creating the limit, naming it to its
runs) runs in tests/flows/test_fleet.py.
"""

from __future__ import annotations

import pytest
import scenario as sc

pytestmark = [pytest.mark.usefixtures("prefect_api")]

BUDGET = 2


def test_two_clusters_rolling_at_once_never_change_more_nodes_than_the_budget(tmp_path_factory) -> None:
    from flows.budget import set_budget
    from flows.leases import limit_in_use
    from flows.cluster import begin_run
    from rollout.journal import BatchStatus
    from rollout.run.request import rollout_request

    name = set_budget("budget-test", BUDGET)
    # maxUnavailable would let a cluster change the 3 after its canary at once: the budget plans 2, then 1
    policy = sc.policy(steps=[1, "100%"], maxUnavailable=4, done={"soak": "2s"},
                       nodes={"selector": "kubesim.kubelet-rollout.io/pool=general"})
    with sc.cluster(tmp_path_factory.mktemp("budget-a"), general=4) as a, \
            sc.cluster(tmp_path_factory.mktemp("budget-b"), general=4) as b:
        runs = []
        for c, rollout in ((a, "budget-a"), (b, "budget-b")):
            request = rollout_request(name=rollout, config=sc.config_text(sc.gateway(c), maxPods=77), policy=policy,
                                      kubeconfig=str(c.kubeconfig), disruption_budget=name)
            runs.append((c, rollout, begin_run(request)))
        held_back: set[str] = set()
        peak = [0]

        def watch() -> bool:
            for _, rollout, run in runs:
                status = run.status() or {}
                if (status.get("waiting") or {}).get("for") == "the disruption budget":
                    held_back.add(rollout)
            used = limit_in_use(name)
            peak[0] = max(peak[0], used[0] if used else 0)
            return False

        with sc.Background(watch, every=0.2, timeout=300):
            for _, rollout, run in runs:
                assert run.wait_ended(300), f"{rollout} did not end"
        for c, rollout, run in runs:
            assert run.result().outcome.value == "completed", (rollout, run.result().message)
        assert held_back, "neither run ever waited for the budget: the test proves nothing"
        assert peak[0] <= BUDGET and limit_in_use(name) == (0, BUDGET)  # every slot given back

        for c, rollout, _ in runs:
            j = sc.journal(sc.gateway(c), rollout)
            assert [b.size for b in j.plan.batches] == [1, BUDGET, 1], "batches no larger than the budget"
            assert all(b.status is BatchStatus.DONE for b in j.batches)
        most, which = sc.most_nodes_changing_at_once([(c, rollout) for c, rollout, _ in runs])
        assert most <= BUDGET, which


def test_a_run_naming_a_budget_prefect_does_not_have_is_refused_before_any_write(tmp_path_factory) -> None:
    from flows.cluster import run_tools
    from rollout.errors import NotFoundError
    from rollout.run.request import rollout_request

    with sc.cluster(tmp_path_factory.mktemp("budget-none"), general=1) as c:
        request = rollout_request(name="no-budget", config=sc.config_text(sc.gateway(c), maxPods=78),
                                  policy=sc.policy(), kubeconfig=str(c.kubeconfig), disruption_budget="kubelet-rollout-fleet-nosuch-nodes")
        with pytest.raises(NotFoundError, match="no global concurrency limit of that name"):
            run_tools(request)
        assert sc.assignment_patches(c) == {}




def test_slots_held_across_a_prefect_server_restart_are_given_back_after_it(tmp_path) -> None:
    """A fleet's server restarted mid-rollout: the batch's lease survives (the fleet stack keeps
    leases on disk, as the README advises), so the run still gives its slots back after it; with
    Prefect's in-memory default they would stay held for good."""
    from prefect.settings import PREFECT_API_URL, temporary_settings

    from flows.budget import PrefectBudget, set_budget
    from flows.leases import limit_in_use
    from rollout_cli.local.fleet_stack import PrefectServer

    server = PrefectServer(tmp_path / "prefect").start()
    try:
        with temporary_settings({PREFECT_API_URL: server.api_url}):
            name = set_budget("restarted", 3)
            budget = PrefectBudget(name)
            other = PrefectBudget(name)  # another cluster's run
            assert budget.take("batch-1", 2) and not other.take("batch-1", 2)
            server.stop()
            server.start()  # the same database, port and lease files
            assert limit_in_use(name) == (2, 3)
            assert not other.take("batch-1", 2)
            budget.release("batch-1")
            assert limit_in_use(name) == (0, 3) and other.take("batch-1", 2)
            other.close()
            budget.close()
    finally:
        server.stop()
