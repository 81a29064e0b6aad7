"""Host implementations: what a real node's SystemdHost runs, and how unit status is read.

Commands are captured through the injected runner: these tests never run systemctl.
"""

from __future__ import annotations

import subprocess
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from kubelet_rollout_agent.host import SystemdHost, last_error_line, parse_show, unit_status


class Runner:
    def __init__(self, stdout: str = "", returncode: int = 0) -> None:
        self.argv: list[list[str]] = []
        self.stdout = stdout
        self.returncode = returncode

    def __call__(self, argv: list[str], **_: Any) -> subprocess.CompletedProcess[str]:
        self.argv.append(argv)
        return subprocess.CompletedProcess(argv, self.returncode, self.stdout, "")


def test_systemctl_runs_in_the_hosts_namespaces(tmp_path: Path) -> None:
    run = Runner()
    host = SystemdHost("n1", root=tmp_path, run=run)
    host.systemctl("restart", "kubelet")
    assert run.argv == [["nsenter", "-t", "1", "-m", "-u", "-i", "-n", "-p", "systemctl", "restart", "kubelet"]]
    assert host.path("/etc/kubernetes/kubelet.conf.d") == tmp_path / "etc/kubernetes/kubelet.conf.d"


def test_on_the_host_itself_no_nsenter_is_needed(tmp_path: Path) -> None:
    run = Runner()
    SystemdHost("n1", root=tmp_path, run=run, command_prefix=()).systemctl("daemon-reload")
    assert run.argv == [["systemctl", "daemon-reload"]]


def test_unit_status_reads_systemctl_show(tmp_path: Path) -> None:
    run = Runner("ActiveState=activating\nSubState=auto-restart\nNRestarts=4\n"
                 "ExecMainStartTimestamp=Tue 2026-11-24 02:06:13 UTC\n")
    status = unit_status(SystemdHost("n1", root=tmp_path, run=run))
    assert (status.active_state, status.n_restarts) == ("activating", 4)
    assert status.started_at == datetime(2026, 11, 24, 2, 6, 13, tzinfo=timezone.utc)
    assert "-p" in run.argv[0] and "kubelet" in run.argv[0]


def test_an_unanswered_show_is_an_unknown_status(tmp_path: Path) -> None:
    assert unit_status(SystemdHost("n1", root=tmp_path, run=Runner(returncode=1))).active_state == ""


def test_a_missing_nsenter_is_a_failed_command_not_a_crash(tmp_path: Path) -> None:
    def missing(argv: list[str], **_: Any) -> subprocess.CompletedProcess[str]:
        raise FileNotFoundError(argv[0])

    result = SystemdHost("n1", root=tmp_path, run=missing).systemctl("is-active", "kubelet")
    assert result.exit_code == 127 and not result.ok


def test_the_last_config_error_line_is_picked_from_the_journal(tmp_path: Path) -> None:
    journal = "\n".join([
        'Nov 24 02:06:10 n1 kubelet[1]: E1124 "command failed" err="failed to validate kubelet configuration, error: x"',
        "Nov 24 02:06:11 n1 systemd[1]: kubelet.service: Main process exited, code=exited, status=1/FAILURE",
        "Nov 24 02:06:12 n1 systemd[1]: kubelet.service: Scheduled restart job, restart counter is at 3.",
    ])
    line = last_error_line(SystemdHost("n1", root=tmp_path, run=Runner(journal)))
    assert "failed to validate kubelet configuration" in line


def test_parse_show_keeps_values_with_equals_signs() -> None:
    assert parse_show("Environment=A=1 B=2\nNRestarts=0") == {"Environment": "A=1 B=2", "NRestarts": "0"}


def test_error_markers_ignore_case(tmp_path: Path) -> None:
    journal = 'Nov 24 02:23:34 n1 kubelet[1]: F1124 server.go:0] failed to run Kubelet: misconfiguration: cgroup driver'
    assert "misconfiguration" in last_error_line(SystemdHost("n1", root=tmp_path, run=Runner(journal)))
