"""`deployments/prefect.yaml` against a real local Prefect server and a process worker.

Slow by nature (server start, worker polling): one test covers deploy -> inactive cron schedule ->
`rollout start --deployment` completing on kubesim through the worker -> `rollout publish`
emitting kubelet-rollout.config.published -> the event-triggered deployment rolling it out.
Every process started here is stopped by its PID.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest
import scenario as sc

from rollout_cli.contract import validator

ROOT = Path(__file__).resolve().parents[2]
PREFECT = [sys.executable, "-m", "prefect"]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _wait_healthy(url: str, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            with urllib.request.urlopen(f"{url}/health", timeout=2) as r:
                if r.status == 200:
                    return
        except OSError:
            time.sleep(0.3)
    raise AssertionError(f"Prefect server at {url} never became healthy")


def _stop(proc: subprocess.Popen, sig: int) -> None:
    if proc.poll() is None:
        proc.send_signal(sig)
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=10)


@pytest.mark.slow
@pytest.mark.timeout(1800)  # four runs through a worker, each a process of its own: 4-5 min on a loaded CI machine, past 15 in ci-43
def test_prefect_yaml_deploys_and_runs_on_kubesim_through_a_process_worker(tmp_path) -> None:
    from rollout_cli.local.prefect_home import template_db

    home = tmp_path / "prefect-home"
    home.mkdir()
    shutil.copyfile(template_db(), home / "prefect.db")
    port = _free_port()
    api = f"http://127.0.0.1:{port}/api"
    env = {k: v for k, v in os.environ.items() if not k.startswith("PREFECT_")}
    env.update({
        "PREFECT_HOME": str(home),
        "PREFECT_SERVER_DATABASE_CONNECTION_URL": f"sqlite+aiosqlite:///{home / 'prefect.db'}",
        "PREFECT_SERVER_DATABASE_MIGRATE_ON_START": "false",
        "PREFECT_SERVER_ANALYTICS_ENABLED": "false",
        "PREFECT_API_URL": api,
        "PREFECT_WORKER_QUERY_SECONDS": "1",
        "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])),
    })
    logs = tmp_path / "logs"
    logs.mkdir()
    server = subprocess.Popen([*PREFECT, "server", "start", "--host", "127.0.0.1", "--port", str(port)],
                              env=env, cwd=tmp_path, stdout=open(logs / "server.log", "w"), stderr=subprocess.STDOUT)
    worker = None
    try:
        _wait_healthy(api, timeout=180)  # a server start is 10 CPU-s here; 60 s was short under load (ci-30)
        for pool in ("kubelet-rollout", "kubelet-rollout-fleet"):
            subprocess.run([*PREFECT, "work-pool", "create", pool, "--type", "process"],
                           env=env, cwd=ROOT, check=True, capture_output=True,
                           timeout=180)  # a CLI start is seconds of CPU: over 60 s under load (ci-34)
        deployed = subprocess.run([*PREFECT, "--no-prompt", "deploy", "--all", "--prefect-file",
                                   "deployments/prefect.yaml"], env=env, cwd=ROOT, capture_output=True,
                                  text=True, timeout=360)  # over 120 s under load (ci-39)
        assert deployed.returncode == 0, deployed.stdout + deployed.stderr
        listing = _api_post(api, "/deployments/filter", {})
        by_name = {d["name"]: d for d in listing}
        assert set(by_name) == {"rollout", "rollout-on-publish", "rollback", "fleet", "identity", "drift"}
        assert by_name["fleet"]["work_pool_name"] == "kubelet-rollout-fleet"  # its workers hold no credentials
        assert by_name["fleet"]["entrypoint"] == "flows.fleet.flow:kubelet_config_fleet_rollout"
        for scheduled in ("rollout", "drift"):  # inactive until someone turns them on
            schedules = by_name[scheduled]["schedules"]
            assert schedules and schedules[0]["schedule"]["cron"] and schedules[0]["active"] is False, scheduled
        assert by_name["drift"]["entrypoint"] == "flows.drift_flow:kubelet_config_drift"
        automations = _api_post(api, "/automations/filter", {})
        assert any(a["trigger"].get("expect") == ["kubelet-rollout.config.published"] for a in automations)

        assert str(ROOT) not in json.dumps(listing)  # nothing of the deploying machine
        assert by_name["rollout"]["parameters"].get("name") is None  # named after its config
        with sc.cluster(tmp_path, general=3) as c:
            # the worker's own credentials, from a directory that is not the repository
            worker = subprocess.Popen([*PREFECT, "worker", "start", "--pool", "kubelet-rollout"],
                                      env={**env, "KUBECONFIG": str(c.kubeconfig)}, cwd=tmp_path,
                                      stdout=open(logs / "worker.log", "w"), stderr=subprocess.STDOUT)
            gw = sc.gateway(c)
            cfg = tmp_path / "kubelet.yaml"
            cfg.write_text(sc.config_text(gw, maxPods=77))
            pol = tmp_path / "policy.yaml"
            pol.write_text(sc.policy())
            started = subprocess.run(
                [sys.executable, "-m", "rollout_cli", "start", "--deployment", "kubelet-config-rollout/rollout",
                 "--config", str(cfg), "--policy", str(pol), "--name", "deployed", "--kubeconfig",
                 str(c.kubeconfig), "-o", "json"],
                env=env, cwd=ROOT, capture_output=True, text=True, timeout=240)
            assert started.returncode == 0, started.stdout + started.stderr + (logs / "worker.log").read_text()[-3000:]
            assert json.loads(started.stdout)["outcome"] == "completed"
            j = sc.journal(gw, "deployed")
            assert j.status.value == "complete"
            assert all(j.target.same_reference(sc.nodes(gw)[n].active) for n in j.plan.nodes)

            # `rollout publish` emits the event; the event-triggered deployment rolls it out
            cfg2 = tmp_path / "kubelet2.yaml"
            cfg2.write_text(sc.config_text(gw, maxPods=78))
            published = subprocess.run(
                [sys.executable, "-m", "rollout_cli", "publish", "--config", str(cfg2), "--name", "on-publish",
                 "--policy", str(pol), "--kubeconfig", str(c.kubeconfig), "-o", "json"],
                env=env, cwd=ROOT, capture_output=True, text=True, timeout=240)  # over 60 s under load (ci-42)
            assert published.returncode == 0, published.stderr
            ref = json.loads(published.stdout)
            deadline = time.monotonic() + 150
            while time.monotonic() < deadline:
                loaded = gw.load_journal("on-publish")
                if loaded is not None and sc.journal(gw, "on-publish").status.value == "complete":
                    break
                time.sleep(1)
            else:
                pytest.fail("event-triggered rollout did not complete:\n" + (logs / "worker.log").read_text()[-3000:])
            assert sc.journal(gw, "on-publish").target.name == ref["name"]
            # publishing the same content again is a no-op: no event, no second run
            again = subprocess.run(
                [sys.executable, "-m", "rollout_cli", "publish", "--config", str(cfg2), "--name", "on-publish",
                 "--policy", str(pol), "--kubeconfig", str(c.kubeconfig), "-o", "json"],
                env=env, cwd=ROOT, capture_output=True, text=True, timeout=240)
            assert json.loads(again.stdout)["created"] is False, again.stderr
            time.sleep(5)
            runs = [r for r in _api_post(api, "/flow_runs/filter", {})
                    if r["parameters"].get("name") == "on-publish"]
            assert len(runs) == 1, [r["name"] for r in runs]
            assert "kubeconfig" not in json.dumps(runs[0]["parameters"])

            # outside the maintenance windows a deployment run does not hold the worker: it
            # schedules a run of the same deployment at the next window and ends (exit 6)
            from datetime import datetime, timedelta, timezone

            from rollout.policy import load_policy_text

            now = datetime.now(timezone.utc)
            start, end = now + timedelta(hours=2), now + timedelta(hours=3)
            windowed = tmp_path / "windowed.yaml"
            windowed.write_text(sc.policy(maintenanceWindows={"timezone": "UTC", "windows": [
                {"start": start.strftime("%H:%M"), "end": end.strftime("%H:%M")}]}))
            opens = load_policy_text(windowed.read_text()).next_window(now)
            cfg3 = tmp_path / "kubelet3.yaml"
            cfg3.write_text(sc.config_text(gw, maxPods=79))
            deferred = subprocess.run(
                [sys.executable, "-m", "rollout_cli", "start", "--deployment", "kubelet-config-rollout/rollout",
                 "--config", str(cfg3), "--policy", str(windowed), "--name", "windowed", "--kubeconfig",
                 str(c.kubeconfig), "-o", "json"],
                env=env, cwd=ROOT, capture_output=True, text=True, timeout=240)
            assert deferred.returncode == 6, deferred.stdout + deferred.stderr
            assert json.loads(deferred.stdout)["outcome"] == "deferred"
            scheduled = [r for r in _api_post(api, "/flow_runs/filter", {
                "flow_runs": {"state": {"type": {"any_": ["SCHEDULED"]}}}}) if r["parameters"].get("name") == "windowed"]
            assert len(scheduled) == 1
            when = datetime.fromisoformat(scheduled[0]["expected_start_time"].replace("Z", "+00:00"))
            assert abs((when - opens).total_seconds()) < 2
            assert sc.journal(gw, "windowed").assigned_nodes() == []

            # the rollback deployment undoes the first rollout (back to local config), handed over with
            # --no-wait while no worker polls; the command it prints follows that run, not the
            # journal, which shows the rollout completed until a worker begins the rollback
            _stop(worker, signal.SIGINT)
            handed = subprocess.run(
                [sys.executable, "-m", "rollout_cli", "rollback", "deployed", "--to", "local", "--policy", str(pol),
                 "--deployment", "kubelet-config-rollback/rollback", "--kubeconfig", str(c.kubeconfig), "--no-wait"],
                env=env, cwd=ROOT, capture_output=True, text=True, timeout=240)
            assert handed.returncode == 0, handed.stdout + handed.stderr
            follow = shlex.split(re.search(r"`(rollout status [^`]+)`", handed.stdout)[1])
            assert follow[-2] == "--run", follow
            follower = subprocess.Popen([sys.executable, "-m", "rollout_cli", *follow[1:]], env=env, cwd=ROOT,
                                        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
            assert follower.stderr is not None
            first = follower.stderr.readline()  # said once it has read the run
            assert first.startswith("following flow run"), first + follower.communicate()[1]
            time.sleep(3)  # three more looks at the completed journal
            assert follower.poll() is None, follower.communicate()  # the completed journal is not its end
            follower.send_signal(signal.SIGINT)  # a person's Ctrl-C stops the following, not the run
            _, stopped = follower.communicate(timeout=60)
            assert follower.returncode == 130 and "it goes on (the same command follows it again)" in stopped, stopped
            follower = subprocess.Popen([sys.executable, "-m", "rollout_cli", *follow[1:]], env=env, cwd=ROOT,
                                        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
            assert follower.stderr is not None
            first = follower.stderr.readline()
            assert first.startswith("following flow run"), first + follower.communicate()[1]
            worker = subprocess.Popen([*PREFECT, "worker", "start", "--pool", "kubelet-rollout"],
                                      env={**env, "KUBECONFIG": str(c.kubeconfig)}, cwd=tmp_path,
                                      stdout=open(logs / "worker2.log", "w"), stderr=subprocess.STDOUT)
            shown, said = follower.communicate(timeout=240)
            said = first + said
            assert follower.returncode == 0, shown + said
            lines = shown.splitlines()
            assert "rollout deployed: completed" in lines[0] and "rollout deployed: rolled-back" in lines[-1], shown
            # a rollback that did all it was asked ends Completed, as its flow run shows it
            assert said.count("following flow run") == 1 and "ended: completed" in said, said
            # a script hands one over with -o json: what was submitted, and the same command to follow it
            again = subprocess.run(
                [sys.executable, "-m", "rollout_cli", "rollback", "deployed", "--to", "local", "--policy", str(pol),
                 "--deployment", "kubelet-config-rollback/rollback", "--kubeconfig", str(c.kubeconfig), "--no-wait",
                 "-o", "json"], env=env, cwd=ROOT, capture_output=True, text=True, timeout=240)
            assert again.returncode == 0, again.stdout + again.stderr
            handed_over = json.loads(again.stdout)
            validator("submitted").validate(handed_over)
            assert handed_over["deployment"] == "kubelet-config-rollback/rollback" and handed_over["name"] == "deployed"
            follow = shlex.split(handed_over["follow"])
            followed = subprocess.run([sys.executable, "-m", "rollout_cli", *follow[1:]], env=env, cwd=ROOT,
                                      capture_output=True, text=True, timeout=240)
            assert followed.returncode == 0 and "rolled-back" in followed.stdout.splitlines()[-1], \
                followed.stdout + followed.stderr
            observed = sc.nodes(gw)
            assert all(observed[n].spec_source is None and observed[n].active is None
                       for n in sc.journal(gw, "deployed").plan.nodes)
    finally:
        if worker is not None:
            _stop(worker, signal.SIGINT)
        _stop(server, signal.SIGTERM)


def _api_post(api: str, path: str, body: dict) -> list:
    req = urllib.request.Request(f"{api}{path}", data=json.dumps(body).encode(), method="POST",
                                 headers={"content-type": "application/json"})
    # a loaded machine (ten test workers) kept the server's answer to a filter past 10 s
    with urllib.request.urlopen(req, timeout=60) as r:
        return json.loads(r.read())
