"""The gateway against kubesim (simulated 1.23 cluster) through the real client over HTTPS.

Aspects: publish + assign + observe (the informer's list + watch) + revert for a batch; a bad config's validate
failure is classified from a single watch event; a gate-off API server is refused before any
node write (audit log) and an assignment it drops is caught by the read-back; 30 % injected
500/429 still converges; lock contention/expiry and the journal on the real Lease/ConfigMap
storage; node events. Retries never sleep (injected sleep); waits are bounded watches.
"""

from __future__ import annotations

import json
import logging
import shutil
import socket
import subprocess
import time
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime, timezone
from typing import Any, Callable, Iterator

import pytest
from gw_helpers import FakeClock, doc

from rollout import publish
from rollout.errors import ClusterNotReadyError, ConflictError, LockHeldError
from rollout.gateway import (
    EVENT_ASSIGNED,
    KubeGateway,
    LockKeeper,
    TokenBucket,
    default_retrying,
)
from rollout.model import ConfigRef, NodeObservation
from rollout.names import ANN_ASSIGNED_AT, ANN_BATCH, ANN_PREVIOUS_SOURCE, ANN_ROLLOUT, LOCAL_SOURCE

HEAD = {"kind": "KubeletConfiguration", "apiVersion": "kubelet.config.k8s.io/v1beta1"}
VALIDATE = "failed to validate config, see Kubelet log for details"
ADMIN_WRITES = {"create", "update", "patch", "delete"}


def gateway(cluster: Any, *, attempts: int = 8, **options: Any) -> KubeGateway:
    return KubeGateway.from_kubeconfig(
        cluster.kubeconfig, retrying=default_retrying(attempts=attempts, sleep=lambda _s: None),
        **options)


def config_text(**fields: Any) -> str:
    return json.dumps({**HEAD, **fields}, indent=2)


def annotations(batch: int, previous: ConfigRef | None) -> dict[str, str]:
    return {ANN_ROLLOUT: "gw-test", ANN_BATCH: str(batch),
            ANN_PREVIOUS_SOURCE: json.dumps(previous.to_api()) if previous else LOCAL_SOURCE,
            ANN_ASSIGNED_AT: datetime.now(timezone.utc).isoformat()}


def follow(gw: KubeGateway, names: list[str], done: Callable[[NodeObservation], bool], *,
           timeout: float = 60.0) -> Iterator[dict[str, NodeObservation]]:
    """Every view of the named nodes an informer gives (one per change), until ``done`` holds
    for all of them (bounded)."""
    deadline = time.monotonic() + timeout
    with gw.informer() as informer:
        assert informer.wait_synced(timeout)
        seen = informer.version
        while True:
            latest = {n: o for n, o in informer.snapshot().items() if n in names}
            yield latest
            if len(latest) == len(names) and all(done(o) for o in latest.values()):
                return
            if time.monotonic() > deadline:
                raise AssertionError("not converged: " + "; ".join(
                    f"{n}: assigned={o.assigned} active={o.active} error={o.error!r} ready={o.ready}"
                    for n, o in latest.items()))
            seen = informer.wait_for_change(seen, deadline - time.monotonic())


def converge(gw: KubeGateway, names: list[str], done: Callable[[NodeObservation], bool], *,
             timeout: float = 60.0) -> dict[str, NodeObservation]:
    """The named nodes once ``done`` holds for all of them."""
    *_, last = follow(gw, names, done, timeout=timeout)
    return last


def wait_until(condition: Callable[[], bool], *, what: str, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.05)


def on(ref: ConfigRef) -> Callable[[NodeObservation], bool]:
    return lambda o: (o.assigned == ref and o.active == ref and not o.error and o.is_ready)


def local(o: NodeObservation) -> bool:
    return (o.spec_source is None and o.assigned is None and o.active is None and not o.error
            and o.is_ready)


def admin_node_writes(cluster: Any) -> list[dict[str, Any]]:
    return [e for e in cluster.audit_log.events()
            if e["user"]["username"] == "admin" and e["verb"] in ADMIN_WRITES
            and (e.get("objectRef") or {}).get("resource") == "nodes"]


