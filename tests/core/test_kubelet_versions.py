"""Fields by kubelet version: a field added after 1.23 is a field (typed, validated by the rules
of the version that brought it) and is refused only for the nodes whose kubelets are older."""

from __future__ import annotations

import pytest

from rollout.kubeletconfig import effective_config, validate_config
from rollout.kubeletconfig.versions import kubelet_minor, later_fields, unknown_to_kubelets
from rollout.model import NodeObservation
from rollout.policy import resolve_policy
from rollout.verdict import Sample, judge

HEAD = "apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\ncgroupDriver: systemd\n"
PULLS = HEAD + "maxParallelImagePulls: 2\n"


@pytest.mark.parametrize(("version", "minor"), [("v1.31.2", 31), ("v1.27.0-eks-4f4795d", 27), ("1.23", 23),
                                                ("", None), ("v2.0.0", None), ("weird", None)])
def test_the_minor_of_a_reported_kubelet_version(version: str, minor: int | None) -> None:
    assert kubelet_minor(version) == minor


def test_a_later_field_is_known_with_its_minor_and_typed() -> None:
    assert later_fields({"maxParallelImagePulls": 2, "maxPods": 10, "podLogsDir": "/logs"}) == {
        "maxParallelImagePulls": 27, "podLogsDir": 30}
    [problem] = validate_config(HEAD + "maxParallelImagePulls: two\n").errors
    assert problem.path == "maxParallelImagePulls"
    [typo] = validate_config(HEAD + "maxParalelImagePulls: 2\n").errors
    assert "did you mean maxParallelImagePulls" in typo.message


def test_more_than_one_pull_at_once_makes_pulls_parallel_by_default_as_from_1_27() -> None:
    assert effective_config({"maxParallelImagePulls": 2})["serializeImagePulls"] is False
    assert effective_config({"maxParallelImagePulls": 1})["serializeImagePulls"] is True
    assert validate_config(PULLS).ok
    [problem] = validate_config(PULLS + "serializeImagePulls: true\n").errors
    assert problem.message == ("invalid configuration: maxParallelImagePulls cannot be larger than 1 unless "
                               "SerializeImagePulls (--serialize-image-pulls) is set to false")


@pytest.mark.parametrize(("body", "message"), [
    ("maxParallelImagePulls: 0", "maxParallelImagePulls 0 must be a positive number"),
    ("containerRuntimeEndpoint: ''", "the containerRuntimeEndpoint was not specified or empty"),
    ("containerLogMaxWorkers: 0", "containerLogMaxWorkers must be greater than or equal to 1"),
    ("containerLogMonitorInterval: 2s", "containerLogMonitorInterval must be a positive time duration greater "
                                        "than or equal to 3s"),
    ("podLogsDir: logs", 'pod logs path "logs" must be absolute path'),
    ("podLogsDir: /var/log/../pods", 'pod logs path "/var/log/../pods" must be normalized'),
    ("imageMaximumGCAge: 1m", "imageMaximumGCAge 1m0s must be greater than imageMinimumGCAge 2m0s"),
    ("enableSystemLogQuery: true\nenableSystemLogHandler: false", "enableSystemLogHandler is required for "
                                                                  "enableSystemLogQuery"),
], ids=lambda value: value.split(":")[0] if ":" in value else "")
def test_the_rules_of_later_fields_as_their_kubelets_have_them(body: str, message: str) -> None:
    assert [p.message for p in validate_config(HEAD + body + "\n").errors] == [f"invalid configuration: {message}"]


def test_nodes_older_than_a_field_are_named_and_those_that_report_no_version_are_not_judged() -> None:
    versions = {f"old-{i}": "v1.26.5" for i in range(5)} | {"new": "v1.27.1", "silent": ""}
    assert unknown_to_kubelets({"maxParallelImagePulls": 2}, versions) == [
        "maxParallelImagePulls: a field of kubelets 1.27 and later; unknown to the kubelets of old-0 (v1.26.5), "
        "old-1 (v1.26.5), old-2 (v1.26.5) and 2 more"]
    assert unknown_to_kubelets({"maxParallelImagePulls": 2}, {"new": "v1.27.1", "silent": ""}) == []


def _node(name: str, version: str) -> NodeObservation:
    return NodeObservation(name=name, kubelet_version=version, backend="agent",
                           annotations={"kubelet-rollout.io/agent": '{"backend": "drop-in"}'})


