"""A run refused before it began says so and nothing else: no "rollout X: started" first, and the
exit code of the README's table. Before: `rollout rollback nosuch` and a `start` refused by the
lock printed "rollout X: started; `rollout status X` shows it" and then failed; `start --name
nosuch` (nothing to resume) exited 2, where the table says 5 for a rollout that does not exist.
A run that did start names the command that shows it, with its own --kubeconfig: copied into a
shell whose default cluster is another (the demo's, any run's given --kubeconfig), it reads this one."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "flows"))
import scenario as sc  # noqa: E402

from rollout.gateway import LockKeeper  # noqa: E402
from rollout.lock import this_process  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]


def _rollout(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "rollout_cli", *args], cwd=ROOT, env=env, capture_output=True,
                          text=True, timeout=180)


def test_refused_runs_say_why_with_their_exit_code_and_never_started(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("PREFECT_API")}
    env.update(PREFECT_HOME=str(tmp_path / "prefect-home"), PREFECT_SERVER_ANALYTICS_ENABLED="false",
               PYTHONPATH=str(ROOT))
    with sc.cluster(tmp_path, general=2) as c:
        gw = sc.gateway(c)
        kc = ["--kubeconfig", str(c.kubeconfig)]
        cfg = tmp_path / "kubelet.yaml"
        cfg.write_text(sc.config_text(gw, maxPods=62))

        nothing = _rollout("rollback", "nosuch", *kc, env=env)
        assert nothing.returncode == 5, nothing.stdout + nothing.stderr
        assert "started" not in nothing.stdout + nothing.stderr
        assert "nothing to roll back" in nothing.stdout + nothing.stderr

        gone = _rollout("start", "--name", "nosuch", *kc, env=env)
        assert gone.returncode == 5 and "no rollout named 'nosuch' to resume" in gone.stderr, gone.stderr
        assert "started" not in gone.stdout + gone.stderr

        with LockKeeper(gw, this_process("other"), outage_tolerance_s=300):  # another rollout runs
            held = _rollout("start", "--config", str(cfg), "--policy", "fast", "--name", "second", *kc, env=env)
        assert held.returncode == 4, held.stdout + held.stderr
        assert "started" not in held.stdout + held.stderr and "other" in held.stdout + held.stderr
        assert gw.load_journal("second") is None  # nothing was written for it

        began = _rollout("start", "--config", str(cfg), "--policy", "fast", "--name", "third", *kc, env=env)
        assert began.returncode == 0, began.stdout + began.stderr
        shown = re.search(r"rollout third: started; `([^`]+)` shows it", began.stderr)
        assert shown, began.stderr
        elsewhere = {**env, "KUBECONFIG": str(tmp_path / "no-such-kubeconfig"),
                     "PATH": f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"}
        status = subprocess.run(shown.group(1), shell=True, cwd=tmp_path, env=elsewhere, capture_output=True,
                                text=True, timeout=120)
        assert status.returncode == 0 and "third" in status.stdout and "completed" in status.stdout, \
            shown.group(1) + "\n" + status.stdout + status.stderr
