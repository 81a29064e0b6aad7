"""The terminal harness itself (``tests/terminal.py``): what the terminal tests rely on."""

from __future__ import annotations

import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from terminal import Terminal  # noqa: E402

# a command that starts one child in its own process group (as every child does by default) and
# one in a session of its own, prints their pids and the terminal's size, then waits
FAMILY = r"""
import os, subprocess, sys, time
same = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"])
own = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"], start_new_session=True)
size = os.get_terminal_size()
print(f"size {size.columns}x{size.lines}; children {same.pid} {own.pid}", flush=True)
sys.stdout.write("wrong\rW"); sys.stdout.flush()
time.sleep(120)
"""


def test_ctrl_c_reaches_the_foreground_process_group_and_nothing_else() -> None:
    with Terminal([sys.executable, "-c", FAMILY], cols=80, rows=24) as term:
        shown = term.wait_for(r"size (\d+)x(\d+); children (\d+) (\d+)", 30)
        same, own = int(shown[3]), int(shown[4])
        term.wait_for(r"^Wrong", 10)  # a carriage return overwrites, as on a screen
        assert {p.pid for p in term.processes()} >= {term.pid, same, own}
        sent = term.ctrl_c()
        ended = term.wait_exit(20)
        assert ended is not None and ended.code == 130, ended  # 128 + SIGINT, as a shell's $? says
        assert ended.ended - sent < 10
        left = {p.pid for p in term.leftovers(3.0)}
        assert (int(shown[1]), int(shown[2])) == (80, 24)
    assert left == {own}, left  # the child of its own session outlived the Ctrl-C; the other did not


def test_kill_9_and_the_exit_code_of_a_signal() -> None:
    with Terminal([sys.executable, "-c", "import time; print('up', flush=True); time.sleep(120)"]) as term:
        term.wait_for("up", 30)
        term.kill_9()
        ended = term.wait_exit(20)
        assert ended is not None and ended.code == 137
        assert term.leftovers(3.0) == []


def test_the_screen_is_what_is_visible_and_the_transcript_everything() -> None:
    lines = "; ".join(f"print('line {i}')" for i in range(30))
    with Terminal([sys.executable, "-c", f"{lines}; import time; time.sleep(0.5)"], cols=40, rows=10) as term:
        ended = term.wait_exit(30)
        assert ended is not None and ended.code == 0
        deadline = time.monotonic() + 5
        while "line 29" not in term.screen() and time.monotonic() < deadline:
            time.sleep(0.1)
        assert "line 29" in term.screen() and "line 0\n" not in term.screen() + "\n"
        assert "line 0\n" in term.transcript()
