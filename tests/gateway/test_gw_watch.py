"""One resumable node watch: resume from RV, bookmarks, reconnects, 410 relists, no polling."""

from __future__ import annotations

import threading
import time

import pytest
from gw_helpers import make_gateway, node_obj

from rollout.errors import TransientGatewayError
from rollout.model import ConfigRef

FAIL = "failed to validate config, see Kubelet log for details"
CM = {"namespace": "kube-system", "name": "kc-b", "kubeletConfigKey": "kubelet",
      "uid": "u-b", "resourceVersion": "22"}


def node_watch_requests(fake):
    return [a for a in fake.state.audit if a[1] == "/api/v1/nodes" and "watch=" in a[2]]


def test_without_rv_lists_first_then_watches_from_list_rv(gw, fake, three_nodes):
    rv0 = str(fake.state.rv)
    w = gw.watch_nodes(timeout_s=1.0)
    events = list(w)
    assert [(e.type, e.node.name, e.relisted) for e in events] == [
        ("ADDED", n, True) for n in three_nodes]
    assert all(e.node.lease_duration_s == 40.0 for e in events)
    (req,) = node_watch_requests(fake)[:1]
    assert f"resourceVersion={rv0}" in req[2] and "allowWatchBookmarks=true" in req[2]


def test_resumed_watch_sees_validate_failure_in_one_event(gw, fake, three_nodes):
    _, rv = gw.list_nodes()
    failing = node_obj("node-b", config={"assigned": {"configMap": CM}, "error": FAIL})

    def change():
        fake.put("nodes", failing)

    threading.Timer(0.1, change).start()
    w = gw.watch_nodes(resource_version=rv, timeout_s=5.0)
    event = next(iter(w))
    w.close()
    assert event.type == "MODIFIED" and event.node.name == "node-b"
    assert event.node.error == FAIL
    assert event.node.assigned == ConfigRef("kube-system", "kc-b", "kubelet", "u-b", "22")
    assert w.resource_version == event.resource_version == str(fake.state.rv)
    # no per-node requests: only the one watch
    assert not [a for a in fake.state.audit if a[1].startswith("/api/v1/nodes/")]


def test_bookmark_advances_resource_version_without_an_event(gw, fake, three_nodes):
    _, rv = gw.list_nodes()
    fake.put("configmaps", {"metadata": {"name": "unrelated"}}, ns="kube-system")  # bumps RV
    w = gw.watch_nodes(resource_version=rv, timeout_s=1.0)
    assert list(w) == []
    assert int(w.resource_version) == fake.state.rv > int(rv)


def test_closed_stream_reconnects_from_last_rv_without_duplicates(gw, fake, three_nodes):
    _, rv = gw.list_nodes()
    fake.state.close_watch_after = 1
    for name in three_nodes:
        fake.put("nodes", node_obj(name, ready="False"))
    w = gw.watch_nodes(resource_version=rv, timeout_s=5.0)
    seen = []
    for event in w:
        seen.append(event.node.name)
        if len(seen) == 3:
            break
    assert seen == three_nodes  # each change exactly once, in order
    assert len(node_watch_requests(fake)) == 3
    assert w.reconnects == 2


def test_http_410_relists_and_reports_deleted_nodes(gw, fake, three_nodes):
    _, rv = gw.list_nodes()
    fake.delete("nodes", "node-c")
    fake.state.history.clear()  # nothing to replay: the server could only answer 410
    fake.state.watch_gone_http = 1
    w = gw.watch_nodes(resource_version=rv, timeout_s=1.0)
    events = list(w)
    assert w.relists == 1
    # resumed from a bare RV this watch never knew node-c, so it cannot report it DELETED
    assert [(e.type, e.node.name) for e in events] == [("ADDED", "node-a"), ("ADDED", "node-b")]
    assert all(e.relisted for e in events)


def test_410_error_event_relists_then_keeps_watching(gw, fake, three_nodes):
    w = gw.watch_nodes(timeout_s=5.0)
    it = iter(w)
    initial = [next(it) for _ in range(3)]
    assert {e.node.name for e in initial} == set(three_nodes)
    fake.state.watch_gone_event = 1
    fake.delete("nodes", "node-c")
    fake.state.history.clear()
    relisted = [next(it), next(it), next(it)]
    assert [(e.type, e.node.name) for e in relisted] == [
        ("ADDED", "node-a"), ("ADDED", "node-b"), ("DELETED", "node-c")]
    assert w.relists == 2
    threading.Timer(0.1, lambda: fake.put("nodes", node_obj("node-a", ready="False"))).start()
    live = next(it)
    w.close()
    assert (live.type, live.node.name, live.node.ready, live.relisted) == (
        "MODIFIED", "node-a", "False", False)


def test_transient_errors_when_connecting_are_retried(gw, fake, sleeps, three_nodes):
    _, rv = gw.list_nodes()
    fake.state.failures = [(503, "1"), (429, "1")]
    threading.Timer(0.1, lambda: fake.put("nodes", node_obj("node-a", ready="False"))).start()
    w = gw.watch_nodes(resource_version=rv, timeout_s=5.0)
    event = next(iter(w))
    w.close()
    assert event.node.name == "node-a" and sleeps.calls[:2] == [1.0, 1.0]


def test_stop_event_ends_iteration(gw, fake, three_nodes):
    stop = threading.Event()
    w = gw.watch_nodes(timeout_s=30.0, stop=stop)
    names = []
    for event in w:
        names.append(event.node.name)
        if len(names) == 2:
            stop.set()
    assert names == three_nodes[:2]


def test_close_from_another_thread_ends_a_blocked_iteration(gw, fake, three_nodes):
    _, rv = gw.list_nodes()
    w = gw.watch_nodes(resource_version=rv, timeout_s=20.0)
    timer = threading.Timer(0.3, w.close)
    timer.start()
    started = time.monotonic()
    assert list(w) == []
    assert time.monotonic() - started < 5.0


def test_unreachable_api_server_is_raised_not_retried_forever(fake, sleeps):
    gw = make_gateway(fake.url, attempts=3, sleeps=sleeps)
    fake.state.failures = [(503, None)] * 10
    with pytest.raises(TransientGatewayError, match="watch nodes: HTTP 503"):
        list(gw.watch_nodes(resource_version="1", timeout_s=None))
    assert len(sleeps.calls) == 2


def test_error_event_mid_stream_reconnects(gw, fake, three_nodes):
    _, rv = gw.list_nodes()
    fake.state.watch_error_event = 1
    threading.Timer(0.2, lambda: fake.put("nodes", node_obj("node-c", ready="False"))).start()
    w = gw.watch_nodes(resource_version=rv, timeout_s=5.0)
    event = next(iter(w))
    w.close()
    assert event.node.name == "node-c" and w.reconnects == 1
