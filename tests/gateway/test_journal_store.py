"""The journal store on kubesim, through the real client: a 20,000-node journal with 63-character
node names kept in ConfigMaps the API server accepts at every stage (the largest one measured as
the server stores it), parts written only when they changed, a save cut short between its parts
and its head leaving the previous journal whole, a journal of the previous format taken over, and
another object under a part's name never overwritten."""

from __future__ import annotations

import json
from dataclasses import replace
from datetime import datetime, timedelta, timezone
from typing import Any

import pytest

from rollout.errors import ConflictError, GatewayError
from rollout.gateway import KubeGateway, default_retrying
from rollout.journal import BatchStatus, Journal, RolloutStatus, from_document, to_document
from rollout.journal.fields import data_bytes
from rollout.model import ConfigRef, NodeObservation, NodePhase
from rollout.names import JOURNAL_PREFIX, LABEL_JOURNAL_PART
from rollout.planner import plan_batches
from rollout.policy import RolloutPolicy

T0 = datetime(2026, 11, 23, 10, 0, tzinfo=timezone.utc)
S = timedelta(seconds=1)
OLD = ConfigRef("kube-system", "kubelet-old-aaaa", "kubelet")
TARGET = ConfigRef("kube-system", "kubelet-new-bbbb", "kubelet", uid="uid-new", resource_version="200")


@pytest.fixture(scope="module")
def cluster(kubesim_cluster_module: Any) -> Any:
    return kubesim_cluster_module(nodes=1)


def gateway(cluster: Any) -> KubeGateway:
    """A gateway as a new process opens one (nothing remembered of earlier saves)."""
    return KubeGateway.from_kubeconfig(cluster.kubeconfig, retrying=default_retrying(attempts=3, sleep=lambda _s: None))


def journal(n: int, rollout: str) -> Journal:
    pool = [NodeObservation(name=f"ip-10-{i // 250}-{i % 250}-7.eu-west-1.compute.internal".ljust(63, "x"),
                            uid=f"u{i}", has_config_status=True, spec_source=OLD, ready="True",
                            labels={"topology.kubernetes.io/zone": f"eu-west-1{'abc'[i % 3]}"}) for i in range(n)]
    assert {len(o.name) for o in pool} == {63}
    policy = RolloutPolicy.model_validate({"name": "big", "steps": [1, "1%", "10%", "50%", "100%"],
                                           "maxUnavailable": "100%"})
    return Journal.start(plan_batches(pool, policy, rollout=rollout, target=TARGET), now=T0)


def journal_objects(gw: KubeGateway, rollout: str) -> dict[str, dict[str, Any]]:
    """Every ConfigMap of the rollout's journal, as the server stores it."""
    body = json.loads(gw.core.list_namespaced_config_map(
        "kube-system", label_selector=f"kubelet-rollout.io/rollout={rollout}", _preload_content=False).data)
    return {item["metadata"]["name"]: item for item in body["items"]
            if item["metadata"]["name"].startswith(JOURNAL_PREFIX)}


def versions(gw: KubeGateway, rollout: str) -> dict[str, str]:
    return {name: o["metadata"]["resourceVersion"] for name, o in journal_objects(gw, rollout).items()}


class Saver:
    """Saves as the engine does: the head's resourceVersion carried along, the layout kept."""

    def __init__(self, gw: KubeGateway, j: Journal, rv: str | None = None) -> None:
        self.gw, self.journal, self.rv = gw, j, rv

    def save(self, j: Journal) -> Journal:
        document = to_document(j)
        self.rv = self.gw.save_journal(j.rollout, document, resource_version=self.rv)
        self.journal = replace(j, layout=document.layout)
        return self.journal


def test_a_20000_node_journal_fits_the_api_server_through_assignment_revert_all_and_10000_decisions(cluster):
    gw = gateway(cluster)
    j = journal(20_000, "huge")
    saver = Saver(gw, j)
    largest: dict[str, int] = {}

    def measure(stage: str) -> None:
        objects = journal_objects(gw, "huge")
        largest[stage] = max(data_bytes(o.get("data") or {}) for o in objects.values())
        loaded = gw.load_journal("huge")
        assert loaded is not None and from_document(loaded[0]) == saver.journal, stage

    j = saver.save(j)
    measure("planned")
    for b in j.plan.batches:
        j = saver.save(j.with_assigned(b.index, {n: OLD for n in b.nodes}, at=T0 + b.index * S))
        j = j.with_written({n: T0 + b.index * S + timedelta(milliseconds=i) for i, n in enumerate(b.nodes)})
        j = j.with_phases({n: NodePhase.ACTIVE for n in b.nodes}, now=T0 + (b.index + 1) * S)
        j = saver.save(j.with_batch_status(b.index, BatchStatus.DONE, at=T0 + (b.index + 1) * S))
    measure("assigned")
    later = T0 + timedelta(hours=1)
    j = j.with_revert_requested({n: OLD for n in j.plan.nodes}, at=later, reason="revert-all")
    j = saver.save(j.with_status(RolloutStatus.REVERTING, at=later, failed={n: "crash-looping " * 30
                                                                              for n in j.plan.nodes}))
    j = saver.save(j.with_revert_written({n: later + timedelta(milliseconds=i) for i, n in enumerate(j.plan.nodes)}))
    measure("reverted")
    for i in range(10_000):
        j = j.with_decision("RevertNodes", f"decision {i}: " + "because " * 60, at=later + i * S)
    saver.save(j.with_status(RolloutStatus.HALTED, at=later + timedelta(hours=3), reason="halted"))
    measure("decided")
    assert max(largest.values()) < 1024 * 1024, largest


