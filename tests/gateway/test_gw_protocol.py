"""The gateway over real HTTP against the scripted fake API server (protocol corners).

Aspects: raw list + lease join; errors translated and retried (Retry-After honoured, instantly);
one merge PATCH carrying configSource + annotations; read-back refusing a gate-off API server;
zero-write prerequisite probe; idempotent publishing; journal optimistic concurrency; lock
contention, expiry and takeover; node events; configz.
"""

from __future__ import annotations

import json
import threading
import time
from datetime import datetime

import pytest
from gw_helpers import T0, doc, make_gateway, node_obj

from rollout.errors import (
    ClusterNotReadyError,
    ConflictError,
    GatewayError,
    LockHeldError,
    NotFoundError,
    TransientGatewayError,
)
from rollout.gateway import LOCK_NAME, KubeGateway, LockKeeper
from rollout.model import ConfigRef
from rollout.names import ANN_BATCH, ANN_PREVIOUS_SOURCE, ANN_ROLLOUT

REF = ConfigRef("kube-system", "kubelet-config-abc123", "kubelet")


def cm_manifest(name: str = REF.name, content: str = "kind: KubeletConfiguration\n") -> dict:
    return {"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": name, "namespace": "kube-system",
                         "labels": {"kubelet-rollout.io/rollout": "r1"}},
            "data": {"kubelet": content}, "immutable": True}


# -- nodes -------------------------------------------------------------------------------

def test_list_nodes_joins_leases_and_returns_list_rv(gw, fake, three_nodes):
    nodes, rv = gw.list_nodes()
    assert [n.name for n in nodes] == three_nodes
    assert rv == str(fake.state.rv)
    assert all(n.lease_duration_s == 40.0 and n.lease_renewed is not None for n in nodes)
    # exactly two list calls, whatever the node count
    assert [a[1] for a in fake.state.audit] == [
        "/api/v1/nodes", "/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases"]


def test_list_nodes_with_label_selector(gw, fake, three_nodes):
    fake.put("nodes", node_obj("gpu-1", labels={"pool": "gpu"}))
    nodes, _ = gw.list_nodes({"pool": "gpu"})
    assert [n.name for n in nodes] == ["gpu-1"]
    assert "labelSelector=pool%3Dgpu" in fake.state.audit[0][2]


def test_read_node_missing_is_not_found(gw):
    with pytest.raises(NotFoundError, match="get node/ghost"):
        gw.read_node("ghost")


# -- retries -----------------------------------------------------------------------------

def test_transient_errors_are_retried_honouring_retry_after(gw, fake, sleeps, three_nodes):
    fake.state.failures = [(429, "2"), (500, None), (503, None)]
    nodes, _ = gw.list_nodes()
    assert len(nodes) == 3
    assert len(sleeps.calls) == 3 and sleeps.calls[0] == 2.0
    assert all(0 <= s <= 30 for s in sleeps.calls[1:])


def test_retries_give_up_with_our_transient_error(fake):
    sleeps: list[float] = []
    gw = make_gateway(fake.url, attempts=3, sleeps=sleeps.append)  # type: ignore[arg-type]
    fake.state.failures = [(500, None)] * 5
    with pytest.raises(TransientGatewayError, match="HTTP 500"):
        gw.read_node("x")
    assert len(sleeps) == 2
    assert len(fake.state.audit) == 3


def test_permanent_errors_are_not_retried(gw, fake, sleeps):
    with pytest.raises(NotFoundError):
        gw.read_configmap("nope")
    assert sleeps.calls == [] and len(fake.state.audit) == 1


def test_connection_refused_is_transient(sleeps):
    gw = make_gateway("http://127.0.0.1:9", attempts=2, sleeps=sleeps)
    with pytest.raises(TransientGatewayError, match="no response"):
        gw.list_nodes()
    assert len(sleeps.calls) == 1


# -- stops -------------------------------------------------------------------------------

def _outage_gateway(stop: threading.Event | None = None) -> KubeGateway:
    """A gateway riding out outages as a run does (real backoff), on a port nobody answers."""
    gw = make_gateway("http://127.0.0.1:9")
    gw.tolerate_outages(300, stop=stop)
    return gw


def test_a_threads_own_stop_ends_a_call_riding_out_an_outage():
    own = threading.Event()
    threading.Timer(0.5, own.set).start()
    started = time.monotonic()
    gw = _outage_gateway()
    with gw.cut_short_by(own), pytest.raises(TransientGatewayError):
        gw.read_node("node-a")
    assert time.monotonic() - started < 5.0  # not the 300 s of the outage tolerance


