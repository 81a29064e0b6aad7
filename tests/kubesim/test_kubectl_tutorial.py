"""Seed 001 ("Reconfigure a Node's Kubelet in a Live Cluster") run verbatim with the real kubectl, curl
and jq: configz through ``kubectl proxy``, ``create configmap --append-hash``, ``edit node``,
watching ``status.config`` go assigned/active/lastKnownGood, a bad config's error and fallback, and
the reset to the local config. Timings are scaled (trial 2 s) but the sequence is the real one."""

from __future__ import annotations

import json
import re
import subprocess

import pytest
import yaml

from tests.conftest import wait_for
from tests.kubesim.kubectl_helpers import BINARIES, Kubectl, needs_kubectl

pytestmark = [needs_kubectl, pytest.mark.slow]


@pytest.fixture(scope="module")
def cluster(kubesim_cluster_module):
    return kubesim_cluster_module(nodes=len(BINARIES), time_scale=60, trial_period="2m")


@pytest.fixture(params=BINARIES, ids=lambda b: b.rsplit("/", 1)[-1])
def kubectl(request, cluster, tmp_path):
    return Kubectl(request.param, cluster.kubeconfig, tmp_path)


def _proxy(kubectl: Kubectl) -> tuple[subprocess.Popen[str], int]:
    process = subprocess.Popen(
        [kubectl.binary, "proxy", "--port=0"], stdout=subprocess.PIPE, text=True, env=kubectl.env()
    )
    line = process.stdout.readline()
    match = re.search(r"127\.0\.0\.1:(\d+)", line)
    assert match, line
    return process, int(match.group(1))


def _config_status(kubectl: Kubectl, node: str) -> dict:
    result = kubectl.shell(f'"$KUBECTL" get no {node} -o json | jq ".status.config"')
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)


def _wait(kubectl: Kubectl, node: str, jsonpath: str, value: str, timeout: str = "60s") -> None:
    kubectl.run("wait", f"node/{node}", f"--for=jsonpath={{{jsonpath}}}={value}", f"--timeout={timeout}", timeout=90)


def _push(kubectl: Kubectl, name: str, path) -> str:
    out = kubectl.run(
        "-n", "kube-system", "create", "configmap", name, f"--from-file=kubelet={path}", "--append-hash", "-o", "yaml"
    ).stdout
    return yaml.safe_load(out)["metadata"]["name"]


def _edit(kubectl: Kubectl, node: str, change: dict) -> None:
    result = kubectl.run("edit", "node", node, EDITOR=kubectl.editor(), KUBESIM_EDIT=json.dumps(change))
    assert result.stdout.strip() == f"node/{node} edited"


def _source(name: str) -> dict:
    return {
        "spec": {
            "configSource": {"configMap": {"name": name, "namespace": "kube-system", "kubeletConfigKey": "kubelet"}}
        }
    }


def test_seed_001_tutorial(kubectl, cluster):
    index = BINARIES.index(kubectl.binary)
    node, qps = f"node-{index + 1}", 7 + index  # distinct content per binary: distinct hash names
    home = kubectl.home
    # DKC on, nothing assigned: {} (E3), once the kubelet's first status push is through
    wait_for(lambda: _config_status(kubectl, node) == {}, timeout=30, interval=0.2, what="status.config == {}")

    # Generate the configuration file from configz through kubectl proxy + curl + jq.
    proxy, port = _proxy(kubectl)
    try:
        fetch = kubectl.shell(
            f'NODE_NAME="{node}"; curl -sSL "http://localhost:{port}/api/v1/nodes/${{NODE_NAME}}/proxy/configz" '
            '| jq \'.kubeletconfig|.kind="KubeletConfiguration"|.apiVersion="kubelet.config.k8s.io/v1beta1"\' '
            f"> {home}/kubelet_configz_${{NODE_NAME}}"
        )
        assert fetch.returncode == 0, fetch.stderr
        config_file = home / f"kubelet_configz_{node}"
        config = json.loads(config_file.read_text())
        assert config["kind"] == "KubeletConfiguration"

        # Edit it (eventRecordQPS), push it, point the node at it with kubectl edit.
        config["eventRecordQPS"] = qps
        config_file.write_text(json.dumps(config))
        good = _push(kubectl, "my-node-config", config_file)
        _edit(kubectl, node, _source(good))

        # Observe: assigned and active first, lastKnownGood after the (scaled) 10-minute trial.
        _wait(kubectl, node, ".status.config.active.configMap.name", good)
        status = _config_status(kubectl, node)
        assert status["assigned"] == status["active"]
        assert status["assigned"]["configMap"]["uid"] and status["assigned"]["configMap"]["resourceVersion"]
        _wait(kubectl, node, ".status.config.lastKnownGood.configMap.name", good)
        configz = kubectl.shell(
            f'curl -sS "http://localhost:{port}/api/v1/nodes/{node}/proxy/configz" | jq .kubeletconfig.eventRecordQPS'
        )
        assert configz.stdout.strip() == str(qps)
    finally:
        proxy.terminate()
        proxy.wait()

    # A bad config (fails validation) falls back to the last-known-good one and reports why.
    config["eventRecordQPS"] = -qps
    bad_file = home / "bad"
    bad_file.write_text(json.dumps(config))
    bad = _push(kubectl, "my-node-config", bad_file)
    patch = json.dumps(_source(bad))
    assert kubectl.run("patch", "node", node, "-p", patch).stdout.strip() == f"node/{node} patched"
    _wait(kubectl, node, ".status.config.assigned.configMap.name", bad)
    _wait(kubectl, node, ".status.config.error", '"failed to validate config, see Kubelet log for details"')
    status = _config_status(kubectl, node)
    assert status["active"]["configMap"]["name"] == good
    assert status["lastKnownGood"]["configMap"]["name"] == good

    # Reset to the local config by removing configSource: status.config becomes empty.
    _edit(kubectl, node, {"spec": {"configSource": None}})
    wait_for(lambda: _config_status(kubectl, node) == {}, timeout=60, interval=0.2, what="status.config == {}")