def test_the_verdict_refuses_a_later_field_for_older_kubelets_and_takes_it_for_newer_ones() -> None:
    policy = resolve_policy("canary")
    running = {"serializeImagePulls": False, "cgroupDriver": "systemd"}
    older = [_node("node-1", "v1.26.3"), _node("node-2", "v1.27.0")]
    refused = judge(PULLS, policy=policy, candidates=older, samples=[Sample(n, running) for n in older])
    assert not refused.valid and refused.headline == "invalid KubeletConfiguration"
    assert refused.problems == ("maxParallelImagePulls: a field of kubelets 1.27 and later; unknown to the "
                                "kubelets of node-1 (v1.26.3)",)
    newer = [_node("node-2", "v1.27.0"), _node("node-3", "v1.31.2")]
    taken = judge(PULLS, policy=policy, candidates=newer, samples=[Sample(n, running) for n in newer])
    assert taken.valid, taken.reasons
    assert taken.changed_fields is not None and "maxParallelImagePulls" in taken.changed_fields


def test_offline_a_later_field_is_taken_with_the_minor_it_needs() -> None:
    plain = "apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\nmaxParallelImagePulls: 2\n"
    verdict = judge(plain, policy=resolve_policy("canary"))
    assert verdict.valid
    assert ("maxParallelImagePulls: a field of kubelets 1.27 and later (judged against the cluster's kubelets "
            "with --kubeconfig; an older kubelet does not know it)") in verdict.warnings


def test_a_drop_in_of_parallel_pulls_over_serial_pulls_is_refused_as_its_kubelet_would() -> None:
    """The kubelet merges a drop-in over its base config already defaulted (serial pulls): the
    1.27 default that makes them parallel never applies to a drop-in, so it must say so itself."""
    node = _node("node-1", "v1.31.0")
    said = judge(PULLS, policy=resolve_policy("canary"), candidates=[node],
                 samples=[Sample(node, {"serializeImagePulls": True, "cgroupDriver": "systemd"})])
    assert not said.valid and said.headline.startswith("the drop-in would not run as written")
    assert any("maxParallelImagePulls cannot be larger than 1" in p for p in said.merged_problems)


# --- feature gates by kubelet version --------------------------------------------------------

SIDECARS = HEAD + "featureGates:\n  SidecarContainers: true\n"


def test_a_gate_of_later_kubelets_is_no_error_and_a_name_no_kubelet_has_is() -> None:
    """Before: every gate after 1.23 was "unrecognized" (SidecarContainers, 1.28), so a config
    enabling one was refused for every cluster, a 1.31 one too."""
    assert validate_config(SIDECARS).ok
    [typo] = validate_config(HEAD + "featureGates:\n  SidecarContainer: true\n").errors
    assert typo.rule == "unknown-gate" and "did you mean SidecarContainers" in typo.message


def test_each_node_is_judged_by_its_own_kubelets_gates() -> None:
    versions = {"old": "v1.27.9", "beta": "v1.29.1", "new": "v1.31.2", "silent": ""}
    assert unknown_to_kubelets({"featureGates": {"SidecarContainers": True}}, versions) == [
        "featureGates.SidecarContainers: a gate of kubelets 1.28 and later; unknown to the kubelets of old (v1.27.9)"]
    # DKC's gate, which a config of the DKC days may still set off, is gone from 1.26 on
    assert unknown_to_kubelets({"featureGates": {"DynamicKubeletConfig": False}}, versions | {"dkc": "v1.23.17"}) == [
        "featureGates.DynamicKubeletConfig: a gate of kubelets 1.23 to 1.25; unknown to the kubelets of "
        "beta (v1.29.1), new (v1.31.2), old (v1.27.9)"]


def test_the_verdict_refuses_a_gate_for_the_kubelets_without_it_and_offline_says_which_have_it() -> None:
    policy = resolve_policy("canary")
    running = {"cgroupDriver": "systemd"}
    mixed = [_node("node-1", "v1.27.3"), _node("node-2", "v1.30.0")]
    refused = judge(SIDECARS, policy=policy, candidates=mixed, samples=[Sample(n, running) for n in mixed])
    assert not refused.valid and refused.problems == (
        "featureGates.SidecarContainers: a gate of kubelets 1.28 and later; unknown to the kubelets of node-1 (v1.27.3)",)
    newer = [_node("node-2", "v1.30.0"), _node("node-3", "v1.31.2")]
    assert judge(SIDECARS, policy=policy, candidates=newer, samples=[Sample(n, running) for n in newer]).valid
    plain = "apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\nfeatureGates:\n  SidecarContainers: true\n"
    offline = judge(plain, policy=policy)
    assert offline.valid and any(w.startswith("featureGates.SidecarContainers: a gate of kubelets 1.28 and later")
                                 for w in offline.warnings), offline.warnings
