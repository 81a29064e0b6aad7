"""The README's command blocks, run as a reader runs them: pasted into bash, line by line, from a
scratch directory, against kubesim (issue 19: the README's statements must match the product).

What a reader would type differently is set the way a reader sets it, never by editing the
lines: ``HOME`` holds a ``~/.kube/config`` for the quickstart's ``export KUBECONFIG=...``,
``$EDITOR`` is a program that makes the change, ``KUBELET_ROLLOUT_TIME_SCALE`` makes it a
rehearsal at kubesim's speed (as the README says). The one exception is the Prometheus address,
a host name only a real cluster resolves: the line that exports it gets the local one. Every line
must exit 0, pipes included (``pipefail``), except where the README's own comment on the line
says otherwise (``exit N: ...``). The blocks are read and run by ``tests/docs_blocks.py``.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
import time
from dataclasses import replace
from pathlib import Path

import pytest

from docs_blocks import Command, command_blocks, reader_env, run_commands

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "flows"))
import scenario as sc  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"
TIME_SCALE = 20
EDITOR = """#!/bin/sh
# the reader's change: maxPods 80
if grep -q '^maxPods:' "$1"; then sed -i 's/^maxPods:.*/maxPods: 80/' "$1"; else echo 'maxPods: 80' >> "$1"; fi
"""


def block_after(heading: str, nth: int = 0) -> list[Command]:
    """The commands of the ``nth`` command block under ``heading``."""
    return command_blocks(README, heading)[nth]


def run_lines(commands: list[Command], *, cwd: Path, env: dict[str, str], timeout: float = 600) -> str:
    return run_commands(commands, cwd=cwd, env=env, timeout=timeout, source="the README")


def scratch(tmp_path: Path) -> tuple[Path, dict[str, str]]:
    """A reader's directory and environment, with the editor that makes their change."""
    editor = tmp_path / "editor"
    editor.write_text(EDITOR)
    editor.chmod(0o755)
    return reader_env(tmp_path, EDITOR=str(editor), KUBELET_ROLLOUT_TIME_SCALE=str(TIME_SCALE))


def test_the_kubesim_block_runs(tmp_path: Path) -> None:
    work, env = scratch(tmp_path)
    lines = block_after("## kubesim")
    up = lines[0].text.rstrip("& ")
    assert up.startswith(".venv/bin/kubesim up")
    server = subprocess.Popen(["bash", "-c", f"exec {up}"], cwd=work, env=env, stdout=subprocess.PIPE,
                              stderr=subprocess.STDOUT, text=True)
    try:
        assert server.stdout is not None
        deadline = time.monotonic() + 120
        for line in server.stdout:
            if line.startswith("kubesim ready:") or time.monotonic() > deadline:
                break
        assert (work / "kc").exists(), "kubesim up did not write ./kc"
        out = run_lines([Command(". .venv/bin/activate", 0), *lines[1:]], cwd=work, env=env)
        assert "node-1" in out and "{}" in out, out  # the nodes, and a status.config with nothing assigned
    finally:
        server.terminate()
        server.wait(timeout=30)


