"""Planner rules (table) and the properties that must hold for any cluster (hypothesis)."""

from __future__ import annotations

from dataclasses import replace
from datetime import timedelta

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from test_machine_support import T0, TARGET, active, node, nodes, policy

from rollout.errors import PlanError
from rollout.model import NodeObservation
from rollout.planner import (
    RESTART_BUDGET,
    SKIP_CONTROL_PLANE,
    SKIP_EXCLUDED_LABEL,
    SKIP_EXCLUDED_NAME,
    SKIP_NO_DKC,
    SKIP_ON_TARGET,
    SKIP_UNHEALTHY,
    Batch,
    RolloutPlan,
    candidate_nodes,
    plan_batches,
)
from rollout.policy import LKG_TRIAL, RolloutPolicy, resolve_amount
from tests.conftest import examples


def plan(pool: list[NodeObservation], pol: RolloutPolicy, **kw: object) -> RolloutPlan:
    return plan_batches(pool, pol, rollout=kw.pop("rollout", "r1"), target=TARGET, **kw)  # type: ignore[arg-type]


def sizes(p: RolloutPlan) -> list[int]:
    return [b.size for b in p.batches]


@pytest.mark.parametrize(
    ("n", "fields", "expected"),
    [
        pytest.param(
            100,
            {"steps": [1, "10%", "50%", "100%"], "maxUnavailable": "50%"},
            [1, 9, 40, 50],
            id="canary 1, then cumulative 10%/50%/100%",
        ),
        pytest.param(
            100,
            {"steps": [1, "10%", "50%", "100%"], "maxUnavailable": 10},
            [1, 9] + [10] * 9,
            id="a step larger than maxUnavailable is split into several batches",
        ),
        pytest.param(
            3,
            {"steps": [1, "10%", "50%", "100%"], "maxUnavailable": 3},
            [1, 1, 1],
            id="a step that adds no node is dropped",
        ),
        pytest.param(1, {"steps": [1, "100%"]}, [1], id="a one-node pool is just the canary"),
        pytest.param(0, {"steps": [1, "100%"]}, [], id="nothing to roll gives no batch"),
        pytest.param(
            20,
            {"steps": ["10%", "20%", "100%"], "maxUnavailable": 20},
            [2, 2, 16],
            id="a percentage canary rounds up",
        ),
        pytest.param(
            10,
            {"steps": [1, 3, "100%"], "maxUnavailable": "20%"},
            [1, 2, 2, 2, 2, 1],
            id="maxUnavailable percentage rounds down and caps every batch",
        ),
        pytest.param(
            4,
            {"steps": [1, "100%"], "maxUnavailable": "10%"},
            [1, 1, 1, 1],
            id="maxUnavailable percentage never rounds below one node",
        ),
    ],
)
def test_batch_sizes(n: int, fields: dict[str, object], expected: list[int]) -> None:
    assert sizes(plan(nodes(n), policy(**fields))) == expected


def test_the_default_canary_is_two_nodes_from_two_zones() -> None:
    from rollout.policy import resolve_policy

    p = plan(nodes(500, zones=3), resolve_policy("canary"))
    assert p.batches[0].size == 2 and p.batches[0].canary
    assert len({p.zones[n] for n in p.batches[0].nodes}) == 2
    assert not any(b.canary for b in p.batches[1:])


@pytest.mark.parametrize(
    ("obs", "fields", "reason"),
    [
        pytest.param(
            node("cp", labels={"node-role.kubernetes.io/control-plane": ""}),
            {},
            SKIP_CONTROL_PLANE,
            id="control-plane nodes are excluded unless allowed",
        ),
        pytest.param(
            node("old-master", labels={"node-role.kubernetes.io/master": ""}),
            {},
            SKIP_CONTROL_PLANE,
            id="the legacy master label counts as control plane",
        ),
        pytest.param(
            node("n1"),
            {"nodes": {"excludeNames": ["n1"]}},
            SKIP_EXCLUDED_NAME,
            id="excluded names are reported",
        ),
        pytest.param(
            node("n1", labels={"hold": "yes"}),
            {"nodes": {"excludeSelector": "hold=yes"}},
            SKIP_EXCLUDED_LABEL,
            id="excluded labels are reported",
        ),
        pytest.param(
            active(node("n1")),
            {},
            SKIP_ON_TARGET,
            id="a node already active on the target is skipped and reported",
        ),
        pytest.param(
            node("n1", has_config_status=False), {}, SKIP_NO_DKC, id="a node without status.config is skipped"
        ),
        pytest.param(
            node("n1", ready="False"),
            {"maxUnavailable": 2},
            SKIP_UNHEALTHY,
            id="a NotReady node is not assigned at planning time",
        ),
    ],
)
def test_skipped_nodes_are_reported_with_a_reason(
    obs: NodeObservation, fields: dict[str, object], reason: str
) -> None:
    p = plan([obs, *nodes(3, prefix="w")], policy(**fields))
    assert obs.name not in p.nodes
    assert (obs.name, reason) in {(s.node, s.reason) for s in p.skipped}


