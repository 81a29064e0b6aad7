"""The host guard, run as the real program (a subprocess with ``$HOST_ROOT``) on a temp host root.

It must rescue a crash-looping kubelet without the API server or the agent: count the starts of
a trial, restore last-known-good (or remove ours) past the threshold, record why, and never keep
the kubelet from starting.
"""

from __future__ import annotations

import ast
import json
import os
import subprocess
import sys
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest
from rollout.model import ConfigRef

from kubelet_rollout_agent import atomic
from kubelet_rollout_agent import guard as guard_module
from kubelet_rollout_agent import names
from kubelet_rollout_agent.decide import Settings, guard_trial
from kubelet_rollout_agent.install import GUARD_SOURCE
from kubelet_rollout_agent.stage import content_sha
from kubelet_rollout_agent.state import AgentState, Phase

LKG = b"apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\nmaxPods: 100\n"
BAD = b"apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\nmaxPods: 999\n"
REF = ConfigRef("kube-system", "kc", "kubelet", "u", "1")


class HostRoot:
    def __init__(self, root: Path) -> None:
        self.root = root
        self.state = root / names.DEFAULT_STATE_DIR.lstrip("/")
        self.dropin = root / names.DEFAULT_CONFIG_DIR.lstrip("/") / names.DROPIN_NAME
        self.state.mkdir(parents=True)
        self.dropin.parent.mkdir(parents=True)

    def start_trial(self, *, lkg: bytes | None, staged_ago: timedelta = timedelta(0)) -> None:
        """What the agent leaves behind when it writes BAD (the real trial format, a one-hour
        window), staged ``staged_ago`` before now by the wall clock the guard reads."""
        self.dropin.write_bytes(BAD)
        if lkg is not None:
            (self.state / names.LKG_FILE).write_bytes(lkg)
        since = datetime.now(timezone.utc) - staged_ago
        state = AgentState(phase=Phase.TRIAL, assigned=REF, dropin_sha=content_sha(BAD),
                           lkg_sha=content_sha(lkg) if lkg else None, since=since)
        trial = guard_trial(state, Settings(trial=timedelta(hours=1), health_deadline=timedelta(0)))
        (self.state / names.GUARD_TRIAL_FILE).write_text(json.dumps(trial))

    def kubelet_start(self) -> str:
        """One ExecStartPre= run, isolated (-I -S: the guard must need nothing but the stdlib)."""
        done = subprocess.run([sys.executable, "-I", "-S", str(GUARD_SOURCE)], capture_output=True, text=True,
                              env={"HOST_ROOT": str(self.root), "PATH": os.environ.get("PATH", "")},
                              cwd=self.root, timeout=30, check=False)
        assert done.returncode == 0, done.stderr
        return done.stdout

    def record(self) -> dict[str, object] | None:
        path = self.state / names.GUARD_RECORD_FILE
        return json.loads(path.read_text()) if path.exists() else None


@pytest.fixture
def host(tmp_path: Path) -> HostRoot:
    return HostRoot(tmp_path)


def test_no_trial_means_nothing_to_do(host: HostRoot) -> None:
    host.dropin.write_bytes(BAD)
    assert "no trial" in host.kubelet_start()
    assert host.dropin.read_bytes() == BAD and host.record() is None


def test_starts_under_the_threshold_are_only_counted(host: HostRoot) -> None:
    host.start_trial(lkg=LKG)
    outputs = [host.kubelet_start() for _ in range(3)]  # the agent's restart + 2 failed starts
    assert "(2/3 failed)" in outputs[-1]
    assert host.dropin.read_bytes() == BAD and host.record() is None


def test_past_the_threshold_last_known_good_is_restored_and_recorded(host: HostRoot) -> None:
    host.start_trial(lkg=LKG)
    for _ in range(3):
        host.kubelet_start()
    assert "restored last-known-good" in host.kubelet_start()
    assert host.dropin.read_bytes() == LKG
    record = host.record()
    assert record is not None and record["restored"] == "last-known-good" and record["starts"] == 4
    assert record["dropinSha"] == content_sha(BAD)
    assert not (host.state / names.GUARD_TRIAL_FILE).exists()
    assert "no trial" in host.kubelet_start()  # the next start runs on last-known-good undisturbed


def test_without_last_known_good_ours_is_removed(host: HostRoot) -> None:
    host.start_trial(lkg=None)
    for _ in range(4):
        host.kubelet_start()
    assert not host.dropin.exists()
    record = host.record()
    assert record is not None and record["restored"] == "base"


def test_a_dropin_that_changed_since_the_trial_began_is_left_alone(host: HostRoot) -> None:
    host.start_trial(lkg=LKG)
    host.dropin.write_bytes(b"someone else's edit")
    for _ in range(4):
        output = host.kubelet_start()
    assert "leaving it" in output and host.dropin.read_bytes() == b"someone else's edit"


def test_starts_after_the_window_are_not_counted(host: HostRoot) -> None:
    host.start_trial(lkg=LKG)
    host.kubelet_start()  # the first start opens the window...
    counter = host.state / names.GUARD_COUNT_FILE
    first = json.loads(counter.read_text())
    long_ago = (datetime.now(timezone.utc) - timedelta(hours=2)).isoformat()
    counter.write_text(json.dumps({**first, "firstStart": long_ago}))  # ...two hours ago
    for _ in range(5):
        assert "is over" in host.kubelet_start()
    assert host.dropin.read_bytes() == BAD


def test_the_window_opens_at_the_first_start_however_late_after_staging(host: HostRoot) -> None:
    """The agent died between writing the drop-in and restarting the kubelet; the next start is a
    reboot two hours later, past the window's length: the crash loop is still counted and rescued
    (before the fix the window ran from staging: "trial is over; not counting")."""
    host.start_trial(lkg=LKG, staged_ago=timedelta(hours=2))
    outputs = [host.kubelet_start() for _ in range(4)]
    assert "(0/3 failed)" in outputs[0], outputs[0]
    assert "restored last-known-good" in outputs[-1], outputs
    assert host.dropin.read_bytes() == LKG


def test_a_broken_trial_file_never_blocks_the_kubelet(host: HostRoot) -> None:
    (host.state / names.GUARD_TRIAL_FILE).write_text("{not json")
    assert "kubelet starts anyway" in host.kubelet_start()


def test_a_tampered_last_known_good_is_not_restored(host: HostRoot) -> None:
    host.start_trial(lkg=LKG)
    (host.state / names.LKG_FILE).write_bytes(b"tampered")
    for _ in range(4):
        output = host.kubelet_start()
    assert "kubelet starts anyway" in output and host.dropin.read_bytes() == BAD


def test_guard_file_names_match_the_agent() -> None:
    assert (guard_module.TRIAL_FILE, guard_module.COUNT_FILE, guard_module.RECORD_FILE) == (
        names.GUARD_TRIAL_FILE, names.GUARD_COUNT_FILE, names.GUARD_RECORD_FILE)
    assert guard_module.TEMP_MARK == atomic.TEMP_MARK


def test_guard_imports_only_the_standard_library() -> None:
    tree = ast.parse(GUARD_SOURCE.read_text())
    roots = {a.name.split(".")[0] for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
    roots |= {n.module.split(".")[0] for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) and n.module}
    assert roots <= set(sys.stdlib_module_names) | {"__future__"}, roots
