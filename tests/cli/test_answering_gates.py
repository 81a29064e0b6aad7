"""Answering an approval gate of a local run from another shell, as a person does: `rollout start`
in one terminal (its Prefect API a temporary server), `rollout approve` in another, same
PREFECT_HOME. The answer comes from the run's own server, at once and quietly: no second server
started for it (before: about 8 s, and that server's INFO lines on the screen). The gate's
evidence is rendered on a terminal and is the markdown itself, whole, when piped."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "flows"))
import scenario as sc  # noqa: E402
from terminal import ROOT, in_terminal, rollout_command  # noqa: E402

SERVER_NOISE = ("INFO", "temporary server", "Traceback")
RECORDS = "kubelet-rollout-servers"  # under PREFECT_HOME: the temporary servers local runs serve


def rollout(*args: str, env: dict[str, str], timeout: float = 120) -> tuple[subprocess.CompletedProcess[str], float]:
    began = time.monotonic()
    result = subprocess.run(rollout_command(*args), cwd=ROOT, env=env, text=True, capture_output=True,
                            timeout=timeout)
    return result, time.monotonic() - began


def wait_for_gate(run: subprocess.Popen[Any], log: Path, timeout: float = 240) -> None:
    """Until the run's flow run pauses at the gate (Prefect says so in the run's log)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        assert run.poll() is None, f"the run ended ({run.returncode}) before its gate: {log.read_text()[-2000:]}"
        if "Pausing flow" in log.read_text():
            return
        time.sleep(0.5)
    raise AssertionError(f"no approval gate within {timeout:.0f} s: {log.read_text()[-2000:]}")


def listed_gates(env: dict[str, str], timeout: float = 60) -> tuple[subprocess.CompletedProcess[str], float]:
    """`rollout approve` (the listing) once it lists a gate (its description is written just
    after the pause), and how long that answer took."""
    deadline = time.monotonic() + timeout
    while True:
        listed, took = rollout("approve", env=env)
        if listed.returncode != 0 or "no rollout is waiting" not in listed.stdout or time.monotonic() > deadline:
            return listed, took
        time.sleep(0.5)


def test_a_gate_of_a_local_run_is_answered_by_its_own_server(tmp_path: Path) -> None:
    with sc.cluster(tmp_path, general=3) as c:
        gw = sc.gateway(c)
        policy, config = tmp_path / "gated.yaml", tmp_path / "kubelet.yaml"
        policy.write_text(sc.policy(steps=[1, "100%"], maxUnavailable=2,
                                    approval={"after": "all", "timeout": "1h", "onTimeout": "halt"}))
        config.write_text(sc.config_text(gw, maxPods=93))
        env = {**os.environ, "PREFECT_HOME": str(tmp_path / "prefect"), "KUBECONFIG": str(c.kubeconfig),
               "PYTHONPATH": str(ROOT)}
        env.pop("PREFECT_API_URL", None)
        log = (tmp_path / "run.log").open("w")
        run = subprocess.Popen(rollout_command("start", "-c", str(config), "-p", str(policy), "--name", "gated"),
                               cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        try:
            wait_for_gate(run, tmp_path / "run.log")
            assert list((tmp_path / "prefect" / RECORDS).glob("*.json")), "the run records its server"

            # temporary servers off: the listing can only come from the run's own server
            listed, listing_s = listed_gates({**env, "PREFECT_SERVER_EPHEMERAL_ENABLED": "false"})
            shown = listed.stdout + listed.stderr
            assert listed.returncode == 0 and "gated-batch-2" in listed.stdout, shown
            assert not any(noise in shown for noise in SERVER_NOISE), shown
            assert "## Rollout `gated`: approve batch 2?" in listed.stdout  # piped: the markdown itself

            code, screen = in_terminal(rollout_command("approve"), columns=100, env=env)
            assert code == 0 and "gated-batch-2" in screen, screen
            assert "Rollout gated: approve batch 2?" in screen and "## Rollout" not in screen, screen  # rendered

            answered, answer_s = rollout("approve", "gated", "--approver", "ann", env=env)
            shown = answered.stdout + answered.stderr
            assert answered.returncode == 0 and "approved gated gate gated-batch-2" in answered.stdout, shown
            assert not any(noise in shown for noise in SERVER_NOISE), shown
            print(f"listing {listing_s:.1f} s, answer {answer_s:.1f} s")  # measured: seconds to answer a gate
            assert run.wait(timeout=240) == 0, (tmp_path / "run.log").read_text()[-3000:]
        finally:
            if run.poll() is None:
                run.kill()
                run.wait(timeout=30)
            log.close()
        assert not list((tmp_path / "prefect" / RECORDS).glob("*.json")), "the record goes with the run"