def test_candidate_nodes_are_the_selected_and_not_excluded_ones() -> None:
    pool = [
        node("a", labels={"pool": "gpu"}),
        node("b", labels={"pool": "cpu"}),
        node("c", labels={"pool": "gpu", "node-role.kubernetes.io/control-plane": ""}),
        node("d", labels={"pool": "gpu"}),
    ]
    pol = policy(nodes={"selector": "pool=gpu", "excludeNames": ["d"]})
    assert [n.name for n in candidate_nodes(pool, pol)] == ["a"]


def test_control_plane_nodes_are_planned_when_allowed() -> None:
    cp = node("cp", labels={"node-role.kubernetes.io/control-plane": ""})
    assert "cp" in plan([cp], policy(nodes={"allowControlPlane": True})).nodes


def test_node_selector_limits_the_pool_and_counts_the_rest() -> None:
    pool = [node("a", labels={"pool": "gpu"}), node("b", labels={"pool": "cpu"})]
    p = plan(pool, policy(nodes={"selector": "pool=gpu"}))
    assert p.nodes == ("a",) and p.unselected == 1


def test_spec_on_target_but_not_active_is_still_planned() -> None:
    from test_machine_support import spec_target

    assert "n1" in plan([spec_target(node("n1"))], policy()).nodes


def test_ready_node_with_stale_lease_is_unhealthy_when_now_is_given() -> None:
    stale = node("n1", lease_renewed=T0 - timedelta(minutes=5), lease_duration_s=40.0)
    p = plan([stale, *nodes(3)], policy(maxUnavailable=2), now=T0)
    assert p.unhealthy == ("n1",)


def test_a_rehearsals_late_renewal_within_the_leases_own_duration_is_no_unhealthy_node() -> None:
    """At x20 the policy's 40 s is 2 s, but the kubelet's Lease still says 40 s: planning reads it
    by the same rule as a node mid-rollout (CI saw a healthy node left out of `drift --fix`)."""
    rehearsal = policy(maxUnavailable=2).rehearsal(20)
    late = node("n1", lease_renewed=T0 - timedelta(seconds=5), lease_duration_s=40.0)
    gone_quiet = node("n2", lease_renewed=T0 - timedelta(seconds=41), lease_duration_s=40.0)
    p = plan([late, gone_quiet, *nodes(3)], rehearsal, now=T0)
    assert "n1" in p.nodes and p.unhealthy == ("n2",)


def test_nodes_already_unhealthy_shrink_every_batch() -> None:
    sick = [node(f"sick{i}", ready="Unknown") for i in range(2)]
    p = plan([*sick, *nodes(20)], policy(steps=[1, "100%"], maxUnavailable=5))
    assert p.max_unavailable == 5 and p.batch_cap == 3
    assert max(sizes(p)) == 3


@pytest.mark.parametrize(("limit", "expected"), [(None, [1, 5, 5, 5, 4]), (2, [1] + [2] * 9 + [1]), (5, [1, 5, 5, 5, 4])])
def test_a_fleets_disruption_budget_caps_every_batch_and_plans_every_node(limit: int | None, expected: list[int]) -> None:
    p = plan(nodes(20), policy(steps=[1, "100%"], maxUnavailable=5), batch_limit=limit)
    assert sizes(p) == expected and sum(sizes(p)) == 20
    assert p.max_unavailable == 5  # waiting on down nodes is still the policy's rule


def test_too_many_unhealthy_nodes_is_a_plan_error() -> None:
    sick = [node(f"sick{i}", ready="False") for i in range(3)]
    with pytest.raises(PlanError, match="already unhealthy"):
        plan([*sick, *nodes(5)], policy(maxUnavailable=3))


def test_a_node_listed_twice_is_a_plan_error() -> None:
    with pytest.raises(PlanError, match="twice"):
        plan([node("n1"), node("n1")], policy())


def test_order_ignores_the_api_list_order() -> None:
    pool = nodes(40, zones=3)
    assert plan(pool, policy()).batches == plan(list(reversed(pool)), policy()).batches


def test_order_depends_on_the_rollout_name() -> None:
    pool = nodes(40)
    assert plan(pool, policy(), rollout="a").nodes != plan(pool, policy(), rollout="b").nodes


