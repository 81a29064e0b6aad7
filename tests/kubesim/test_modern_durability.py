"""``kubesim up --kubernetes-version 1.31`` as a child process: the host endpoints work across
processes, host files are a disk (a bad drop-in is still there after ``kill -9`` and a restart on
the same state dir, so the kubelet still crash-loops), host daemons die with kubesim, and a guard
that refuses every start does not keep ``kubesim up`` from announcing itself."""

from __future__ import annotations

import os
import sys

import pytest
from kubernetes import client

from kubesim import Cluster
from tests.conftest import api_client, wait_for

HEAD = "apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\n"


def _ready(cluster, name):
    core = client.CoreV1Api(api_client(cluster.kubeconfig))
    return next(c.status for c in core.read_node(name).status.conditions if c.type == "Ready")


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


@pytest.mark.slow
def test_host_files_survive_kill_dash_nine(tmp_path):
    state = tmp_path / "state"
    first = Cluster(1, state_dir=state, mode="process", kubernetes_version="1.31", time_scale=20).start()
    try:
        host = first.host("node-1")
        agent = host.path("/usr/local/bin/agent")
        agent.parent.mkdir(parents=True)
        agent.write_text(f"#!{sys.executable}\nimport os, time\n"
                         "open(os.environ['HOST_ROOT'] + '/var/lib/kubelet-rollout/pid', 'w').write(str(os.getpid()))\n"
                         "time.sleep(600)\n")
        agent.chmod(0o755)
        (host.unit_dir / "agent.service").write_text("[Service]\nExecStart=/usr/local/bin/agent\n")
        assert host.systemctl("enable", "--now", "agent").exit_code == 0
        pid_file = host.path("/var/lib/kubelet-rollout/pid")
        pid = int(wait_for(lambda: pid_file.exists() and pid_file.read_text(), what="the agent daemon"))
        (host.dropin_dir / "90-bad.conf").write_text(HEAD + "maxPods: -1\n")
        assert host.systemctl("restart", "kubelet").exit_code == 0
        wait_for(lambda: int(host.show("NRestarts")["NRestarts"]) >= 1, what="a crash loop")
    finally:
        first.kill()
    wait_for(lambda: not _alive(pid), what="the host daemon to die with kubesim")
    pid_file.unlink()
    # while kubesim is down, a guard that refuses every start: `kubesim up` must not wait for Ready
    block = host.path("/var/lib/kubelet-rollout/block")
    block.write_text("")
    guard = host.path("/usr/local/bin/guard")
    guard.write_text(f"#!{sys.executable}\nimport os, sys\n"
                     "sys.exit(os.path.exists(os.environ['HOST_ROOT'] + '/var/lib/kubelet-rollout/block'))\n")
    guard.chmod(0o755)
    (host.unit_dropin_dir / "50-guard.conf").write_text("[Service]\nExecStartPre=/usr/local/bin/guard\n")

    second = Cluster(1, state_dir=state, mode="process", kubernetes_version="1.31", time_scale=20).start()
    try:
        host = second.host("node-1")
        wait_for(lambda: host.show("Result")["Result"] == "exit-code", what="the guard refusing the start")
        assert any("Control process exited, code=exited, status=1/FAILURE" in line for line in host.journal())
        block.unlink()
        wait_for(lambda: int(host.show("NRestarts")["NRestarts"]) >= 2, what="still crash-looping after restart")
        assert "failed to validate kubelet configuration" in "\n".join(host.journal(lines=20))
        wait_for(lambda: pid_file.exists(), what="the enabled agent unit to start at boot")
        (host.dropin_dir / "90-bad.conf").unlink()
        host.systemctl("restart", "kubelet")
        wait_for(lambda: host.healthz() == (200, "ok"), what="kubelet healthy")
        wait_for(lambda: _ready(second, "node-1") == "True", timeout=30, what="node-1 Ready")
    finally:
        second.stop()


def test_a_kubelet_refused_at_first_boot_does_not_hold_up_start_when_expected(kubesim_cluster, tmp_path):
    """--allow-failed-nodes: a host whose guard refuses the kubelet is ready without it (without the
    flag kubesim up fails naming the node: the ready line is honest, see test_api_cli)."""
    state = tmp_path / "state"
    unit_d = state / "nodes/node-1/host/etc/systemd/system/kubelet.service.d"
    unit_d.mkdir(parents=True)
    (unit_d / "50-refuse.conf").write_text("[Service]\nExecStartPre=/bin/false\n")
    cluster = kubesim_cluster(nodes=1, state_dir=state, kubernetes_version="1.31", time_scale=20, ready_timeout=30,
                              allow_failed_nodes=True)
    host = cluster.host("node-1")
    assert host.show("Result") == {"Result": "exit-code"}
    assert host.healthz()[0] == 503
    assert cluster.host("control-plane-1").healthz() == (200, "ok")
