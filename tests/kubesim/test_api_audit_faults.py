"""The audit log (every request, HTTP and in-process) and runtime-switchable API faults."""

from __future__ import annotations

import http.client
import json
import queue
import ssl
import subprocess
import sys
import threading
import time
from pathlib import Path
from urllib.parse import urlsplit

import pytest
from kubernetes import client, watch
from kubernetes.client.rest import ApiException

from kubesim.kubeconfig import read as read_kubeconfig
from tests.conftest import api_client, raw_request, wait_for


@pytest.fixture
def cluster(kubesim_cluster):
    return kubesim_cluster(nodes=1)


def test_audit_events_for_http_requests(cluster):
    core = client.CoreV1Api(api_client(cluster.kubeconfig))
    core.patch_node("node-1", {"metadata": {"labels": {"audited": "yes"}}})
    with pytest.raises(ApiException):
        core.read_namespaced_config_map("missing", "kube-system")
    events = cluster.audit_log.events(verb="patch")
    mine = [e for e in events if e["user"]["username"] == "admin"]
    assert mine, events
    event = mine[-1]
    assert event["kind"] == "Event" and event["apiVersion"] == "audit.k8s.io/v1"
    assert event["stage"] == "ResponseComplete" and event["auditID"]
    assert event["requestURI"].startswith("/api/v1/nodes/node-1")
    assert event["objectRef"] == {"resource": "nodes", "name": "node-1", "apiGroup": "", "apiVersion": "v1"}
    assert event["responseStatus"]["code"] == 200
    assert "system:masters" in event["user"]["groups"]
    assert event["requestReceivedTimestamp"] <= event["stageTimestamp"]
    missing = [e for e in cluster.audit_log.events(verb="get") if e.get("objectRef", {}).get("name") == "missing"]
    assert missing[-1]["responseStatus"]["code"] == 404
    assert missing[-1]["objectRef"]["namespace"] == "kube-system"


def test_audit_covers_in_process_kubelet_requests_and_failed_authentication(cluster):
    def kubelet_lease_update():
        return [
            e
            for e in cluster.audit_log.events(verb="update")
            if e["user"]["username"] == "system:node:node-1" and e["objectRef"]["resource"] == "leases"
        ]

    wait_for(kubelet_lease_update, what="a lease renewal by the kubelet in the audit log")
    event = kubelet_lease_update()[0]
    assert event["user"]["groups"] == ["system:nodes", "system:authenticated"]
    assert event["objectRef"]["apiGroup"] == "coordination.k8s.io"
    raw_request(cluster.kubeconfig, "GET", "/api/v1/nodes", token="")
    assert any(e["responseStatus"]["code"] == 401 for e in cluster.audit_log.events())


def test_watch_is_audited_when_it_ends(cluster):
    core = client.CoreV1Api(api_client(cluster.kubeconfig))
    list(watch.Watch().stream(core.list_node, timeout_seconds=1))
    watches = cluster.audit_log.events(verb="watch")
    assert any(e["objectRef"]["resource"] == "nodes" and e["user"]["username"] == "admin" for e in watches)


def test_api_errors_with_retry_after(cluster):
    core = client.CoreV1Api(api_client(cluster.kubeconfig))
    cluster.faults.api_errors(1.0, codes=[429], retry_after=3)
    try:
        status, headers, body = raw_request(cluster.kubeconfig, "GET", "/api/v1/nodes")
        assert status == 429 and headers["Retry-After"] == "3"
        assert json.loads(body)["reason"] == "TooManyRequests"
        cluster.faults.api_errors(1.0, codes=[500])
        with pytest.raises(ApiException) as info:
            core.list_node()
        assert info.value.status == 500
    finally:
        cluster.faults.reset()
    assert core.list_node().items
    assert cluster.faults.get()["api"]["error_rate"] == 0.0


