"""The agent's API calls against kubesim over HTTPS: the real client path, no fakes.

Runs on today's kubesim (1.23 mode): Nodes, ConfigMaps, Events and the node proxy behave the
same there as in modern mode, so the agent's wire format is pinned before modern mode lands.
"""

from __future__ import annotations

import threading
import time
from typing import Any, Callable

import pytest
from rollout.errors import NotFoundError
from rollout.gateway import default_retrying

from kubelet_rollout_agent import names
from kubelet_rollout_agent.api import NodeApi, RawApi, client_from_kubeconfig


@pytest.fixture(scope="module")
def cluster(kubesim_cluster_module: Callable[..., Any]) -> Any:
    return kubesim_cluster_module(nodes=1)


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
