"""The docs' rehearsals, run verbatim on kubesim as a reader runs them (``tests/docs_blocks.py``).

docs/agent.md, "On kubesim: a rehearsal": kubesim 1.31 at x20, one agent per simulated host, a
drop-in rolled out with the shipped ``fast`` policy as a rehearsal. Issue 36, item 3: done as the
doc said, it ended with exit 1, "node-2: timed-out: kubelet resolved the target but did not
restart onto it within progressDeadline": the agent's 30 s health wait was wall-clock time, the
policy's deadline divided by 20.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from docs_blocks import ROOT, command_blocks, reader_env, run_commands

AGENT_DOC = ROOT / "docs" / "agent.md"


@pytest.mark.slow
@pytest.mark.skipif(shutil.which("kubectl") is None, reason="kubectl is not installed")
@pytest.mark.timeout(900)
def test_the_agent_rehearsal_of_docs_agent_md_runs_as_written(tmp_path: Path) -> None:
    work, env = reader_env(tmp_path)
    rehearsal = command_blocks(AGENT_DOC, "## On kubesim: a rehearsal")[0]
    assert any(c.text.startswith("rollout start") for c in rehearsal), "the doc's rehearsal rolls nothing out"
    out = run_commands(rehearsal, cwd=work, env=env, timeout=720, source="docs/agent.md")
    assert "maxpods-150: completed" in out, out[-3000:]
    rows = [line.split() for line in out.splitlines() if line.startswith(("node-", "control-plane-"))]
    active = {row[0]: row[1] for row in rows if len(row) == 2}
    workers = [n for n in active if n.startswith("node-")]
    assert len(workers) == 3 and all("kubelet-config-" in active[n] for n in workers), out[-3000:]
