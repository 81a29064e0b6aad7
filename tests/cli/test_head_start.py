"""`rollout start` without a Prefect profile does not wait for its temporary Prefect server: the
rollout begins at once and its flow run attaches when the server is up, then shows everything the
run did, in order, and ends in the run's outcome."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from datetime import datetime, timezone
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "flows"))
import scenario as sc  # noqa: E402

from rollout_cli.prefect_home import template_db  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]


def _log_time(line: str) -> datetime:
    """A Prefect log line's time of day (local), on today's date, as UTC."""
    clock = datetime.strptime(line.split(" | ")[0].strip(), "%H:%M:%S.%f").time()
    return datetime.combine(datetime.now().date(), clock).astimezone().astimezone(timezone.utc)


def test_the_rollout_writes_before_its_temporary_prefect_server_is_up(tmp_path: Path) -> None:
    with sc.cluster(tmp_path, general=3) as c:
        gw = sc.gateway(c)
        cfg = tmp_path / "kubelet.yaml"
        cfg.write_text(sc.config_text(gw, maxPods=97))
        pol = tmp_path / "policy.yaml"
        pol.write_text(sc.policy())
        home = tmp_path / "prefect-home"
        home.mkdir()
        shutil.copyfile(template_db(), home / "prefect.db")  # as after a first run: migrated
        env = {k: v for k, v in os.environ.items() if not k.startswith("PREFECT_API")}
        env.update(PREFECT_HOME=str(home), PREFECT_SERVER_ANALYTICS_ENABLED="false", PYTHONPATH=str(ROOT))
        done = subprocess.run([sys.executable, "-m", "rollout_cli", "start", "--config", str(cfg), "--policy",
                               str(pol), "--name", "ahead", "--kubeconfig", str(c.kubeconfig), "-o", "json"],
                              cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
        assert done.returncode == 0, done.stderr[-3000:]
        answer = json.loads(done.stdout)
        assert answer["outcome"] == "completed" and answer["flow_run_id"], answer
        began = next(_log_time(line) for line in done.stderr.splitlines() if "Beginning flow run" in line)
        patches = sorted(datetime.fromisoformat(e["stageTimestamp"].replace("Z", "+00:00"))
                         for e in c.audit_log.events(verb="patch")
                         if (e.get("objectRef") or {}).get("resource") == "nodes"
                         and not e["objectRef"].get("subresource")
                         and not e["user"]["username"].startswith("system:"))
        assert patches and patches[0] < began, "the first assignment waited for the Prefect server"
        assert sc.assignment_patches(c) == {n: 1 for n in sc.workers(gw)}
        # the flow run shows what the run did before it existed, in order
        lines = done.stderr.splitlines()
        first_batch = next(i for i, line in enumerate(lines) if "starting batch 1 (canary)" in line)
        assert first_batch > next(i for i, line in enumerate(lines) if "Beginning flow run" in line)
        assert any("rollout ahead completed" in line for line in lines[first_batch:])


def test_a_head_start_begins_without_importing_prefect() -> None:
    """Importing Prefect takes seconds; the CLI begins the rollout before it does."""
    probe = ("import sys, flows.head_start, flows.stop, rollout_cli.main; "
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
