"""Resume after the orchestrating process is killed mid-batch, and rollback runs."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import scenario as sc

from rollout.names import ANN_ASSIGNED_AT, ANN_ROLLOUT

pytestmark = pytest.mark.usefixtures("prefect_api")
ROOT = Path(__file__).resolve().parents[2]


def test_killed_orchestrator_resumes_without_assigning_any_node_twice(tmp_path, prefect_api) -> None:
    with sc.cluster(tmp_path, general=5) as c:
        gw = sc.gateway(c)
        cfg = tmp_path / "kubelet.yaml"
        cfg.write_text(sc.config_text(gw, maxPods=75))
        pol = tmp_path / "policy.yaml"
        pol.write_text(sc.policy(steps=[1, "40%", "100%"], maxUnavailable=3, done={"soak": "4s"}))
        env = {**os.environ, "PREFECT_API_URL": prefect_api, "PREFECT_SERVER_ANALYTICS_ENABLED": "false",
               "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])), "PREFECT_HOME": str(tmp_path / "prefect-sub")}
        proc = subprocess.Popen(
            [sys.executable, "-m", "rollout_cli", "start", "--config", str(cfg), "--policy", str(pol),
             "--name", "resume", "--kubeconfig", str(c.kubeconfig)],
            cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
        try:
            # kill it once the second batch has been assigned (and is soaking)
            deadline = time.monotonic() + 120
            while time.monotonic() < deadline:
                loaded = gw.load_journal("resume")
                if loaded is not None:
                    j = sc.journal(gw, "resume")
                    if len(j.plan.batches) >= 3 and j.batches[1].status.value == "in-progress" \
                            and j.assigned_nodes(batch=1):
                        break
                assert proc.poll() is None, "the rollout ended before it could be killed"
                time.sleep(0.2)
            else:
                pytest.fail("second batch never started")
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=10)
        finally:
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)
        before = {n: o.annotations.get(ANN_ASSIGNED_AT) for n, o in sc.nodes(gw).items()
                  if ANN_ROLLOUT in o.annotations}
        assert before and sc.journal(gw, "resume").status.value == "running"
        # `rollout status` works after the crash: every node, with its phase, from the cluster alone
        from typer.testing import CliRunner

        from rollout_cli.main import app

        shown = CliRunner().invoke(app, ["status", "resume", "-o", "json", "--kubeconfig", str(c.kubeconfig)])
        assert shown.exit_code == 0, shown.output
        phases = {n["name"]: n["phase"] for n in __import__("json").loads(shown.stdout)["nodes"]}
        assert set(phases) == set(sc.journal(gw, "resume").plan.nodes)
        assert all(phases[n] != "pending" for n in before) and "pending" in phases.values()

        outcome = sc.run(name="resume", config=cfg.read_text(), policy=pol.read_text(), kubeconfig=str(c.kubeconfig))

        assert outcome.outcome == "completed", outcome.message
        j = sc.journal(gw, "resume")
        observed = sc.nodes(gw)
        patches = sc.assignment_patches(c)
        assert patches == {n: 1 for n in j.plan.nodes}, patches  # none twice, none forgotten
        for n in j.plan.nodes:
            assert j.target.same_reference(observed[n].active) and observed[n].error == ""
        for n, stamp in before.items():  # nodes assigned before the kill kept their assignment
            assert observed[n].annotations[ANN_ASSIGNED_AT] == stamp


def test_rollback_to_previous_then_to_local(tmp_path) -> None:
    with sc.cluster(tmp_path, general=3) as c:
        gw = sc.gateway(c)
        first = sc.run(name="v1", config=sc.config_text(gw, maxPods=60), policy=sc.policy(), kubeconfig=str(c.kubeconfig))
        assert first.outcome == "completed", first.message
        v1 = sc.journal(gw, "v1").target
        second = sc.run(name="v2", config=sc.config_text(gw, maxPods=61), policy=sc.policy(), kubeconfig=str(c.kubeconfig))
        assert second.outcome == "completed", second.message
        v2 = sc.journal(gw, "v2").target
        workers = sc.workers(gw)
        assert all(v2.same_reference(sc.nodes(gw)[n].active) for n in workers)

        back = sc.run_rollback(name="v2", to="previous", policy=sc.policy(), kubeconfig=str(c.kubeconfig))
        assert back.outcome == "rolled-back", back.message
        observed = sc.nodes(gw)
        for n in workers:  # each node back on v1, the source it had before v2
            assert v1.same_reference(observed[n].spec_source), n
            assert v1.same_reference(observed[n].active) and observed[n].active.uid == v1.uid, n
            assert observed[n].error == "" and observed[n].is_ready

        local = sc.run_rollback(name="v1", to="local", policy=sc.policy(), kubeconfig=str(c.kubeconfig))
        assert local.outcome == "rolled-back", local.message
        observed = sc.nodes(gw)
        for n in workers:  # configSource removed: the kubelets run their local --config
            assert observed[n].spec_source is None and observed[n].active is None, n
            assert observed[n].assigned is None and observed[n].is_ready
        from rollout.usecases.status import rollout_status

        status = rollout_status(gw, "v1")
        assert {n["phase"] for n in status["nodes"]} == {"reverted"}
