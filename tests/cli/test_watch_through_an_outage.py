"""`rollout status NAME --watch` in a terminal, in another window than the run it follows, while
the API server stops answering for longer than one look's retries: the watch rides it out as the
run does, says when the server stopped answering and when it answers again, and ends with the
rollout, exit 0. Before: it exited with an error 17 s into the outage while the run went on."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "flows"))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
import scenario as sc  # noqa: E402
from terminal import Terminal  # noqa: E402

from test_terminal_ctrl_c import start_args, user_env  # noqa: E402,F401  (the fixture, a new user's shell)

pytestmark = pytest.mark.slow

OUTAGE_S = 15.0  # past one look's retries (eight attempts a second apart, kubesim's Retry-After: 1)


def test_a_watch_in_a_terminal_rides_out_an_api_outage_and_ends_with_the_rollout(
        tmp_path: Path, user_env: dict[str, str]) -> None:  # noqa: F811
    with sc.cluster(tmp_path, general=3) as cluster:
        kc = str(cluster.kubeconfig)
        args = start_args(tmp_path, cluster, "watched", sc.policy(steps=[1, "100%"], maxUnavailable=3,
                                                                   done={"soak": "60s"}), maxPods=73)
        with open(tmp_path / "run.log", "wb") as log:
            run = subprocess.Popen(args, env=user_env, cwd=tmp_path, stdout=log, stderr=subprocess.STDOUT)
        try:
            with Terminal(["rollout", "status", "watched", "--watch", "--kubeconfig", kc], env=user_env,
                          cwd=tmp_path, cols=120, rows=40) as term:
                term.wait_for(r"rollout watched: running .* nodes on target", 120)
                cluster.faults.api_errors(1.0, codes=[503])  # the kubelets spared: the nodes go on
                try:
                    term.wait_for("the API server has not answered since", 60, on="transcript")
                    time.sleep(OUTAGE_S)
                    assert term.exit() is None, term.transcript()[-3000:]  # still watching
                finally:
                    cluster.faults.reset()
                term.wait_for("the API server answers again", 60, on="transcript")
                ended = term.wait_exit(300)
                shown = term.transcript()
                assert ended is not None and ended.code == 0, shown[-3000:]
                assert shown.count("the API server has not answered since") == 1, shown[-3000:]
                assert "Traceback" not in shown
                # said once, not as each look's eight attempts (they pushed the table off a 40-line screen)
                assert "API request attempt" not in shown, shown[-3000:]
                # a line printed above the live table once rendered its cells' markup raw
                assert "[green]" not in shown and "[dim]" not in shown, shown[-3000:]
            assert run.wait(120) == 0, (tmp_path / "run.log").read_text()[-3000:]
        finally:
            if run.poll() is None:
                run.kill()
