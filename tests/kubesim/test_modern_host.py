"""Simulated hosts of a 1.31 cluster: a bad drop-in crash-loops the kubelet under ``Restart=always``
and recovers once removed; an agent's ``ExecStartPre=`` guard runs as a real program with
``HOST_ROOT`` and can stop a start; ``OnFailure=`` runs once the start limit is hit. Each test
has a node of its own in one shared cluster (time scale 20: RestartSec 10s -> 0.5s)."""

from __future__ import annotations

import json
import os
import signal
import sys
import textwrap
import time

import pytest
from kubernetes import client

from tests.conftest import api_client, wait_for

HEAD = "apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\n"


@pytest.fixture(scope="module")
def cluster(kubesim_cluster_module):
    return kubesim_cluster_module(nodes=4, kubernetes_version="1.31", time_scale=20)


@pytest.fixture(scope="module")
def core(cluster):
    return client.CoreV1Api(api_client(cluster.kubeconfig))


def _ready(core, name) -> str:
    for cond in core.read_node(name).status.conditions or []:
        if cond.type == "Ready":
            return cond.status
    return ""


def _restarts(host) -> int:
    return int(host.show("NRestarts")["NRestarts"])


def _starts(host) -> int:
    return sum("Started kubelet.service" in line for line in host.journal(lines=2000))


