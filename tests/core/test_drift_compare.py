"""The drift watch's rules (``rollout.drift``), as tables: which rollout proved each node, how a
running config is compared with the proved one (the read-back's comparison, shared with the
agent), and what `rollout drift --fix` would roll out again."""

from __future__ import annotations

import json
from dataclasses import replace
from datetime import timedelta
from typing import Any

import pytest
from test_machine_support import OLD, T0, TARGET, make_plan, node, nodes, policy

from rollout.drift import (
    CONFIG_SOURCE_FIELD,
    DriftState,
    FieldDrift,
    NodeDrift,
    Proof,
    compare,
    counts,
    event_message,
    fix_plan,
    proofs,
    unmanaged,
)
from rollout.errors import FlagError
from rollout.journal import Journal, RolloutStatus
from rollout.kubeletconfig.readback import differences, not_in_effect
from rollout.model import ConfigRef
from rollout.names import ANN_AGENT
from rollout.planner import selected_nodes

DOC = {"apiVersion": "kubelet.config.k8s.io/v1beta1", "kind": "KubeletConfiguration", "maxPods": 150,
       "evictionHard": {"memory.available": "1Gi"}, "imageGCHighThresholdPercent": 85,
       "syncFrequency": "1m", "readOnlyPort": 0, "serializeImagePulls": False}
RUNNING = {"maxPods": 150, "evictionHard": {"memory.available": "1024Mi", "nodefs.available": "10%"},
           "imageGCHighThresholdPercent": 85, "syncFrequency": "1m0s", "serializeImagePulls": False,
           "cgroupDriver": "systemd"}
PROOF = Proof("n1", "r1", TARGET, T0)


def configz(**changes: Any) -> dict[str, Any]:
    body = {**RUNNING, **changes}
    return {"kubeletconfig": {k: v for k, v in body.items() if v is not None}}


def agent_node(name: str = "n1", after: list[dict[str, Any]] | None = None) -> Any:
    advert = {"version": "t", "backend": "drop-in", **({"dropinsAfter": after} if after else {})}
    return replace(node(name), backend="agent", annotations={ANN_AGENT: json.dumps(advert)})


def dkc_node(name: str = "n1", source: ConfigRef | None = TARGET) -> Any:
    return replace(node(name), backend="dkc", spec_source=source.unresolved() if source else None,
                   has_config_status=True)


@pytest.mark.parametrize(("running", "expected"), [
    pytest.param(configz(), [], id="the same values as the kubelet prints them back (1Gi is 1024Mi, 1m is 1m0s)"),
    pytest.param(configz(cgroupDriver="cgroupfs"), [], id="a field the proved config does not set is not drift"),
    pytest.param(configz(maxPods=110), [("maxPods", 150, 110)], id="a field set to another value drifts"),
    pytest.param(configz(evictionHard={"memory.available": "500Mi"}),
                 [("evictionHard.memory.available", "1Gi", "500Mi")], id="maps are compared key by key"),
    pytest.param(configz(syncFrequency=None), [("syncFrequency", "1m", None)], id="a field configz lacks drifts"),
    pytest.param(configz(serializeImagePulls=0), [("serializeImagePulls", False, 0)], id="false is never 0"),
    pytest.param(configz(readOnlyPort=None), [], id="a zero configz leaves out (omitempty) is the value it runs"),
])
def test_a_running_config_is_compared_with_the_proved_one_field_by_field(running: Any, expected: Any) -> None:
    result = compare(agent_node(), PROOF, DOC, running)
    assert [(f.field, f.expected, f.running) for f in result.fields] == expected
    assert result.state is (DriftState.DRIFTED if expected else DriftState.IN_SYNC)
    # one comparison: the agent's read-back proof names exactly the fields the drift watch does
    assert not_in_effect(DOC, running) == [d.path for d in differences(DOC, running)] == [e[0] for e in expected]


def test_a_field_a_later_drop_in_sets_names_that_file() -> None:
    obs = agent_node(after=[{"file": "99-other.conf", "config": {"maxPods": 90}}])
    result = compare(obs, PROOF, DOC, configz(maxPods=90))
    assert result.fields == (FieldDrift("maxPods", 150, 90, "99-other.conf"),)
    assert "99-other.conf" in event_message(result) and "maxPods: expected 150, running 90" in event_message(result)


@pytest.mark.parametrize(("source", "drifted"), [
    pytest.param(TARGET, False, id="spec.configSource still names the proved ConfigMap"),
    pytest.param(OLD, True, id="spec.configSource reassigned by hand to another ConfigMap"),
    pytest.param(None, True, id="spec.configSource removed by hand (the kubelet's local config)"),
])
def test_a_dkc_node_must_still_name_the_proved_configmap(source: ConfigRef | None, drifted: bool) -> None:
    result = compare(dkc_node(source=source), PROOF, DOC, configz())
    assert [f.field for f in result.fields] == ([CONFIG_SOURCE_FIELD] if drifted else [])
    if drifted:
        assert result.fields[0].expected == "kube-system/kubelet-new-bbbb"
        assert result.fields[0].running == ("kube-system/kubelet-old-aaaa" if source else
                                            "local (the kubelet's --config)")


def _complete(rollout: str, names: list[str], *, target: ConfigRef = TARGET, finished: int = 0,
              revert: tuple[str, ...] = (), status: RolloutStatus = RolloutStatus.COMPLETE) -> Journal:
    pool = [node(n) for n in names]
    plan = replace(make_plan(pool, policy(steps=[1, "100%"], maxUnavailable="100%"), rollout=rollout), target=target)
    at = T0 + timedelta(hours=finished)
    j = Journal.start(plan, now=at)
    for batch in plan.batches:
        j = j.with_assigned(batch.index, {n: OLD for n in batch.nodes}, at=at)
    if revert:
        j = j.with_revert_requested({n: OLD for n in revert}, at=at, reason="failed")
    return j.with_status(status, at=at)


