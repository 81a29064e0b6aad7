"""A check that runs only for the changes it watches (`when: {changes: [...]}`): left out of the
plan of a rollout whose config changes none of those fields, saying so; kept where it does, and
where what the config changes is not known (no node's running config was read)."""

from __future__ import annotations

import pytest
import yaml

from rollout.errors import PolicyError
from rollout.model import NodeObservation
from rollout.policy import load_policy_text, resolve_policy
from rollout.verdict import Sample, judge

WATCHED = {"changes": ["serializeImagePulls", "maxParallelImagePulls"]}


def policy_with(when: object) -> str:
    body = resolve_policy("canary").dump()
    for check in body["analysis"]["checks"]:
        if check["name"] == "image-pull-wait-vs-control":
            check["when"] = when
            check.pop("dryRun", None)
    return yaml.safe_dump(body)


def test_a_check_is_left_out_where_the_config_changes_none_of_its_fields_and_says_so() -> None:
    policy = load_policy_text(policy_with(WATCHED))
    kept, said = policy.for_changes(("maxPods", "evictionHard"))
    assert "image-pull-wait-vs-control" not in [c.name for c in kept.analysis.checks]
    assert len(kept.analysis.checks) == len(policy.analysis.checks) - 1
    assert said == ("analysis check image-pull-wait-vs-control left out: the config changes none of "
                    "serializeImagePulls, maxParallelImagePulls",)


@pytest.mark.parametrize("changed", [("serializeImagePulls",), ("maxPods", "maxParallelImagePulls"), None],
                         ids=["one of its fields", "among others", "not known"])
def test_a_check_stays_where_the_config_changes_one_of_its_fields_or_nobody_knows(changed: object) -> None:
    policy = load_policy_text(policy_with(WATCHED))
    kept, said = policy.for_changes(changed)  # type: ignore[arg-type]
    assert kept.analysis.checks == policy.analysis.checks and said == ()


def test_checks_without_when_run_in_every_rollout() -> None:
    policy = resolve_policy("cautious")
    assert all(c.when is None for c in policy.analysis.checks if c.name != "image-pull-wait-vs-control")
    kept, _ = policy.for_changes(())
    assert {c.name for c in policy.analysis.checks} - {c.name for c in kept.analysis.checks} <= {
        "image-pull-wait-vs-control"}


@pytest.mark.parametrize("when", [{"changes": []}, {"changes": ["serialize image pulls"]},
                                  {"changes": ["evictionHard.memory.available"]}, {"fields": ["maxPods"]}],
                         ids=["empty", "not a name", "a nested path", "unknown key"])
def test_a_bad_when_is_one_clear_error(when: object) -> None:
    with pytest.raises(PolicyError) as caught:
        load_policy_text(policy_with(when))
    assert "when" in str(caught.value)


def test_the_verdict_knows_what_the_config_changes_on_the_nodes_read() -> None:
    node = NodeObservation(name="n1", uid="u1", has_config_status=True, ready="True", backend="dkc")
    running = {"apiVersion": "kubelet.config.k8s.io/v1beta1", "kind": "KubeletConfiguration", "maxPods": 110,
               "serializeImagePulls": True}
    text = yaml.safe_dump({**running, "maxPods": 90})
    policy = resolve_policy("canary")
    said = judge(text, policy=policy, samples=[Sample(node, running)], candidates=[node])
    assert said.changed_fields == ("maxPods",)
    offline = judge(text, policy=policy)
    assert offline.changed_fields is None  # nothing read: every check stays


def test_validate_plan_and_start_say_which_checks_a_config_leaves_out() -> None:
    """The verdict every command shows (validate, diff, plan, start: `rollout.verdict`) names them."""
    node = NodeObservation(name="n1", uid="u1", has_config_status=True, ready="True", backend="dkc")
    running = {"apiVersion": "kubelet.config.k8s.io/v1beta1", "kind": "KubeletConfiguration", "maxPods": 110}
    policy = load_policy_text(policy_with(WATCHED))
    pods = judge(yaml.safe_dump({**running, "maxPods": 90}), policy=policy, samples=[Sample(node, running)],
                 candidates=[node])
    assert any(c.startswith("analysis check image-pull-wait-vs-control left out") for c in pods.caveats), pods.caveats
    pulls = judge(yaml.safe_dump({**running, "serializeImagePulls": False}), policy=policy,
                  samples=[Sample(node, running)], candidates=[node])
    assert not any("left out" in c for c in pulls.caveats), pulls.caveats