def _program(host, host_path: str, body: str) -> None:
    """Install an executable on the host (a Python script, as an agent would ship one)."""
    path = host.path(host_path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(f"#!{sys.executable}\n" + textwrap.dedent(body))
    path.chmod(0o755)


def test_bad_drop_in_crash_loops_until_removed(cluster, core):
    host = cluster.host("node-1")
    bad = host.dropin_dir / "90-kubelet-rollout.conf"
    bad.write_text(HEAD + "maxPods: -1\n")
    assert host.systemctl("restart", "kubelet").exit_code == 0  # Type=simple: the start job succeeds
    wait_for(lambda: _restarts(host) >= 3, what="NRestarts to grow")
    state = host.show("ActiveState", "Result", "ExecMainStatus")
    assert state["Result"] == "exit-code" and state["ExecMainStatus"] == "1"
    journal = "\n".join(host.journal(lines=40))
    assert '"command failed" err="failed to validate kubelet configuration, error: invalid configuration: ' in journal
    assert "kubelet.service: Scheduled restart job, restart counter is at" in journal
    wait_for(lambda: _ready(core, "node-1") != "True", timeout=30, what="node-1 NotReady")
    assert host.healthz()[0] == 503

    bad.unlink()
    restarted_at = time.time()
    assert host.systemctl("restart", "kubelet").exit_code == 0
    wait_for(lambda: _ready(core, "node-1") == "True", timeout=30, what="node-1 Ready again")
    # healthz, read right after Ready, once answered 503 on a loaded CI machine (ci-33): waited for
    wait_for(lambda: host.healthz() == (200, "ok"), timeout=30, what="healthz ok")
    assert host.show("ActiveState", "SubState") == {"ActiveState": "active", "SubState": "running"}
    assert _restarts(host) == 0  # a manual start flushes the counter of automatic restarts
    since = host.journal(lines=0, since=restarted_at)
    assert since and not any("command failed" in line for line in since)


def test_config_the_host_cannot_run_crashes_after_the_crash_window(cluster):
    host = cluster.host("node-4")
    (host.dropin_dir / "50-driver.conf").write_text(HEAD + "cgroupDriver: systemd\n")  # host runs cgroupfs
    host.systemctl("restart", "kubelet")
    wait_for(lambda: _restarts(host) >= 1, what="a crash")
    assert "misconfiguration: kubelet cgroup driver" in "\n".join(host.journal(lines=30))
    (host.dropin_dir / "50-driver.conf").unlink()
    host.systemctl("restart", "kubelet")


GUARD = """\
import os, sys
root = os.environ["HOST_ROOT"]
with open(os.path.join(root, "var/lib/kubelet-rollout/guard.seen"), "a") as fh:
    fh.write(f"{root} {os.getcwd()} {os.environ['KUBESIM_NODE']}\\n")
if os.path.exists(os.path.join(root, "var/lib/kubelet-rollout/block")):
    print("guard: refusing to start the kubelet")
    sys.exit(3)
"""


def test_exec_start_pre_failure_stops_the_start(cluster, core):
    host = cluster.host("node-2")
    _program(host, "/usr/local/bin/guard", GUARD)
    (host.unit_dropin_dir / "50-guard.conf").write_text("[Service]\nExecStartPre=/usr/local/bin/guard\n")
    assert host.show("NeedDaemonReload") == {"NeedDaemonReload": "yes"}
    assert host.systemctl("daemon-reload").exit_code == 0
    block = host.path("/var/lib/kubelet-rollout/block")
    block.write_text("")

    result = host.systemctl("restart", "kubelet")
    assert result.exit_code == 1
    assert "Job for kubelet.service failed because the control process exited with error code." in result.stderr
    seen = host.path("/var/lib/kubelet-rollout/guard.seen").read_text().split()
    assert seen[:3] == [str(host.root.resolve()), str(host.root), "node-2"]
    journal = "\n".join(host.journal(lines=30))
    assert "guard[" in journal and "guard: refusing to start the kubelet" in journal
    assert "kubelet.service: Control process exited, code=exited, status=3/FAILURE" in journal
    wait_for(lambda: _restarts(host) >= 2, what="Restart=always retrying the failed start")
    assert host.healthz()[0] == 503

    block.unlink()  # the next automatic start passes the guard
    wait_for(lambda: host.show("ActiveState")["ActiveState"] == "active", what="kubelet active")
    wait_for(lambda: host.healthz() == (200, "ok"), what="healthz ok")


COUNTER = """\
import os
root = os.environ["HOST_ROOT"]
count_file = os.path.join(root, "var/lib/kubelet-rollout/failures")
count = int(open(count_file).read()) + 1 if os.path.exists(count_file) else 1
open(count_file, "w").write(str(count))
print(f"counter: kubelet failure {count}")
if count >= 2:
    os.remove(os.path.join(root, "etc/kubernetes/kubelet.conf.d/90-kubelet-rollout.conf"))
"""


def test_on_failure_runs_on_every_crash_under_restart_always(cluster):
    """systemd 254+ (RestartMode=normal): each crash passes through "failed" before the automatic
    restart, so a guard unit can count failed starts during a trial."""
    host = cluster.host("node-2")
    _program(host, "/usr/local/bin/counter", COUNTER)
    (host.unit_dir / "kubelet-failures.service").write_text("[Service]\nType=oneshot\nExecStart=/usr/local/bin/counter\n")
    (host.unit_dropin_dir / "65-count.conf").write_text("[Unit]\nOnFailure=kubelet-failures.service\n")
    host.systemctl("daemon-reload")
    (host.dropin_dir / "90-kubelet-rollout.conf").write_text(HEAD + "maxPods: -2\n")
    host.systemctl("restart", "kubelet")
    wait_for(lambda: host.healthz() == (200, "ok") and _restarts(host) >= 2, what="the counter's revert to work")
    assert host.path("/var/lib/kubelet-rollout/failures").read_text() == "2"
    assert host.show("ActiveState")["ActiveState"] == "active"
    assert "counter: kubelet failure 2" in "\n".join(host.journal(unit="kubelet-failures"))
    (host.unit_dropin_dir / "65-count.conf").unlink()
    host.systemctl("daemon-reload")


RESCUE = """\
import os
root = os.environ["HOST_ROOT"]
os.remove(os.path.join(root, "etc/kubernetes/kubelet.conf.d/90-kubelet-rollout.conf"))
open(os.path.join(root, "var/lib/kubelet-rollout/rescued"), "w").close()
print("rescue: removed the drop-in")
"""


def test_on_failure_runs_only_once_the_start_limit_is_hit_with_restart_mode_direct(cluster, core):
    host = cluster.host("node-3")
    _program(host, "/usr/local/bin/rescue", RESCUE)
    (host.unit_dir / "kubelet-rollout-rescue.service").write_text(
        "[Unit]\nDescription=rescue\n[Service]\nType=oneshot\nExecStart=/usr/local/bin/rescue\n"
    )
    (host.unit_dropin_dir / "60-limit.conf").write_text(
        "[Unit]\nStartLimitIntervalSec=60s\nStartLimitBurst=3\nOnFailure=kubelet-rollout-rescue.service\n"
        # as systemd < 254 behaves: no OnFailure= on the crashes that Restart= retries
        "[Service]\nRestartMode=direct\n"
    )
    host.systemctl("daemon-reload")
    (host.dropin_dir / "90-kubelet-rollout.conf").write_text(HEAD + "maxPods: [1]\n")
    host.systemctl("restart", "kubelet")

    wait_for(lambda: host.path("/var/lib/kubelet-rollout/rescued").exists(), what="the OnFailure unit")
    assert host.show("ActiveState", "Result") == {"ActiveState": "failed", "Result": "start-limit-hit"}
    assert host.systemctl("is-failed", "kubelet").exit_code == 0
    # the rescue creates its marker file before it prints: its output reaches the journal a moment later
    wait_for(lambda: "rescue: removed the drop-in" in "\n".join(host.journal(unit="kubelet-rollout-rescue", lines=10)),
             what="the rescue's output in its journal")
    journal = "\n".join(host.journal(lines=40))
    assert "failed to unmarshal merged JSON into kubelet configuration" in journal
    assert "kubelet.service: Start request repeated too quickly." in journal

    assert host.systemctl("reset-failed", "kubelet").exit_code == 0
    assert host.systemctl("start", "kubelet").exit_code == 0
    wait_for(lambda: host.healthz() == (200, "ok"), what="kubelet healthy")
    configz = json.loads(core.connect_get_node_proxy_with_path("node-3", "configz", _preload_content=False).data)
    assert configz["kubeletconfig"]["maxPods"] == 110


AGENT = """\
import os, time
root = os.environ["HOST_ROOT"]
with open(os.path.join(root, "var/lib/kubelet-rollout/agent.pid"), "w") as fh:
    fh.write(str(os.getpid()))
print("agent: up", flush=True)
while True:
    time.sleep(0.05)
"""


def test_an_agent_daemon_runs_as_a_host_unit(cluster):
    host = cluster.host("node-4")
    _program(host, "/usr/local/bin/agent", AGENT)
    (host.unit_dir / "kubelet-rollout-agent.service").write_text(
        "[Service]\nExecStart=/usr/local/bin/agent\nRestart=always\nRestartSec=2s\n"
        "[Install]\nWantedBy=multi-user.target\n"
    )
    assert host.systemctl("enable", "--now", "kubelet-rollout-agent").exit_code == 0
    assert host.systemctl("is-enabled", "kubelet-rollout-agent").stdout == "enabled\n"
    pid_file = host.path("/var/lib/kubelet-rollout/agent.pid")
    pid = int(wait_for(lambda: pid_file.exists() and pid_file.read_text(), what="the agent's pid"))
    assert host.systemctl("is-active", "kubelet-rollout-agent").stdout == "active\n"
    wait_for(lambda: any("agent: up" in line for line in host.journal(unit="kubelet-rollout-agent")))

    os.kill(pid, signal.SIGKILL)  # Restart=always brings it back
    wait_for(lambda: host.show("NRestarts", unit="kubelet-rollout-agent")["NRestarts"] == "1", what="a restart")
    wait_for(lambda: pid_file.read_text() != str(pid), what="a new agent process")
    new_pid = int(pid_file.read_text())
    assert host.systemctl("disable", "--now", "kubelet-rollout-agent").exit_code == 0
    assert host.systemctl("is-active", "kubelet-rollout-agent").exit_code == 3
    wait_for(lambda: not _alive(new_pid), what="the agent to be stopped")


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def test_restart_no_leaves_the_unit_failed_and_triggers_on_failure(cluster):
    host = cluster.host("node-2")
    _program(host, "/usr/local/bin/mark", "import os\nopen(os.environ['HOST_ROOT'] + '/var/lib/kubelet-rollout/marked', 'w')\n")
    (host.unit_dir / "mark.service").write_text("[Service]\nType=oneshot\nExecStart=/usr/local/bin/mark\n")
    (host.unit_dropin_dir / "70-no-restart.conf").write_text("[Unit]\nOnFailure=mark.service\n[Service]\nRestart=no\n")
    host.systemctl("daemon-reload")
    (host.dropin_dir / "90-kubelet-rollout.conf").write_text(HEAD + "maxPods: -5\n")
    host.systemctl("restart", "kubelet")
    wait_for(lambda: host.path("/var/lib/kubelet-rollout/marked").exists(), what="OnFailure=mark.service")
    assert host.show("ActiveState", "Result", "NRestarts") == {
        "ActiveState": "failed",
        "Result": "exit-code",
        "NRestarts": "0",
    }
    (host.dropin_dir / "90-kubelet-rollout.conf").unlink()
    (host.unit_dropin_dir / "70-no-restart.conf").unlink()
    host.systemctl("daemon-reload")
    assert host.systemctl("start", "kubelet").exit_code == 0
    wait_for(lambda: host.healthz() == (200, "ok"), what="kubelet healthy")


def test_a_cpu_manager_policy_change_needs_the_state_file_on_the_host_removed(cluster):
    host = cluster.host("node-3")
    state_file = host.path("/var/lib/kubelet/cpu_manager_state")
    assert json.loads(state_file.read_text())["policyName"] == "none"  # the running kubelet wrote it
    (host.dropin_dir / "80-cpu.conf").write_text(HEAD + "cpuManagerPolicy: static\nreservedSystemCPUs: '0'\n")
    host.systemctl("restart", "kubelet")
    wait_for(lambda: _restarts(host) >= 1, what="a crash after the crash window")
    assert 'delete the CPU manager checkpoint file "/var/lib/kubelet/cpu_manager_state"' in "\n".join(
        host.journal(lines=30)
    )
    state_file.unlink()  # what the runbook (and an agent) does for this field
    wait_for(lambda: host.healthz() == (200, "ok") and _restarts(host) >= 1, what="the next start to run")
    wait_for(lambda: json.loads(state_file.read_text())["policyName"] == "static", what="the new state file")
    (host.dropin_dir / "80-cpu.conf").unlink()
    state_file.unlink()
    host.systemctl("restart", "kubelet")


def test_never_return_fault_holds_the_automatic_restart(cluster):
    host = cluster.host("node-4")
    cluster.faults.never_return("node-4")
    try:
        (host.dropin_dir / "90-kubelet-rollout.conf").write_text(HEAD + "maxPods: -1\n")
        host.systemctl("restart", "kubelet")
        wait_for(lambda: host.show("SubState")["SubState"] == "auto-restart", what="the first crash")
        starts = _starts(host)
        time.sleep(1.5)  # three RestartSec periods
        assert (_restarts(host), _starts(host)) == (0, starts)
    finally:
        cluster.faults.never_return("node-4", False)
        (host.dropin_dir / "90-kubelet-rollout.conf").unlink()
    wait_for(lambda: host.healthz() == (200, "ok"), what="the held restart to happen")
    assert _restarts(host) == 1


def test_n_restarts_survives_a_start_during_auto_restart_but_not_a_restart(cluster):
    host = cluster.host("node-1")
    (host.dropin_dir / "90-kubelet-rollout.conf").write_text(HEAD + "maxPods: -1\n")
    try:
        host.systemctl("restart", "kubelet")
        wait_for(lambda: _restarts(host) >= 2, what="a crash loop")
        wait_for(lambda: host.show("SubState")["SubState"] == "auto-restart", what="auto-restart")
        host.systemctl("start", "kubelet")
        assert _restarts(host) >= 2
    finally:
        (host.dropin_dir / "90-kubelet-rollout.conf").unlink()
    host.systemctl("restart", "kubelet")
    assert _restarts(host) == 0
    wait_for(lambda: host.healthz() == (200, "ok"), what="kubelet healthy")
