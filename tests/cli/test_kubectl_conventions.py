"""kubectl conventions, checked with the real kubectl against kubesim: the rollout as a node
label (selectable with -l, shown with -L), `kubectl kubelet-rollout` as a plugin, $KUBECONFIG
honoured by both CLIs, `rollout --version`."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "flows"))
import scenario as sc  # noqa: E402

from rollout.names import LABEL_ROLLOUT  # noqa: E402

pytestmark = [pytest.mark.usefixtures("prefect_api"),
              pytest.mark.skipif(shutil.which("kubectl") is None, reason="needs kubectl")]
BIN = Path(sys.executable).parent


def run(*args: str, kubeconfig: Path) -> subprocess.CompletedProcess[str]:
    """A command as a user's shell runs it: the venv's bin on PATH, the cluster in $KUBECONFIG."""
    env = {**os.environ, "KUBECONFIG": str(kubeconfig), "PATH": f"{BIN}{os.pathsep}{os.environ['PATH']}"}
    return subprocess.run(list(args), env=env, text=True, capture_output=True, timeout=120)


def labelled(kubeconfig: Path, rollout: str) -> list[str]:
    got = run("kubectl", "get", "nodes", "-l", f"{LABEL_ROLLOUT}={rollout}", "-L", LABEL_ROLLOUT,
              "--no-headers", kubeconfig=kubeconfig)
    assert got.returncode == 0, got.stderr
    rows = [line.split() for line in got.stdout.splitlines() if line.strip()]
    assert all(row[-1] == rollout for row in rows), got.stdout  # the -L column shows it
    return sorted(row[0] for row in rows)


def test_rollout_label_plugin_and_kubeconfig_from_the_environment(tmp_path: Path, prefect_api: str) -> None:
    with sc.cluster(tmp_path, general=3) as c:
        gw, kc = sc.gateway(c), Path(c.kubeconfig)
        outcome = sc.run(name="labelled", config=sc.config_text(gw, maxPods=81), policy=sc.policy(),
                         kubeconfig=str(kc))
        assert outcome.outcome == "completed", outcome.message
        assert labelled(kc, "labelled") == sc.workers(gw)

        plugin = run("kubectl", "kubelet-rollout", "status", "labelled", "-o", "json", kubeconfig=kc)
        assert plugin.returncode == 0, plugin.stderr
        assert json.loads(plugin.stdout)["state"] == "completed"
        assert run("rollout", "--version", kubeconfig=kc).stdout.startswith("rollout ")
        assert run("kubesim", "fault", "show", kubeconfig=kc).returncode == 0  # no --kubeconfig needed

        back = sc.run_rollback(name="labelled", kubeconfig=str(kc), policy=sc.policy())
        assert back.outcome == "rolled-back", back.message
        assert labelled(kc, "labelled") == []  # a revert removes the label in the same PATCH
