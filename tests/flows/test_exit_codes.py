"""A `rollout start` process ends with the exit code of its outcome: the rollout benchmark's two
shapes (bench/rollout_scale.py: Kubernetes 1.23 with DKC, and 1.31 with a node agent on every
host) at a size CI affords, run as a user runs it.

At 1,000 nodes a completed rollout died by SIGABRT (exit 134): a thread still sending node Events
was inside the API client when the interpreter exited. What makes such a thread outlive the run
is shown in tests/flows/test_run_loop.py (a stop with Events in flight); here the whole process
of a completed rollout of each shape must end 0, saying so on stdout, with no traceback and no
fatal error on stderr.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "bench"))
import rollout_scale as bench  # noqa: E402 - the benchmark's shapes, defined once

pytestmark = pytest.mark.slow
NODES = 25  # the control-plane node included, as the benchmark counts


@pytest.mark.parametrize("mode", ["dkc", "modern"])
def test_a_completed_rollout_of_the_benchmarks_shape_exits_0(mode: str, tmp_path: Path, prefect_api: str) -> None:
    modern = mode == "modern"
    env = {**os.environ, "PREFECT_API_URL": prefect_api, "PREFECT_SERVER_ANALYTICS_ENABLED": "false",
           "PREFECT_HOME": str(tmp_path / "prefect"), "PYTHONPATH": str(ROOT)}
    scale = bench.MODERN_TIME_SCALE if modern else bench.time_scale_for(NODES)
    kubesim, kubeconfig, _ = bench._kubesim(NODES, scale, tmp_path, modern)
    agents = None
    try:
        cfg, pol = tmp_path / "kubelet.yaml", tmp_path / "policy.yaml"
        cfg.write_text(bench._dropin(eventRecordQPS=7) if modern else bench._config(kubeconfig, eventRecordQPS=7))
        pol.write_text(yaml.safe_dump(bench.POLICY))
        if modern:
            # the exit code is the subject, not the agents' pace: a 3 s health wait, not 30 s per batch
            agents = bench._agents(kubeconfig, tmp_path, NODES, env, [*bench.AGENT_ARGS, "--health-wait", "3s"])
        with (tmp_path / "stdout").open("w+") as out, (tmp_path / "stderr").open("w+") as err:
            code = subprocess.run([sys.executable, "-m", "rollout_cli", "start", "--config", str(cfg), "--policy",
                                   str(pol), "--name", "bench", "--kubeconfig", str(kubeconfig), "-o", "json"],
                                  cwd=ROOT, env=env, stdout=out, stderr=err, timeout=280).returncode
            out.seek(0)
            err.seek(0)
            stdout, stderr = out.read(), err.read()
        assert code == 0, f"exit {code}: {stderr[-3000:]}"
        assert json.loads(stdout)["outcome"] == "completed"
        assert "Traceback" not in stderr and "Fatal Python error" not in stderr, stderr[-3000:]
    finally:
        bench.stop_children(agents, kubesim)