def test_a_thread_told_to_end_sends_nothing_more(gw, fake, three_nodes):
    own = threading.Event()
    own.set()
    with gw.cut_short_by(own), pytest.raises(TransientGatewayError, match="not sent"):
        gw.read_node("node-a")
    assert fake.state.audit == []
    assert gw.read_node("node-a").name == "node-a"  # outside the block: as before


def test_after_the_runs_stop_a_call_is_tried_once_and_within_retries_a_last_word(fake, three_nodes):
    stop = threading.Event()
    stop.set()
    gw = make_gateway(fake.url)
    gw.tolerate_outages(300, stop=stop)
    fake.state.failures = [(503, None)] * 3
    with pytest.raises(TransientGatewayError):
        gw.read_node("node-a")  # one attempt: a stop never waits out an outage
    assert len(fake.state.audit) == 1
    assert gw.within(10).read_node("node-a").name == "node-a"  # retried through two more 503s
    assert [path for _, path, _ in fake.state.audit].count("/api/v1/nodes/node-a") == 4


# -- assignment --------------------------------------------------------------------------

ANNOTATIONS = {ANN_ROLLOUT: "r1", ANN_BATCH: "0", ANN_PREVIOUS_SOURCE: "local"}


def test_assign_is_one_merge_patch_with_spec_and_annotations(gw, fake, three_nodes):
    obs = gw.assign("node-a", REF, annotations=ANNOTATIONS)
    assert obs.spec_source == REF and obs.annotations[ANN_ROLLOUT] == "r1"
    writes = fake.writes("nodes")
    assert [w[:2] for w in writes] == [("PATCH", "/api/v1/nodes/node-a")]
    stored = fake.get("nodes", "node-a")
    assert stored["spec"]["configSource"] == {"configMap": {
        "namespace": "kube-system", "name": REF.name, "kubeletConfigKey": "kubelet"}}
    assert stored["metadata"]["annotations"][ANN_PREVIOUS_SOURCE] == "local"


def test_assign_never_sends_uid_or_resource_version(gw, fake, three_nodes):
    resolved = ConfigRef(REF.namespace, REF.name, "kubelet", uid="u1", resource_version="9")
    gw.assign("node-a", resolved, annotations=ANNOTATIONS)
    assert set(fake.get("nodes", "node-a")["spec"]["configSource"]["configMap"]) == {
        "namespace", "name", "kubeletConfigKey"}


def test_unassign_removes_config_source_and_can_drop_annotations(gw, fake, three_nodes):
    gw.assign("node-a", REF, annotations=ANNOTATIONS)
    obs = gw.assign("node-a", None, annotations={ANN_ROLLOUT: None, ANN_BATCH: None})
    assert obs.spec_source is None
    stored = fake.get("nodes", "node-a")
    assert "configSource" not in stored["spec"] and ANN_ROLLOUT not in stored["metadata"]["annotations"]
    assert stored["spec"]["podCIDR"] == "10.0.0.0/24"


def test_gate_off_api_server_dropping_config_source_is_refused(gw, fake, three_nodes):
    fake.state.gate_off = True
    with pytest.raises(ClusterNotReadyError, match="DynamicKubeletConfig feature gate is off"):
        gw.assign("node-a", REF, annotations=ANNOTATIONS)


def test_probe_refuses_nodes_without_config_status_with_zero_writes(gw, fake):
    fake.put("nodes", node_obj("dkc-1"))
    fake.put("nodes", node_obj("plain-1", config=None))
    fake.put("nodes", node_obj("plain-2", config=None))
    with pytest.raises(ClusterNotReadyError) as info:
        gw.probe_cluster()
    assert "2 node(s): plain-1, plain-2" in str(info.value)
    assert "dkc-1" not in str(info.value)
    assert all(a[0] == "GET" for a in fake.state.audit)


def test_probe_refuses_api_server_without_dkc(gw, fake, three_nodes):
    fake.state.version = "v1.27.3"
    with pytest.raises(ClusterNotReadyError, match="v1.27.3") as info:
        gw.probe_cluster()
    # its hint names what works after 1.26, not a DynamicKubeletConfig gate it no longer has
    assert "agent" in info.value.advice and "enable the DynamicKubeletConfig" not in info.value.advice