def test_a_save_writes_only_the_parts_that_changed_and_then_the_head(cluster):
    gw = gateway(cluster)
    saver = Saver(gw, journal(5_000, "only-changed"))
    j = saver.save(saver.journal)
    parts = len(j.layout)
    assert parts > 1
    before = versions(gw, "only-changed")
    canary = j.plan.batches[0]
    saver.save(j.with_assigned(0, {n: OLD for n in canary.nodes}, at=T0 + S))
    after = versions(gw, "only-changed")
    assert sorted(name for name, rv in after.items() if before.get(name) != rv) == [
        f"{JOURNAL_PREFIX}only-changed", f"{JOURNAL_PREFIX}only-changed.p0b"]
    assert len(after) == parts + 2, "the head, every part's first slot, and the canary's part's second"


def test_a_save_cut_short_before_its_head_leaves_the_previous_journal_whole(cluster, monkeypatch):
    gw = gateway(cluster)
    saver = Saver(gw, journal(5_000, "cut-short"))
    committed = saver.save(saver.journal)
    everything = committed
    for b in committed.plan.batches:
        everything = everything.with_assigned(b.index, {n: OLD for n in b.nodes}, at=T0 + S)
    real_replace = gw.core.replace_namespaced_config_map

    def dies_at_the_head(name: str, namespace: str, body: Any, **kwargs: Any) -> Any:
        if name == f"{JOURNAL_PREFIX}cut-short":
            raise GatewayError("the process died here")
        return real_replace(name, namespace, body, **kwargs)

    monkeypatch.setattr(gw.core, "replace_namespaced_config_map", dies_at_the_head)
    with pytest.raises(GatewayError):
        saver.save(everything)  # every part written to its spare slot, the head never
    monkeypatch.undo()
    fresh = gateway(cluster)  # the next process
    loaded = fresh.load_journal("cut-short")
    assert loaded is not None
    back = from_document(loaded[0])
    assert back == committed and not back.assigned_nodes(), "the journal is the last one committed"
    again = Saver(fresh, back, loaded[1]).save(replace(everything, layout=back.layout))
    reloaded = fresh.load_journal("cut-short")
    assert reloaded is not None and from_document(reloaded[0]) == again
    assert len(again.assigned_nodes()) == 5_000


def test_a_journal_of_the_previous_format_is_taken_over_by_the_next_save(cluster):
    import sys
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "core"))
    from journal_v1 import to_v1_data

    gw = gateway(cluster)
    j = journal(300, "from-v1")
    gw.core.create_namespaced_config_map("kube-system", {
        "metadata": {"name": f"{JOURNAL_PREFIX}from-v1", "labels": {"kubelet-rollout.io/rollout": "from-v1",
                                                                   "app.kubernetes.io/managed-by": "kubelet-rollout"}},
        "data": to_v1_data(j)})
    loaded = gw.load_journal("from-v1")
    assert loaded is not None and from_document(loaded[0]) == j
    assigned = Saver(gw, j, loaded[1]).save(j.with_assigned(0, {n: OLD for n in j.plan.batches[0].nodes}, at=T0))
    head = journal_objects(gw, "from-v1")[f"{JOURNAL_PREFIX}from-v1"]["data"]
    assert head["format"] == "kubelet-rollout-journal/v2" and "nodes" not in head
    reloaded = gw.load_journal("from-v1")
    assert reloaded is not None and from_document(reloaded[0]) == assigned
    assert [from_document(d).rollout for d in gw.list_journals()].count("from-v1") == 1


def test_another_object_under_a_part_name_is_never_overwritten(cluster):
    gw = gateway(cluster)
    j = journal(50, "squatted")
    name = f"{JOURNAL_PREFIX}squatted.p0a"
    gw.core.create_namespaced_config_map("kube-system", {"metadata": {"name": name}, "data": {"mine": "yes"}})
    with pytest.raises(ConflictError, match="is not a part of rollout 'squatted'"):
        Saver(gw, j).save(j)
    assert gw.read_configmap(name)["data"] == {"mine": "yes"}
    assert LABEL_JOURNAL_PART not in (gw.read_configmap(name)["metadata"].get("labels") or {})


class CommitsBetweenReads(KubeGateway):
    """A reader (`rollout status` in another process) that the writer overtakes twice between its
    read of the head and its read of the parts: the slots the head named are written over."""

    writer: Saver
    commits: list[Journal]

    def read_configmap(self, name: str, *args: Any, **kwargs: Any) -> Any:
        obj = super().read_configmap(name, *args, **kwargs)
        if name.startswith(JOURNAL_PREFIX) and "." not in name and self.commits:
            for j in self.commits:  # two commits: each part's spare slot, then its first slot again
                self.writer.save(j)
            self.commits = []
        return obj


def test_a_reader_overtaken_by_the_writer_reads_the_newer_journal_whole(cluster):
    """Before: the reader failed with "changed by another writer" (seen as a flaky storm test)."""
    gw = gateway(cluster)
    j = journal(50, "overtaken")
    writer = Saver(gw, j)
    writer.save(j)
    first = writer.journal.with_batch_status(0, BatchStatus.IN_PROGRESS, at=T0 + S)
    second = first.with_batch_status(0, BatchStatus.DONE, at=T0 + 2 * S)
    reader = CommitsBetweenReads.from_kubeconfig(cluster.kubeconfig, retrying=default_retrying(attempts=3, sleep=lambda _s: None))
    reader.writer, reader.commits = writer, [first, second]
    loaded = reader.load_journal("overtaken")
    assert loaded is not None
    assert from_document(loaded[0]).batches[0].status is BatchStatus.DONE  # the newer head, with its parts
