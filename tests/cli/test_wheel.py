"""An installed wheel works without the repository: shipped policies and schemas are package
data, the console scripts exist. Built from this checkout as a release is (an sdist, then the
wheel from it, so nothing left in ``build/`` can hide a file the sdist forgot), installed in a
fresh venv (uv's cache makes the dependencies quick), run from a directory that is not the
repository."""

from __future__ import annotations

import json
import shutil
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
CONFIG = "apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\nmaxPods: 80\n"

pytestmark = pytest.mark.skipif(shutil.which("uv") is None, reason="needs uv")


def run(*args: str | Path, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(a) for a in args], cwd=cwd, text=True, capture_output=True, timeout=600)


@dataclass(frozen=True)
class Installed:
    bin: Path  # the fresh venv's bin/
    cwd: Path  # outside the repository, with kubelet.yaml in it


@pytest.fixture(scope="module")
def installed(tmp_path_factory: pytest.TempPathFactory) -> Installed:
    tmp_path = tmp_path_factory.mktemp("wheel")
    built = run("uv", "build", "--out-dir", tmp_path / "dist", ROOT, cwd=tmp_path)
    assert built.returncode == 0, built.stderr
    wheel = next((tmp_path / "dist").glob("kubelet_rollout-*.whl"))
    venv = tmp_path / "venv"
    assert run("uv", "venv", "-q", venv, "--python", "python3.11", cwd=tmp_path).returncode == 0
    installed = run("uv", "pip", "install", "-q", "--python", venv / "bin" / "python", wheel, cwd=tmp_path)
    assert installed.returncode == 0, installed.stderr
    (tmp_path / "kubelet.yaml").write_text(CONFIG)
    return Installed(venv / "bin", tmp_path)


def test_an_installed_wheel_validates_against_a_shipped_policy(installed: Installed) -> None:
    valid = run(installed.bin / "rollout", "validate", "--policy", "fast", "--config", "kubelet.yaml",
                "-o", "json", cwd=installed.cwd)
    assert valid.returncode == 0, valid.stdout + valid.stderr
    assert json.loads(valid.stdout)["policy"] == "fast"
    plugin = run(installed.bin / "kubectl-kubelet_rollout", "--version", cwd=installed.cwd)
    assert plugin.returncode == 0 and plugin.stdout.startswith("rollout "), plugin.stderr
    schemas = run(installed.bin / "python", "-c",
                  "from rollout_cli.contract import SCHEMAS, schema; print(len([schema(s) for s in SCHEMAS]))",
                  cwd=installed.cwd)
    from rollout_cli.contract import SCHEMAS

    assert schemas.stdout.strip() == str(len(SCHEMAS)), schemas.stderr  # every schema is in the wheel


def test_every_policy_of_the_top_level_folder_ships_inside_the_package(installed: Installed) -> None:
    shipped = run(installed.bin / "python", "-c",
                  "import json; from rollout.policy import DEFAULT_POLICY_DIR, available_policies; "
                  "print(json.dumps([str(DEFAULT_POLICY_DIR), available_policies()]))",
                  cwd=installed.cwd)
    assert shipped.returncode == 0, shipped.stderr
    where, names = json.loads(shipped.stdout)
    assert Path(where).parts[-3:] == ("site-packages", "rollout", "policies")
    assert names == sorted(p.stem for p in (ROOT / "policies").glob("*.yaml"))


@pytest.fixture
def kubesim_of_the_wheel(installed: Installed, tmp_path: Path) -> Iterator[Path]:
    """``kubesim up`` from the installed wheel (its package data included); yields the kubeconfig."""
    kubeconfig = tmp_path / "kubeconfig"
    proc = subprocess.Popen(
        [str(installed.bin / "kubesim"), "up", "--nodes", "2", "--kubeconfig", str(kubeconfig),
         "--state-dir", str(tmp_path / "state"), "--time-scale", "20"],
        cwd=installed.cwd, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    try:
        assert proc.stdout is not None
        assert any("kubesim ready" in line for line in proc.stdout), "kubesim did not come up"
        yield kubeconfig
    finally:
        proc.terminate()
        proc.wait(timeout=60)


def test_an_installed_wheel_plans_a_rollout_with_a_shipped_policy(installed: Installed,
                                                                   kubesim_of_the_wheel: Path) -> None:
    plan = run(installed.bin / "rollout", "plan", "--config", "kubelet.yaml", "--policy", "canary",
               "--kubeconfig", kubesim_of_the_wheel, "-o", "json", cwd=installed.cwd)
    assert plan.returncode == 0, plan.stdout + plan.stderr
    answer = json.loads(plan.stdout)
    assert answer["policy"] == "canary"
    assert sorted(n for batch in answer["batches"] for n in batch["nodes"]) == ["node-1", "node-2"]
