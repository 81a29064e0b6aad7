"""The real kubectl (PATH dispatcher, 1.27, 1.33) against kubesim: every command of the tutorial
works and prints what it prints against a real 1.23 API server."""

from __future__ import annotations

import json
import re

import pytest
import yaml
from kubernetes import client

from tests.conftest import api_client
from tests.kubesim.kubectl_helpers import BINARIES, Kubectl, needs_kubectl

pytestmark = needs_kubectl

KUBELET_CONFIG = "apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\neventRecordQPS: 7\n"


@pytest.fixture(scope="module")
def cluster(kubesim_cluster_module):
    return kubesim_cluster_module(nodes=len(BINARIES) + 1)


@pytest.fixture(params=BINARIES, ids=lambda b: b.rsplit("/", 1)[-1])
def kubectl(request, cluster, tmp_path):
    return Kubectl(request.param, cluster.kubeconfig, tmp_path)


@pytest.fixture
def node(kubectl):
    """A node of its own for each kubectl binary, so binaries do not see each other's edits."""
    return f"node-{BINARIES.index(kubectl.binary) + 1}"


def test_get_nodes_prints_server_side_columns(kubectl, cluster):
    out = kubectl.run("get", "nodes").stdout.splitlines()
    assert re.split(r"\s+", out[0].strip()) == ["NAME", "STATUS", "ROLES", "AGE", "VERSION"]
    rows = {line.split()[0]: line.split() for line in out[1:]}
    assert rows["control-plane-1"][1:3] == ["Ready", "control-plane"]
    assert rows["node-1"][1:3] == ["Ready", "<none>"] and rows["node-1"][4] == "v1.23.17"
    wide = kubectl.run("get", "nodes", "-o", "wide").stdout.splitlines()[0]
    assert "INTERNAL-IP" in wide and "CONTAINER-RUNTIME" in wide


def test_get_node_json_piped_to_jq(kubectl, node):
    result = kubectl.shell(f'"$KUBECTL" get node {node} -o json | jq -c .metadata.name')
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == f'"{node}"'
    result = kubectl.shell(f'"$KUBECTL" get no {node} -o json | jq .status.config')
    assert result.returncode == 0, result.stderr


def test_create_configmap_with_append_hash(kubectl, cluster):
    source = kubectl.home / "kubelet"
    source.write_text(KUBELET_CONFIG)
    name = f"cm-{kubectl.label.replace('.', '-')}"
    out = kubectl.run(
        "-n", "kube-system", "create", "configmap", name, f"--from-file=kubelet={source}", "--append-hash", "-o", "yaml"
    ).stdout
    created = yaml.safe_load(out)
    assert re.fullmatch(rf"{name}-[a-z0-9]{{10}}", created["metadata"]["name"])
    assert created["data"] == {"kubelet": KUBELET_CONFIG}
    assert created["metadata"]["uid"] and created["metadata"]["resourceVersion"]
    again = kubectl.run(
        "-n", "kube-system", "create", "configmap", name, f"--from-file=kubelet={source}", "--append-hash", check=False
    )
    assert again.returncode != 0 and "already exists" in again.stderr


def test_patch_node_and_patch_no_change(kubectl, node):
    patch = (
        '{"spec":{"configSource":{"configMap":{"name":"p","namespace":"kube-system","kubeletConfigKey":"kubelet"}}}}'
    )
    label = '{"metadata":{"labels":{"patched-twice":"yes"}}}'
    assert kubectl.run("patch", "node", node, "-p", label).stdout.strip() == f"node/{node} patched"
    # the same patch again changes nothing (a label: the kubelet does not react to it mid-command;
    # done before the configSource patch, whose status.config error the kubelet writes meanwhile)
    assert kubectl.run("patch", "node", node, "-p", label).stdout.strip() == f"node/{node} patched (no change)"
    first = kubectl.run("patch", "node", node, "-p", patch)
    assert first.stdout.strip() == f"node/{node} patched"
    assert "spec.configSource: deprecated" in first.stderr
    kubectl.run("patch", "node", node, "--type", "merge", "-p", '{"spec":{"configSource":null}}')


def test_patch_with_invalid_source_shows_causes(kubectl, node):
    patch = '{"spec":{"configSource":{"configMap":{"name":"p","namespace":"kube-system","kubeletConfigKey":"kubelet","uid":"x"}}}}'
    result = kubectl.run("patch", "node", node, "-p", patch, check=False)
    assert result.returncode == 1
    assert (
        f'The Node "{node}" is invalid: spec.configSource.configMap.uid: Forbidden: uid must not be set in spec'
        in result.stderr
    )


def test_edit_node_with_scripted_editor(kubectl, node, cluster):
    edit = {
        "metadata": {"labels": {"edited": "yes"}},
        "spec": {
            "configSource": {"configMap": {"name": "edited", "namespace": "kube-system", "kubeletConfigKey": "kubelet"}}
        },
    }
    result = kubectl.run("edit", "node", node, EDITOR=kubectl.editor(), KUBESIM_EDIT=json.dumps(edit))
    assert result.stdout.strip() == f"node/{node} edited"
    got = json.loads(kubectl.run("get", "node", node, "-o", "json").stdout)
    assert got["metadata"]["labels"]["edited"] == "yes"
    assert got["spec"]["configSource"]["configMap"]["name"] == "edited"
    removal = {"spec": {"configSource": None}}
    kubectl.run("edit", "node", node, EDITOR=kubectl.editor(), KUBESIM_EDIT=json.dumps(removal))
    assert "configSource" not in json.loads(kubectl.run("get", "node", node, "-o", "json").stdout)["spec"]


