"""CRUD through the Python client: server-owned metadata, resourceVersion, conflicts, Status shapes."""

from __future__ import annotations

import json

import pytest
from kubernetes import client
from kubernetes.client.rest import ApiException

from tests.conftest import api_client, raw_request
from kubesim.apiserver.client import local_client


@pytest.fixture(scope="module")
def cluster(kubesim_cluster_module):
    return kubesim_cluster_module(nodes=2)


@pytest.fixture(scope="module")
def core(cluster):
    return client.CoreV1Api(api_client(cluster.kubeconfig))


def _cm(name: str, **data: str) -> client.V1ConfigMap:
    return client.V1ConfigMap(metadata=client.V1ObjectMeta(name=name), data=data)


def test_create_sets_server_owned_metadata(core):
    created = core.create_namespaced_config_map("default", _cm("crud-a", k="v"))
    meta = created.metadata
    assert meta.uid and meta.creation_timestamp is not None
    assert int(meta.resource_version) > 0
    assert meta.namespace == "default"
    assert created.data == {"k": "v"}


def test_every_write_bumps_the_global_resource_version_but_noops_do_not(core):
    first = core.create_namespaced_config_map("default", _cm("crud-rv", k="1"))
    rv1 = int(first.metadata.resource_version)
    patched = core.patch_namespaced_config_map("crud-rv", "default", {"data": {"k": "2"}})
    rv2 = int(patched.metadata.resource_version)
    assert rv2 > rv1
    same = core.patch_namespaced_config_map("crud-rv", "default", {"data": {"k": "2"}})
    assert int(same.metadata.resource_version) == rv2
    listed = core.list_namespaced_config_map("default")
    assert int(listed.metadata.resource_version) >= rv2


def test_replace_with_stale_resource_version_is_409_conflict(core):
    cm = core.create_namespaced_config_map("default", _cm("crud-conflict", k="1"))
    core.patch_namespaced_config_map("crud-conflict", "default", {"data": {"k": "2"}})
    cm.data = {"k": "3"}
    with pytest.raises(ApiException) as info:
        core.replace_namespaced_config_map("crud-conflict", "default", cm)
    assert info.value.status == 409
    body = json.loads(info.value.body)
    assert body["reason"] == "Conflict"
    assert body["message"] == (
        'Operation cannot be fulfilled on configmaps "crud-conflict": the object has been modified; '
        "please apply your changes to the latest version and try again"
    )
    assert body["details"] == {"name": "crud-conflict", "kind": "configmaps"}


def test_replace_without_resource_version_is_unconditional(core):
    core.create_namespaced_config_map("default", _cm("crud-uncond", k="1"))
    replaced = core.replace_namespaced_config_map("crud-uncond", "default", _cm("crud-uncond", k="9"))
    assert replaced.data == {"k": "9"}


def test_duplicate_create_is_409_already_exists(core):
    core.create_namespaced_config_map("default", _cm("crud-dup"))
    with pytest.raises(ApiException) as info:
        core.create_namespaced_config_map("default", _cm("crud-dup"))
    body = json.loads(info.value.body)
    assert (info.value.status, body["reason"]) == (409, "AlreadyExists")
    assert body["message"] == 'configmaps "crud-dup" already exists'


def test_missing_object_is_404_with_status_body(core):
    with pytest.raises(ApiException) as info:
        core.read_node("nope")
    body = json.loads(info.value.body)
    assert info.value.status == 404
    assert body == {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": 'nodes "nope" not found',
        "reason": "NotFound",
        "details": {"name": "nope", "kind": "nodes"},
        "code": 404,
    }


def test_grouped_kinds_name_their_group_in_not_found(cluster):
    coord = client.CoordinationV1Api(api_client(cluster.kubeconfig))
    with pytest.raises(ApiException) as info:
        coord.read_namespaced_lease("nope", "kube-node-lease")
    assert json.loads(info.value.body)["message"] == 'leases.coordination.k8s.io "nope" not found'


def test_unknown_path_is_404_the_server_could_not_find(cluster):
    status, _, body = raw_request(cluster.kubeconfig, "GET", "/api/v1/secrets")
    assert status == 404
    assert json.loads(body)["message"] == "the server could not find the requested resource"


def test_no_token_is_401(cluster):
    status, _, body = raw_request(cluster.kubeconfig, "GET", "/api/v1/nodes", token="")
    assert status == 401
    assert json.loads(body)["reason"] == "Unauthorized"
    status, _, _ = raw_request(cluster.kubeconfig, "GET", "/api/v1/nodes", token="forged")
    assert status == 401


def test_generate_name_events_and_namespace_rules(core):
    event = client.CoreV1Event(
        metadata=client.V1ObjectMeta(generate_name="node-1."),
        involved_object=client.V1ObjectReference(kind="Node", name="node-1", uid="node-1"),
        reason="Test",
        message="hello",
        type="Normal",
    )
    created = core.create_namespaced_event("default", event)
    assert created.metadata.name.startswith("node-1.") and len(created.metadata.name) == len("node-1.") + 5
    with pytest.raises(ApiException) as info:
        core.create_namespaced_config_map("nowhere", _cm("x"))
    assert json.loads(info.value.body)["message"] == 'namespaces "nowhere" not found'
    wrong = _cm("crud-wrong-ns")
    wrong.metadata.namespace = "kube-system"
    with pytest.raises(ApiException) as info:
        core.create_namespaced_config_map("default", wrong)
    assert info.value.status == 400
    assert "does not match the namespace" in json.loads(info.value.body)["message"]