@pytest.mark.slow
@pytest.mark.timeout(900)  # the blocks' own bound: 300 s ran out twice on a loaded 2-CPU machine (5 min of clocks)
def test_the_quickstart_scripting_and_rollback_blocks_run_on_kubesim(tmp_path: Path) -> None:
    from kubesim.cluster import Cluster

    work, env = scratch(tmp_path)
    with Cluster(nodes=3, state_dir=tmp_path / "kubesim", time_scale=TIME_SCALE) as c:
        sc.wait_for_dkc(c)
        shutil.copy(c.kubeconfig, Path(env["HOME"]) / ".kube" / "config")
        with sc.prometheus(c) as prom:
            quickstart = [replace(c, text=re.sub(r"(KUBELET_ROLLOUT_PROMETHEUS_URL=)\S+", rf"\g<1>{prom.url}", c.text))
                          for c in block_after("## Quickstart against a real cluster")]
            assert sum(line != original for line, original in
                       zip(quickstart, block_after("## Quickstart against a real cluster"))) == 1
            out = run_lines(quickstart + block_after("## Quickstart against a real cluster", 1)
                            + block_after("## Rollback"), cwd=work, env=env, timeout=900)
        assert "completed" in out
        nodes = {n: o for n, o in sc.nodes(sc.gateway(c)).items() if n.startswith("node-")}
        # the last line rolled maxpods-80 back to each kubelet's local config
        assert nodes and all(o.spec_source is None for o in nodes.values()), nodes


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_the_prometheus_rehearsal_runs_as_written(tmp_path: Path) -> None:
    """README, "Analysis": kubesim, `rollout prometheus` and the shipped canary, its checks measured
    on real data, exactly as the block says (issue 36: the Prometheus set-up failed as documented:
    Debian's build refused one shipped file, the other needed an endpoint only the tests could
    start, and at a rehearsal's clock every check returned no data)."""
    work, env = reader_env(tmp_path)
    block = next(b for b in command_blocks(README, "## Analysis: a canary that sees the workloads")
                 if any(c.text.startswith("kubesim up") for c in b))
    out = run_commands(block, cwd=work, env=env, timeout=840, source="the README")
    assert "prometheus ready: url=" in out and "r1: completed" in out, out[-3000:]
    assert "no data" not in out, "a check passed without measuring"


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_the_fleet_set_up_runs_as_written(tmp_path: Path) -> None:
    """README, "Fleet": the set-up and a first fleet rollout, line by line, as a reader in a clone
    runs them (issue 38: `prefect deploy --all` failed as written, the pool it names being made
    only in another section). The reader's own: a Prefect server (the line exporting its address
    gets the local one, as the quickstart's Prometheus does), a cluster `eu-1` (a kubesim, its
    kubeconfig at ~/.kube/eu-1), and their fleet.yaml (eu-1 with its identity, a short policy)
    and kubelet.yaml."""
    import yaml

    from rollout_cli.local.fleet_stack import PrefectServer, identity_of

    heading = "## Fleet: one config across many clusters"
    block = block_after(heading)
    assert any("prefect --no-prompt deploy --all" in c.text for c in block), "the set-up block moved"
    work, env = reader_env(tmp_path)
    (work / "deployments").symlink_to(ROOT / "deployments")  # a clone has it
    (tmp_path / "eu-1").mkdir()
    server = PrefectServer(tmp_path / "prefect-server").start()
    try:
        with sc.cluster(tmp_path / "eu-1", general=2) as c:
            kubeconfig = Path(env["HOME"]) / ".kube" / "eu-1"
            shutil.copy(c.kubeconfig, kubeconfig)
            (work / "policy.yaml").write_text(sc.policy(steps=[1, "100%"]))
            (work / "fleet.yaml").write_text(yaml.safe_dump({
                "clusters": [{"name": "eu-1", "workPool": "eu-1", "identity": identity_of(kubeconfig)}],
                "policy": "policy.yaml", "stages": [{"clusters": ["eu-1"]}]}, sort_keys=False))
            (work / "kubelet.yaml").write_text(sc.config_text(sc.gateway(c), maxPods=81))
            lines = [replace(c, text=re.sub(r"^(export PREFECT_API_URL=)\S+", rf"\g<1>{server.api_url}", c.text))
                     for c in block]
            assert sum(line != original for line, original in zip(lines, block)) == 1
            out = run_lines(lines, cwd=work, env={**env, "PREFECT_WORKER_QUERY_SECONDS": "2"}, timeout=840)
            assert "kubeSystemUID" in out and "every worker reaches its cluster" in out, out[-3000:]
            assert "fleet maxpods-80: completed" in out, out[-3000:]
            journal = sc.journal(sc.gateway(c), "maxpods-80-eu-1")
            assert journal.status.value == "complete"
    finally:
        server.stop()


@pytest.mark.slow
@pytest.mark.skipif(shutil.which("kubectl") is None, reason="kubectl is not installed")
@pytest.mark.timeout(900)
def test_the_drift_rehearsal_runs_as_written(tmp_path: Path) -> None:
    """README, "Drift": a completed rollout, a configSource changed by hand, `rollout drift` naming
    the node (exit 1), `--fix` and drift in sync again, exactly as the block says."""
    work, env = reader_env(tmp_path)
    block = command_blocks(README, "## Drift: does every node still run what was proved?")[0]
    out = run_commands(block, cwd=work, env=env, timeout=840, source="the README")
    assert "r1: completed" in out and "drift-fix-" in out, out[-3000:]
    assert '"field":"spec.configSource"' in out, out[-3000:]