def test_probe_accepts_dkc_cluster(gw, fake, three_nodes):
    assert gw.probe_cluster().server_version == "v1.23.17"


# -- configmaps --------------------------------------------------------------------------

def test_publish_returns_resolved_ref_and_is_idempotent(gw, fake):
    ref = gw.publish_configmap(cm_manifest())
    assert ref.unresolved() == REF and ref.uid and ref.resource_version
    again = gw.publish_configmap(cm_manifest())
    assert again == ref
    assert len([w for w in fake.writes("configmaps") if w[0] == "POST"]) == 2
    assert gw.resolve(REF) == ref


def test_publish_same_name_different_content_is_conflict(gw):
    gw.publish_configmap(cm_manifest())
    with pytest.raises(ConflictError, match="holds different data"):
        gw.publish_configmap(cm_manifest(content="kind: KubeletConfiguration\nmaxPods: 5\n"))


def test_publish_survives_lost_create_response(gw, fake, sleeps):
    # the create lands but the client sees a 500 on its first attempt: retry gets AlreadyExists
    fake.put("configmaps", cm_manifest(), ns="kube-system")
    fake.state.failures = [(500, None)]
    ref = gw.publish_configmap(cm_manifest())
    assert ref.uid == fake.get("configmaps", REF.name, ns="kube-system")["metadata"]["uid"]


def test_configz_reads_node_proxy(gw, fake, three_nodes):
    assert gw.configz("node-a") == {"kubeletconfig": {"maxPods": 110}}
    assert fake.state.audit[-1][1] == "/api/v1/nodes/node-a/proxy/configz"


# -- journal -----------------------------------------------------------------------------

def test_journal_round_trip_with_labels(gw, fake):
    assert gw.load_journal("r1") is None
    rv1 = gw.save_journal("r1", doc({"plan": json.dumps({"batches": 2})}), resource_version=None)
    data, rv = gw.load_journal("r1")
    assert data == doc({"plan": '{"batches": 2}'}) and rv == rv1
    rv2 = gw.save_journal("r1", doc({"plan": "{}", "decisions": "[]"}), resource_version=rv1)
    assert rv2 != rv1 and gw.load_journal("r1") == (doc({"plan": "{}", "decisions": "[]"}), rv2)
    stored = fake.get("configmaps", "kubelet-rollout-journal-r1", ns="kube-system")
    assert stored["metadata"]["labels"]["kubelet-rollout.io/rollout"] == "r1"


def test_journal_stale_resource_version_conflicts(gw):
    rv1 = gw.save_journal("r1", doc({"a": "1"}), resource_version=None)
    gw.save_journal("r1", doc({"a": "2"}), resource_version=rv1)
    with pytest.raises(ConflictError):
        gw.save_journal("r1", doc({"a": "3"}), resource_version=rv1)
    with pytest.raises(ConflictError):
        gw.save_journal("r1", doc({"a": "4"}), resource_version=None)
    assert gw.load_journal("r1")[0] == doc({"a": "2"})


def test_journal_namespace_is_configurable(fake):
    gw = make_gateway(fake.url, namespace="rollouts")
    gw.save_journal("r9", doc({"x": "y"}), resource_version=None)
    assert fake.get("configmaps", "kubelet-rollout-journal-r9", ns="rollouts") is not None


# -- lock --------------------------------------------------------------------------------

def test_second_holder_is_refused_naming_holder_and_rollout(gw, fake, clock):
    gw.acquire_lock("ci-1", rollout="maxpods", duration_s=60)
    clock.advance(30)
    with pytest.raises(LockHeldError) as info:
        gw.acquire_lock("ci-2", rollout="other", duration_s=60)
    assert "ci-1" in str(info.value) and "maxpods" in str(info.value)
    assert info.value.rollout == "maxpods"
    lease = fake.get("leases", LOCK_NAME, ns="kube-system")
    assert lease["spec"]["holderIdentity"] == "ci-1"


def test_expired_lock_is_taken_over(gw, fake, clock):
    gw.acquire_lock("ci-1", rollout="maxpods", duration_s=60)
    clock.advance(61)
    info = gw.acquire_lock("ci-2", rollout="other", duration_s=60)
    assert (info.holder, info.rollout, info.transitions) == ("ci-2", "other", 1)


