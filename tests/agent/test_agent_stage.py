"""Staging: a downloaded ConfigMap becomes a drop-in only if it is the one assigned and valid here."""

from __future__ import annotations

from typing import Any

import pytest
from rollout.model import ConfigRef

from agent_fakes import BASE, dropin_text
from kubelet_rollout_agent.stage import Refused, Staged, content_sha, stage

REF = ConfigRef("kube-system", "kc", "kubelet", "uid-1", "7")


def configmap(text: str, *, uid: str = "uid-1", rv: str = "7", key: str = "kubelet") -> dict[str, Any]:
    return {"metadata": {"name": "kc", "namespace": "kube-system", "uid": uid, "resourceVersion": rv},
            "data": {key: text}}


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
    pytest.param(configmap(dropin_text(imageGCLowThresholdPercent=90)), [{"imageGCHighThresholdPercent": 85}],
                 "imageGC", id="a drop-in valid alone but invalid over another slot is refused"),
    pytest.param(configmap(dropin_text(maxPod=50)), [], "unknown field", id="a typo is refused, not ignored"),
])
def test_refusals(cm: dict[str, Any], others: list[dict[str, Any]], needle: str) -> None:
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
