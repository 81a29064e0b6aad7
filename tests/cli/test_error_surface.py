"""Nothing a user does gets a traceback: every expected outcome of `rollout start` is one message
and its documented exit code, in the terminal and in the flow run's Prefect logs.

The CLI runs as a real process (a terminal sees Prefect's log stream on stderr; CliRunner would
not). Ctrl-C (exit 130, no traceback) is covered in tests/flows/test_run_loop.py.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "flows"))
import scenario as sc  # noqa: E402

from rollout_cli.main import EXIT_FAILED, EXIT_INVALID, EXIT_LOCKED, EXIT_OK  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
NOISE = ("Traceback", "database is locked", "Failed to send telemetry", "Error:")


def rollout(*args: str, home: Path, api: str | None) -> subprocess.CompletedProcess[str]:
    """`rollout ARGS` in its own process; ``api=None``: Prefect's temporary server in ``home``."""
    env = {**os.environ, "PREFECT_HOME": str(home),
           "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}
    env.pop("PREFECT_SERVER_ANALYTICS_ENABLED", None)  # the CLI turns it off itself
    env.pop("PREFECT_API_URL", None)
    if api:
        env["PREFECT_API_URL"] = api
    return subprocess.run([sys.executable, "-m", "rollout_cli", *args], cwd=ROOT, env=env, text=True,
                          capture_output=True, timeout=240)


def assert_one_message(result: subprocess.CompletedProcess[str], code: int, line: str) -> None:
    """Exit ``code``; ``line`` (how it ended) said exactly once; no traceback, no noise."""
    both = result.stdout + result.stderr
    assert result.returncode == code, both[-3000:]
    for noise in NOISE:
        assert noise not in both, both[-3000:]
    assert both.count(line) == 1, both[-3000:]


def prefect_logs(flow_run_name: str) -> str:
    """Every log line of the flow runs named ``flow_run_name`` (and their task runs)."""
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import FlowRunFilter, FlowRunFilterName, LogFilter, LogFilterFlowRunId

    with get_client(sync_client=True) as client:
        runs = client.read_flow_runs(flow_run_filter=FlowRunFilter(name=FlowRunFilterName(any_=[flow_run_name])))
        logs = client.read_logs(log_filter=LogFilter(flow_run_id=LogFilterFlowRunId(any_=[r.id for r in runs])))
    return "\n".join(log.message for log in logs)


def flow_runs(flow_run_name: str) -> list[Any]:
    """The flow runs named ``flow_run_name``, latest first."""
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import FlowRunFilter, FlowRunFilterName
    from prefect.client.schemas.sorting import FlowRunSort

    with get_client(sync_client=True) as client:
        return list(client.read_flow_runs(flow_run_filter=FlowRunFilter(name=FlowRunFilterName(any_=[flow_run_name])),
                                          sort=FlowRunSort.START_TIME_DESC, limit=1))


def final_state(flow_run_name: str) -> tuple[str, str]:
    """(type, name) of the latest flow run named ``flow_run_name``."""
    run = flow_runs(flow_run_name)[0]
    return run.state.type.value, run.state.name


def test_each_expected_outcome_is_one_message_and_its_exit_code(tmp_path: Path, prefect_api: str) -> None:
    with sc.cluster(tmp_path, general=2, legacy=1) as c:
        gw, kc = sc.gateway(c), str(c.kubeconfig)
        pol = tmp_path / "policy.yaml"
        # the scenario's soak (3 s), not less: a crash loop shows as NotReady only after the node
        # monitor's grace plus notReadyFor (2 s at 40x), and a shorter soak could end first
        pol.write_text(sc.policy(allowFields=sorted(sc.CRASHLOOP_ON_LEGACY), failureAction="revert-all",
                                 steps=[1, "100%"], maxUnavailable=3))
        good, other, bad = tmp_path / "good.yaml", tmp_path / "other.yaml", tmp_path / "bad.yaml"
        good.write_text(sc.config_text(gw, maxPods=61))
        other.write_text(sc.config_text(gw, maxPods=62))
        bad.write_text(sc.config_text(gw, maxPods=63, **sc.CRASHLOOP_ON_LEGACY))

        def start(name: str, config: Path, api: str | None = prefect_api, home: Path = tmp_path / "home"):
            return rollout("start", "--name", name, "--config", str(config), "--policy", str(pol),
                           "--kubeconfig", kc, home=home, api=api)

        missing = start("missing", tmp_path / "nope.yaml")
        assert_one_message(missing, EXIT_INVALID, "error: ")
        assert "nope.yaml" in missing.stderr

        # a fresh PREFECT_HOME and Prefect's temporary server: no database or telemetry noise
        completed = start("reused", good, api=None, home=tmp_path / "fresh-home")
        assert_one_message(completed, EXIT_OK, "reused: completed: ")
        # piped, the report is its markdown, whole (a rendered table is cut to the width), never a repr
        assert "<Markdown" not in completed.stdout and "# Rollout `reused`: completed" in completed.stdout

        reused = start("reused", other)
        assert_one_message(reused, EXIT_INVALID, "reused: invalid: rollout 'reused' already exists")
        assert "Traceback" not in prefect_logs("reused")

        reverted = start("crashloop", bad)
        assert_one_message(reverted, EXIT_FAILED, "crashloop: reverted: ")
        assert "reverted: reverted" not in reverted.stdout
        assert "Traceback" not in prefect_logs("crashloop")
        assert final_state("crashloop") == ("FAILED", "Reverted")  # still Failed, named for what happened

        halt = tmp_path / "halt.yaml"
        halt.write_text(sc.policy(allowFields=sorted(sc.CRASHLOOP_ON_LEGACY), failureAction="halt",
                                  steps=[1, "100%"], maxUnavailable=3))
        halted = rollout("start", "--name", "halting", "--config", str(bad), "--policy", str(halt),
                         "--kubeconfig", kc, home=tmp_path / "home", api=prefect_api)
        assert_one_message(halted, EXIT_FAILED, "halting: halted: ")
        assert "Traceback" not in prefect_logs("halting")
        assert final_state("halting") == ("FAILED", "Halted")

        from rollout.gateway import LockKeeper

        with LockKeeper(gw, "kubelet-rollout/someone-else", rollout="someone-else"):
            locked = start("blocked", other)
        assert_one_message(locked, EXIT_LOCKED, "blocked: locked: ")
        assert "someone-else" in locked.stdout
        assert "Traceback" not in prefect_logs("blocked")
        assert not flow_runs("blocked")  # the lock is taken before Prefect: a locked start makes no flow run


@pytest.fixture(autouse=True)
def _api(prefect_api: str) -> None:
    """The session's Prefect API, also for the log reads above."""