def test_delete_returns_success_status_and_object_is_gone(core):
    core.create_namespaced_config_map("default", _cm("crud-del"))
    status = core.delete_namespaced_config_map("crud-del", "default")
    assert status["status"] == "Success" and status["details"]["name"] == "crud-del"
    with pytest.raises(ApiException) as info:
        core.read_namespaced_config_map("crud-del", "default")
    assert info.value.status == 404


def test_seeded_namespaces_and_namespace_defaults(core):
    names = {ns.metadata.name for ns in core.list_namespace().items}
    assert {"default", "kube-system", "kube-public", "kube-node-lease"} <= names
    created = core.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name="crud-ns")))
    assert created.status.phase == "Active"
    assert created.spec.finalizers == ["kubernetes"]
    assert created.metadata.labels["kubernetes.io/metadata.name"] == "crud-ns"
    with pytest.raises(ApiException) as info:
        core.delete_namespace("kube-system")
    assert info.value.status == 403


def test_immutable_configmap_rejects_data_changes(core):
    cm = _cm("crud-immutable", k="1")
    cm.immutable = True
    core.create_namespaced_config_map("default", cm)
    with pytest.raises(ApiException) as info:
        core.patch_namespaced_config_map("crud-immutable", "default", {"data": {"k": "2"}})
    body = json.loads(info.value.body)
    assert info.value.status == 422
    assert (
        body["message"]
        == 'ConfigMap "crud-immutable" is invalid: data: Forbidden: field is immutable when `immutable` is set'
    )
    assert body["details"]["causes"] == [
        {
            "reason": "FieldValueForbidden",
            "field": "data",
            "message": "Forbidden: field is immutable when `immutable` is set",
        }
    ]
    with pytest.raises(ApiException) as info:
        core.patch_namespaced_config_map("crud-immutable", "default", {"immutable": False})
    assert info.value.status == 422
    labelled = core.patch_namespaced_config_map("crud-immutable", "default", {"metadata": {"labels": {"a": "b"}}})
    assert labelled.metadata.labels == {"a": "b"}


def test_leases_put_with_resource_version(cluster):
    coord = client.CoordinationV1Api(api_client(cluster.kubeconfig))
    lease = client.V1Lease(
        metadata=client.V1ObjectMeta(name="crud-lease"),
        spec=client.V1LeaseSpec(holder_identity="me", lease_duration_seconds=40),
    )
    created = coord.create_namespaced_lease("kube-system", lease)
    created.spec.holder_identity = "you"
    renewed = coord.replace_namespaced_lease("crud-lease", "kube-system", created)
    assert renewed.spec.holder_identity == "you"
    again = coord.replace_namespaced_lease("crud-lease", "kube-system", renewed)  # same content: no-op
    assert again.metadata.resource_version == renewed.metadata.resource_version
    with pytest.raises(ApiException) as info:
        coord.replace_namespaced_lease("crud-lease", "kube-system", created)  # stale RV
    assert info.value.status == 409


def test_pods_list_is_empty(core):
    assert core.list_pod_for_all_namespaces(field_selector="spec.nodeName=node-1").items == []


def test_dry_run_does_not_persist(core):
    core.create_namespaced_config_map("default", _cm("crud-dry"), dry_run="All")
    with pytest.raises(ApiException):
        core.read_namespaced_config_map("crud-dry", "default")


def test_events_expire_after_the_event_ttl():
    """Like etcd's lease on events: an event disappears ``event_ttl`` after its last write.

    The stamps have a second's resolution (``lastTimestamp``), so an event just written may look up
    to a second old: the TTL is 3 s, which leaves a fresh event two seconds of a loaded machine
    (official CI once lost one written a moment before with a TTL of 1 s).
    """
    import asyncio
    import time

    from kubesim.apiserver import ApiServer

    async def scenario():
        server = ApiServer(event_ttl=3.0)
        admin = local_client(server)
        event = {"involvedObject": {"kind": "Node", "name": "n"}, "reason": "Test"}
        await admin.create("/api/v1/namespaces/default/events", {**event, "metadata": {"name": "first"}})
        deadline = time.monotonic() + 30.0
        i = 0
        while time.monotonic() < deadline:  # bounded: each create may run the GC pass (rate limit lifted here)
            server._next_event_gc = 0.0
            await admin.create("/api/v1/namespaces/default/events", {**event, "metadata": {"name": f"later-{i}"}})
            names = [e["metadata"]["name"] for e in (await admin.list("/api/v1/namespaces/default/events"))["items"]]
            if "first" not in names:
                return names, f"later-{i}"
            i += 1
            await asyncio.sleep(0.1)
        raise AssertionError("the event never expired")

    names, newest = asyncio.run(scenario())
    assert newest in names  # expiry drops the old event, not the fresh ones


