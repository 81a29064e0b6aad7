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


def test_a_node_whose_kubelet_cannot_start_does_not_block_ready(kubesim_cluster, tmp_path):
    """E20: a 1.23 kubelet with --dynamic-config-dir but no explicit gate never starts; the cluster
    still comes up (that node simply never registers), instead of waiting for --ready-timeout."""
    fleet = tmp_path / "fleet.yaml"
    fleet.write_text(
        "kind: Cluster\npools:\n  - {name: ok, count: 1}\n"
        "  - {name: nogate, count: 1, kubelet: {featureGates: {}}}\n"
    )
    cluster = kubesim_cluster(cluster_file=fleet, ready_timeout=30)
    core = client.CoreV1Api(api_client(cluster.kubeconfig))
    assert [n.metadata.name for n in core.list_node().items] == ["ok-1"]
