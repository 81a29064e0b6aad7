"""`rollout status --watch` (and the display of a run on a Prefect deployment) read a rollout's
status every second. They list the nodes once and follow them with a watch: a list of every node
and Lease each second is seconds of the API server's work at 20,000 nodes, for as long as a person
watches."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "flows"))
import scenario as sc  # noqa: E402

from test_head_start import ROOT, _user_env  # noqa: E402

from rollout.usecases import StatusFollower  # noqa: E402


def _lists(c: Any, since: datetime) -> list[str]:
    """The resources listed (nodes, leases) by anyone but the cluster's own components since ``since``."""
    return sorted(e["objectRef"]["resource"] for e in c.audit_log.events(verb="list")
                  if (e.get("objectRef") or {}).get("resource") in ("nodes", "leases")
                  and not e["user"]["username"].startswith("system:")
                  and datetime.fromisoformat(e["stageTimestamp"].replace("Z", "+00:00")) >= since)


def test_a_watched_status_lists_the_nodes_once_and_follows_them(tmp_path: Path) -> None:
    with sc.cluster(tmp_path, general=3) as c:
        gw = sc.gateway(c)
        cfg = tmp_path / "kubelet.yaml"
        cfg.write_text(sc.config_text(gw, maxPods=97))
        pol = tmp_path / "policy.yaml"
        pol.write_text(sc.policy(steps=[1, "100%"], approval={"after": [0], "timeout": "10m"}))
        env = _user_env(tmp_path)
        rollout = [sys.executable, "-m", "rollout_cli"]
        run = subprocess.Popen([*rollout, "start", "--config", str(cfg), "--policy", str(pol), "--name", "followed",
                                "--kubeconfig", str(c.kubeconfig), "-o", "json"],
                               cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        try:
            deadline = time.monotonic() + 180
            while not _at_the_gate(gw):  # the canary is done; the run waits for a person
                assert run.poll() is None and time.monotonic() < deadline, run.communicate()[1][-3000:]
                time.sleep(0.5)

            # a person watches for a while: one list of the nodes and one of their Leases, however long
            since = datetime.now(timezone.utc)
            watcher = subprocess.Popen([*rollout, "status", "followed", "--watch", "-o", "json",
                                        "--kubeconfig", str(c.kubeconfig)],
                                       cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
            time.sleep(8)  # the first read, then several seconds of reads
            watcher.send_signal(signal.SIGINT)  # Ctrl-C
            out, err = watcher.communicate(timeout=30)
            shown = [json.loads(line) for line in out.splitlines()]  # JSON Lines: a document per change
            assert shown and shown[0]["state"] == "running", out[-2000:] + err[-2000:]
            assert _lists(c, since) == ["leases", "nodes"], err[-2000:]

            # the view follows the nodes: the run goes on and is seen to its end without a list
            since = datetime.now(timezone.utc)
            with StatusFollower(gw, "followed") as follower:
                first = follower.read()
                assert first["state"] == "running"
                approved = subprocess.run([*rollout, "approve", "followed", "--approver", "alice"],
                                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)
                assert approved.returncode == 0, approved.stdout + approved.stderr
                deadline = time.monotonic() + 120
                while (data := follower.read())["state"] != "completed":
                    assert time.monotonic() < deadline, data
                    time.sleep(0.5)
            assert {row["phase"] for row in data["nodes"]} <= {"active", "promoted"}, data["nodes"]
            assert _lists(c, since) == ["leases", "nodes"]
            out, err = run.communicate(timeout=120)
            assert run.returncode == 0, err[-3000:]
        finally:
            if run.poll() is None:
                run.kill()


def _at_the_gate(gw: Any) -> bool:
    try:
        journal = sc.journal(gw, "followed")
    except AssertionError:
        return False  # no journal yet
    return journal.batches[0].approval is not None