def test_renew_keeps_lock_alive_and_is_reentrant(gw, clock):
    gw.acquire_lock("ci-1", rollout="r", duration_s=60)
    for _ in range(3):
        clock.advance(40)
        gw.renew_lock("ci-1", rollout="r", duration_s=60)
    with pytest.raises(LockHeldError):
        gw.acquire_lock("ci-2", rollout="x")
    assert gw.acquire_lock("ci-1", rollout="r").holder == "ci-1"


def test_release_frees_lock_at_once(gw, clock):
    gw.acquire_lock("ci-1", rollout="r", duration_s=60)
    assert gw.release_lock("ci-2") is False
    assert gw.release_lock("ci-1") is True
    assert gw.acquire_lock("ci-2", rollout="x").holder == "ci-2"


def test_renew_after_takeover_reports_lost_lock(gw, clock):
    gw.acquire_lock("ci-1", rollout="r", duration_s=60)
    clock.advance(120)
    gw.acquire_lock("ci-2", rollout="x", duration_s=60)
    with pytest.raises(LockHeldError, match="ci-2"):
        gw.renew_lock("ci-1", rollout="r")


def test_racing_takeover_is_settled_by_resource_version(gw, fake, clock):
    gw.acquire_lock("ci-1", rollout="r", duration_s=60)
    clock.advance(61)
    # ci-2 read the expired lease; before its write lands, ci-3 takes it (bumps the RV)
    real_read = gw.read_lock
    seen = []

    def read_then_race():
        info = real_read()
        if not seen:
            seen.append(info)
            other = make_gateway(fake.url, clock=clock)
            other.acquire_lock("ci-3", rollout="z", duration_s=60)
        return info

    gw.read_lock = read_then_race  # type: ignore[method-assign]
    with pytest.raises(LockHeldError, match="ci-3"):
        gw.acquire_lock("ci-2", rollout="x", duration_s=60)


def test_lock_keeper_renews_and_releases(gw, fake, clock):
    with LockKeeper(gw, "ci-1", rollout="r", renew_every_s=3600) as keeper:
        first = fake.get("leases", LOCK_NAME, ns="kube-system")["spec"]["renewTime"]
        clock.advance(30)
        keeper.renew_now()
        keeper.check()
        assert fake.get("leases", LOCK_NAME, ns="kube-system")["spec"]["renewTime"] != first
    assert fake.get("leases", LOCK_NAME, ns="kube-system")["spec"].get("holderIdentity") in (None, "")


def test_lock_keeper_detects_loss(gw, fake, clock):
    with LockKeeper(gw, "ci-1", rollout="r", renew_every_s=3600) as keeper:
        clock.advance(keeper.duration_s + 1)
        make_gateway(fake.url, clock=clock).acquire_lock("ci-2", rollout="x")
        keeper.renew_now()
        with pytest.raises(LockHeldError, match="ci-2"):
            keeper.check()
    # the keeper must not release a lock it no longer holds
    assert fake.get("leases", LOCK_NAME, ns="kube-system")["spec"]["holderIdentity"] == "ci-2"


def test_lock_keeper_thread_renews_in_background(gw, fake, clock):
    with LockKeeper(gw, "ci-1", rollout="r", renew_every_s=0.01) as keeper:
        for _ in range(500):
            if keeper.renewals >= 2:
                break
            keeper.lost.wait(0.01)
        assert keeper.renewals >= 2


# -- events ------------------------------------------------------------------------------

def test_node_event_recorded_with_component_and_prefixed_reason(gw, fake, three_nodes):
    assert gw.record_node_event("node-a", "KubeletConfigAssigned", "assigned kc-abc (batch 0)")
    assert gw.record_node_event("node-b", "halted", "bad config", type="Warning")
    events = [o for (r, _, _), o in fake.state.objects.items() if r == "events"]
    reasons = sorted(e["reason"] for e in events)
    assert reasons == ["KubeletConfigAssigned", "KubeletRolloutHalted"]
    e = next(e for e in events if e["involvedObject"]["name"] == "node-b")
    assert e["source"]["component"] == "kubelet-rollout" and e["type"] == "Warning"
    assert e["involvedObject"] == {"kind": "Node", "name": "node-b", "uid": "node-b", "apiVersion": "v1"}


