"""``rollout.usecases.drift`` through a small fake of its port (``ClusterForDrift``): the journals are
found through the rollouts the nodes name and read by name, a node whose configz fails is
unreachable (saying why) without holding up the others, a proved ConfigMap replaced under its name
proves nothing, one Event per drifted node, and the request a fix starts names its nodes in the
policy it carries."""

from __future__ import annotations

import json
from dataclasses import replace
from typing import Any

import yaml
from test_machine_support import OLD, T0, TARGET, make_plan, node, policy

from rollout.drift import DriftState
from rollout.errors import NotFoundError, TransientGatewayError
from rollout.journal import Journal, JournalDocument, RolloutStatus, to_document
from rollout.model import NodeObservation
from rollout.names import ANN_ROLLOUT, EVENT_DRIFT
from rollout.policy import load_policy_ref
from rollout.ports import ConfigMapObject, JsonObject
from rollout.run import rollout_request
from rollout.usecases.drift import drift_report, record_drift_events

PROVED = {"apiVersion": "kubelet.config.k8s.io/v1beta1", "kind": "KubeletConfiguration", "maxPods": 150}


class FakeCluster:
    """Nodes, journals by name, ConfigMaps by name, configz per node; records what was asked."""

    def __init__(self, nodes: list[NodeObservation], journals: dict[str, Journal], configz: dict[str, Any],
                 configmaps: dict[str, ConfigMapObject]) -> None:
        self.nodes, self.journals, self.answers, self.configmaps = nodes, journals, configz, configmaps
        self.asked: list[str] = []
        self.events: list[tuple[str, str, str]] = []

    def list_nodes(self, selector: str | None = None) -> tuple[list[NodeObservation], str]:
        return sorted(self.nodes, key=lambda n: n.name), "1"

    def load_journal(self, rollout: str) -> tuple[JournalDocument, str] | None:
        self.asked.append(f"journal {rollout}")
        j = self.journals.get(rollout)
        return None if j is None else (to_document(j), "7")

    def read_configmap(self, name: str, *, namespace: str | None = None) -> ConfigMapObject:
        if name not in self.configmaps:
            raise NotFoundError(f"configmap {name} not found")
        return self.configmaps[name]

    def configz(self, node: str) -> JsonObject:
        self.asked.append(f"configz {node}")
        answer = self.answers[node]
        if isinstance(answer, Exception):
            raise answer
        return {"kubeletconfig": answer}

    def impatient(self) -> FakeCluster:
        return self

    def record_node_event(self, node: str, reason: str, message: str, type: str = "Normal", *,
                          at: Any = None) -> bool:
        self.events.append((node, reason, message))
        return True


def _cluster(*, uid: str = "uid-new", answers: dict[str, Any] | None = None) -> FakeCluster:
    names = ["n1", "n2", "n3"]
    plan = make_plan([node(n) for n in names], policy(steps=[1, "100%"], maxUnavailable="100%"), rollout="r1")
    j = Journal.start(plan, now=T0)
    for batch in plan.batches:
        j = j.with_assigned(batch.index, {n: OLD for n in batch.nodes}, at=T0)
    j = j.with_status(RolloutStatus.COMPLETE, at=T0)
    labelled = [replace(node("n1"), annotations={ANN_ROLLOUT: "r1"}, backend="agent"),
                replace(node("n2"), annotations={ANN_ROLLOUT: "r1"}, backend="agent"),
                replace(node("n3"), backend="agent"),  # re-created: none of our annotations
                replace(node("n4"), backend="agent")]  # never in a rollout
    cm: ConfigMapObject = {"metadata": {"name": TARGET.name, "uid": uid}, "data": {"kubelet": yaml.safe_dump(PROVED)}}
    return FakeCluster(labelled, {"r1": j}, answers or {"n1": {"maxPods": 150}, "n2": {"maxPods": 150},
                                                         "n3": {"maxPods": 110}, "n4": {"maxPods": 110}},
                       {TARGET.name: cm})


def test_the_journals_are_found_through_the_nodes_and_each_managed_node_read_once() -> None:
    fake = _cluster()
    results = {r.node: r for r in drift_report(fake, policy=policy())}
    assert {n: r.state for n, r in results.items()} == {"n1": DriftState.IN_SYNC, "n2": DriftState.IN_SYNC,
                                                        "n3": DriftState.DRIFTED, "n4": DriftState.UNMANAGED}
    assert results["n3"].proof is not None and results["n3"].proof.rollout == "r1"  # found in r1's plan
    assert sorted(fake.asked) == ["configz n1", "configz n2", "configz n3", "journal r1"]  # n4: nothing to read
    assert record_drift_events(fake, list(results.values())) == 1
    assert fake.events == [("n3", EVENT_DRIFT, "running config differs from what rollout r1 proved "
                                                "(kube-system/kubelet-new-bbbb): maxPods: expected 150, running 110")]


def test_a_kubelet_that_does_not_answer_is_unreachable_and_the_others_are_judged() -> None:
    fake = _cluster(answers={"n1": TransientGatewayError("node n1: get configz: 503 Service Unavailable"),
                             "n2": {"maxPods": 150}, "n3": {"maxPods": 150}, "n4": {}})
    results = {r.node: r for r in drift_report(fake, policy=policy(), readers=4)}
    assert results["n1"].state is DriftState.UNREACHABLE and "503" in results["n1"].reason
    assert results["n2"].state is results["n3"].state is DriftState.IN_SYNC
    assert json.loads(json.dumps(results["n1"].as_json()))["reason"].startswith("configz could not be read")


def test_a_configmap_replaced_under_the_proved_name_proves_nothing() -> None:
    results = drift_report(_cluster(uid="uid-other"), policy=policy())
    unreachable = [r for r in results if r.state is DriftState.UNREACHABLE]
    assert [r.node for r in unreachable] == ["n1", "n2", "n3"] and "was replaced" in unreachable[0].reason


def test_a_fix_request_carries_its_nodes_in_the_policy_it_travels_with() -> None:
    request = rollout_request(name="drift-fix-1", configmap="kube-system/kubelet-config-fix-abc", policy="fast",
                              node_names=["n3", "n1"])
    assert request.policy.nodes.names == ("n1", "n3")
    assert load_policy_ref(request.policy_source).nodes.names == ("n1", "n3")  # a deployment run keeps them
    assert rollout_request(name="plain", configmap="kube-system/x", policy="fast").policy_source == "fast"