def test_wait_for_jsonpath(kubectl, node):
    kubectl.run("label", "node", node, "wait-for=me", "--overwrite")
    result = kubectl.run("wait", f"node/{node}", "--for=jsonpath={.metadata.labels.wait-for}=me", "--timeout=20s")
    assert result.stdout.strip() == f"node/{node} condition met"
    timed_out = kubectl.run(
        "wait", f"node/{node}", "--for=jsonpath={.metadata.labels.wait-for}=never", "--timeout=1s", check=False
    )
    assert timed_out.returncode == 1 and "timed out" in timed_out.stderr
    missing = kubectl.run("wait", "node/nope", "--for=jsonpath={.x}=y", "--timeout=2s", check=False)
    assert 'nodes "nope" not found' in missing.stderr


def test_get_nodes_watch(kubectl):
    result = kubectl.run("get", "nodes", "-w", "--request-timeout=2s", timeout=20, check=False)
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert sum(1 for line in lines if line.startswith("NAME")) == 1
    assert any(line.startswith("node-1 ") for line in lines)


def test_describe_node(kubectl, node):
    out = kubectl.run("describe", "node", node).stdout
    for section in (
        "Name:",
        "Roles:",
        "Labels:",
        "Conditions:",
        "Lease:",
        "Capacity:",
        "System Info:",
        "Non-terminated Pods:",
        "Events:",
    ):
        assert section in out, section
    assert f"HolderIdentity:  {node}" in out
    assert re.search(r"Ready\s+True", out)


def test_label_and_cordon(kubectl, node, cluster):
    assert kubectl.run("label", "node", node, "tier=canary", "--overwrite").stdout.strip() == f"node/{node} labeled"
    assert kubectl.run("label", "node", node, "tier-").stdout.strip() == f"node/{node} unlabeled"
    assert kubectl.run("cordon", node).stdout.strip() == f"node/{node} cordoned"
    assert kubectl.run("cordon", node).stdout.strip() == f"node/{node} already cordoned"
    row = kubectl.run("get", "node", node).stdout.splitlines()[1].split()
    assert row[1] == "Ready,SchedulingDisabled"
    assert kubectl.run("uncordon", node).stdout.strip() == f"node/{node} uncordoned"


def test_get_events_and_configmaps_tables(kubectl):
    out = kubectl.run("get", "events", "-A").stdout.splitlines()
    assert out[0].split()[:4] == ["NAMESPACE", "LAST", "SEEN", "TYPE"]
    out = kubectl.run("-n", "kube-node-lease", "get", "leases").stdout.splitlines()
    assert out[0].split() == ["NAME", "HOLDER", "AGE"]
    empty = kubectl.run("get", "pods")
    assert "No resources found in default namespace." in empty.stderr


def test_node_proxy_configz_through_kubectl_get_raw(kubectl, node, cluster):
    result = kubectl.run("get", "--raw", f"/api/v1/nodes/{node}/proxy/configz")
    assert "kubeletconfig" in json.loads(result.stdout)


def test_get_nodes_watch_prints_live_changes_as_table_rows(kubectl, node, cluster):
    import subprocess

    core = client.CoreV1Api(api_client(cluster.kubeconfig))
    process = subprocess.Popen(
        [kubectl.binary, "get", "nodes", "-w", "--request-timeout=8s"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=kubectl.env(),
    )
    try:
        lines = [process.stdout.readline()]  # header
        while not lines[-1].startswith(node + " "):
            lines.append(process.stdout.readline())
        core.patch_node(node, {"spec": {"unschedulable": True}})
        while "SchedulingDisabled" not in lines[-1]:
            line = process.stdout.readline()
            assert line, "watch ended without showing the change"
            lines.append(line)
        assert lines[-1].split()[:2] == [node, "Ready,SchedulingDisabled"]
    finally:
        core.patch_node(node, {"spec": {"unschedulable": None}})
        process.kill()
        process.wait()


def test_create_namespace_and_client_side_apply(kubectl):
    suffix = kubectl.label.replace(".", "-")
    assert kubectl.run("create", "namespace", f"ns-{suffix}").stdout.strip() == f"namespace/ns-{suffix} created"
    manifest = kubectl.home / "cm.yaml"
    manifest.write_text(
        f'apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: applied\n  namespace: ns-{suffix}\ndata:\n  a: "1"\n'
    )
    assert kubectl.run("apply", "-f", str(manifest)).stdout.strip() == "configmap/applied created"
    manifest.write_text(manifest.read_text().replace('"1"', '"2"'))
    assert kubectl.run("apply", "-f", str(manifest)).stdout.strip() == "configmap/applied configured"
    assert kubectl.run("apply", "-f", str(manifest)).stdout.strip() == "configmap/applied unchanged"
    ssa = kubectl.run("apply", "--server-side", "-f", str(manifest), check=False)
    assert ssa.returncode != 0 and "Server-side apply not available on the server" in ssa.stderr
    assert kubectl.run("delete", "namespace", f"ns-{suffix}").stdout.strip() == f'namespace "ns-{suffix}" deleted'


def test_status_subresource_get_and_patch(kubectl, node):
    rows = kubectl.run("get", "node", node, "--subresource=status").stdout.splitlines()
    assert rows[0].split() == ["NAME", "STATUS", "ROLES", "AGE", "VERSION"]
    patched = kubectl.run(
        "patch",
        "node",
        node,
        "--subresource=status",
        "--type=merge",
        "-p",
        '{"status":{"config":{"error":"set by kubectl"}}}',
    )
    assert patched.stdout.strip() == f"node/{node} patched"
