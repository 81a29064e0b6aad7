"""Modern mode (1.31) seen through the API: the DKC fields are gone from Nodes, kubelets report no
``status.config``, the node proxy serves the merged running config, and the host endpoints admit
the admin and each node's own credentials only."""

from __future__ import annotations

import json

import pytest
from kubernetes import client

from kubesim.host.client import Host, HostError
from tests.conftest import api_client, raw_request
from tests.kubesim.kubectl_helpers import BINARIES, Kubectl, needs_kubectl

SOURCE = {"configMap": {"name": "cfg", "namespace": "kube-system", "kubeletConfigKey": "kubelet"}}


@pytest.fixture(scope="module")
def cluster(kubesim_cluster_module):
    return kubesim_cluster_module(nodes=2, kubernetes_version="1.31", time_scale=20)


@pytest.fixture(scope="module")
def core(cluster):
    return client.CoreV1Api(api_client(cluster.kubeconfig))


def _config_source(core, name):
    node = core.read_node(name)
    return node.spec.config_source, node.status.config


# --- the API server ------------------------------------------------------------------------------


def test_version_is_1_31(cluster):
    status, _, body = raw_request(cluster.kubeconfig, "GET", "/version")
    assert status == 200
    assert (json.loads(body)["minor"], json.loads(body)["gitVersion"]) == ("31", "v1.31.4")


def test_kubelets_report_their_version_and_no_status_config(core):
    for node in core.list_node().items:
        assert node.status.node_info.kubelet_version == "v1.31.4"
        assert node.status.config is None


@pytest.mark.parametrize("content_type", ["strategic-merge-patch", "merge-patch"])
def test_config_source_is_silently_dropped_by_patch(cluster, core, content_type):
    status, _, body = raw_request(
        cluster.kubeconfig,
        "PATCH",
        "/api/v1/nodes/node-1",
        {"spec": {"configSource": SOURCE}},
        headers={"Content-Type": f"application/{content_type}+json"},
    )
    assert status == 200, body
    assert "configSource" not in json.loads(body)["spec"]
    assert _config_source(core, "node-1") == (None, None)


def test_config_source_is_silently_dropped_by_update_and_create(core):
    node = core.read_node("node-2")
    node.spec.config_source = client.V1NodeConfigSource(
        config_map=client.V1ConfigMapNodeConfigSource(
            name="cfg", namespace="kube-system", kubelet_config_key="kubelet"
        )
    )
    core.replace_node("node-2", node)
    assert _config_source(core, "node-2") == (None, None)
    created = core.create_node({"metadata": {"name": "extra"}, "spec": {"configSource": SOURCE}})
    assert created.spec.config_source is None
    core.delete_node("extra")


def test_status_config_is_dropped_too(cluster, core):
    node_api = client.CoreV1Api(api_client(cluster.node_kubeconfig("node-1")))
    status = {"active": SOURCE | {"configMap": SOURCE["configMap"] | {"uid": "u", "resourceVersion": "1"}}}
    node_api.patch_node_status("node-1", {"status": {"config": status}})
    assert _config_source(core, "node-1") == (None, None)


@needs_kubectl
def test_kubectl_patch_of_config_source_is_a_no_op(cluster, tmp_path):
    kubectl = Kubectl(BINARIES[0], cluster.kubeconfig, tmp_path)
    kubectl.run("patch", "node", "node-1", "-p", json.dumps({"spec": {"configSource": SOURCE}}))
    out = kubectl.run("get", "node", "node-1", "-o", "jsonpath={.spec.configSource}").stdout
    assert out == ""


@needs_kubectl
def test_kubectl_reads_configz_healthz_and_the_journal_raw(cluster, tmp_path):
    kubectl = Kubectl(BINARIES[0], cluster.kubeconfig, tmp_path)
    assert kubectl.run("get", "--raw", "/api/v1/nodes/node-2/proxy/healthz").stdout == "ok"
    configz = json.loads(kubectl.run("get", "--raw", "/api/v1/nodes/node-2/proxy/configz").stdout)
    assert configz["kubeletconfig"]["cgroupDriver"] == "cgroupfs"
    journal = json.loads(kubectl.run("get", "--raw", "/kubesim/v1/hosts/node-2/journal?lines=2").stdout)
    assert journal["unit"] == "kubelet" and len(journal["lines"]) == 2


def test_1_23_keeps_config_source(kubesim_cluster):
    legacy = kubesim_cluster(nodes=1)
    core = client.CoreV1Api(api_client(legacy.kubeconfig))
    core.patch_node("node-1", {"spec": {"configSource": SOURCE}})
    assert core.read_node("node-1").spec.config_source.config_map.name == "cfg"


# --- the kubelet through the node proxy -----------------------------------------------------------


def test_configz_and_healthz_through_the_node_proxy(cluster, core):
    configz = json.loads(core.connect_get_node_proxy_with_path("node-1", "configz", _preload_content=False).data)
    assert configz["kubeletconfig"]["maxPods"] == 110
    health = core.connect_get_node_proxy_with_path("node-1", "healthz", _preload_content=False)
    assert (health.status, health.data) == (200, b"ok")


# --- host control authorization ---------------------------------------------------------------


def _host_as(cluster, node, kubeconfig):
    return Host(cluster.node_dir(node) / "host", node, kubeconfig)


def test_admin_and_own_node_may_drive_a_host(cluster):
    assert cluster.host("node-1").systemctl("is-active", "kubelet").stdout == "active\n"
    own = _host_as(cluster, "node-1", cluster.node_kubeconfig("node-1"))
    assert own.show("ActiveState")["ActiveState"] == "active"
    assert own.journal(lines=5)
    # the kubeconfig kubeadm leaves on the host carries the same identity
    assert cluster.host("node-1").as_node().show("SubState") == {"SubState": "running"}


def test_another_nodes_credentials_are_forbidden(cluster):
    other = _host_as(cluster, "node-1", cluster.node_kubeconfig("node-2"))
    for call in (lambda: other.systemctl("restart", "kubelet"), lambda: other.journal()):
        with pytest.raises(HostError, match="403"):
            call()


def test_anonymous_is_rejected(cluster):
    status, _, _ = raw_request(
        cluster.kubeconfig, "POST", "/kubesim/v1/hosts/node-1/systemctl", {"args": ["status"]}, token="nope"
    )
    assert status == 401


def test_unknown_host_is_404(cluster):
    with pytest.raises(HostError, match="404"):
        _host_as(cluster, "nope", cluster.kubeconfig).journal()
