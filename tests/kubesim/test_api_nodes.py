"""Node API semantics of a 1.23 API server: E13 validation, spec/status split, the DynamicKubeletConfig
gate (silent drops), NodeRestriction and the node authorizer (E12), through the Python client."""

from __future__ import annotations

import asyncio
import json

import pytest
from kubernetes import client
from kubernetes.client.rest import ApiException

from kubesim.apiserver import ApiError, ApiServer
from kubesim.apiserver.client import local_client
from tests.conftest import api_client, wait_for


@pytest.fixture(scope="module")
def cluster(kubesim_cluster_module):
    return kubesim_cluster_module(nodes=3)


@pytest.fixture(scope="module")
def core(cluster):
    return client.CoreV1Api(api_client(cluster.kubeconfig))


def node_core(cluster, name):
    return client.CoreV1Api(api_client(cluster.node_kubeconfig(name)))


def _source(name="cfg", namespace="kube-system", key="kubelet", **extra):
    cm = {"name": name, "namespace": namespace, "kubeletConfigKey": key, **extra}
    return {"spec": {"configSource": {"configMap": cm}}}


def _invalid(call):
    with pytest.raises(ApiException) as info:
        call()
    assert info.value.status == 422, info.value.body
    return json.loads(info.value.body)


# --- E13 validation --------------------------------------------------------------------------


def test_uid_and_resource_version_are_forbidden_in_spec(core):
    body = _invalid(lambda: core.patch_node("node-1", _source(uid="u", resourceVersion="1")))
    assert body["details"]["kind"] == "Node"
    assert body["details"]["causes"] == [
        {
            "reason": "FieldValueForbidden",
            "message": "Forbidden: uid must not be set in spec",
            "field": "spec.configSource.configMap.uid",
        },
        {
            "reason": "FieldValueForbidden",
            "message": "Forbidden: resourceVersion must not be set in spec",
            "field": "spec.configSource.configMap.resourceVersion",
        },
    ]
    assert body["message"] == (
        'Node "node-1" is invalid: [spec.configSource.configMap.uid: Forbidden: uid must not be set in spec, '
        "spec.configSource.configMap.resourceVersion: Forbidden: resourceVersion must not be set in spec]"
    )


def test_required_fields_of_a_config_map_source(core):
    body = _invalid(lambda: core.patch_node("node-1", _source(name="", namespace="", key="")))
    assert [(c["field"], c["message"]) for c in body["details"]["causes"]] == [
        ("spec.configSource.configMap.namespace", "Required value: namespace must be set"),
        ("spec.configSource.configMap.name", "Required value: name must be set"),
        ("spec.configSource.configMap.kubeletConfigKey", "Required value: kubeletConfigKey must be set"),
    ]


def test_invalid_names_and_keys(core):
    body = _invalid(lambda: core.patch_node("node-1", _source(name="Bad_Name", key="a/b")))
    fields = [(c["field"], c["reason"]) for c in body["details"]["causes"]]
    assert fields == [
        ("spec.configSource.configMap.name", "FieldValueInvalid"),
        ("spec.configSource.configMap.kubeletConfigKey", "FieldValueInvalid"),
    ]
    assert body["details"]["causes"][0]["message"].startswith(
        'Invalid value: "Bad_Name": a lowercase RFC 1123 subdomain'
    )


def test_exactly_one_reference_subfield(core):
    body = _invalid(lambda: core.patch_node("node-1", {"spec": {"configSource": {"configMap": None}}}))
    assert body["details"]["causes"] == [
        {
            "reason": "FieldValueInvalid",
            "field": "spec.configSource",
            "message": "Invalid value: core.NodeConfigSource{ConfigMap:(*core.ConfigMapNodeConfigSource)(nil)}: "
            "exactly one reference subfield must be non-nil",
        }
    ]


def test_status_config_requires_uid_and_resource_version(core):
    status = {
        "status": {
            "config": {
                "assigned": {"configMap": {"name": "cfg", "namespace": "kube-system", "kubeletConfigKey": "kubelet"}}
            }
        }
    }
    body = _invalid(lambda: core.patch_node_status("node-2", status))
    assert [(c["field"], c["message"]) for c in body["details"]["causes"]] == [
        ("status.config.assigned.configMap.uid", "Required value: uid must be set in status"),
        ("status.config.assigned.configMap.resourceVersion", "Required value: resourceVersion must be set in status"),
    ]
    ok = {"status": {"config": {"error": "x"}}}
    assert core.patch_node_status("node-2", ok).status.config.error == "x"


def test_create_path_does_not_validate_config_source(core):
    node = {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": "created-by-admin"},
        **_source(uid="not-validated-on-create"),
    }
    created = core.create_node(node)
    assert created.spec.config_source.config_map.uid == "not-validated-on-create"
    core.delete_node("created-by-admin")


# --- spec/status split -----------------------------------------------------------------------


