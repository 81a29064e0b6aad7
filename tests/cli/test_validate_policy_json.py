"""`validate -o json` reports a refused policy on stdout too, as it does a refused config (README:
"`validate -o json` reports an invalid input on stdout too"; schemas/validate.json)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from rollout_cli.base import EXIT_INVALID
from rollout_cli.contract import validator

ROOT = Path(__file__).resolve().parents[2]
CONFIG = "apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\nmaxPods: 80\n"


def rollout(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    env.pop("KUBECONFIG", None)
    return subprocess.run([sys.executable, "-m", "rollout_cli", *args], cwd=cwd, env=env, text=True,
                          capture_output=True, timeout=120)


@pytest.mark.parametrize(("policy", "problem"), [
    ("name: typo\nsteps: [1, 100%\n", "not valid YAML"),  # a typo in the file
    ("name: typo\nsteps: [1, '100%']\nbogus: 1\n", "bogus: unknown field"),
    ("nosuch", "no policy named 'nosuch'"),  # neither a shipped name nor a file
])
@pytest.mark.parametrize("with_config", [False, True], ids=["policy alone", "with a config"])
def test_a_refused_policy_is_a_verdict_on_stdout(tmp_path: Path, policy: str, problem: str, with_config: bool) -> None:
    """Before: exit 2 and nothing on stdout (the policy was refused while the flags were read)."""
    ref = policy
    if "\n" in policy:
        (tmp_path / "typo.yaml").write_text(policy)
        ref = "typo.yaml"
    (tmp_path / "kubelet.yaml").write_text(CONFIG)
    config = ["--config", "kubelet.yaml"] if with_config else []
    for output, parse in (("json", json.loads), ("yaml", yaml.safe_load)):
        result = rollout("validate", "--policy", ref, *config, "-o", output, cwd=tmp_path)
        assert result.returncode == EXIT_INVALID, result.stderr
        data = parse(result.stdout)
        validator("validate").validate(data)
        assert data["valid"] is False and data["policy"] == ref
        assert data["config"] == ("kubelet.yaml" if with_config else None)
        assert any(problem in p for p in [data["message"], *data["problems"]]), data
    table = rollout("validate", "--policy", ref, *config, cwd=tmp_path)  # the table: one error on stderr
    assert table.returncode == EXIT_INVALID and table.stdout == "" and problem in table.stderr
    assert "Traceback" not in table.stderr
