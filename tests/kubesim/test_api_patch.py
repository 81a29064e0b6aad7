"""Strategic merge, JSON merge and JSON patches as the real server applies them to Nodes and ConfigMaps."""

from __future__ import annotations

import json

import pytest
from kubernetes import client
from kubernetes.client.rest import ApiException

from kubesim.apiserver.patch import SMP_SCHEMA, strategic_merge
from tests.conftest import api_client, raw_request


@pytest.fixture(scope="module")
def cluster(kubesim_cluster_module):
    return kubesim_cluster_module(nodes=1)


@pytest.fixture(scope="module")
def core(cluster):
    return client.CoreV1Api(api_client(cluster.kubeconfig))


def _patch(cluster, path, body, content_type):
    status, _, data = raw_request(cluster.kubeconfig, "PATCH", path, body, {"Content-Type": content_type})
    return status, json.loads(data)


def test_smp_merges_conditions_by_type_and_honours_directives(cluster):
    path = "/api/v1/nodes/node-1/status"
    smp = "application/strategic-merge-patch+json"
    status, node = _patch(
        cluster, path, {"status": {"conditions": [{"type": "Custom", "status": "True", "reason": "Test"}]}}, smp
    )
    assert status == 200
    types = [c["type"] for c in node["status"]["conditions"]]
    assert "Custom" in types and "Ready" in types  # merged by key, not replaced
    status, node = _patch(
        cluster,
        path,
        {
            "status": {
                "$setElementOrder/conditions": [{"type": "Custom"}, {"type": "Ready"}],
                "conditions": [{"type": "Custom", "message": "changed"}],
            }
        },
        smp,
    )
    custom = next(c for c in node["status"]["conditions"] if c["type"] == "Custom")
    assert custom == {"type": "Custom", "status": "True", "reason": "Test", "message": "changed"}
    assert [c["type"] for c in node["status"]["conditions"]][:2] == ["Custom", "Ready"]
    status, node = _patch(cluster, path, {"status": {"conditions": [{"$patch": "delete", "type": "Custom"}]}}, smp)
    assert "Custom" not in [c["type"] for c in node["status"]["conditions"]]
    assert not any(k.startswith("$") for k in json.dumps(node).split('"'))


def test_smp_primitive_sets_and_atomic_lists(cluster):
    path = "/api/v1/nodes/node-1"
    smp = "application/strategic-merge-patch+json"
    _, node = _patch(
        cluster,
        path,
        {"metadata": {"finalizers": ["a.io/x", "b.io/y"]}, "spec": {"taints": [{"key": "k1", "effect": "NoSchedule"}]}},
        smp,
    )
    _, node = _patch(
        cluster,
        path,
        {
            "metadata": {"finalizers": ["c.io/z"], "$deleteFromPrimitiveList/finalizers": ["a.io/x"]},
            "spec": {"taints": [{"key": "k2", "effect": "NoSchedule"}]},
        },
        smp,
    )
    assert node["metadata"]["finalizers"] == ["b.io/y", "c.io/z"]
    assert node["spec"]["taints"] == [{"key": "k2", "effect": "NoSchedule"}]  # taints are replaced
    _, node = _patch(cluster, path, {"metadata": {"finalizers": None}, "spec": {"taints": None}}, smp)
    assert "finalizers" not in node["metadata"] and "taints" not in node["spec"]


def test_merge_patch_null_deletes_and_lists_replace(core, cluster):
    core.create_namespaced_config_map(
        "default",
        client.V1ConfigMap(metadata=client.V1ObjectMeta(name="mp", labels={"a": "1", "b": "2"}), data={"x": "1"}),
    )
    status, cm = _patch(
        cluster,
        "/api/v1/namespaces/default/configmaps/mp",
        {"metadata": {"labels": {"a": None, "c": "3"}}},
        "application/merge-patch+json",
    )
    assert status == 200 and cm["metadata"]["labels"] == {"b": "2", "c": "3"}


def test_json_patch_operations_and_failures(core, cluster):
    core.create_namespaced_config_map(
        "default", client.V1ConfigMap(metadata=client.V1ObjectMeta(name="jp"), data={"x": "1"})
    )
    ops = [
        {"op": "add", "path": "/data/y", "value": "2"},
        {"op": "replace", "path": "/data/x", "value": "9"},
        {"op": "test", "path": "/data/y", "value": "2"},
        {"op": "copy", "from": "/data/y", "path": "/data/z"},
        {"op": "remove", "path": "/data/y"},
    ]
    cm = core.patch_namespaced_config_map("jp", "default", ops)  # a list body = JSON patch
    assert cm.data == {"x": "9", "z": "2"}
    status, body = _patch(
        cluster,
        "/api/v1/namespaces/default/configmaps/jp",
        [{"op": "test", "path": "/data/x", "value": "wrong"}],
        "application/json-patch+json",
    )
    assert status == 422 and body["reason"] == "Invalid"
    status, body = _patch(
        cluster,
        "/api/v1/namespaces/default/configmaps/jp",
        [{"op": "remove", "path": "/data/missing"}],
        "application/json-patch+json",
    )
    assert status == 422


def test_unsupported_patch_types_are_415(cluster):
    status, body = _patch(cluster, "/api/v1/nodes/node-1", {"metadata": {}}, "application/apply-patch+yaml")
    assert status == 415 and body["reason"] == "UnsupportedMediaType"
    assert body["message"].startswith(
        "the body of the request was in an unknown format - accepted media types include:"
    )


def test_resource_version_in_a_patch_is_a_precondition(core):
    core.create_namespaced_config_map("default", client.V1ConfigMap(metadata=client.V1ObjectMeta(name="pre")))
    with pytest.raises(ApiException) as info:
        core.patch_namespaced_config_map("pre", "default", {"metadata": {"resourceVersion": "1", "labels": {"a": "b"}}})
    assert info.value.status == 409


def test_smp_replace_directive_and_unknown_merge_items():
    schema = SMP_SCHEMA["Node"]
    original = {"status": {"conditions": [{"type": "A", "status": "True"}, {"type": "B", "status": "True"}]}}
    replaced = strategic_merge(original, {"status": {"conditions": [{"$patch": "replace"}, {"type": "C"}]}}, schema, ())
    assert replaced == {"status": {"conditions": [{"type": "C"}]}}
    gone = strategic_merge(
        {"spec": {"configSource": {"configMap": {"name": "x"}}}},
        {"spec": {"configSource": {"$patch": "delete"}}},
        schema,
        (),
    )
    assert gone == {"spec": {}}