def test_api_errors_spare_kubelets_unless_included(cluster):
    cluster.faults.api_errors(1.0, codes=[500])
    try:
        node = client.CoreV1Api(api_client(cluster.node_kubeconfig("node-1")))
        assert node.read_node("node-1").metadata.name == "node-1"
        cluster.faults.api_errors(1.0, codes=[500], include_nodes=True)
        with pytest.raises(ApiException):
            node.read_node("node-1")
    finally:
        cluster.faults.reset()


def _ready_transition(core: client.CoreV1Api) -> dict[str, object]:
    return {
        n.metadata.name: [(c.status, c.last_transition_time) for c in n.status.conditions if c.type == "Ready"]
        for n in core.list_node().items
    }


def _control_plane_failures(cluster) -> list[dict]:
    return [
        e
        for e in cluster.audit_log.events()
        if e["user"]["username"] == "system:kube-controller-manager" and e["responseStatus"]["code"] >= 500
    ]


def test_api_storm_spares_the_node_lifecycle_controller_unless_included(cluster):
    """A storm (errors plus dropped watches, several node-monitor grace periods long) hits API
    clients, not kubesim's own controllers: no controller request fails and no healthy node's
    Ready flaps. ``include_control_plane`` puts the controllers back in the storm."""
    core = client.CoreV1Api(api_client(cluster.kubeconfig))
    before = _ready_transition(core)
    cluster.faults.drop_watches()
    cluster.faults.api_errors(0.5, codes=[500])
    try:
        codes = {raw_request(cluster.kubeconfig, "GET", "/api/v1/nodes")[0] for _ in range(20)}
        assert 500 in codes  # the storm is on for API clients
        time.sleep(3 * 40 / cluster.time_scale)  # three node-monitor grace periods
        assert _control_plane_failures(cluster) == []
    finally:
        cluster.faults.reset()
    assert _ready_transition(core) == before
    cluster.faults.drop_watches(include_control_plane=True)
    cluster.faults.api_errors(1.0, codes=[500], include_control_plane=True)
    try:
        wait_for(lambda: _control_plane_failures(cluster), what="a controller request failed by the storm")
    finally:
        cluster.faults.reset()


def test_drop_watches_closes_open_streams(cluster):
    core = client.CoreV1Api(api_client(cluster.kubeconfig))
    ended = threading.Event()

    def consume():
        for _ in watch.Watch().stream(
            core.list_namespaced_config_map, "default", timeout_seconds=60, _request_timeout=90
        ):
            pass
        ended.set()

    watcher = threading.Thread(target=consume, daemon=True)
    watcher.start()
    wait_for(
        lambda: (
            cluster.api.store.hub.count() > 0 and any(w.resource == "configmaps" for w in cluster.api.store.hub.all())
        ),
        what="the watch to open",
    )
    cluster.faults.drop_watches()
    try:
        assert ended.wait(20), "the watch stream was not closed"
    finally:
        cluster.faults.reset()


def test_latency_and_fault_endpoint_is_admin_only(cluster):
    cluster.faults.latency(0.3)
    try:
        import time

        start = time.monotonic()
        raw_request(cluster.kubeconfig, "GET", "/api/v1/nodes")
        assert time.monotonic() - start >= 0.3
    finally:
        cluster.faults.reset()
    status, _, _ = raw_request(cluster.kubeconfig, "GET", "/kubesim/v1/faults", token=cluster.node_token("node-1"))
    assert status == 403
    status, _, body = raw_request(cluster.kubeconfig, "PUT", "/kubesim/v1/faults", {"api": {"bogus": 1}})
    assert status == 400


def test_node_faults_through_the_cli(cluster):
    def cli(*args):
        return subprocess.run(
            [sys.executable, "-m", "kubesim", "fault", "--kubeconfig", str(cluster.kubeconfig), *args],
            capture_output=True,
            text=True,
            timeout=30,
        )

    result = cli("partition", "node-1")
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout)["nodes"]["node-1"]["partitioned"] is True
    assert cli("slow-restart", "node-1", "5s").returncode == 0
    shown = json.loads(cli("show").stdout)
    assert shown["nodes"]["node-1"] == {"never_return": False, "slow_restart": 5.0, "partitioned": True}
    assert json.loads(cli("heal", "node-1").stdout)["nodes"]["node-1"]["partitioned"] is False
    assert json.loads(cli("api-errors", "--rate", "0.5", "--codes", "503").stdout)["api"]["error_codes"] == [503]
    assert json.loads(cli("blackhole").stdout)["api"]["blackhole"] is True  # its own requests get through
    assert json.loads(cli("blackhole", "--off").stdout)["api"]["blackhole"] is False
    assert json.loads(cli("reset").stdout)["api"]["error_rate"] == 0.0
    assert cli("api-errors", "--rate", "2").returncode == 2


