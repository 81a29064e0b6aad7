"""The README's command blocks, run as a reader runs them: pasted into bash, line by line, from a
scratch directory, against kubesim (issue 19: the README's statements must match the product).

What a reader would type differently is set the way a reader sets it, never by editing the
lines: ``HOME`` holds a ``~/.kube/config`` for the quickstart's ``export KUBECONFIG=...``,
``$EDITOR`` is a program that makes the change, ``KUBELET_ROLLOUT_TIME_SCALE`` makes it a
rehearsal at kubesim's speed (as the README says). The one exception is the Prometheus address,
a host name only a real cluster resolves: the line that exports it gets the local one. Every line
must exit 0, pipes included (``pipefail``), except where the README's own comment on the line
says otherwise (``exit N: ...``).
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "flows"))
import scenario as sc  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"
TIME_SCALE = 20
EDITOR = """#!/bin/sh
# the reader's change: maxPods 80
if grep -q '^maxPods:' "$1"; then sed -i 's/^maxPods:.*/maxPods: 80/' "$1"; else echo 'maxPods: 80' >> "$1"; fi
"""


def block_after(heading: str, nth: int = 0) -> list[str]:
    """The command lines of the ``nth`` shell block under ``heading`` (before the next heading)."""
    blocks: list[list[str]] = []
    inside_section = in_block = False
    for line in README.read_text().splitlines():
        if line.startswith("```"):
            in_block = not in_block
            if in_block and inside_section and line.strip() == "```sh":
                blocks.append([])
            continue
        if in_block:
            if inside_section and blocks and line.strip() and not line.lstrip().startswith("#"):
                blocks[-1].append(line)
        elif line.startswith("#"):
            inside_section = line == heading
    return blocks[nth]


def run_lines(lines: list[str], *, cwd: Path, env: dict[str, str], timeout: float = 600) -> str:
    """Each line in one bash session; stops at the first line that does not exit 0 (or the code
    its README comment states), naming it."""
    script = ["set -o pipefail"]
    for line in lines:
        quoted = line.replace("'", "'\"'\"'")
        said = re.search(r"#.*\(exit (\d+):", line)
        expected = int(said.group(1)) if said else 0
        script.append(f"{line}\nrc=$?; if [ $rc -ne {expected} ]; then "
                      f"echo \"exit $rc\" 'from the README line: {quoted}' >&2; exit 99; fi")
    log = cwd / "readme-lines.log"  # each line's output as it comes (kept under tmp_path)
    with log.open("w") as sink:
        done = subprocess.run(["bash", "-c", "\n".join(["set -x", *script])], cwd=cwd, env=env, stdout=subprocess.PIPE,
                              stderr=sink, text=True, timeout=timeout)
    assert done.returncode == 0, f"exit {done.returncode}\n{done.stdout[-4000:]}\n{log.read_text()[-4000:]}"
    return done.stdout


def scratch(tmp_path: Path) -> tuple[Path, dict[str, str]]:
    """A reader's directory (the venv reachable as ``.venv``) and environment."""
    work = tmp_path / "work"
    work.mkdir()
    (work / ".venv").symlink_to(ROOT / ".venv")
    home = tmp_path / "home"
    (home / ".kube").mkdir(parents=True)
    editor = tmp_path / "editor"
    editor.write_text(EDITOR)
    editor.chmod(0o755)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("KUBECONFIG", "KUBELET_ROLLOUT_", "PREFECT_"))}
    env.update(HOME=str(home), EDITOR=str(editor), PREFECT_HOME=str(tmp_path / "prefect"), COLUMNS="200",
               KUBELET_ROLLOUT_TIME_SCALE=str(TIME_SCALE))
    return work, env


def test_the_kubesim_block_runs(tmp_path: Path) -> None:
    work, env = scratch(tmp_path)
    lines = block_after("## kubesim")
    up = lines[0].rstrip("& ")
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
        out = run_lines([". .venv/bin/activate", *lines[1:]], cwd=work, env=env)
        assert "node-1" in out and "{}" in out, out  # the nodes, and a status.config with nothing assigned
    finally:
        server.terminate()
        server.wait(timeout=30)


@pytest.mark.slow
def test_the_quickstart_scripting_and_rollback_blocks_run_on_kubesim(tmp_path: Path) -> None:
    from kubesim.cluster import Cluster

    work, env = scratch(tmp_path)
    with Cluster(nodes=3, state_dir=tmp_path / "kubesim", time_scale=TIME_SCALE) as c:
        sc.wait_for_dkc(c)
        shutil.copy(c.kubeconfig, Path(env["HOME"]) / ".kube" / "config")
        with sc.prometheus(c) as prom:
            quickstart = [re.sub(r"(KUBELET_ROLLOUT_PROMETHEUS_URL=)\S+", rf"\g<1>{prom.url}", line)
                          for line in block_after("## Quickstart against a real cluster")]
            assert sum(line != original for line, original in
                       zip(quickstart, block_after("## Quickstart against a real cluster"))) == 1
            out = run_lines(quickstart + block_after("## Quickstart against a real cluster", 1)
                            + block_after("## Rollback"), cwd=work, env=env, timeout=900)
        assert "completed" in out
        nodes = {n: o for n, o in sc.nodes(sc.gateway(c)).items() if n.startswith("node-")}
        # the last line rolled maxpods-80 back to each kubelet's local config
        assert nodes and all(o.spec_source is None for o in nodes.values()), nodes
