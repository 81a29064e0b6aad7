"""The agent's API calls against kubesim over HTTPS: the real client path, no fakes.

Runs on today's kubesim (1.23 mode): Nodes, ConfigMaps, Events and the node proxy behave the
same there as in modern mode, so the agent's wire format is pinned before modern mode lands.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from typing import Any, Callable

import pytest
from rollout.errors import NotFoundError
from rollout.gateway import default_retrying

from kubelet_rollout_agent import names
from kubelet_rollout_agent.api import NodeApi, RawApi, client_from_kubeconfig
from kubelet_rollout_agent.fleet import NodeWatch, WatchedNodeApi
from kubelet_rollout_agent.kubesim_host import kubesim_time_scale


@pytest.fixture(scope="module")
def cluster(kubesim_cluster_module: Callable[..., Any]) -> Any:
    # no periodic Node status report (5 min, 5 s at 60x): a Node changes only when a test changes it
    return kubesim_cluster_module(nodes=1, node_status_report=86400)


@pytest.fixture
def api(cluster: Any) -> NodeApi:
    raw = RawApi(client_from_kubeconfig(str(cluster.kubeconfig)), retrying=default_retrying(sleep=lambda _: None))
    return NodeApi(raw, cluster.node_names[-1])


def test_annotations_are_patched_and_removed_with_one_merge_patch(api: NodeApi) -> None:
    api.patch_annotations({names.ANN_ERROR: "boom", names.ANN_AGENT: "{}"})
    assert api.get_node()["metadata"]["annotations"][names.ANN_ERROR] == "boom"
    api.patch_annotations({names.ANN_ERROR: None})
    annotations = api.get_node()["metadata"]["annotations"]
    assert names.ANN_ERROR not in annotations and annotations[names.ANN_AGENT] == "{}"


def test_a_configmap_is_read_raw_and_a_missing_one_is_not_found(api: NodeApi) -> None:
    api.raw.request("POST", "/api/v1/namespaces/kube-system/configmaps",
                    body={"metadata": {"name": "agent-api-cm"}, "data": {"kubelet": "x"}})
    cm = api.get_configmap("kube-system", "agent-api-cm")
    assert cm["data"] == {"kubelet": "x"} and cm["metadata"]["uid"]
    with pytest.raises(NotFoundError):
        api.get_configmap("kube-system", "no-such-cm")


def test_events_are_recorded_on_the_node(api: NodeApi) -> None:
    assert api.record_event(names.EVENT_ACTIVE, "kubelet runs x")
    events = api.raw.request("GET", "/api/v1/namespaces/default/events",
                             query={"fieldSelector": f"involvedObject.name={api.node}"})
    assert names.EVENT_ACTIVE in [e["reason"] for e in events["items"]]


def test_configz_comes_through_the_node_proxy(api: NodeApi) -> None:
    configz = api.configz()
    assert configz is not None and "kubeletconfig" in configz


def test_wait_for_change_returns_on_a_change_and_times_out_without_one(api: NodeApi) -> None:
    rv = api.get_node()["metadata"]["resourceVersion"]
    timer = threading.Timer(0.5, lambda: api.patch_annotations({names.ANN_ERROR: "poke"}))
    timer.start()
    started = time.monotonic()
    assert api.wait_for_change(rv, 20) is True
    assert time.monotonic() - started < 15
    rv = api.get_node()["metadata"]["resourceVersion"]
    assert api.wait_for_change(rv, 1.5) is False


@pytest.fixture
def shared(cluster: Any) -> Iterator[tuple[NodeWatch, dict[str, WatchedNodeApi]]]:
    """A fleet's shared Node watch over both nodes of the cluster, and one agent API per node."""
    raw = RawApi(client_from_kubeconfig(str(cluster.kubeconfig)), retrying=default_retrying(sleep=lambda _: None))
    stop = threading.Event()
    watch = NodeWatch(raw, timeout_s=60)
    watch.start(stop, sync_timeout_s=10)
    try:
        yield watch, {n: WatchedNodeApi(raw, n, watch) for n in cluster.node_names}
    finally:
        stop.set()


def test_the_shared_watch_wakes_only_the_agent_whose_node_changed(
        shared: tuple[NodeWatch, dict[str, WatchedNodeApi]]) -> None:
    _, apis = shared
    mine, other = (apis[n] for n in sorted(apis))
    rv = mine.get_node()["metadata"]["resourceVersion"]
    # another node's change is not ours: the wait runs to its timeout
    threading.Timer(0.2, lambda: other.patch_annotations({names.ANN_ERROR: "other"})).start()
    assert mine.wait_for_change(rv, 1.0) is False
    rv = mine.get_node()["metadata"]["resourceVersion"]
    # a change by someone else (the orchestrator's write) reaches the cache through the stream
    threading.Timer(0.3, lambda: mine.raw.request(
        "PATCH", f"/api/v1/nodes/{mine.node}", body={"metadata": {"annotations": {names.ANN_DESIRED: "x"}}},
        content_type="application/merge-patch+json")).start()
    started = time.monotonic()
    assert mine.wait_for_change(rv, 20) is True
    assert time.monotonic() - started < 10
    assert mine.get_node()["metadata"]["annotations"][names.ANN_DESIRED] == "x"


def test_an_agent_reads_its_own_patch_back_at_once_without_a_get(
        shared: tuple[NodeWatch, dict[str, WatchedNodeApi]], monkeypatch: pytest.MonkeyPatch) -> None:
    watch, apis = shared
    api = apis[sorted(apis)[-1]]
    api.patch_annotations({names.ANN_ERROR: "own write"})
    monkeypatch.setattr(NodeApi, "get_node", lambda self: pytest.fail("a GET the cache should have answered"))
    assert api.get_node()["metadata"]["annotations"][names.ANN_ERROR] == "own write"
    # a stale version arriving late (a watch event for an older change) does not replace it
    stale = {"metadata": {"name": api.node, "resourceVersion": "1", "annotations": {}}}
    watch.offer(stale)
    assert api.get_node()["metadata"]["annotations"][names.ANN_ERROR] == "own write"


def test_the_agent_names_itself_in_user_agent(cluster: Any) -> None:
    assert client_from_kubeconfig(str(cluster.kubeconfig)).user_agent.startswith("kubelet-rollout-agent/")


def test_a_simulated_host_tells_its_clock_with_the_nodes_own_credentials(cluster: Any) -> None:
    """The agent on a kubesim host runs its timers on kubesim's clock (issue 36, item 3)."""
    node = cluster.node_names[-1]
    raw = RawApi(client_from_kubeconfig(str(cluster.node_kubeconfig(node))))
    assert kubesim_time_scale(raw) == cluster.time_scale > 1
