"""Staging: a downloaded ConfigMap becomes a drop-in only if it is the one assigned and valid here."""

from __future__ import annotations

from typing import Any

import pytest
from rollout.model import ConfigRef
from rollout.names import ANN_SET_ASIDE_OVERRIDES

from rollout.kubeletconfig.dropin import DropinFile

from agent_fakes import BASE, dropin_text
from kubelet_rollout_agent.stage import Refused, Staged, content_sha, stage

REF = ConfigRef("kube-system", "kc", "kubelet", "uid-1", "7")


def configmap(text: str, *, uid: str = "uid-1", rv: str = "7", key: str = "kubelet",
              takes_precedence: bool = False) -> dict[str, Any]:
    annotations = {ANN_SET_ASIDE_OVERRIDES: "true"} if takes_precedence else {}
    return {"metadata": {"name": "kc", "namespace": "kube-system", "uid": uid, "resourceVersion": rv,
                         "annotations": annotations}, "data": {key: text}}


@pytest.mark.parametrize(("cm", "others", "needle"), [
    pytest.param(configmap(dropin_text(maxPods=50), uid="uid-2"), [], "not the one assigned",
                 id="a uid mismatch is refused (replaced ConfigMap)"),
    pytest.param(configmap(dropin_text(maxPods=50), rv="8"), [], "resourceVersion 8",
                 id="a resourceVersion mismatch is refused (edited in place)"),
    pytest.param(configmap(dropin_text(maxPods=50), key="other"), [], "has no key 'kubelet'",
                 id="a missing key is refused"),
    pytest.param(configmap("maxPods: 50\n"), [], "kind", id="a drop-in without kind/apiVersion is refused"),
    pytest.param(configmap(""), [], "empty", id="an empty drop-in is refused (the kubelet would not start)"),
    pytest.param(configmap(dropin_text(maxPods=-1)), [], "maxPods", id="an invalid merged config is refused"),
    pytest.param(configmap(dropin_text(imageGCLowThresholdPercent=90)),
                 [DropinFile("40-nodeadm.conf", {"imageGCHighThresholdPercent": 85})],
                 "imageGC", id="a drop-in valid alone but invalid over another slot is refused"),
    pytest.param(configmap(dropin_text(maxPods=50)), [DropinFile("50-x.conf", {}, "cannot be loaded: empty")],
                 "50-x.conf cannot be loaded", id="another file the kubelet cannot load refuses it (no start would work)"),
    pytest.param(configmap(dropin_text(maxPod=50)), [], "unknown field", id="a typo is refused, not ignored"),
])
def test_refusals(cm: dict[str, Any], others: list[DropinFile], needle: str) -> None:
    outcome = stage(REF, cm, base=BASE, other_dropins=others)
    assert isinstance(outcome, Refused), outcome
    assert needle in outcome.message


def test_a_valid_dropin_is_staged_byte_for_byte() -> None:
    text = dropin_text(maxPods=50, shutdownGracePeriod="30s", shutdownGracePeriodCriticalPods="10s")
    outcome = stage(REF, configmap(text), base=BASE)
    assert isinstance(outcome, Staged)
    assert outcome.text == text and outcome.sha == content_sha(text) and outcome.document["maxPods"] == 50


def test_problems_the_base_already_has_do_not_refuse_a_dropin() -> None:
    # A 1.31 base may carry fields the 1.23 validator does not know: not the drop-in's fault.
    base = {**BASE, "someFieldOf131": True}
    outcome = stage(REF, configmap(dropin_text(maxPods=50)), base=base)
    assert isinstance(outcome, Staged), outcome


def test_a_later_file_that_makes_the_merge_invalid_is_refused_naming_the_file_and_the_field() -> None:
    """The issue's node: ours sets imageGC high 65 / low 60, 99-other.conf sets low 70. The
    kubelet applies 99-other.conf last: low 70 over high 65 is invalid, and our low never runs.
    (Before the fix ours was merged after every other file and this was staged.)"""
    ours = dropin_text(imageGCHighThresholdPercent=65, imageGCLowThresholdPercent=60)
    others = [DropinFile("40-nodeadm.conf", {"maxPods": 58}),
              DropinFile("99-other.conf", {"imageGCLowThresholdPercent": 70})]
    outcome = stage(REF, configmap(ours), base=BASE, other_dropins=others)
    assert isinstance(outcome, Refused), outcome
    assert "imageGCLowThresholdPercent is set to 70 by 99-other.conf, read after the drop-in" in outcome.message
    assert "must be less than imageGCHighThresholdPercent 65" in outcome.message


def test_a_field_a_later_file_overrides_is_refused_even_when_the_merge_is_valid() -> None:
    """A subdirectory is walked where its name sorts: zz/ comes after 90-kubelet-rollout.conf."""
    outcome = stage(REF, configmap(dropin_text(maxPods=50, featureGates={"CPUManager": True})), base=BASE,
                    other_dropins=[DropinFile("zz/10-x.conf", {"maxPods": 70, "featureGates": {"MemoryQoS": False}})])
    assert isinstance(outcome, Refused) and "maxPods is set to 70 by zz/10-x.conf" in outcome.message
    assert "featureGates" not in outcome.message  # maps merge key by key: our gate still runs


@pytest.mark.parametrize("others", [
    pytest.param([DropinFile("40-nodeadm.conf", {"maxPods": 70})], id="an earlier file: ours wins over it"),
    pytest.param([DropinFile("99-other.conf", {"maxPods": 50, "podPidsLimit": 100})],
                 id="a later file that sets our value again, and fields we leave alone"),
    pytest.param([DropinFile("99-a.conf", {"maxPods": 70}), DropinFile("99-b.conf", {"maxPods": 50})],
                 id="a later file overridden by a still later one that restores our value"),
])
def test_other_files_that_leave_our_fields_in_effect_do_not_refuse(others: list[DropinFile]) -> None:
    outcome = stage(REF, configmap(dropin_text(maxPods=50)), base=BASE, other_dropins=others)
    assert isinstance(outcome, Staged), outcome


def test_a_config_that_takes_precedence_sets_aside_only_the_later_files_that_override_it() -> None:
    """`rollout drift --fix`'s ConfigMap: 99-other.conf overrides our maxPods and goes aside; 99-x.conf
    sets a field we leave alone and 40-nodeadm.conf is read before ours: both stay."""
    others = [DropinFile("40-nodeadm.conf", {"maxPods": 58}), DropinFile("99-other.conf", {"maxPods": 70}),
              DropinFile("99-x.conf", {"podPidsLimit": 100})]
    outcome = stage(REF, configmap(dropin_text(maxPods=50), takes_precedence=True), base=BASE, other_dropins=others)
    assert isinstance(outcome, Staged) and outcome.set_aside == ("99-other.conf",), outcome
    plain = stage(REF, configmap(dropin_text(maxPods=50)), base=BASE, other_dropins=others)
    assert isinstance(plain, Refused) and "maxPods is set to 70 by 99-other.conf" in plain.message


def test_what_is_left_after_setting_aside_is_still_checked() -> None:
    """Setting aside 99-other.conf leaves imageGC low 70 of 99-z.conf over our high 65: refused."""
    ours = dropin_text(imageGCHighThresholdPercent=65, maxPods=50)
    others = [DropinFile("99-other.conf", {"maxPods": 70}), DropinFile("99-z.conf", {"imageGCLowThresholdPercent": 70})]
    outcome = stage(REF, configmap(ours, takes_precedence=True), base=BASE, other_dropins=others)
    assert isinstance(outcome, Refused) and "imageGCLowThresholdPercent" in outcome.message, outcome