def test_status_via_main_resource_and_spec_via_status_are_ignored(core):
    after = core.patch_node("node-3", {"status": {"config": {"error": "ignored"}}})
    assert (after.status.config.error if after.status.config else None) != "ignored"
    after = core.patch_node_status("node-3", {"spec": {"unschedulable": True}})
    assert not after.spec.unschedulable


def test_deprecation_warning_header_on_config_source(cluster):
    from tests.conftest import raw_request

    status, headers, _ = raw_request(
        cluster.kubeconfig,
        "PATCH",
        "/api/v1/nodes/node-3",
        _source(name="warned"),
        {"Content-Type": "application/merge-patch+json"},
    )
    assert status == 200
    assert "spec.configSource: deprecated in v1.22" in headers.get("Warning", "")
    raw_request(
        cluster.kubeconfig,
        "PATCH",
        "/api/v1/nodes/node-3",
        {"spec": {"configSource": None}},
        {"Content-Type": "application/merge-patch+json"},
    )


# --- NodeRestriction -------------------------------------------------------------------------


def _forbidden(call):
    with pytest.raises(ApiException) as info:
        call()
    assert info.value.status == 403, info.value.body
    return json.loads(info.value.body)["message"]


def test_node_restriction(cluster, core):
    kubelet = node_core(cluster, "node-1")
    assert (
        _forbidden(lambda: kubelet.patch_node("node-2", {"metadata": {"labels": {"x": "y"}}}))
        == 'nodes "node-2" is forbidden: node "node-1" is not allowed to modify node "node-2"'
    )
    assert (
        _forbidden(lambda: kubelet.patch_node("node-1", _source()))
        == 'nodes "node-1" is forbidden: node "node-1" is not allowed to update configSource to a new non-nil configSource'
    )
    assert (
        _forbidden(lambda: kubelet.patch_node_status("node-2", {"status": {"config": {}}}))
        == 'nodes "node-2" is forbidden: node "node-1" is not allowed to modify node "node-2"'
    )
    assert kubelet.patch_node("node-1", {"metadata": {"labels": {"own": "ok"}}}).metadata.labels["own"] == "ok"
    # a node may drop its configSource (old kubelets do), just not set a new one
    core.patch_node("node-1", _source(name="given"))
    assert kubelet.patch_node("node-1", {"spec": {"configSource": None}}).spec.config_source is None
    with_source = {"apiVersion": "v1", "kind": "Node", "metadata": {"name": "node-new"}, **_source()}
    new_kubelet = node_core(cluster, "node-new")
    assert (
        _forbidden(lambda: new_kubelet.create_node(with_source))
        == 'nodes "node-new" is forbidden: node "node-new" is not allowed to create pods with a non-nil configSource'
    )


def test_node_lease_restriction(cluster):
    coord = client.CoordinationV1Api(api_client(cluster.node_kubeconfig("node-1")))
    lease = client.V1Lease(metadata=client.V1ObjectMeta(name="node-2"), spec=client.V1LeaseSpec(holder_identity="x"))
    assert (
        _forbidden(lambda: coord.create_namespaced_lease("kube-node-lease", lease))
        == 'leases.coordination.k8s.io "node-2" is forbidden: can only access node lease with the same name as the requesting node'
    )
    lease.metadata.name = "node-1"
    assert 'can only access leases in the "kube-node-lease" namespace' in _forbidden(
        lambda: coord.create_namespaced_lease("default", lease)
    )


def test_node_rbac_denials(cluster):
    kubelet = node_core(cluster, "node-1")
    assert _forbidden(kubelet.list_namespace) == (
        'namespaces is forbidden: User "system:node:node-1" cannot list resource "namespaces" '
        'in API group "" at the cluster scope'
    )
    assert kubelet.read_node("node-2").metadata.name == "node-2"  # system:node may read nodes
    assert kubelet.list_pod_for_all_namespaces(field_selector="spec.nodeName=node-1").items == []


# --- node authorizer (E12) -------------------------------------------------------------------


def test_node_reads_only_its_assigned_config_map_after_the_edge_appears(cluster, core):
    for name in ("authz-a", "authz-b"):
        core.create_namespaced_config_map(
            "kube-system", client.V1ConfigMap(metadata=client.V1ObjectMeta(name=name), data={"kubelet": "{}"})
        )
    kubelet = node_core(cluster, "node-2")
    message = _forbidden(lambda: kubelet.read_namespaced_config_map("authz-a", "kube-system"))
    assert message == (
        'configmaps "authz-a" is forbidden: User "system:node:node-2" cannot get resource '
        '"configmaps" in API group "" in the namespace "kube-system": '
        "no relationship found between node 'node-2' and this object"
    )
    core.patch_node("node-2", _source(name="authz-a"))
    wait_for(lambda: kubelet.read_namespaced_config_map("authz-a", "kube-system"), what="edge to authz-a")
    listed = kubelet.list_namespaced_config_map("kube-system", field_selector="metadata.name=authz-a")
    assert [cm.metadata.name for cm in listed.items] == ["authz-a"]
    assert _forbidden(lambda: kubelet.list_namespaced_config_map("kube-system")).endswith(": No Object name found")
    assert "can only read resources of this type" in _forbidden(
        lambda: kubelet.delete_namespaced_config_map("authz-a", "kube-system")
    )
    core.patch_node("node-2", _source(name="authz-b"))
    wait_for(lambda: kubelet.read_namespaced_config_map("authz-b", "kube-system"), what="edge to authz-b")
    _forbidden(lambda: kubelet.read_namespaced_config_map("authz-a", "kube-system"))