def test_spread_across_zones_takes_the_zones_in_turn() -> None:
    pool = nodes(30, zones=3)
    p = plan(pool, policy(steps=[1, "10%", "100%"], maxUnavailable=30, spreadAcrossZones=True))
    zones = [p.zones[n] for n in p.nodes]
    assert len(set(zones[:3])) == 3, "the first three nodes come from three different zones"
    assert all(len(set(zones[i : i + 3])) == 3 for i in range(0, 30, 3))


def test_without_spread_a_batch_may_come_from_one_zone_only_by_hash() -> None:
    pool = nodes(30, zones=3)
    spread = plan(pool, policy(spreadAcrossZones=True)).nodes
    flat = plan(pool, policy(spreadAcrossZones=False)).nodes
    assert sorted(spread) == sorted(flat) and spread != flat


def test_zone_label_can_be_overridden() -> None:
    pool = [node(f"n{i}", labels={"rack": f"r{i % 2}"}) for i in range(4)]
    p = plan_batches(pool, policy(maxUnavailable=4), rollout="r", target=TARGET, zone_label="rack")
    assert set(p.zones.values()) == {"r0", "r1"}


def _check(interval: str, count: int) -> dict[str, object]:
    return {"name": f"every-{interval}-x{count}", "query": 'up{node=~"{{nodes}}"}', "condition": "< 1", "noData": "pass",
            "interval": interval, "count": count}


@pytest.mark.parametrize(
    ("fields", "per_batch"),
    [
        pytest.param(
            {"done": {"until": "active", "soak": "0s"}},
            RESTART_BUDGET,
            id="active-only batches cost the restart budget",
        ),
        pytest.param(
            {"done": {"until": "active", "soak": "2m"}},
            RESTART_BUDGET + timedelta(minutes=2),
            id="soak adds to every batch",
        ),
        pytest.param(
            {"done": {"until": "lastKnownGood"}, "progressDeadline": "15m"},
            RESTART_BUDGET + LKG_TRIAL,
            id="lastKnownGood adds the 10-minute trial",
        ),
        pytest.param(
            {"done": {"until": "active", "soak": "2m"}, "analysis": {"checks": [_check("1m", 7)]}},
            RESTART_BUDGET + timedelta(minutes=7),
            id="an analysis longer than the soak holds the batch to its last measurement",
        ),
        pytest.param(
            {"done": {"until": "active", "soak": "7m"}, "analysis": {"checks": [_check("1m", 3), _check("2m", 2)]}},
            RESTART_BUDGET + timedelta(minutes=7),
            id="an analysis within the soak adds nothing",
        ),
        pytest.param(
            {"done": {"until": "lastKnownGood", "soak": "5m"}, "progressDeadline": "15m",
             "analysis": {"checks": [_check("1m", 8)]}},
            RESTART_BUDGET + LKG_TRIAL + timedelta(minutes=5),
            id="the analysis runs within the lastKnownGood trial",
        ),
    ],
)
def test_estimated_duration(fields: dict[str, object], per_batch: timedelta) -> None:
    p = plan(nodes(10), policy(steps=[1, "100%"], maxUnavailable=9, **fields), assign_rate_per_s=1e9)
    assert len(p.batches) == 2
    assert abs(p.estimated_duration - 2 * per_batch) < timedelta(seconds=1)


def test_approval_gates_are_counted_separately_from_the_estimate() -> None:
    p = plan(nodes(10), policy(steps=[1, "50%", "100%"], maxUnavailable=5, approval={"after": "all"}))
    assert p.estimate.approval_gates == 2


def test_approval_gate_only_after_the_last_batch_of_a_split_step() -> None:
    p = plan(nodes(10), policy(steps=[1, "100%"], maxUnavailable=3, approval={"after": [0]}))
    assert [p.approval_after(b.index) for b in p.batches] == [True, False, False, False]


def test_caveats_travel_with_the_plan() -> None:
    assert plan(nodes(2), policy(), caveats=["x"]).caveats == ("x",)


# --------------------------------------------------------------------------- properties

names = st.lists(st.from_regex(r"[a-z][a-z0-9-]{0,12}", fullmatch=True), min_size=0, max_size=60, unique=True)


@st.composite
def clusters(draw: st.DrawFn) -> list[NodeObservation]:
    pool = []
    for name in draw(names):
        obs = node(name, zone=draw(st.sampled_from(["a", "b", "c", ""])))
        kind = draw(st.sampled_from(["fresh"] * 6 + ["on-target", "not-ready", "control-plane", "no-dkc"]))
        if kind == "on-target":
            obs = active(obs)
        elif kind == "not-ready":
            obs = replace(obs, ready="False")
        elif kind == "control-plane":
            obs = replace(obs, labels={**obs.labels, "node-role.kubernetes.io/control-plane": ""})
        elif kind == "no-dkc":
            obs = replace(obs, has_config_status=False)
        pool.append(obs)
    return pool


