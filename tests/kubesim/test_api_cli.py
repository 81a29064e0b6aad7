"""``kubesim up``: one ready line, clean shutdown on SIGTERM, exit 2 on bad flags; cluster files."""

from __future__ import annotations

import signal
import subprocess
import sys

import pytest
from kubernetes import client

from tests.conftest import api_client


def _up(*args: str, **kwargs) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "kubesim", "up", *args], capture_output=True, text=True, timeout=60, **kwargs
    )


@pytest.mark.parametrize(
    "args, message",
    [
        (["--nodes", "2"], "--kubeconfig"),
        (["--kubeconfig", "k", "--nodes", "-1"], "must be >= 0"),
        (["--kubeconfig", "k", "--time-scale", "0"], "must be > 0"),
        (["--kubeconfig", "k", "--trial-period", "ten minutes"], "invalid duration"),
        (["--kubeconfig", "k", "--feature-gates", "NoSuchGate=true"], "unrecognized feature gate"),
        (["--kubeconfig", "k", "--cluster", "/nonexistent.yaml"], "no such file"),
        (["--kubeconfig", "k", "--bogus"], "unrecognized arguments"),
    ],
)
def test_bad_flags_exit_2_with_a_clear_message(args, message, tmp_path):
    result = _up(*args, cwd=tmp_path)
    assert result.returncode == 2
    assert message in result.stderr
    assert result.stdout == ""


def test_invalid_cluster_file_is_a_usage_error(tmp_path):
    bad = tmp_path / "fleet.yaml"
    bad.write_text("kind: Cluster\npools:\n  - name: x\n    count: -1\n")
    result = _up("--kubeconfig", str(tmp_path / "k"), "--cluster", str(bad))
    assert result.returncode == 2 and "pools.0.count" in result.stderr


def test_up_prints_one_ready_line_and_stops_on_sigterm(tmp_path):
    fleet = tmp_path / "fleet.yaml"
    fleet.write_text(
        "apiVersion: kubesim.kubelet-rollout.io/v1\nkind: Cluster\npools:\n"
        "  - {name: cp, count: 1, controlPlane: true}\n"
        "  - {name: edge, count: 2, zones: [zone-x], labels: {tier: edge}}\n"
    )
    kubeconfig = tmp_path / "kubeconfig"
    process = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "kubesim",
            "up",
            "--kubeconfig",
            str(kubeconfig),
            "--cluster",
            str(fleet),
            "--state-dir",
            str(tmp_path / "state"),
            "--time-scale",
            "60",
            "--restart-delay",
            "5s",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    try:
        line = process.stdout.readline().strip()
        assert line == f"kubesim ready: server={line.split('server=')[1].split()[0]} kubeconfig={kubeconfig} nodes=3"
        assert line.split("server=")[1].startswith("https://127.0.0.1:")
        core = client.CoreV1Api(api_client(kubeconfig))
        nodes = {n.metadata.name: n for n in core.list_node().items}
        assert sorted(nodes) == ["cp-1", "edge-1", "edge-2"]
        assert nodes["edge-1"].metadata.labels["tier"] == "edge"
        assert nodes["edge-2"].metadata.labels["topology.kubernetes.io/zone"] == "zone-x"
        assert "node-role.kubernetes.io/control-plane" in nodes["cp-1"].metadata.labels
        process.send_signal(signal.SIGTERM)
        rest, _ = process.communicate(timeout=30)
        assert process.returncode == 0
        assert rest == ""  # exactly one line on stdout
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()


NOGATE_FLEET = (
    "kind: Cluster\npools:\n  - {name: ok, count: 1}\n"
    "  - {name: nogate, count: 1, kubelet: {featureGates: {}}}\n"
)


def test_an_expected_node_whose_kubelet_cannot_start_does_not_block_ready(kubesim_cluster, tmp_path):
    """E20: a 1.23 kubelet with --dynamic-config-dir but no explicit gate never starts; with
    allow_failed_nodes the cluster still comes up (that node simply never registers), instead of
    waiting for --ready-timeout."""
    fleet = tmp_path / "fleet.yaml"
    fleet.write_text(NOGATE_FLEET)
    cluster = kubesim_cluster(cluster_file=fleet, ready_timeout=30, allow_failed_nodes=True)
    core = client.CoreV1Api(api_client(cluster.kubeconfig))
    assert [n.metadata.name for n in core.list_node().items] == ["ok-1"]


def test_up_names_a_node_whose_kubelet_cannot_start_and_exits_1(tmp_path):
    """Without --allow-failed-nodes the ready line is honest: no line, the node and the kubelet's
    own reason on stderr, exit 1 - long before --ready-timeout."""
    fleet = tmp_path / "fleet.yaml"
    fleet.write_text(NOGATE_FLEET)
    args = ["--kubeconfig", str(tmp_path / "kc"), "--cluster", str(fleet), "--time-scale", "60"]
    result = _up(*args, "--state-dir", str(tmp_path / "st"), "--ready-timeout", "50s")
    assert result.returncode == 1
    assert result.stdout == ""
    assert "node nogate-1: the kubelet cannot start" in result.stderr
    assert "DynamicKubeletConfig feature gate must be enabled" in result.stderr
    allowed = subprocess.Popen(
        [sys.executable, "-m", "kubesim", "up", *args, "--state-dir", str(tmp_path / "st2"), "--allow-failed-nodes"],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    try:
        assert allowed.stdout.readline().startswith("kubesim ready: ")
    finally:
        allowed.send_signal(signal.SIGTERM)
        allowed.communicate(timeout=30)


def test_cluster_start_fails_with_the_node_and_reason(tmp_path):
    from kubesim import Cluster

    fleet = tmp_path / "fleet.yaml"
    fleet.write_text(NOGATE_FLEET)
    with pytest.raises(RuntimeError, match="node nogate-1: the kubelet cannot start"):
        Cluster(cluster_file=fleet, state_dir=tmp_path / "st", time_scale=60, ready_timeout=50).start()
