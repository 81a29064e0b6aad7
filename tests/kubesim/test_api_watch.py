"""Watch protocol through the Python client: RV resume, initial ADDED, selectors, bookmarks, 410."""

from __future__ import annotations

import json

import pytest
from kubernetes import client, watch
from kubernetes.client.rest import ApiException

from tests.conftest import api_client, raw_request


@pytest.fixture(scope="module")
def cluster(kubesim_cluster_module):
    # a tiny watch history so 410 is reachable; bookmarks every 60 s / time_scale
    return kubesim_cluster_module(nodes=1, time_scale=120, api_options={"history_capacity": 20})


@pytest.fixture(scope="module")
def core(cluster):
    return client.CoreV1Api(api_client(cluster.kubeconfig))


def _cm(name, labels=None, **data):
    return client.V1ConfigMap(metadata=client.V1ObjectMeta(name=name, labels=labels), data=data)


def _events(core, ns, **kwargs):
    """Watch events for a namespace's ConfigMaps, without the root CA publisher's own ConfigMap."""
    events = watch.Watch().stream(core.list_namespaced_config_map, ns, timeout_seconds=1, **kwargs)
    return [e for e in events if e["type"] in ("BOOKMARK", "ERROR") or e["object"].metadata.name != "kube-root-ca.crt"]


def test_watch_from_resource_version_replays_changes_in_order(core):
    core.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name="w-order")))
    start = core.list_namespaced_config_map("w-order").metadata.resource_version
    core.create_namespaced_config_map("w-order", _cm("a", k="1"))
    core.patch_namespaced_config_map("a", "w-order", {"data": {"k": "2"}})
    core.delete_namespaced_config_map("a", "w-order")
    events = _events(core, "w-order", resource_version=start)
    assert [e["type"] for e in events] == ["ADDED", "MODIFIED", "DELETED"]
    rvs = [int(e["object"].metadata.resource_version) for e in events]
    assert rvs == sorted(rvs) and len(set(rvs)) == 3  # DELETED carries its own, newer RV


def test_watch_without_resource_version_starts_with_current_objects(core):
    core.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name="w-initial")))
    core.create_namespaced_config_map("w-initial", _cm("x"))
    core.create_namespaced_config_map("w-initial", _cm("y"))
    events = _events(core, "w-initial")
    assert [(e["type"], e["object"].metadata.name) for e in events] == [("ADDED", "x"), ("ADDED", "y")]


def test_selectors_filter_and_leaving_the_selection_is_deleted(core):
    core.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name="w-sel")))
    start = core.list_namespaced_config_map("w-sel").metadata.resource_version
    core.create_namespaced_config_map("w-sel", _cm("in", labels={"tier": "a"}))
    core.create_namespaced_config_map("w-sel", _cm("out", labels={"tier": "b"}))
    core.patch_namespaced_config_map("in", "w-sel", {"metadata": {"labels": {"tier": "b"}}})
    core.patch_namespaced_config_map("out", "w-sel", {"metadata": {"labels": {"tier": "a"}}})
    events = _events(core, "w-sel", resource_version=start, label_selector="tier=a")
    assert [(e["type"], e["object"].metadata.name) for e in events] == [
        ("ADDED", "in"),
        ("DELETED", "in"),
        ("ADDED", "out"),
    ]
    named = _events(core, "w-sel", resource_version=start, field_selector="metadata.name=out")
    assert {e["object"].metadata.name for e in named} == {"out"}


def test_bookmarks_carry_the_current_resource_version(core):
    rv = core.list_namespaced_config_map("default").metadata.resource_version
    events = list(
        watch.Watch().stream(
            core.list_namespaced_config_map,
            "default",
            resource_version=rv,
            allow_watch_bookmarks=True,
            timeout_seconds=2,
        )
    )
    bookmarks = [e for e in events if e["type"] == "BOOKMARK"]
    assert bookmarks, events
    assert int(bookmarks[-1]["object"]["metadata"]["resourceVersion"]) >= int(rv)


def test_too_old_resource_version_is_410_expired(core):
    old = core.list_namespaced_config_map("default").metadata.resource_version
    core.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name="w-churn")))
    core.create_namespaced_config_map("w-churn", _cm("churn", n="0"))
    for i in range(30):  # more than the history keeps
        core.patch_namespaced_config_map("churn", "w-churn", {"data": {"n": str(i + 1)}})
    with pytest.raises(ApiException) as info:
        _events(core, "default", resource_version=old)
    assert info.value.status == 410
    assert "too old resource version" in str(info.value.reason)


def test_410_on_the_wire_is_an_error_event_in_a_200_stream(cluster, core):
    status, _, body = raw_request(
        cluster.kubeconfig, "GET", "/api/v1/namespaces/default/configmaps?watch=1&resourceVersion=1&timeoutSeconds=1"
    )
    assert status == 200
    event = json.loads(body.splitlines()[0])
    assert event["type"] == "ERROR"
    assert event["object"]["code"] == 410 and event["object"]["reason"] == "Expired"


def test_go_style_booleans_and_timeout_seconds(cluster):
    status, headers, body = raw_request(cluster.kubeconfig, "GET", "/api/v1/nodes?watch=True&timeoutSeconds=1")
    assert status == 200
    lines = [json.loads(line) for line in body.splitlines()]
    assert lines and lines[0]["type"] == "ADDED"  # a watch stream (initial ADDED, then changes), not a list
    status, _, body = raw_request(cluster.kubeconfig, "GET", "/api/v1/nodes?watch=maybe")
    assert status == 400


def test_a_write_reaches_name_indexed_watchers_without_visiting_the_others():
    """5,000 kubelets each watch their own Node: fan-out must look one bucket up, not scan them all."""
    from kubesim.apiserver.selectors import Selector
    from kubesim.apiserver.watch import Event, StoredObject, Watcher, WatchHub

    hub = WatchHub()
    watchers = {}
    for i in range(5000):
        watcher = Watcher("nodes", "", Selector.parse("nodes", {"fieldSelector": f"metadata.name=node-{i}"}))
        hub.add(watcher)
        watchers[i] = watcher
    everything = Watcher("nodes", "", Selector("nodes"))
    hub.add(everything)
    stored = StoredObject({"metadata": {"name": "node-42"}}, b"{}", 7, "node-42", "")
    assert set(hub._interested("nodes", "node-42")) == {watchers[42], everything}
    hub.dispatch("nodes", Event("MODIFIED", stored, stored))
    assert [w for w in watchers.values() if w.queue] == [watchers[42]]
    assert len(everything.queue) == 1