def test_the_edge_lags_behind_the_spec_write(tmp_path):
    """Right after an assignment the kubelet sees 403 (transient), then access (E12)."""

    async def scenario():
        server = ApiServer(authz_lag=0.5)
        admin, kubelet = local_client(server), local_client(server, "system:node:n1")
        await kubelet.create("/api/v1/nodes", {"metadata": {"name": "n1"}})
        await admin.create("/api/v1/namespaces/kube-system/configmaps", {"metadata": {"name": "c"}})
        await admin.patch("/api/v1/nodes/n1", _source(name="c"))
        with pytest.raises(ApiError) as info:
            await kubelet.get("/api/v1/namespaces/kube-system/configmaps/c")
        assert info.value.code == 403
        for _ in range(200):
            try:
                return await kubelet.get("/api/v1/namespaces/kube-system/configmaps/c")
            except ApiError:
                await asyncio.sleep(0.01)
        raise AssertionError("edge never appeared")

    assert asyncio.run(scenario())["metadata"]["name"] == "c"


def test_an_authorizer_that_loses_the_race_refuses_exactly_the_first_ask_however_late(tmp_path):
    """``authz_loses_race``: one 403 per assignment, whether the kubelet asks before or after the lag."""

    async def scenario():
        server = ApiServer(authz_lag=0.05, authz_loses_race=True)
        admin = local_client(server)
        codes: dict[str, list[int]] = {}
        for node, late in (("early", False), ("late", True)):
            kubelet = local_client(server, f"system:node:{node}")
            await kubelet.create("/api/v1/nodes", {"metadata": {"name": node}})
            await admin.create("/api/v1/namespaces/kube-system/configmaps", {"metadata": {"name": f"c-{node}"}})
            await admin.patch(f"/api/v1/nodes/{node}", _source(name=f"c-{node}"))
            if late:
                await asyncio.sleep(0.2)  # the lag is long over before the first ask
            codes[node] = []
            for _ in range(3):
                try:
                    await kubelet.get(f"/api/v1/namespaces/kube-system/configmaps/c-{node}")
                    codes[node].append(200)
                except ApiError as exc:
                    codes[node].append(exc.code)
                await asyncio.sleep(0.1)
        return codes

    assert asyncio.run(scenario()) == {"early": [403, 200, 200], "late": [403, 200, 200]}


# --- the gate off ----------------------------------------------------------------------------


def test_gate_off_drops_new_config_source_and_first_status_config(kubesim_cluster):
    cluster = kubesim_cluster(nodes=1, gate_enabled=False)
    core = client.CoreV1Api(api_client(cluster.kubeconfig))
    patched = core.patch_node("node-1", _source(name="dropped"))
    assert patched.spec.config_source is None  # accepted (200) and silently dropped
    status = {"status": {"config": {"error": "first-time"}}}
    assert core.patch_node_status("node-1", status).status.config is None


def test_gate_off_keeps_an_in_use_config_source_and_maintains_no_edges(tmp_path):
    async def scenario():
        on = ApiServer(state_dir=tmp_path, gate_enabled=True, authz_lag=0)
        await local_client(on, "system:node:n1").create("/api/v1/nodes", {"metadata": {"name": "n1"}})
        await local_client(on).patch("/api/v1/nodes/n1", _source(name="first"))
        await local_client(on).create("/api/v1/namespaces/kube-system/configmaps", {"metadata": {"name": "second"}})
        on.close()
        off = ApiServer(state_dir=tmp_path, gate_enabled=False, authz_lag=0)
        changed = await local_client(off).patch("/api/v1/nodes/n1", _source(name="second"))
        with pytest.raises(ApiError) as info:
            await local_client(off, "system:node:n1").get("/api/v1/namespaces/kube-system/configmaps/second")
        removed = await local_client(off).patch("/api/v1/nodes/n1", {"spec": {"configSource": None}})
        off.close()
        return changed, info.value, removed

    changed, denied, removed = asyncio.run(scenario())
    assert changed["spec"]["configSource"]["configMap"]["name"] == "second"  # in use: may change
    assert denied.code == 403 and "no relationship found" in denied.message
    assert "configSource" not in removed.get("spec", {})
