"""``rollout_cli.local.processes``: a helper in a session of its own, ended with the process that
started it however that ended, and what the helper started with it."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from rollout_cli.local.processes import WATCHDOG_GRACE_S

pytestmark = pytest.mark.skipif(not Path("/proc").is_dir(), reason="the watchdog reads /proc")

# starts a helper that starts a child of its own and a helper that ignores SIGTERM; prints their
# pids, then waits to be killed
STARTER = r"""
import json, signal, subprocess, sys, time
from rollout_cli.local.processes import start_helper
parent = start_helper(["sh", "-c", "sleep 300 & wait"])
stubborn = start_helper([sys.executable, "-c",
                         "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); time.sleep(300)"])
print(json.dumps({"parent": parent.pid, "stubborn": stubborn.pid}), flush=True)
time.sleep(300)
"""


def _stat(pid: int) -> list[str] | None:
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return None
    return None if fields[0] == "Z" else fields


def _children(pid: int) -> list[int]:
    return [int(p.parent.name) for p in Path("/proc").glob("[0-9]*/stat")
            if (fields := _stat(int(p.parent.name))) and int(fields[1]) == pid]


def test_helpers_live_in_sessions_of_their_own_and_go_after_a_kill_9_of_their_starter() -> None:
    starter = subprocess.Popen([sys.executable, "-c", STARTER], stdout=subprocess.PIPE, text=True)
    try:
        assert starter.stdout is not None
        pids = json.loads(starter.stdout.readline())
        grandchildren = _children(pids["parent"])
        forked_by = time.monotonic() + 10  # the helper's shell forks its sleep when it is scheduled
        while not grandchildren and time.monotonic() < forked_by:
            time.sleep(0.05)
            grandchildren = _children(pids["parent"])
        assert grandchildren, "the helper's own child"
        for name in ("parent", "stubborn"):
            fields = _stat(pids[name])
            assert fields is not None and int(fields[3]) == pids[name], f"{name}: not a session of its own"
        everything = [*pids.values(), *grandchildren]
        assert all(_stat(p) for p in everything)
        starter.send_signal(signal.SIGKILL)
        starter.wait(timeout=10)
        deadline = time.monotonic() + WATCHDOG_GRACE_S + 5
        while any(_stat(p) for p in everything) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert not [p for p in everything if _stat(p)], "left running after kill -9 of the process that started them"
    finally:
        if starter.poll() is None:
            starter.kill()