def test_the_most_recent_complete_rollout_that_left_the_node_on_its_target_proves_it() -> None:
    newer = ConfigRef("kube-system", "kubelet-newer-cccc", "kubelet", uid="u3", resource_version="300")
    found = proofs([
        _complete("r2", ["n1", "n2"], target=newer, finished=2),
        _complete("r1", ["n1", "n2", "n3"], finished=1),
        _complete("r3", ["n2"], target=OLD, finished=3, revert=("n2",)),  # reverted there: proves nothing
        _complete("r4", ["n3"], target=OLD, finished=4, status=RolloutStatus.HALTED),  # not complete
        _complete("r5", ["n1"], target=OLD, finished=5, status=RolloutStatus.ROLLED_BACK),
    ])
    assert {n: (p.rollout, p.target.name) for n, p in found.items()} == {
        "n1": ("r2", "kubelet-newer-cccc"), "n2": ("r2", "kubelet-newer-cccc"), "n3": ("r1", "kubelet-new-bbbb")}


def test_a_node_found_already_on_the_target_is_proved_by_that_rollout() -> None:
    on_target = replace(node("n2"), spec_source=TARGET.unresolved(), assigned=TARGET, active=TARGET,
                        has_config_status=True)
    pool = [node("n1"), on_target]
    plan = make_plan(pool, policy(steps=[1, "100%"], maxUnavailable="100%"))
    assert plan.nodes == ("n1",) and [s.node for s in plan.skipped] == ["n2"]
    j = Journal.start(plan, now=T0).with_assigned(0, {"n1": OLD}, at=T0).with_status(RolloutStatus.COMPLETE, at=T0)
    assert set(proofs([j])) == {"n1", "n2"}


def _drifted(name: str, target: ConfigRef = TARGET, *, overridden: str = "") -> NodeDrift:
    return NodeDrift(name, DriftState.DRIFTED, "agent", (FieldDrift("maxPods", 150, 90, overridden),),
                     Proof(name, "r1" if target == TARGET else "r0", target, T0))


def test_fix_rolls_the_proved_config_out_to_the_drifted_nodes_only() -> None:
    results = [_drifted("n1"), NodeDrift("n2", DriftState.IN_SYNC, "agent", proof=Proof("n2", "r1", TARGET, T0)),
               _drifted("n3"), unmanaged(node("n4")), _drifted("n5", overridden="99-other.conf")]
    plan = fix_plan(results)
    assert plan.proof is not None and plan.proof.target == TARGET and plan.nodes == ("n1", "n3", "n5")
    # n5's agent sets aside the later drop-in that overrides the proved config; nothing is left out
    assert plan.set_aside == (("n5", ("99-other.conf",)),) and plan.left_out == ()
    assert counts(results) == {"in-sync": 1, "drifted": 3, "unmanaged": 1, "unreachable": 0}


def test_fix_refuses_nodes_proved_by_different_configs_unless_one_is_named() -> None:
    results = [_drifted("n1"), _drifted("n2", OLD)]
    with pytest.raises(FlagError, match="proved by 2 different configs") as refused:
        fix_plan(results)
    assert "kube-system/kubelet-old-aaaa" in str(refused.value) and "n2" in str(refused.value)
    named = fix_plan(results, configmap="kube-system/kubelet-old-aaaa")
    assert named.nodes == ("n2",) and named.left_out == (("n1", "proved by kube-system/kubelet-new-bbbb, not "
                                                                "kube-system/kubelet-old-aaaa"),)
    with pytest.raises(FlagError, match="no drifted node was proved by kube-system/other"):
        fix_plan(results, configmap="kube-system/other")


def test_nothing_drifted_is_nothing_to_fix() -> None:
    plan = fix_plan([NodeDrift("n1", DriftState.IN_SYNC, "dkc")])
    assert plan.proof is None and plan.nodes == () and plan.left_out == ()


def test_a_policy_naming_nodes_selects_only_those() -> None:
    pool = nodes(4)
    named = policy(nodes={"names": ["n001", "n003"]})
    assert [n.name for n in selected_nodes(pool, named)] == ["n001", "n003"]
    assert set(make_plan(pool, named).nodes) == {"n001", "n003"}
    assert len(selected_nodes(pool, policy())) == 4


def test_the_review_refuses_an_overridden_drop_in_unless_it_takes_precedence() -> None:
    """The orchestrator's review before a write: `rollout start` of a drop-in whose maxPods a later
    file sets is refused on that node; the drift fix's config (it takes precedence) is not, and
    the review notes the file its agent will set aside."""
    from rollout.kubeletconfig import export_from_configz
    from rollout.verdict import dropin_review

    running = export_from_configz(configz())
    obs = agent_node(after=[{"file": "99-other.conf", "config": {"maxPods": 90}},
                            {"file": "99-x.conf", "config": {"podPidsLimit": 100}}])
    ours = {"apiVersion": "kubelet.config.k8s.io/v1beta1", "kind": "KubeletConfiguration", "maxPods": 150}
    plain = dropin_review(obs, running, ours)
    assert any("99-other.conf" in p for p in plain.problems) and plain.merged["maxPods"] == 90, plain
    fix = dropin_review(obs, running, ours, takes_precedence=True)
    assert fix.problems == [] and fix.merged["maxPods"] == 150 and fix.merged["podPidsLimit"] == 100, fix
    assert [n for n in fix.notes if "99-other.conf" in n and "set" in n] and not any("99-x.conf" in n for n in fix.notes)
