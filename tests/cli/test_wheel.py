"""An installed wheel works without the repository: shipped policies and schemas are package
data, the console scripts exist. Built from this checkout, installed in a fresh venv (uv's cache
makes the dependencies quick), run from a directory that is not the repository."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
CONFIG = "apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\nmaxPods: 80\n"

pytestmark = pytest.mark.skipif(shutil.which("uv") is None, reason="needs uv")


def run(*args: str | Path, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(a) for a in args], cwd=cwd, text=True, capture_output=True, timeout=600)


def test_an_installed_wheel_validates_against_a_shipped_policy(tmp_path: Path) -> None:
    built = run("uv", "build", "--wheel", "--out-dir", tmp_path / "dist", ROOT, cwd=tmp_path)
    assert built.returncode == 0, built.stderr
    wheel = next((tmp_path / "dist").glob("kubelet_rollout-*.whl"))
    venv = tmp_path / "venv"
    assert run("uv", "venv", "-q", venv, "--python", "python3.11", cwd=tmp_path).returncode == 0
    installed = run("uv", "pip", "install", "-q", "--python", venv / "bin" / "python", wheel, cwd=tmp_path)
    assert installed.returncode == 0, installed.stderr
    (tmp_path / "kubelet.yaml").write_text(CONFIG)

    valid = run(venv / "bin" / "rollout", "validate", "--policy", "canary", "--config", "kubelet.yaml",
                "-o", "json", cwd=tmp_path)
    assert valid.returncode == 0, valid.stdout + valid.stderr
    assert json.loads(valid.stdout)["policy"] == "canary"
    plugin = run(venv / "bin" / "kubectl-kubelet_rollout", "--version", cwd=tmp_path)
    assert plugin.returncode == 0 and plugin.stdout.startswith("rollout "), plugin.stderr
    schemas = run(venv / "bin" / "python", "-c",
                  "from rollout_cli.contract import SCHEMAS, schema; print(len([schema(s) for s in SCHEMAS]))",
                  cwd=tmp_path)
    assert schemas.stdout.strip() == "7", schemas.stderr
