"""Reads as kubectl needs them: selectors, Tables, discovery, /version, OpenAPI (v3 JSON, v2 protobuf)."""

from __future__ import annotations

import json

import pytest
from kubernetes import client
from kubernetes.client.rest import ApiException

from kubesim.apiserver import protobuf
from tests.conftest import api_client, raw_request, wait_for

TABLE = (
    "application/json;as=Table;v=v1;g=meta.k8s.io,application/json;as=Table;v=v1beta1;g=meta.k8s.io,application/json"
)


@pytest.fixture(scope="module")
def cluster(kubesim_cluster_module):
    return kubesim_cluster_module(nodes=3)


@pytest.fixture(scope="module")
def core(cluster):
    return client.CoreV1Api(api_client(cluster.kubeconfig))


def _get(cluster, path, accept="application/json"):
    status, headers, body = raw_request(cluster.kubeconfig, "GET", path, headers={"Accept": accept})
    return status, headers, json.loads(body) if body[:1] in (b"{", b"[") else body


def test_label_selectors(core):
    names = lambda sel: sorted(n.metadata.name for n in core.list_node(label_selector=sel).items)  # noqa: E731
    assert names("node-role.kubernetes.io/control-plane") == ["control-plane-1"]
    assert names("!node-role.kubernetes.io/control-plane") == ["node-1", "node-2", "node-3"]
    assert names("topology.kubernetes.io/zone in (zone-a,zone-c)") == ["control-plane-1", "node-1", "node-3"]
    assert names("topology.kubernetes.io/zone notin (zone-a,zone-c),kubernetes.io/os=linux") == ["node-2"]
    assert names("topology.kubernetes.io/zone!=zone-a") == ["node-2", "node-3"]


def test_field_selectors(core):
    core.patch_node("node-3", {"spec": {"unschedulable": True}})
    try:
        cordoned = core.list_node(field_selector="spec.unschedulable=true").items
        assert [n.metadata.name for n in cordoned] == ["node-3"]
    finally:
        core.patch_node("node-3", {"spec": {"unschedulable": None}})
    events = core.list_event_for_all_namespaces(
        field_selector="involvedObject.uid=node-1,involvedObject.kind=Node,involvedObject.namespace="
    ).items
    assert all(e.involved_object.name == "node-1" for e in events)
    with pytest.raises(ApiException) as info:
        core.list_node(field_selector="spec.foo=bar")
    assert info.value.status == 400
    assert json.loads(info.value.body)["message"] == "field label not supported: spec.foo"


def test_node_table(cluster, core):
    core.patch_node("node-2", {"spec": {"unschedulable": True}})
    try:
        status, headers, table = _get(cluster, "/api/v1/nodes?limit=500", TABLE)
    finally:
        core.patch_node("node-2", {"spec": {"unschedulable": None}})
    assert status == 200 and headers["Content-Type"] == "application/json;as=Table;v=v1;g=meta.k8s.io"
    assert [c["name"] for c in table["columnDefinitions"]][:5] == ["Name", "Status", "Roles", "Age", "Version"]
    rows = {r["cells"][0]: r for r in table["rows"]}
    assert rows["control-plane-1"]["cells"][1:3] == ["Ready", "control-plane"]
    assert rows["node-2"]["cells"][1:3] == ["Ready,SchedulingDisabled", "<none>"]
    assert rows["node-1"]["cells"][4] == "v1.23.17"
    assert all(len(r["cells"]) == 10 for r in table["rows"])
    assert rows["node-1"]["object"]["kind"] == "PartialObjectMetadata"
    assert int(table["metadata"]["resourceVersion"]) > 0


def test_table_for_a_single_object_and_include_object(cluster):
    _, _, table = _get(cluster, "/api/v1/nodes/node-1?includeObject=Object", TABLE)
    assert len(table["rows"]) == 1 and table["rows"][0]["object"]["kind"] == "Node"
    _, _, table = _get(cluster, "/api/v1/namespaces?includeObject=None", TABLE)
    assert "object" not in table["rows"][0]
    _, _, table = _get(cluster, "/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases", TABLE)
    assert [c["name"] for c in table["columnDefinitions"]] == ["Name", "Holder", "Age"]
    _, _, table = _get(cluster, "/api/v1/events", TABLE)
    assert [c["name"] for c in table["columnDefinitions"]][:4] == ["Last Seen", "Type", "Reason", "Object"]


def test_version_and_discovery(cluster):
    status, headers, version = _get(cluster, "/version")
    assert (version["major"], version["minor"], version["gitVersion"]) == ("1", "23", "v1.23.17")
    aggregated = "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList,application/json"
    status, headers, apis = _get(cluster, "/apis", aggregated)
    assert headers["Content-Type"] == "application/json" and apis["kind"] == "APIGroupList"
    _, _, core_v1 = _get(cluster, "/api/v1")
    names = {r["name"] for r in core_v1["resources"]}
    assert {"nodes", "nodes/status", "configmaps", "namespaces", "events", "pods"} <= names
    _, _, coord = _get(cluster, "/apis/coordination.k8s.io/v1")
    assert [r["name"] for r in coord["resources"]] == ["leases"]
    _, _, api = _get(cluster, "/api")
    assert api["versions"] == ["v1"]