def _connection(kubeconfig: Path, timeout: float) -> http.client.HTTPSConnection:
    """One HTTPS connection, kept open across requests (as a client's pool keeps it)."""
    info = read_kubeconfig(kubeconfig)
    url = urlsplit(info.server)
    context = ssl.create_default_context(cadata=info.ca_pem.decode())
    conn = http.client.HTTPSConnection(url.hostname, url.port, context=context, timeout=timeout)
    conn.connect()
    return conn


def _answered(conn: http.client.HTTPSConnection, kubeconfig: Path) -> bool:
    """Does a GET on this connection get an answer before the connection's timeout?"""
    token = read_kubeconfig(kubeconfig).token
    try:
        conn.request("GET", "/api/v1/nodes/node-1", headers={"Authorization": f"Bearer {token}"})
        response = conn.getresponse()
        response.read()
        return response.status == 200
    except TimeoutError:
        return False


def _drain_what_was_on_its_way(events: queue.Queue[str], quiet_s: float = 1.0, within_s: float = 15.0) -> None:
    """Events sent before the switch, still being read: until the stream has been quiet for
    ``quiet_s`` (a loaded CI machine's reader thread delivered one two seconds after the switch,
    when the queue had been emptied at once). A stream that goes on, Lease renewals every 10 s of
    kubesim's clock (a sixth of a second here), is never quiet so long: the fault did not hold."""
    deadline = time.monotonic() + within_s
    while True:
        try:
            events.get(timeout=quiet_s)
        except queue.Empty:
            return
        assert time.monotonic() < deadline, f"the watch still delivered {within_s:g} s after the blackhole"


def test_blackhole_silences_connections_without_closing_them(cluster):
    """Switched on: an open watch stops delivering but stays open, a connection opened before gets
    no answer, nor does a new one while it lasts; the fault endpoint still answers. Switched off: a
    new connection is served, the silenced ones stay silent."""
    kubeconfig = cluster.kubeconfig
    leases = client.CoordinationV1Api(api_client(kubeconfig))
    events: queue.Queue[str] = queue.Queue()
    ended = threading.Event()

    def consume():  # kubelets renew their Lease every 10 s / time scale: a busy stream
        try:
            for event in watch.Watch().stream(leases.list_namespaced_lease, "kube-node-lease",
                                              timeout_seconds=120, _request_timeout=(5, 120)):
                events.put(event["type"])
        except Exception:  # noqa: BLE001 - the cluster stopping under it ends it too
            pass
        ended.set()

    threading.Thread(target=consume, daemon=True).start()
    events.get(timeout=20)
    used, idle = _connection(kubeconfig, 1.0), _connection(kubeconfig, 1.0)
    assert _answered(used, kubeconfig) and _answered(idle, kubeconfig)
    cluster.faults.blackhole()
    try:
        assert not _answered(used, kubeconfig)
        assert not _answered(_connection(kubeconfig, 1.0), kubeconfig)
        assert cluster.faults.get()["api"]["blackhole"] is True
        _drain_what_was_on_its_way(events)
        with pytest.raises(queue.Empty):  # several renewals happened meanwhile
            events.get(timeout=1.0)
        assert not ended.is_set()
    finally:
        cluster.faults.blackhole(False)
    assert _answered(_connection(kubeconfig, 5.0), kubeconfig)
    assert not _answered(idle, kubeconfig)  # open when it began: silent for good
    with pytest.raises(queue.Empty):
        events.get(timeout=1.0)
    assert not ended.is_set()