def publish_config(gw: KubeGateway, text: str, base: str = "gw-kubelet") -> ConfigRef:
    manifest = publish.build_configmap("kube-system", base_name=base, config_text=text,
                                       rollout_name="gw-test")
    return gw.publish_configmap(manifest)


def test_publish_assign_observe_revert_a_batch(kubesim_cluster):
    cluster = kubesim_cluster(nodes=3)
    gw = gateway(cluster)
    batch = ["node-1", "node-2"]
    before = {n: gw.configz(n)["kubeletconfig"]["maxPods"] for n in batch}
    ref = publish_config(gw, config_text(maxPods=77))
    assert publish_config(gw, config_text(maxPods=77)) == ref  # second publish is a no-op
    assert ref.uid and ref.resource_version and ref.kubelet_config_key == "kubelet"

    for name in batch:
        assigned = gw.assign(name, ref, annotations=annotations(0, None))
        assert assigned.spec_source == ref.unresolved()
        assert assigned.annotations[ANN_PREVIOUS_SOURCE] == LOCAL_SOURCE
    observed = converge(gw, batch, on(ref))
    assert all(o.annotations[ANN_ROLLOUT] == "gw-test" for o in observed.values())
    assert {n: gw.configz(n)["kubeletconfig"]["maxPods"] for n in batch} == {n: 77 for n in batch}
    assert gw.read_node("node-3").spec_source is None

    for name in batch:
        gw.assign(name, None, annotations={ANN_ROLLOUT: None, ANN_BATCH: None,
                                           ANN_PREVIOUS_SOURCE: None, ANN_ASSIGNED_AT: None})
    reverted = converge(gw, batch, local)
    assert all(ANN_ROLLOUT not in o.annotations for o in reverted.values())
    assert {n: gw.configz(n)["kubeletconfig"]["maxPods"] for n in batch} == before

    writes = admin_node_writes(cluster)
    assert [(w["verb"], w["objectRef"]["name"]) for w in writes] == [
        ("patch", "node-1"), ("patch", "node-2"), ("patch", "node-1"), ("patch", "node-2")]
    # observed through list + watch only: no per-node polling of Node objects
    polled = [e for e in cluster.audit_log.events(verb="get")
              if e["user"]["username"] == "admin"
              and (e.get("objectRef") or {}).get("resource") == "nodes"
              and not (e.get("objectRef") or {}).get("subresource")]
    assert [e["objectRef"]["name"] for e in polled] == ["node-3"]  # the one read_node above


def test_bad_config_is_classified_from_one_watch_event(kubesim_cluster):
    cluster = kubesim_cluster(nodes=2)
    gw = gateway(cluster)
    ref = publish_config(gw, config_text(eventRecordQPS=-1), base="gw-bad")
    gw.assign("node-1", ref, annotations=annotations(0, None))
    seen = [view["node-1"] for view in follow(gw, ["node-1"], lambda o: o.assigned is not None)]
    verdict = seen[-1]
    # the first event in which the kubelet reports the assignment already carries the verdict
    assert verdict.assigned == ref
    assert verdict.error == VALIDATE
    assert verdict.active is None  # first-ever assignment: it fell back to its local config
    assert all(o.assigned is None for o in seen[:-1])
    assert gw.configz("node-1")["kubeletconfig"]["eventRecordQPS"] == 5


def test_gate_off_cluster_is_refused_with_zero_node_writes(kubesim_cluster):
    cluster = kubesim_cluster(nodes=3, gate_enabled=False)
    gw = gateway(cluster)
    # let every kubelet push its (stripped) status.config at least once
    wait_until(lambda: {"node-1", "node-2", "node-3"} <= {
        e["objectRef"]["name"] for e in cluster.audit_log.events(verb="patch")
        if (e.get("objectRef") or {}).get("subresource") == "status"
        and e["responseStatus"]["code"] == 200}, what="a status push from every kubelet")
    with pytest.raises(ClusterNotReadyError) as info:
        gw.probe_cluster()
    message = str(info.value)
    assert "node-1, node-2, node-3" in message and "status.config" in message
    assert admin_node_writes(cluster) == []