step_lists = st.sampled_from(
    [[1, "100%"], [1, "10%", "50%", "100%"], [2, 5, "100%"], ["5%", "20%", "100%"], [1, 2, 3, "100%"]]
)
max_unavailables = st.one_of(st.integers(1, 30), st.sampled_from(["10%", "25%", "50%", "100%"]))


def try_plan(pool: list[NodeObservation], pol: RolloutPolicy, rollout: str) -> RolloutPlan | None:
    try:
        return plan(pool, pol, rollout=rollout)
    except PlanError:
        return None


@settings(max_examples=examples(150), deadline=None)
@given(
    pool=clusters(),
    steps=step_lists,
    mu=max_unavailables,
    spread=st.booleans(),
    rollout=st.text(min_size=1, max_size=8),
)
def test_property_every_selected_node_is_in_exactly_one_batch_or_skipped(
    pool: list[NodeObservation], steps: list[object], mu: object, spread: bool, rollout: str
) -> None:
    p = try_plan(pool, policy(steps=steps, maxUnavailable=mu, spreadAcrossZones=spread), rollout)
    if p is None:
        return
    planned = [n for b in p.batches for n in b.nodes]
    assert len(planned) == len(set(planned)), "no node in two batches"
    skipped = {s.node for s in p.skipped}
    assert not skipped & set(planned)
    assert set(planned) | skipped == {o.name for o in pool}


@settings(max_examples=examples(150), deadline=None)
@given(pool=clusters(), steps=step_lists, mu=max_unavailables)
def test_property_no_batch_exceeds_max_unavailable_counting_unhealthy_nodes(
    pool: list[NodeObservation], steps: list[object], mu: object
) -> None:
    p = try_plan(pool, policy(steps=steps, maxUnavailable=mu), "r")
    if p is None:
        assert len(p_unhealthy(pool)) >= 1
        return
    for b in p.batches:
        assert b.size + len(p.unhealthy) <= p.max_unavailable


def p_unhealthy(pool: list[NodeObservation]) -> list[str]:
    return [o.name for o in pool if o.ready != "True"]


@settings(max_examples=examples(100), deadline=None)
@given(pool=clusters(), steps=step_lists, mu=max_unavailables, data=st.data())
def test_property_same_input_same_plan_whatever_the_list_order(
    pool: list[NodeObservation], steps: list[object], mu: object, data: st.DataObject
) -> None:
    pol = policy(steps=steps, maxUnavailable=mu)
    shuffled = data.draw(st.permutations(pool))
    assert try_plan(pool, pol, "r") == try_plan(shuffled, pol, "r")


@settings(max_examples=examples(100), deadline=None)
@given(pool=clusters(), steps=step_lists, mu=max_unavailables)
def test_property_the_canary_comes_first_and_is_never_larger_than_its_step(
    pool: list[NodeObservation], steps: list[object], mu: object
) -> None:
    pol = policy(steps=steps, maxUnavailable=mu)
    p = try_plan(pool, pol, "r")
    if p is None or not p.batches:
        return
    assert p.batches[0].canary
    canary_nodes = sum(b.size for b in p.batches if b.canary)
    assert canary_nodes <= resolve_amount(pol.steps[0], len(p.nodes), round_up=True)
    assert [b.step for b in p.batches] == sorted(b.step for b in p.batches)


@pytest.mark.parametrize(("name", "canary"), [("canary", 2), ("cautious", 2), ("fast", 1)])
def test_shipped_policies_plan_a_100_node_pool_from_their_canary(name: str, canary: int) -> None:
    from rollout.policy import resolve_policy

    pol = resolve_policy(name)
    p = plan(nodes(100, zones=3), pol)
    assert p.batches[0].size == canary and p.batches[0].canary
    assert sorted(p.nodes) == sorted(o.name for o in nodes(100, zones=3))
    assert all(b.size <= p.max_unavailable for b in p.batches)
    assert p.estimated_duration > timedelta(0)
    if pol.done.until.value == "lastKnownGood":
        assert p.estimated_duration >= len(p.batches) * LKG_TRIAL


@pytest.mark.parametrize(
    ("batch", "label"),
    [
        (Batch(index=0, step=0, nodes=("a",)), "batch 1 (canary)"),
        (Batch(index=1, step=0, nodes=("b",)), "batch 2 (canary)"),
        (Batch(index=2, step=1, nodes=("c",)), "batch 3"),
        (Batch(index=9, step=3, nodes=("d",)), "batch 10"),
    ],
    ids=[
        "the first batch is the canary, counted from 1",
        "a canary step split by maxUnavailable stays marked canary",
        "later batches count from 1",
        "no zero padding",
    ],
)
def test_batch_labels_are_what_people_read(batch: Batch, label: str) -> None:
    assert batch.label == label
    assert batch.name == label.removeprefix("batch ")
