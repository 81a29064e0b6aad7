"""`rollout start` (and `rollout rollback`) without a Prefect profile does not wait for its temporary
Prefect server: the run begins at once and its flow run attaches when the server is up, then shows
everything the run did, in order, and ends in the run's outcome."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "flows"))
import scenario as sc  # noqa: E402

from rollout_cli.local.prefect_home import template_db  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]


def _log_time(line: str) -> datetime:
    """A Prefect log line's time of day (local), on today's date, as UTC."""
    clock = datetime.strptime(line.split(" | ")[0].strip(), "%H:%M:%S.%f").time()
    return datetime.combine(datetime.now().date(), clock).astimezone().astimezone(timezone.utc)


def _user_env(tmp_path: Path) -> dict[str, str]:
    """A person's shell without a Prefect profile, on a Prefect home already migrated (as after a
    first run): the command starts its temporary Prefect server itself."""
    home = tmp_path / "prefect-home"
    home.mkdir(exist_ok=True)
    shutil.copyfile(template_db(), home / "prefect.db")
    env = {k: v for k, v in os.environ.items() if not k.startswith("PREFECT_API")}
    env.update(PREFECT_HOME=str(home), PREFECT_SERVER_ANALYTICS_ENABLED="false", PYTHONPATH=str(ROOT))
    return env


def _node_patches(c: Any, since: datetime) -> list[datetime]:
    """When our PATCHes of Nodes (assignments and reverts) landed, from the audit log, in order."""
    at = (datetime.fromisoformat(e["stageTimestamp"].replace("Z", "+00:00")) for e in c.audit_log.events(verb="patch")
          if (e.get("objectRef") or {}).get("resource") == "nodes" and not e["objectRef"].get("subresource")
          and not e["user"]["username"].startswith("system:"))
    return sorted(t for t in at if t >= since)


def _flow_run_began(stderr: str) -> datetime:
    return next(_log_time(line) for line in stderr.splitlines() if "Beginning flow run" in line)


def test_the_rollout_and_its_rollback_write_before_their_temporary_prefect_server_is_up(tmp_path: Path) -> None:
    with sc.cluster(tmp_path, general=3) as c:
        gw = sc.gateway(c)
        cfg = tmp_path / "kubelet.yaml"
        cfg.write_text(sc.config_text(gw, maxPods=97))
        pol = tmp_path / "policy.yaml"
        pol.write_text(sc.policy())
        env = _user_env(tmp_path)
        since = datetime.now(timezone.utc)
        done = subprocess.run([sys.executable, "-m", "rollout_cli", "start", "--config", str(cfg), "--policy",
                               str(pol), "--name", "ahead", "--kubeconfig", str(c.kubeconfig), "-o", "json"],
                              cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
        assert done.returncode == 0, done.stderr[-3000:]
        answer = json.loads(done.stdout)
        assert answer["outcome"] == "completed" and answer["flow_run_id"], answer
        patches = _node_patches(c, since)
        assert patches and patches[0] < _flow_run_began(done.stderr), "the first assignment waited for Prefect"
        assert sc.assignment_patches(c) == {n: 1 for n in sc.workers(gw)}
        # the flow run shows what the run did before it existed, in order
        lines = done.stderr.splitlines()
        first_batch = next(i for i, line in enumerate(lines) if "starting batch 1 (canary)" in line)
        assert first_batch > next(i for i, line in enumerate(lines) if "Beginning flow run" in line)
        assert any("rollout ahead completed" in line for line in lines[first_batch:])

        # the rollback, typed in a hurry, begins as soon: its first revert before its flow run exists
        since = datetime.now(timezone.utc)
        back = subprocess.run([sys.executable, "-m", "rollout_cli", "rollback", "ahead", "--kubeconfig",
                               str(c.kubeconfig), "-o", "json"], cwd=ROOT, env=env, capture_output=True, text=True,
                              timeout=300)
        assert back.returncode == 0, back.stderr[-3000:]
        answer = json.loads(back.stdout)
        assert answer["outcome"] == "rolled-back" and answer["flow_run_id"], answer
        assert sorted(answer["nodes"]) == sorted(sc.workers(gw))
        reverts = _node_patches(c, since)
        assert len(reverts) == len(sc.workers(gw)), reverts
        assert reverts[0] < _flow_run_began(back.stderr), "the first revert waited for the Prefect server"
        assert "Rollback of" in answer["report"]  # the rollback's own report, as without a head start
        # back where they were before the rollout: each kubelet on its local config
        assert all(o.spec_source is None for o in gw.list_nodes()[0] if o.name in answer["nodes"])


def test_a_head_start_begins_without_importing_prefect() -> None:
    """Importing Prefect takes seconds; the CLI begins the rollout before it does."""
    probe = ("import sys, rollout.run, flows.cluster, flows.stop, rollout_cli.main, rollout_cli.runs; "
             "print(sorted(m for m in sys.modules if m.split('.')[0] == 'prefect'))")
    done = subprocess.run([sys.executable, "-c", probe], cwd=ROOT, capture_output=True, text=True, timeout=60,
                          env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"


def test_a_run_in_ephemeral_mode_is_approved_from_another_shell_with_the_same_prefect_home(tmp_path: Path) -> None:
    """As the README says (it used to say the opposite): no Prefect server configured, the gate of
    `rollout start` is answered by `rollout approve` typed in a second shell with the same
    PREFECT_HOME, minutes later or seconds later alike."""
    import time

    with sc.cluster(tmp_path, general=2) as c:
        gw = sc.gateway(c)
        cfg = tmp_path / "kubelet.yaml"
        cfg.write_text(sc.config_text(gw, maxPods=96))
        pol = tmp_path / "policy.yaml"
        pol.write_text(sc.policy(steps=[1, "100%"], approval={"after": [0], "timeout": "10m"}))
        home = tmp_path / "prefect-home"
        home.mkdir()
        env = {k: v for k, v in os.environ.items() if not k.startswith("PREFECT_API")}
        env.update(PREFECT_HOME=str(home), PREFECT_SERVER_ANALYTICS_ENABLED="false", PYTHONPATH=str(ROOT))
        rollout = [sys.executable, "-m", "rollout_cli"]
        first = subprocess.Popen([*rollout, "start", "--config", str(cfg), "--policy", str(pol), "--name", "gated",
                                  "--kubeconfig", str(c.kubeconfig), "-o", "json"],
                                 cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        try:
            deadline = time.monotonic() + 180
            while True:  # the second shell: the gate shows in `rollout approve`'s list
                assert first.poll() is None and time.monotonic() < deadline, first.communicate()[1][-3000:]
                listed = subprocess.run([*rollout, "approve", "-o", "json"], cwd=ROOT, env=env, capture_output=True,
                                        text=True, timeout=120)
                if "gated" in listed.stdout:
                    break
                time.sleep(2)
            approved = subprocess.run([*rollout, "approve", "gated", "--approver", "alice", "--comment", "fine"],
                                      cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)
            assert approved.returncode == 0, approved.stdout + approved.stderr
            out, err = first.communicate(timeout=180)
        finally:
            if first.poll() is None:
                first.kill()
        assert first.returncode == 0, err[-3000:]
        assert json.loads(out)["outcome"] == "completed"
        assert sc.journal(gw, "gated").batches[0].approval.by == "alice"


@pytest.mark.parametrize("prefect", ["temporary server", "a Prefect server"])
def test_a_person_at_a_terminal_watches_the_run_from_its_own_view_of_the_nodes(
        prefect: str, tmp_path: Path, request: pytest.FixtureRequest) -> None:
    """On a terminal `rollout start` draws the run's progress each second. Drawn from the run's own
    journal and live view, it asks the API server nothing: before, each second listed every node
    and Lease again (seconds of the server's work at 20,000 nodes), and so did each second before
    the run's first decision. The same with a Prefect server, where the flow runs in the command's
    process."""
    import pty
    import threading

    env = {**_user_env(tmp_path), "COLUMNS": "160"}
    if prefect == "a Prefect server":
        env["PREFECT_API_URL"] = request.getfixturevalue("prefect_api")

    with sc.cluster(tmp_path, general=3) as c:
        gw = sc.gateway(c)
        cfg = tmp_path / "kubelet.yaml"
        cfg.write_text(sc.config_text(gw, maxPods=95))
        pol = tmp_path / "policy.yaml"
        pol.write_text(sc.policy(done={"soak": "4s"}))  # three batches: the display ticks a dozen times
        since = datetime.now(timezone.utc)
        terminal, shell_side = pty.openpty()
        drawn: list[bytes] = []
        reader = threading.Thread(target=lambda: _read_all(terminal, drawn), daemon=True)
        reader.start()
        done = subprocess.run([sys.executable, "-m", "rollout_cli", "start", "--config", str(cfg), "--policy",
                               str(pol), "--name", "watched", "--kubeconfig", str(c.kubeconfig)],
                              cwd=ROOT, env=env, stdout=subprocess.PIPE,
                              stderr=shell_side, text=True, timeout=300)
        os.close(shell_side)
        reader.join(timeout=10)
        shown = b"".join(drawn).decode(errors="replace")
        assert done.returncode == 0, shown[-3000:]
        assert "nodes on target" in shown  # the display was drawn
        lists = [e for e in c.audit_log.events(verb="list")
                 if (e.get("objectRef") or {}).get("resource") in ("nodes", "leases")
                 and not e["user"]["username"].startswith("system:")
                 and datetime.fromisoformat(e["stageTimestamp"].replace("Z", "+00:00")) >= since]
        listed = [(e["objectRef"]["resource"], e["stageTimestamp"], e.get("userAgent")) for e in lists]
        assert sorted(e["objectRef"]["resource"] for e in lists) == ["leases", "nodes"], listed  # the run's one listing


def _read_all(fd: int, into: list[bytes]) -> None:
    while True:
        try:
            chunk = os.read(fd, 65536)
        except OSError:  # the terminal's other side closed
            return
        if not chunk:
            return
        into.append(chunk)