def test_a_node_event_keeps_the_time_of_what_it_reports(gw, fake, three_nodes):
    assert gw.record_node_event("node-a", "KubeletConfigAssigned", "m", at=T0)
    event = next(o for (r, _, _), o in fake.state.objects.items() if r == "events")
    stamps = {datetime.fromisoformat(event[k].replace("Z", "+00:00")) for k in ("firstTimestamp", "lastTimestamp")}
    assert stamps == {T0}


def test_a_node_event_is_not_sent_once_its_thread_is_told_to_end(gw, fake, three_nodes):
    ending = threading.Event()
    ending.set()
    with gw.cut_short_by(ending):
        assert gw.record_node_event("node-a", "KubeletConfigAssigned", "m") is False
    assert fake.state.audit == []


def test_node_event_failure_is_best_effort(fake, sleeps):
    gw = make_gateway(fake.url, attempts=1, sleeps=sleeps)
    fake.state.failures = [(403, None)]
    assert gw.record_node_event("node-a", "KubeletConfigAssigned", "m") is False


def test_gateway_errors_are_ours(gw, fake):
    fake.state.failures = [(422, None)]
    with pytest.raises(GatewayError) as info:
        gw.assign("node-a", REF, annotations={})
    assert not isinstance(info.value, TransientGatewayError)
    assert "patch node/node-a" in str(info.value)


def test_publish_refuses_existing_mutable_configmap_of_same_name(gw, fake):
    mutable = cm_manifest()
    mutable.pop("immutable")
    fake.put("configmaps", mutable, ns="kube-system")
    with pytest.raises(ConflictError, match="not immutable"):
        gw.publish_configmap(cm_manifest())


def test_from_kubeconfig_uses_context_and_owns_retries(fake, tmp_path):
    from rollout.gateway import KubeGateway

    kubeconfig = tmp_path / "config"
    kubeconfig.write_text(json.dumps({
        "apiVersion": "v1", "kind": "Config", "current-context": "wrong",
        "clusters": [{"name": "sim", "cluster": {"server": fake.url}},
                     {"name": "nowhere", "cluster": {"server": "http://127.0.0.1:9"}}],
        "users": [{"name": "admin", "user": {"token": "t0ken"}}],
        "contexts": [{"name": "sim", "context": {"cluster": "sim", "user": "admin"}},
                     {"name": "wrong", "context": {"cluster": "nowhere", "user": "admin"}}],
    }))
    fake.put("nodes", node_obj("n1"))
    with KubeGateway.from_kubeconfig(kubeconfig, context="sim") as gw:
        assert gw.api_client.configuration.retries is False
        assert [n.name for n in gw.list_nodes()[0]] == ["n1"]


# -- writes whose answer was lost (applied, then 500): the retry must not turn into an error ----

def test_journal_update_whose_answer_was_lost_is_recognised(gw, fake):
    rv1 = gw.save_journal("r1", doc({"a": "1"}), resource_version=None)
    fake.state.lost_responses = 1
    rv2 = gw.save_journal("r1", doc({"a": "2"}), resource_version=rv1)
    assert gw.load_journal("r1") == (doc({"a": "2"}), rv2)
    assert [w[0] for w in fake.writes("configmaps")] == ["POST", "PUT", "PUT"]


def test_journal_create_whose_answer_was_lost_is_recognised(gw, fake):
    fake.state.lost_responses = 1
    rv = gw.save_journal("r1", doc({"a": "1"}), resource_version=None)
    assert gw.load_journal("r1") == (doc({"a": "1"}), rv)


def test_lost_answer_does_not_hide_a_real_conflict(gw, fake):
    rv1 = gw.save_journal("r1", doc({"a": "1"}), resource_version=None)
    gw.save_journal("r1", doc({"a": "other writer"}), resource_version=rv1)
    with pytest.raises(ConflictError):
        gw.save_journal("r1", doc({"a": "2"}), resource_version=rv1)


def test_lock_writes_whose_answer_was_lost_still_hold_the_lock(gw, fake, clock):
    fake.state.lost_responses = 1
    assert gw.acquire_lock("ci-1", rollout="r", duration_s=60).holder == "ci-1"
    clock.advance(10)
    fake.state.lost_responses = 1
    info = gw.renew_lock("ci-1", rollout="r", duration_s=60)
    assert info.holder == "ci-1" and info.renewed == clock.now


def test_assignment_whose_answer_was_lost_is_read_back_not_written_twice(gw, fake, three_nodes):
    """The PATCH landed but its answer was lost: the retry reads the node first and writes nothing."""
    fake.state.lost_responses = 1
    obs = gw.assign("node-a", REF, annotations=ANNOTATIONS)
    assert obs.spec_source == REF
    assert len(fake.writes("nodes")) == 1


