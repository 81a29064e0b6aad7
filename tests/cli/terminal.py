"""A command as a person's terminal runs it: its output goes to a pseudo-terminal of a given
size (so it sees a terminal, and its width, as it would in a window that wide), and what the
screen received comes back as text, colours and cursor moves removed."""

from __future__ import annotations

import fcntl
import os
import pty
import re
import select
import struct
import subprocess
import sys
import termios
import time
from pathlib import Path
from typing import Mapping

ROOT = Path(__file__).resolve().parents[2]
# colours, cursor moves, erasures; then the OSC sequences (a window title)
ESCAPES = re.compile(r"\x1b\[[0-9;?]*[ -/]*[@-~]|\x1b\][^\x07\x1b]*(\x07|\x1b\\)|\x1b[=>]")


def plain(screen: str) -> str:
    """What a person reads: escapes removed, the terminal's CR LF as LF."""
    return ESCAPES.sub("", screen).replace("\r\n", "\n").replace("\r", "")


def in_terminal(args: list[str], *, columns: int = 80, rows: int = 50, env: Mapping[str, str] | None = None,
                cwd: Path = ROOT, timeout: float = 120.0) -> tuple[int, str]:
    """Run ``args`` with stdin, stdout and stderr on a terminal ``columns`` wide; (exit code,
    the screen as plain text). ``COLUMNS``/``LINES`` are not set: the width is the terminal's."""
    master, slave = pty.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", rows, columns, 0, 0))
    environment = {k: v for k, v in (env if env is not None else os.environ).items() if k not in ("COLUMNS", "LINES")}
    environment.setdefault("TERM", "xterm-256color")
    process = subprocess.Popen(args, stdin=slave, stdout=slave, stderr=slave, env=environment, cwd=cwd,
                               start_new_session=True)
    os.close(slave)
    received = bytearray()
    deadline = time.monotonic() + timeout
    try:
        while time.monotonic() < deadline:
            ready, _, _ = select.select([master], [], [], 0.2)
            if ready:
                try:
                    chunk = os.read(master, 65536)
                except OSError:  # the last writer closed the terminal
                    break
                if not chunk:
                    break
                received += chunk
            elif process.poll() is not None:
                break
        else:
            process.kill()
            raise AssertionError(f"{args} did not end within {timeout:.0f} s: {plain(received.decode(errors='replace'))[-2000:]}")
        code = process.wait(timeout=30)
    finally:
        os.close(master)
    return code, plain(received.decode(errors="replace"))


def rollout_command(*args: str) -> list[str]:
    """The `rollout` command of this checkout, as a console script would run it."""
    return [sys.executable, "-m", "rollout_cli", *args]
