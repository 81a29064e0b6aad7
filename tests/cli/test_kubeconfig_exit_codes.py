"""A kubeconfig that is missing or unreadable is invalid input (exit 2), however it was named.

The README's table: 2 for invalid input (config, policy, flags), 3 for a cluster or API problem.
No cluster is asked anything when the file that says where the cluster is cannot be read, so
every way of naming it ends the same: ``--kubeconfig``, ``$KUBECONFIG`` or the default
``~/.kube/config``. A kubeconfig that reads but whose server does not answer is the cluster's
problem: exit 3. Each case runs the real `rollout` command, as a person's shell does.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from rollout_cli.base import EXIT_CLUSTER, EXIT_INVALID
from rollout_cli.local.processes import free_port

ROOT = Path(__file__).resolve().parents[2]


def rollout(*args: str, home: Path, kubeconfig_env: str | None = None) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k not in ("KUBECONFIG", "KUBERNETES_SERVICE_HOST")}
    env.update(HOME=str(home), PYTHONPATH=str(ROOT))
    if kubeconfig_env is not None:
        env["KUBECONFIG"] = kubeconfig_env
    return subprocess.run([sys.executable, "-m", "rollout_cli", *args], cwd=home, env=env, text=True,
                          capture_output=True, timeout=120)


def one_error(result: subprocess.CompletedProcess[str], code: int, *said: str) -> None:
    assert result.returncode == code, result.stdout + result.stderr
    assert "Traceback" not in result.stderr, result.stderr
    assert result.stderr.count("error: ") == 1, result.stderr
    for words in said:
        assert words in result.stderr, result.stderr


@pytest.fixture
def home(tmp_path: Path) -> Path:
    (tmp_path / ".kube").mkdir()
    return tmp_path


def test_no_kubeconfig_at_all_is_invalid_input(home: Path) -> None:
    """Before: exit 3 and "Invalid kube-config file. No configuration found." with the hint to
    check the cluster; `--kubeconfig /nonexistent` gave 2."""
    one_error(rollout("status", "r1", home=home), EXIT_INVALID, "no kubeconfig", "give --kubeconfig FILE")
    one_error(rollout("status", "r1", home=home, kubeconfig_env=""), EXIT_INVALID, "no kubeconfig")
    one_error(rollout("status", "r1", "--kubeconfig", "/nonexistent", home=home), EXIT_INVALID, "/nonexistent")
    one_error(rollout("list", home=home, kubeconfig_env=str(home / "gone")), EXIT_INVALID, "gone")


@pytest.mark.parametrize(("text", "said"), [
    ("clusters: [\n", "line 2"),  # before: a traceback (yaml.parser.ParserError) and exit 1
    ("apiVersion: v1\nkind: Config\n", "current-context"),  # before: exit 3
])
def test_an_unreadable_default_kubeconfig_is_invalid_input(home: Path, text: str, said: str) -> None:
    (home / ".kube" / "config").write_text(text)
    one_error(rollout("status", "r1", home=home), EXIT_INVALID, str(home / ".kube" / "config"), said)


def test_a_kubeconfig_whose_server_does_not_answer_is_a_cluster_problem(home: Path) -> None:
    (home / ".kube" / "config").write_text(f"""apiVersion: v1
kind: Config
clusters: [{{name: gone, cluster: {{server: "http://127.0.0.1:{free_port()}"}}}}]
users: [{{name: me, user: {{token: x}}}}]
contexts: [{{name: gone, context: {{cluster: gone, user: me}}}}]
current-context: gone
""")
    one_error(rollout("status", "r1", home=home), EXIT_CLUSTER, "check that the cluster is up")