def test_gate_off_drop_of_a_new_config_source_is_caught_by_read_back(kubesim_cluster):
    cluster = kubesim_cluster(nodes=1, gate_enabled=False)
    gw = gateway(cluster)
    ref = publish_config(gw, config_text(maxPods=50))
    with pytest.raises(ClusterNotReadyError, match="feature gate is off"):
        gw.assign("node-1", ref, annotations=annotations(0, None))
    assert gw.read_node("node-1").spec_source is None


def test_probe_accepts_a_dkc_cluster_once_kubelets_report(kubesim_cluster):
    cluster = kubesim_cluster(nodes=2)
    gw = gateway(cluster)
    nodes, _ = gw.list_nodes()
    converge(gw, [n.name for n in nodes], lambda o: o.has_config_status, timeout=20)
    assert gw.probe_cluster().server_version.startswith("v1.23")
    assert admin_node_writes(cluster) == []


def test_thirty_percent_api_faults_still_converge(kubesim_cluster):
    cluster = kubesim_cluster(nodes=3)
    gw = gateway(cluster, attempts=14)
    cluster.faults.apply({"api": {"error_rate": 0.3, "error_codes": [500, 429], "retry_after": 1},
                          "seed": 1234})
    try:
        with LockKeeper(gw, "ci-faults", rollout="gw-test") as lock:
            ref = publish_config(gw, config_text(maxPods=66))
            jrv = gw.save_journal("gw-test", doc({"plan": "[]"}), resource_version=None)
            batch = ["node-1", "node-2", "node-3"]
            for name in batch:
                gw.assign(name, ref, annotations=annotations(0, None))
                gw.record_node_event(name, EVENT_ASSIGNED, f"assigned {ref.name}")
            converge(gw, batch, on(ref))
            lock.renew_now()
            lock.check()
            jrv = gw.save_journal("gw-test", doc({"plan": "[]", "done": "1"}), resource_version=jrv)
    finally:
        cluster.faults.apply({"reset": True})
    assert gw.load_journal("gw-test") == (doc({"plan": "[]", "done": "1"}), jrv)
    assert gw.read_lock().holder == ""  # released at the end
    injected = [e["responseStatus"]["code"] for e in cluster.audit_log.events()
                if e["user"]["username"] == "admin" and e["responseStatus"]["code"] in (429, 500)]
    assert 429 in injected and 500 in injected and len(injected) >= 5


def test_lock_contention_expiry_and_takeover(kubesim_cluster):
    cluster = kubesim_cluster(nodes=1)
    clock = FakeClock(datetime.now(timezone.utc))
    first, second = gateway(cluster, now=clock), gateway(cluster, now=clock)
    # no outage to ride out: the run may act 30 s past its last renewal, the lease lasts 90 s
    with LockKeeper(first, "ci-1", rollout="maxpods", outage_tolerance_s=0, renew_every_s=3600) as keeper:
        assert keeper.duration_s == 90
        with pytest.raises(LockHeldError) as info:
            second.acquire_lock("ci-2", rollout="other", duration_s=90)
        assert "ci-1" in str(info.value) and "maxpods" in str(info.value)
        clock.advance(60)
        keeper.renew_now()  # renewed: still not expired 60 s later
        clock.advance(60)
        with pytest.raises(LockHeldError):
            second.acquire_lock("ci-2", rollout="other", duration_s=90)
        clock.advance(31)  # ci-1 stopped renewing: expired
        taken = second.acquire_lock("ci-2", rollout="other", duration_s=90)
        assert (taken.holder, taken.rollout, taken.transitions) == ("ci-2", "other", 1)
        keeper.renew_now()
        with pytest.raises(LockHeldError, match="ci-2"):
            keeper.check()
    assert second.read_lock().holder == "ci-2"  # the loser did not release the winner's lock
    assert second.release_lock("ci-2")


def test_journal_round_trip_and_conflict(kubesim_cluster):
    cluster = kubesim_cluster(nodes=1)
    gw, other = gateway(cluster), gateway(cluster)
    assert gw.load_journal("gw-j") is None
    rv1 = gw.save_journal("gw-j", doc({"plan": "{}", "decisions": "[]"}), resource_version=None)
    data, rv = other.load_journal("gw-j")
    assert (data, rv) == (doc({"plan": "{}", "decisions": "[]"}), rv1)
    rv2 = other.save_journal("gw-j", doc({"plan": "{}", "decisions": '["x"]'}), resource_version=rv)
    with pytest.raises(ConflictError):
        gw.save_journal("gw-j", doc({"plan": "{}", "decisions": '["y"]'}), resource_version=rv1)
    assert gw.load_journal("gw-j") == (doc({"plan": "{}", "decisions": '["x"]'}), rv2)
    cm = gw.read_configmap("kubelet-rollout-journal-gw-j")
    assert cm["metadata"]["labels"]["kubelet-rollout.io/rollout"] == "gw-j"