def test_openapi_v3_marks_patch_with_field_validation(cluster):
    _, _, root = _get(cluster, "/openapi/v3")
    url = root["paths"]["api/v1"]["serverRelativeURL"]
    _, _, doc = _get(cluster, url)
    patch = doc["paths"]["/api/v1/nodes/{name}"]["patch"]
    assert patch["x-kubernetes-group-version-kind"] == {"group": "", "version": "v1", "kind": "Node"}
    assert "fieldValidation" in [p["name"] for p in patch["parameters"]]


def test_openapi_v2_protobuf_document(cluster):
    status, headers, body = raw_request(
        cluster.kubeconfig,
        "GET",
        "/openapi/v2",
        headers={"Accept": "application/com.github.proto-openapi.spec.v2@v1.0+protobuf"},
    )
    assert status == 200 and "protobuf" in headers["Content-Type"]
    top = dict((n, v) for n, v in protobuf.fields(body) if n != 8)
    assert top[1] == b"2.0"
    paths = [v for n, v in protobuf.fields(body) if n == 8][0]
    names = [dict(protobuf.fields(item))[1] for n, item in protobuf.fields(paths) if n == 2]
    assert b"/api/v1/nodes/{name}" in names


def test_protobuf_config_map_create(cluster, core):
    f = protobuf.field
    meta = f(1, "pb-cm") + f(2, "") + f(8, b"")
    entry = f(1, "kubelet") + f(2, "maxPods: 50\n")
    binary = f(1, "blob") + f(2, b"\x00\x01")
    cm = f(1, meta) + f(2, entry) + f(3, binary)
    unknown = f(1, f(1, "v1") + f(2, "ConfigMap")) + f(2, cm) + f(3, "") + f(4, "")
    status, _, body = raw_request(
        cluster.kubeconfig,
        "POST",
        "/api/v1/namespaces/kube-system/configmaps?fieldManager=kubectl-create",
        b"k8s\x00" + unknown,
        {
            "Content-Type": "application/vnd.kubernetes.protobuf",
            "Accept": "application/vnd.kubernetes.protobuf,application/json",
        },
    )
    assert status == 201, body
    stored = core.read_namespaced_config_map("pb-cm", "kube-system")
    assert stored.data == {"kubelet": "maxPods: 50\n"} and stored.binary_data == {"blob": "AAE="}
    bad = f(1, f(1, "v1") + f(2, "Secret")) + f(2, b"")
    status, _, _ = raw_request(
        cluster.kubeconfig,
        "POST",
        "/api/v1/namespaces/default/configmaps",
        b"k8s\x00" + bad,
        {"Content-Type": "application/vnd.kubernetes.protobuf"},
    )
    assert status == 415


def test_missing_content_type_is_json(cluster, core):
    status, _, _ = raw_request(
        cluster.kubeconfig,
        "POST",
        "/api/v1/namespaces/default/configmaps",
        json.dumps({"metadata": {"name": "no-ct"}}).encode(),
    )
    assert status == 201
    assert core.read_namespaced_config_map("no-ct", "default").metadata.name == "no-ct"


def test_limit_pages_with_continue_tokens(cluster, core):
    core.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name="paging")))
    wait_for(lambda: core.read_namespaced_config_map("kube-root-ca.crt", "paging"), what="the root CA publisher")
    for i in range(7):
        core.create_namespaced_config_map(
            "paging", client.V1ConfigMap(metadata=client.V1ObjectMeta(name=f"cm-{i}", labels={"odd": str(i % 2)}))
        )
    first = core.list_namespaced_config_map("paging", limit=3)
    assert [c.metadata.name for c in first.items] == ["cm-0", "cm-1", "cm-2"]
    assert first.metadata._continue and first.metadata.remaining_item_count == 5
    second = core.list_namespaced_config_map("paging", limit=3, _continue=first.metadata._continue)
    assert [c.metadata.name for c in second.items] == ["cm-3", "cm-4", "cm-5"]
    assert second.metadata.resource_version == first.metadata.resource_version  # the first page's snapshot RV
    last = core.list_namespaced_config_map("paging", limit=3, _continue=second.metadata._continue)
    assert [c.metadata.name for c in last.items] == ["cm-6", "kube-root-ca.crt"] and not last.metadata._continue
    odd = core.list_namespaced_config_map("paging", limit=2, label_selector="odd=1")
    assert [c.metadata.name for c in odd.items] == ["cm-1", "cm-3"]
    assert odd.metadata._continue and odd.metadata.remaining_item_count is None  # not counted with selectors
    from_cache = core.list_namespaced_config_map("paging", limit=3, resource_version="0")
    assert len(from_cache.items) == 8  # resourceVersion=0: the watch cache ignores limit
    with pytest.raises(ApiException) as info:
        core.list_namespaced_config_map("paging", _continue="garbage!")
    assert info.value.status == 400


def test_kubectl_style_table_paging(cluster):
    _, _, page = _get(cluster, "/api/v1/nodes?limit=2", TABLE)
    assert len(page["rows"]) == 2 and page["metadata"]["continue"]
    status, _, rest = _get(cluster, f"/api/v1/nodes?limit=2&continue={page['metadata']['continue']}", TABLE)
    assert status == 200 and len(rest["rows"]) == 2
