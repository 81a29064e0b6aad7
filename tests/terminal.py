"""Drive a command through a real terminal, as a person at a keyboard does.

``Terminal(argv, cols=120, rows=40)`` starts the command in a new pty, under a job-control shell
(``terminal_job.py``) that makes it the terminal's foreground process group, as a shell does for a
command typed at its prompt. Keys are written to the pty as a keyboard sends them: ``ctrl_c()``
writes ``\\x03`` and the *terminal driver* sends SIGINT to the whole foreground process group
(the command and every child it did not put in a session of its own), which a signal sent to one
pid does not. What the command writes is read all the time (a full pty would block it) and
rendered by a terminal emulator (``pyte``): ``screen()`` is what is visible now, ``frames`` every
distinct screen shown, ``transcript()`` everything written with the escape sequences removed.

Every process started under the terminal carries ``TERMINAL_MARK`` in its environment (inherited
by default, kept by every server we start): ``processes()`` walks /proc for them, whatever
session or process group they moved to, and ``leftovers()`` is what is still running after the
command ended.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import sys
import tempfile
import threading
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

import pexpect
import pyte

JOB_SHELL = str(Path(__file__).with_name("terminal_job.py"))
TERMINAL_MARK = "KUBELET_ROLLOUT_TEST_TERMINAL"
CTRL_C = b"\x03"
# CSI (cursor moves, colours, erasing), OSC (titles, links), and the two-byte escapes
_ANSI = re.compile(rb"\x1b\[[0-?]*[ -/]*[@-~]|\x1b\][^\x07\x1b]*(?:\x07|\x1b\\)|\x1b[@-Z\\-_]")


@dataclass(frozen=True)
class Exit:
    code: int  # as a shell's $? shows it: 128 + N when signal N ended the command
    ended: float  # time.monotonic() when it ended


@dataclass(frozen=True)
class Process:
    pid: int
    ppid: int
    pgid: int
    sid: int
    state: str
    cmdline: str

    def __str__(self) -> str:
        return f"pid {self.pid} (ppid {self.ppid}, pgid {self.pgid}, sid {self.sid}, {self.state}): {self.cmdline[:300]}"


def strip_ansi(data: bytes) -> str:
    text = _ANSI.sub(b"", data).decode("utf-8", "replace")
    return text.replace("\r\n", "\n").replace("\r", "\n")


def marked_processes(mark: str, *, exclude: Sequence[int] = ()) -> list[Process]:
    """Every live process (not a zombie) whose environment carries ``TERMINAL_MARK=mark``."""
    needle = f"{TERMINAL_MARK}={mark}".encode()
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) in exclude:
            continue
        try:
            if needle not in (entry / "environ").read_bytes().split(b"\0"):
                continue
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
            cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode("utf-8", "replace").strip()
        except (OSError, IndexError):
            continue  # gone meanwhile, or not ours to read
        if fields[0] == "Z":
            continue
        found.append(Process(int(entry.name), int(fields[1]), int(fields[2]), int(fields[3]), fields[0], cmdline))
    return found


class Terminal:
    """One command in a terminal of ``cols`` x ``rows`` (see the module doc)."""

    def __init__(self, argv: Sequence[str], *, env: Mapping[str, str] | None = None, cwd: str | Path | None = None,
                 cols: int = 120, rows: int = 40) -> None:
        self.argv = list(argv)
        self.cols, self.rows = cols, rows
        self.mark = uuid.uuid4().hex
        environment = dict(os.environ if env is None else env)
        for sized in ("COLUMNS", "LINES"):  # a terminal's size is the pty's, not a variable's
            environment.pop(sized, None)
        environment.setdefault("TERM", "xterm-256color")
        environment[TERMINAL_MARK] = self.mark
        self._dir = tempfile.mkdtemp(prefix="terminal-")
        self._status = os.path.join(self._dir, "status")
        self._raw = bytearray()
        self._lock = threading.Lock()
        self._screen = pyte.Screen(cols, rows)
        self._stream = pyte.ByteStream(self._screen)
        self.frames: list[tuple[float, str]] = []  # (monotonic time, screen) each time it changed
        self.started = time.monotonic()
        self.child = pexpect.spawn(sys.executable, [JOB_SHELL, self._status, "--", *self.argv], env=environment,
                                   cwd=None if cwd is None else str(cwd), dimensions=(rows, cols))
        self._reader = threading.Thread(target=self._read, daemon=True, name="terminal-reader")
        self._reader.start()

    # ----------------------------------------------------------------------------- the screen
    def _read(self) -> None:
        while True:
            try:
                chunk = self.child.read_nonblocking(65536, timeout=0.2)
            except pexpect.TIMEOUT:
                continue
            except (pexpect.EOF, OSError, ValueError):
                return
            with self._lock:
                self._raw += chunk
                self._stream.feed(chunk)
                shown = self._display()
                if not self.frames or self.frames[-1][1] != shown:
                    self.frames.append((time.monotonic(), shown))

    def _display(self) -> str:
        return "\n".join(line.rstrip() for line in self._screen.display).rstrip("\n")

    def resize(self, cols: int, rows: int) -> None:
        """As a person drags the window: the pty's new size (the kernel sends SIGWINCH to the
        foreground process group) and a screen of that size to draw on."""
        with self._lock:
            self.cols, self.rows = cols, rows
            self._screen.resize(rows, cols)
            self.child.setwinsize(rows, cols)

    def screen(self) -> str:
        """What the terminal shows now, line by line."""
        with self._lock:
            return self._display()

    def transcript(self) -> str:
        """Everything the command wrote so far, without escape sequences."""
        with self._lock:
            return strip_ansi(bytes(self._raw))

    def wait_for(self, pattern: str | Callable[[str], Any], timeout: float, *, on: str = "screen") -> Any:
        """Until ``pattern`` (a regex, or a function of the text) matches the screen (or the
        transcript); fails the test naming what was shown when the command ends or time is up."""
        deadline = time.monotonic() + timeout
        while True:
            text = self.screen() if on == "screen" else self.transcript()
            found = pattern(text) if callable(pattern) else re.search(pattern, text, re.IGNORECASE | re.MULTILINE)
            if found:
                return found
            ended = self.exit()
            if ended is not None or time.monotonic() > deadline:
                why = f"the command ended (exit {ended.code})" if ended else f"not within {timeout:.0f} s"
                raise AssertionError(f"{pattern!r} never shown: {why}; the screen:\n{self.screen()}\n"
                                     f"the transcript's end:\n{self.transcript()[-3000:]}")
            time.sleep(0.1)

    # ----------------------------------------------------------------------------- the keyboard
    def press(self, keys: bytes | str) -> float:
        """Type ``keys``; returns when (``time.monotonic``)."""
        self.child.send(keys)
        return time.monotonic()

    def ctrl_c(self) -> float:
        """Ctrl-C: the terminal driver sends SIGINT to the foreground process group."""
        return self.press(CTRL_C)

    # ----------------------------------------------------------------------------- the processes
    @property
    def pid(self) -> int | None:
        """The command's pid (None until the shell started it)."""
        with contextlib.suppress(OSError, ValueError):
            return int(Path(f"{self._status}.pid").read_text())
        return None

    def exit(self) -> Exit | None:
        """How the command ended (None while it runs)."""
        with contextlib.suppress(OSError, ValueError):
            ended = json.loads(Path(self._status).read_text())
            return Exit(int(ended["code"]), float(ended["ended"]))
        return None

    def wait_exit(self, timeout: float) -> Exit | None:
        """Until the command ends (None: it still runs after ``timeout`` seconds)."""
        deadline = time.monotonic() + timeout
        while (ended := self.exit()) is None and time.monotonic() < deadline:
            time.sleep(0.05)
        if ended is not None:
            time.sleep(0.3)  # its last words reach the screen
        return ended

    def kill_9(self) -> float:
        """``kill -9`` of the command itself (its pid alone); returns when."""
        pid = self.pid
        assert pid is not None, "the command has not started"
        os.kill(pid, signal.SIGKILL)
        return time.monotonic()

    def processes(self) -> list[Process]:
        """Every process started under this terminal that still runs (the shell itself aside)."""
        return marked_processes(self.mark, exclude=(self.child.pid,))

    def leftovers(self, grace: float = 0.0) -> list[Process]:
        """What still runs ``grace`` seconds (at most) after the command ended: a helper given a
        moment to finish (a server asked to stop, an Event sender) is not a leftover until then."""
        deadline = time.monotonic() + grace
        while (left := self.processes()) and time.monotonic() < deadline:
            time.sleep(0.2)
        return left

    def close(self) -> None:
        """End everything started under this terminal (``kill -9``) and close it."""
        for _ in range(3):
            for process in self.processes():
                with contextlib.suppress(OSError):
                    os.kill(process.pid, signal.SIGKILL)
            time.sleep(0.1)
        with contextlib.suppress(Exception):
            self.child.close(force=True)
        self._reader.join(timeout=5)
        with contextlib.suppress(OSError):
            for name in os.listdir(self._dir):
                os.unlink(os.path.join(self._dir, name))
            os.rmdir(self._dir)

    def __enter__(self) -> "Terminal":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


ROOT = Path(__file__).resolve().parents[1]


def in_terminal(args: Sequence[str], *, columns: int = 80, rows: int = 50, env: Mapping[str, str] | None = None,
                cwd: Path = ROOT, timeout: float = 120.0) -> tuple[int, str]:
    """Run ``args`` to its end on a terminal ``columns`` wide; (its exit code, everything it wrote
    as plain text). ``COLUMNS``/``LINES`` are not passed on: the width is the terminal's."""
    terminal = Terminal(args, env=env, cwd=cwd, cols=columns, rows=rows)
    try:
        ended = terminal.wait_exit(timeout)
        if ended is None:
            raise AssertionError(f"{list(args)} did not end within {timeout:.0f} s: {terminal.transcript()[-2000:]}")
        return ended.code, terminal.transcript()
    finally:
        terminal.close()


def rollout_command(*args: str) -> list[str]:
    """The `rollout` command of this checkout, as a console script would run it."""
    return [sys.executable, "-m", "rollout_cli", *args]