# -- construction and rate limiting --------------------------------------------------------

def test_in_cluster_config_is_used_in_a_pod_without_kubeconfig(monkeypatch, tmp_path):
    import kubernetes.config.incluster_config as incluster

    from rollout.gateway import KubeGateway

    (tmp_path / "token").write_text("sa-token")
    (tmp_path / "ca.crt").write_text("not checked until a request is made")
    monkeypatch.setattr(incluster, "SERVICE_TOKEN_FILENAME", str(tmp_path / "token"))
    monkeypatch.setattr(incluster, "SERVICE_CERT_FILENAME", str(tmp_path / "ca.crt"))
    monkeypatch.setenv("KUBERNETES_SERVICE_HOST", "10.96.0.1")
    monkeypatch.setenv("KUBERNETES_SERVICE_PORT", "443")
    monkeypatch.setenv("KUBECONFIG", str(tmp_path / "absent"))
    gw = KubeGateway.from_kubeconfig()
    cfg = gw.api_client.configuration
    assert cfg.host == "https://10.96.0.1:443"
    assert cfg.api_key["BearerToken"] == "bearer sa-token"
    assert cfg.retries is False


def test_every_attempt_takes_a_token_from_the_shared_bucket(fake, three_nodes):
    from rollout.gateway import TokenBucket

    class Mono:
        t = 0.0

        def __call__(self) -> float:
            return self.t

        def sleep(self, s: float) -> None:
            self.t += s

    mono = Mono()
    bucket = TokenBucket(qps=10, burst=2, clock=mono, sleep=mono.sleep)
    gw = make_gateway(fake.url, rate_limiter=bucket)
    fake.state.failures = [(500, None)]
    for name in three_nodes:
        gw.assign(name, REF, annotations=ANNOTATIONS)
    # 4 PATCH attempts (one retried, after a read of the node: 5 requests) through a 2-token burst
    # at 10 qps: 0.3 s of throttling
    assert len(fake.writes("nodes")) == 4
    assert mono.t == pytest.approx(0.3)


def test_bad_kubeconfig_or_context_is_our_error(fake, tmp_path):
    """Bad input (exit 2), not a cluster problem: no cluster was asked anything."""
    from rollout.errors import FlagError
    from rollout.gateway import KubeGateway

    with pytest.raises(FlagError, match="names no kubeconfig file .*absent"):
        KubeGateway.from_kubeconfig(tmp_path / "absent")
    kubeconfig = tmp_path / "config"
    kubeconfig.write_text(json.dumps({
        "apiVersion": "v1", "kind": "Config", "current-context": "sim",
        "clusters": [{"name": "sim", "cluster": {"server": fake.url}}],
        "users": [{"name": "admin", "user": {"token": "t"}}],
        "contexts": [{"name": "sim", "context": {"cluster": "sim", "user": "admin"}}]}))
    with pytest.raises(FlagError, match="context nope"):
        KubeGateway.from_kubeconfig(kubeconfig, context="nope")


def test_paged_list_restarts_when_its_continue_token_expires(gw, fake, three_nodes):
    fake.put("nodes", node_obj("node-d"))
    fake.state.expire_continue = 1
    nodes, _ = gw.list_nodes(page_size=2)
    assert [n.name for n in nodes] == ["node-a", "node-b", "node-c", "node-d"]
    lists = [a[2] for a in fake.state.audit if a[1] == "/api/v1/nodes"]
    # page 1, expired page 2, then page 1 and 2 again
    assert len(lists) == 4 and sum("continue=" in q for q in lists) == 2


def test_a_node_count_pages_through_a_server_that_gives_no_estimate(gw, fake, three_nodes):
    fake.put("nodes", node_obj("node-d"))
    assert gw.node_count() == 4
    lists = [a[2] for a in fake.state.audit if a[1] == "/api/v1/nodes"]
    assert len(lists) == 2 and "limit=1" in lists[0] and "limit=500" in lists[1]  # one node, then the rest


def test_unexpected_response_shape_is_our_error(gw, fake):
    fake.put("nodes", {"metadata": {"name": "weird", "labels": {"a": 1}}})  # label value not a str
    with pytest.raises(GatewayError, match="list nodes: unexpected response"):
        gw.list_nodes()