def test_label_and_annotation_rules(core):
    with pytest.raises(ApiException) as info:
        core.patch_node("node-1", {"metadata": {"labels": {"kubelet-rollout.io/rollout": "not a valid value!"}}})
    body = json.loads(info.value.body)
    assert info.value.status == 422
    assert body["details"]["causes"][0]["field"] == "metadata.labels"
    assert body["details"]["causes"][0]["message"].startswith(
        'Invalid value: "not a valid value!": a valid label must be an empty string or consist of alphanumeric'
    )
    with pytest.raises(ApiException) as info:
        core.create_namespaced_config_map(
            "default", client.V1ConfigMap(metadata=client.V1ObjectMeta(name="bad-key", labels={"a/b/c": "x"}))
        )
    assert info.value.status == 422
    with pytest.raises(ApiException) as info:
        core.patch_node("node-1", {"metadata": {"annotations": {"big": "x" * (256 * 1024)}}})
    assert json.loads(info.value.body)["details"]["causes"] == [
        {
            "reason": "FieldValueTooLong",
            "message": "Too long: must have at most 262144 bytes",
            "field": "metadata.annotations",
        }
    ]
    ok = core.patch_node("node-1", {"metadata": {"annotations": {"kubelet-rollout.io/previous-source": '{"x": 1}'}}})
    assert ok.metadata.annotations["kubelet-rollout.io/previous-source"] == '{"x": 1}'


def test_configmap_data_is_limited_to_one_mebibyte_in_bytes_not_characters(core):
    """As the API server counts it: 600,000 two-byte characters are 1.2 MB, over the limit."""
    with pytest.raises(ApiException) as info:
        core.create_namespaced_config_map("default", _cm("too-big", text="\u00e9" * 600_000))
    assert info.value.status == 422
    assert "must have at most 1048576 bytes" in info.value.body
    core.create_namespaced_config_map("default", _cm("fits", text="\u00e9" * 500_000))


def test_unknown_fields_are_dropped_like_a_1_23_server(cluster, core):
    from tests.conftest import raw_request

    status, _, body = raw_request(
        cluster.kubeconfig,
        "POST",
        "/api/v1/namespaces/default/configmaps",
        {"metadata": {"name": "unknown-fields", "bogus": 1}, "data": {"k": "v"}, "extra": True},
        {"Content-Type": "application/json"},
    )
    created = json.loads(body)
    assert status == 201 and "extra" not in created and "bogus" not in created["metadata"]
    typo = {"spec": {"configsource": {"configMap": {"name": "x"}}, "unschedulable": False}}
    patched = core.patch_node("node-2", typo)  # accepted: the typo simply vanishes
    raw = json.loads(core.read_node("node-2", _preload_content=False).data)
    assert "configsource" not in raw["spec"] and patched.spec.config_source is None


def test_omitempty_zero_values_are_not_stored_and_make_no_op_patches(core):
    before = core.create_node({"metadata": {"name": "no-kubelet"}, "spec": {"unschedulable": False}})
    assert before.spec.unschedulable is None
    after = core.patch_node("no-kubelet", {"spec": {"unschedulable": False}, "metadata": {"labels": {}}})
    assert after.metadata.resource_version == before.metadata.resource_version  # nothing stored changed
    created = core.create_namespaced_config_map("default", {"metadata": {"name": "empty-data"}, "data": {}})
    assert created.data is None
    core.delete_node("no-kubelet")


def test_every_namespace_gets_the_root_ca_config_map(cluster, core):
    from kubesim.kubeconfig import read
    from tests.conftest import wait_for

    core.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name="root-ca")))
    for namespace in ("kube-system", "default", "root-ca"):
        cm = wait_for(lambda ns=namespace: core.read_namespaced_config_map("kube-root-ca.crt", ns), what=namespace)
        assert cm.data["ca.crt"] == read(cluster.kubeconfig).ca_pem.decode()


def test_in_process_callers_keep_ownership_of_their_bodies():
    """The LocalClient does not copy bodies; the registry must never keep (or change) the caller's dicts."""
    import asyncio

    from kubesim.apiserver import ApiServer

    async def scenario():
        server = ApiServer()
        admin = local_client(server)
        body = {"metadata": {"name": "mine", "labels": {"a": "1"}}, "data": {"k": "v"}}
        await admin.create("/api/v1/namespaces/default/configmaps", body)
        patch = {"metadata": {"labels": {"b": "2"}}, "data": {"k": "w"}}
        await admin.patch("/api/v1/namespaces/default/configmaps/mine", patch)
        body["data"]["k"] = "changed by the caller"
        patch["metadata"]["labels"]["b"] = "changed too"
        return body, await admin.get("/api/v1/namespaces/default/configmaps/mine")

    body, stored = asyncio.run(scenario())
    assert body == {"metadata": {"name": "mine", "labels": {"a": "1"}}, "data": {"k": "changed by the caller"}}
    assert stored["data"] == {"k": "w"} and stored["metadata"]["labels"] == {"a": "1", "b": "2"}