def test_node_event_is_visible_on_the_node(kubesim_cluster):
    cluster = kubesim_cluster(nodes=1)
    gw = gateway(cluster)
    assert gw.record_node_event("node-1", EVENT_ASSIGNED, "assigned kube-system/x (batch 0)")
    from kubernetes import client, config

    core = client.CoreV1Api(config.new_client_from_config(str(cluster.kubeconfig)))
    events = json.loads(core.list_namespaced_event(
        "default", field_selector="involvedObject.name=node-1,reason=KubeletConfigAssigned",
        _preload_content=False).data)["items"]
    assert [(e["source"]["component"], e["message"]) for e in events] == [
        ("kubelet-rollout", "assigned kube-system/x (batch 0)")]


def test_paged_list_returns_the_same_nodes_and_snapshot_rv(kubesim_cluster):
    cluster = kubesim_cluster(nodes=4)
    gw = gateway(cluster)
    whole, _ = gw.list_nodes()
    paged, rv = gw.list_nodes(page_size=2)
    assert [n.name for n in paged] == [n.name for n in whole] and len(whole) == 5
    assert rv
    pages = [e for e in cluster.audit_log.events(verb="list")
             if e["user"]["username"] == "admin" and e["objectRef"]["resource"] == "nodes"]
    assert len(pages) == 1 + 3  # one whole list, then 3 pages of <= 2


def test_a_node_count_is_one_list_of_one_node_and_the_servers_estimate_of_the_rest(kubesim_cluster):
    cluster = kubesim_cluster(nodes=4)
    assert gateway(cluster).node_count() == 5  # the control-plane node too: every Node object
    (listed,) = [e for e in cluster.audit_log.events(verb="list")
                 if e["user"]["username"] == "admin" and e["objectRef"]["resource"] == "nodes"]
    assert "limit=1" in listed["requestURI"]


@pytest.mark.parametrize("gate", [True, False], ids=["gate-on", "gate-off"])
def test_dry_run_tells_whether_a_new_config_source_would_stick(kubesim_cluster, gate):
    cluster = kubesim_cluster(nodes=1, gate_enabled=gate)
    gw = gateway(cluster)
    ref = publish_config(gw, config_text(maxPods=50))
    assert gw.would_keep_assignment("node-1", ref) is gate
    assert gw.read_node("node-1").spec_source is None  # nothing persisted
    (write,) = admin_node_writes(cluster)
    assert "dryRun=All" in write["requestURI"]


def test_a_big_batch_never_bursts_the_api_server(kubesim_cluster):
    """120 assignments with qps=40, burst=10: the server sees at most burst + qps per second."""
    cluster = kubesim_cluster(nodes=120, ready_timeout=120)
    gw = gateway(cluster, rate_limiter=TokenBucket(qps=40, burst=10))
    ref = publish_config(gw, config_text(maxPods=60))
    workers = [f"node-{i}" for i in range(1, 121)]
    started = time.monotonic()
    for name in workers:
        gw.assign(name, ref, annotations=annotations(0, None))
    elapsed = time.monotonic() - started
    stamps = sorted(
        datetime.fromisoformat(e["requestReceivedTimestamp"].replace("Z", "+00:00")).timestamp()
        for e in admin_node_writes(cluster))
    assert len(stamps) == 120
    busiest = max(sum(1 for t in stamps[i:] if t < start + 1.0) for i, start in enumerate(stamps))
    assert busiest <= 10 + 40 + 2  # burst + one second of qps (+2 for timestamp granularity)
    assert elapsed >= (120 - 10) / 40 * 0.95  # the limiter, not the server, set the pace


