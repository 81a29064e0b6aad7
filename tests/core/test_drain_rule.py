"""The one rule that judges a change needing a drain (rollout.kubeletconfig.dkc_refusals with the
policy's disruption section), the section itself, and `start` refusing a state reset no node here
can do (Dynamic Kubelet Config nodes: only the agent deletes a checkpoint file), before anything
is written. One case per rule, named for it."""

from __future__ import annotations

from collections.abc import Mapping

import pytest

from rollout.errors import ConfigError
from rollout.kubeletconfig import dkc_refusals
from rollout.model import ClusterFacts, ConfigRef, NodeObservation
from rollout.policy import RolloutPolicy, load_policy_ref
from rollout.ports import ConfigMapObject
from rollout.usecases.prepare import prepare

CPU_STATE = "/var/lib/kubelet/cpu_manager_state"
STATIC = {"cpuManagerPolicy": "static", "reservedSystemCPUs": "0"}
NODES = {"n1": {"cpuManagerPolicy": "none"}, "n2": {"cpuManagerPolicy": "none"}}


def test_without_a_disruption_section_the_rule_refuses_naming_field_reason_and_section() -> None:
    refusals = dkc_refusals(STATIC, allow_fields=(), running=NODES)
    policy_field = next(r for r in refusals if r.change.path == "cpuManagerPolicy")
    said = str(policy_field)
    assert said.startswith("cpuManagerPolicy (state-reset, 'none' -> 'static') on 2 node(s) [n1, n2]")
    assert f"the kubelet refuses to start while {CPU_STATE} was written under policy 'none'" in said
    assert "state_checkpoint.go" in said and "add `disruption: {drain: auto}` to the policy" in said


def test_allow_fields_does_not_let_a_drain_change_through() -> None:
    """Before: cpuManagerPolicy in allowFields rolled out, and every node crash-looped."""
    refused = dkc_refusals(STATIC, allow_fields=("cpuManagerPolicy", "reservedSystemCPUs"), running=NODES)
    assert {r.change.path for r in refused} == {"cpuManagerPolicy", "reservedSystemCPUs"}


def test_a_disruption_section_lets_the_rollout_drain_for_it() -> None:
    assert dkc_refusals(STATIC, allow_fields=(), running=NODES, drain="auto") == ()
    assert dkc_refusals(STATIC, allow_fields=(), running=NODES, drain="always") == ()


def test_drain_never_refuses_and_says_which_setting() -> None:
    said = " ".join(str(r) for r in dkc_refusals(STATIC, allow_fields=(), running=NODES, drain="never"))
    assert "the policy's disruption.drain is never: set it to auto" in said and "add `disruption" not in said


def test_a_reboot_field_is_still_the_allow_lists_to_let_through() -> None:
    document = {"cgroupDriver": "systemd"}
    assert [r.change.path for r in dkc_refusals(document, allow_fields=(), drain="auto")] == ["cgroupDriver"]
    assert dkc_refusals(document, allow_fields=("cgroupDriver",)) == ()


def test_the_policy_section_is_optional_and_strict() -> None:
    assert load_policy_ref("canary").disruption is None and load_policy_ref("canary").drain_mode is None
    assert RolloutPolicy.model_validate({"disruption": {}}).drain_mode == "auto"
    assert RolloutPolicy.model_validate({"disruption": {"drain": "never"}}).drain_mode == "never"
    for bad in ({"drain": "sometimes"}, {"drian": "auto"}, "yes"):
        with pytest.raises(ValueError):
            RolloutPolicy.model_validate({"disruption": bad})


HEAD = "apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\n"


class Cluster:
    """Two DKC nodes on the none CPU policy; nothing may be written."""

    def load_journal(self, rollout: str) -> None:
        return None

    def probe_cluster(self, nodes: object = None) -> ClusterFacts:
        return ClusterFacts(server_version="v1.23.17")

    def impatient(self) -> Cluster:
        return self

    def configz(self, node: str) -> dict[str, object]:
        return {"kubeletconfig": {"cpuManagerPolicy": "none"}}

    def publish_configmap(self, manifest: object) -> ConfigRef:
        raise AssertionError("published a config start refuses")

    def read_configmap(self, name: str, *, namespace: str | None = None) -> ConfigMapObject:
        raise AssertionError("no ConfigMap is named: the config is given as text")

    def resolve(self, ref: ConfigRef) -> ConfigRef:
        raise AssertionError("no ConfigMap is named: the config is given as text")


def _observations() -> Mapping[str, NodeObservation]:
    return {n: NodeObservation(name=n, uid=f"u-{n}", has_config_status=True, ready="True") for n in ("n1", "n2")}


def test_start_refuses_a_state_reset_on_nodes_without_the_agent_and_says_so() -> None:
    policy = RolloutPolicy.model_validate({**load_policy_ref("fast").dump(), "disruption": {"drain": "auto"}})
    text = HEAD + "cpuManagerPolicy: static\nreservedSystemCPUs: '0'\n"
    with pytest.raises(ConfigError) as refused:
        prepare(Cluster(), name="pin", policy=policy, observations=_observations(), config=text, configmap=None,
                validate=True)
    said = str(refused.value)
    assert f"the kubelet must start with {CPU_STATE} deleted, which only kubelet-rollout-agent does" in said
    assert "2 node(s) take their config through Dynamic Kubelet Config (n1, n2)" in said
    assert "nothing was written to the cluster" in said


def test_the_policy_section_says_how_a_drain_goes() -> None:
    policy = RolloutPolicy.model_validate({"disruption": {"onBlocked": "skip", "timeout": "5m", "gracePeriod": "20s",
                                                          "evictLocalStorage": True}})
    rules = policy.drain_rules
    assert (rules.grace_period_s, rules.evict_local_storage, rules.evict_unmanaged_pods) == (20, True, False)
    assert policy.rehearsal(10).disruption is not None and policy.rehearsal(10).drain_rules.grace_period_s == 2
    with pytest.raises(ValueError):
        RolloutPolicy.model_validate({"disruption": {"onBlocked": "ignore"}})


def test_start_without_the_section_refuses_with_the_section_to_add() -> None:
    text = HEAD + "cpuManagerPolicy: static\nreservedSystemCPUs: '0'\n"
    with pytest.raises(ConfigError) as refused:
        prepare(Cluster(), name="pin", policy=load_policy_ref("fast"), observations=_observations(), config=text,
                configmap=None, validate=True)
    said = str(refused.value)
    assert "add `disruption: {drain: auto}` to the policy" in said and "kubelet-rollout-agent" not in said
