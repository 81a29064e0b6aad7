"""What every local server of ours (a Prefect server, a Prometheus, a PostgreSQL, a worker) needs
from this machine: a free loopback port, a stop that does not wait forever, and a watchdog that
ends it once our process is gone, however it ended. Standard library only:
``rollout_cli.prefect_server`` runs before anything heavy is imported."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any


def free_port() -> int:
    """A loopback port nothing listens on now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def stop_process(proc: subprocess.Popen[Any], sig: int = signal.SIGINT, timeout: float = 20) -> None:
    """Send ``sig`` and wait ``timeout`` seconds for the exit; then kill it."""
    if proc.poll() is None:
        proc.send_signal(sig)
        try:
            proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=10)


# A tiny watchdog process: while our process lives it notes the children of ours whose command
# line holds the marker (from /proc); once our process is gone (even by kill -9) it stops them and
# removes the directories they leave. Its arguments come hex-encoded, so that no watchdog's own
# command line holds a marker. A server in a session of its own (out of the reach of a terminal's
# Ctrl-C, which goes to the whole foreground process group) has nobody else to end it.
_WATCHDOG = """
import os, shutil, signal, sys, time
from pathlib import Path
parent, me = int(sys.argv[1]), os.getpid()
marker, leftovers = bytes.fromhex(sys.argv[2]), [bytes.fromhex(a).decode() for a in sys.argv[3:]]
found = set()
def alive(pid):
    try:
        os.kill(pid, 0)
        return True
    except OSError:
        return False
def children():
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            if int(stat.read_text().rsplit(")", 1)[1].split()[1]) != parent or int(stat.parent.name) == me:
                continue
            if marker in (stat.parent / "cmdline").read_bytes():
                yield int(stat.parent.name)
        except (OSError, ValueError, IndexError):
            continue
while alive(parent):
    found.update(children())
    time.sleep(0.25)
def signal_all(sig):
    for pid in [p for p in found if alive(p)]:
        try:
            os.kill(pid, sig)
        except OSError:
            pass
signal_all(signal.SIGTERM)
deadline = time.monotonic() + 3
while time.monotonic() < deadline and any(alive(pid) for pid in found):
    time.sleep(0.1)
signal_all(signal.SIGKILL)
for path in leftovers:
    shutil.rmtree(path, ignore_errors=True)
"""


def watch_children(marker: str, *, leftovers: Sequence[Path] = ()) -> None:
    """Start a watchdog (Linux: it reads /proc) that stops this process's children whose command
    line holds ``marker`` once this process is gone, however it ended, then removes ``leftovers``
    (directories). Start it before the child: no moment of the child's life is left uncovered."""
    if not Path("/proc").is_dir():
        return
    subprocess.Popen([sys.executable, "-c", _WATCHDOG, str(os.getpid()), marker.encode().hex(),
                      *(str(p).encode().hex() for p in leftovers)],
                     stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                     start_new_session=True)