@pytest.mark.skipif(shutil.which("kubectl") is None, reason="kubectl not installed")
def test_kubectl_shows_our_node_event_and_lock_holder(kubesim_cluster):
    cluster = kubesim_cluster(nodes=1)
    gw = gateway(cluster)
    gw.record_node_event("node-1", EVENT_ASSIGNED, "rollout r1: batch 1: assigned kube-system/kc-abc")
    gw.acquire_lock("ci-1", rollout="r1")

    def kubectl(*args: str) -> str:
        done = subprocess.run(["kubectl", "--kubeconfig", str(cluster.kubeconfig), *args],
                              capture_output=True, text=True, timeout=60)
        assert done.returncode == 0, done.stderr
        return done.stdout

    events = kubectl("describe", "node", "node-1").split("Events:")[-1]
    assert any(line.split()[:2] == ["Normal", "KubeletConfigAssigned"] and "kubelet-rollout" in line
               and line.rstrip().endswith("assigned kube-system/kc-abc") for line in events.splitlines())
    table = kubectl("get", "lease", "-n", "kube-system", "kubelet-rollout-lock").splitlines()
    assert table[1].split()[:2] == ["kubelet-rollout-lock", "ci-1"]


# -- connections: the pool, keep-alive, frozen connections ----------------------------------------

def test_the_pool_keeps_a_connection_for_each_request_the_engine_sends_at_once(kubesim_cluster, caplog):
    """The engine's fan-out plus the watches, the lock keeper, node Events and the run loop, all at
    once: every connection goes back to the pool, none is thrown away (and rebuilt with a TLS
    handshake the next time)."""
    from rollout.loop.engine import DEFAULT_CONCURRENCY

    cluster = kubesim_cluster(nodes=1)
    gw = gateway(cluster, rate_limiter=TokenBucket(qps=0))
    at_once = DEFAULT_CONCURRENCY + 5
    cluster.faults.latency(0.5)  # so they are all in flight together
    try:
        with caplog.at_level(logging.WARNING, logger="urllib3.connectionpool"), \
                ThreadPoolExecutor(max_workers=at_once) as pool:
            assert all(pool.map(lambda _: gw.read_node("node-1"), range(at_once)))
    finally:
        cluster.faults.reset()
    assert [r.getMessage() for r in caplog.records if "pool is full" in r.getMessage()] == []
    gw.close()


def test_connections_probe_an_idle_peer_with_tcp_keepalive(kubesim_cluster):
    """Within a minute of quiet, not the kernel's two hours: a peer that vanished without a word
    (a dead load balancer) is noticed on a quiet watch and on idle pooled connections."""
    cluster = kubesim_cluster(nodes=1)
    gw = gateway(cluster)
    gw.read_node("node-1")
    pool = gw.api_client.rest_client.pool_manager.connection_from_url(gw.api_client.configuration.host)
    conn = pool._get_conn()
    try:
        assert conn.sock.getsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE) == 1
        assert 0 < conn.sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPIDLE) <= 60
    finally:
        pool._put_conn(conn)
    gw.close()


def test_once_a_request_met_a_frozen_connection_no_later_one_does(kubesim_cluster):
    """Every pooled connection went silent at once (a blackhole that ended). The first request
    waits out its read timeout and is retried on a new connection; the other idle ones are dropped
    then, so requests sent afterwards, all at once, each get a working connection instead of
    drawing the frozen ones one by one."""
    cluster = kubesim_cluster(nodes=1)
    retries: list[float] = []
    gw = KubeGateway.from_kubeconfig(cluster.kubeconfig, retrying=default_retrying(sleep=retries.append),
                                     rate_limiter=TokenBucket(qps=0), request_timeout_s=1.0)

    def in_parallel(count: int) -> None:
        cluster.faults.latency(0.3)  # so they are all in flight together, one connection each
        try:
            with ThreadPoolExecutor(max_workers=count) as pool:
                assert all(pool.map(lambda _: gw.read_configmap("kube-root-ca.crt"), range(count)))
        finally:
            cluster.faults.apply({"api": {"latency": 0.0}})

    in_parallel(6)  # six connections in the pool
    cluster.faults.blackhole()
    cluster.faults.blackhole(False)  # every connection of that moment is dead, new ones are fine
    gw.read_configmap("kube-root-ca.crt")
    assert len(retries) == 1  # it met a frozen one
    in_parallel(5)
    assert len(retries) == 1
    gw.close()
