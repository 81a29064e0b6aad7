"""What every local server of ours (a Prefect server, a Prometheus, a PostgreSQL, a worker) needs
from this machine: a free loopback port, a session of its own, an end tied to ours, and a stop
that does not wait forever. Standard library only: ``rollout_cli.local.prefect_server`` runs before
anything heavy is imported.

A session of its own: a terminal sends Ctrl-C (SIGINT) to its whole foreground process group, and
a helper in the command's group would die with it while the command still talks to it (a run
reporting its end to its Prefect server). In a session of its own, only we stop it, in order.

An end tied to ours: :func:`watch` hands the helper to the watchdog, a small process of its own
that holds the read end of a pipe only this process writes to. When this process is gone (its
end, a crash, ``kill -9``) the pipe closes, and the watchdog stops every helper it was given that
still runs, and what they started: asked first (each helper's own stop signal), killed a few
seconds later; then it removes the directories it was told they leave (a Prometheus's data).
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any, Sequence

# how long a helper asked to stop by the watchdog gets before it is killed
WATCHDOG_GRACE_S = 5.0


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


def stop_process_tree(proc: subprocess.Popen[Any], sig: int = signal.SIGINT, timeout: float = 20) -> None:
    """:func:`stop_process`, then what it started that outlived it: a Prefect worker's flow-run
    processes run in sessions of their own and are orphaned, not ended, when the worker exits
    (one left running after a Ctrl-C of the fleet demo). Its descendants are noted until it is
    gone (by pid and start time, so a pid used again is never touched), then asked to stop,
    then killed."""
    seen: dict[int, str] = {}

    def note() -> None:
        for pid in descendants(proc.pid):
            if pid not in seen and (start := started(pid)):
                seen[pid] = start

    note()
    if proc.poll() is None:
        proc.send_signal(sig)
        deadline = time.monotonic() + timeout
        while proc.poll() is None and time.monotonic() < deadline:
            note()  # a walk of /proc: twice a second is enough to see a flow run's process
            time.sleep(0.5)
        if proc.poll() is None:
            proc.kill()
            proc.wait(timeout=10)
    for stop_signal, grace in ((signal.SIGTERM, WATCHDOG_GRACE_S), (signal.SIGKILL, 0.0)):
        left = [pid for pid, start in seen.items() if started(pid) == start]
        for pid in left:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, stop_signal)
        deadline = time.monotonic() + grace
        while left and time.monotonic() < deadline:
            time.sleep(0.1)
            left = [pid for pid in left if started(pid) == seen[pid]]
        if not left:
            return


def descendants(pid: int) -> list[int]:
    """Every process ``pid`` started, and what they started (from /proc)."""
    children: dict[int, list[int]] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            ppid = int(stat.read_text().rsplit(")", 1)[1].split()[1])
        except (OSError, ValueError, IndexError):
            continue
        children.setdefault(ppid, []).append(int(stat.parent.name))
    found, todo = [], [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            found.append(child)
            todo.append(child)
    return found


def started(pid: int) -> str:
    """When ``pid`` started (clock ticks since boot, as /proc says); "" when it is gone or a zombie."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return ""
    return fields[19] if fields[0] != "Z" else ""


def start_helper(argv: Sequence[str], *, stop_signal: int = signal.SIGTERM, **popen: Any) -> subprocess.Popen[Any]:
    """Start a helper process: in a session of its own, and watched (see the module doc); ``stop_signal``
    is how the watchdog asks it to stop (ours, :func:`stop_process`, is the caller's)."""
    _order("")  # the watchdog first: no moment of the helper's life is left uncovered
    proc = subprocess.Popen(list(argv), start_new_session=True, **popen)
    watch(proc.pid, stop_signal)
    return proc


# The watchdog. Its orders, one a line on stdin: ``watch PID SIGNAL`` (stop PID and what it
# started with SIGNAL once the pipe closes) and ``remove HEX`` (a directory, its
# path hex-encoded, removed once the helpers are stopped). A process is known by its pid and
# start time, so a pid used again by another process is never touched.
_WATCHDOG = r"""
import os, select, shutil, signal, sys, time
from pathlib import Path
parent, grace = int(sys.argv[1]), float(sys.argv[2])
watched, leftovers = {}, []
def stat(pid):
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None
def started(pid):
    fields = stat(pid)
    return fields[19] if fields and fields[0] != "Z" else None
def table():
    rows = {}
    for entry in Path("/proc").glob("[0-9]*/stat"):
        fields = stat(int(entry.parent.name))
        if fields:
            rows[int(entry.parent.name)] = fields
    return rows
pending = b""
while True:
    ready, _, _ = select.select([0], [], [], 0.25)
    if ready:
        chunk = os.read(0, 4096)
        if not chunk:
            break
        pending += chunk
        *lines, pending = pending.split(b"\n")
        for line in lines:
            order, _, rest = line.decode().partition(" ")
            if order == "watch":
                pid, sig = map(int, rest.split())
                if started(pid):
                    watched[pid] = (started(pid), sig)
            elif order == "remove":
                leftovers.append(bytes.fromhex(rest).decode())
rows = table()
children = {}
for pid, fields in rows.items():
    children.setdefault(int(fields[1]), []).append(pid)
doomed = {}
for pid, (start, sig) in watched.items():
    if started(pid) != start:
        continue  # it ended (or its pid is another process's now)
    doomed[pid] = (start, sig)
    todo = [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            doomed.setdefault(child, (rows[child][19], signal.SIGTERM))
            todo.append(child)
for pid, (start, sig) in doomed.items():
    try:
        os.kill(pid, sig)
    except OSError:
        pass
deadline = time.monotonic() + grace
while time.monotonic() < deadline and any(started(p) == s for p, (s, _) in doomed.items()):
    time.sleep(0.1)
for pid, (start, _) in doomed.items():
    if started(pid) == start:
        try:
            os.kill(pid, signal.SIGKILL)
        except OSError:
            pass
for path in leftovers:
    shutil.rmtree(path, ignore_errors=True)
"""

# the watchdog of this process (a child forked from it starts its own): (our pid, the watchdog)
_watchdog: tuple[int, subprocess.Popen[bytes]] | None = None
_watchdog_lock = threading.Lock()


def _order(line: str) -> None:
    """Send the watchdog an order (none: just start it), starting it first. Linux only (it reads /proc): elsewhere
    helpers are stopped by us only."""
    global _watchdog
    if not Path("/proc").is_dir():
        return
    with _watchdog_lock:
        if _watchdog is None or _watchdog[0] != os.getpid():
            # its stdin is a pipe whose write end only this process holds (non-inheritable)
            _watchdog = (os.getpid(), subprocess.Popen(
                [sys.executable, "-c", _WATCHDOG, str(os.getpid()), str(WATCHDOG_GRACE_S)], stdin=subprocess.PIPE,
                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True))
        stdin = _watchdog[1].stdin
        assert stdin is not None
        if line:
            stdin.write(f"{line}\n".encode())
            stdin.flush()


def watch(pid: int, stop_signal: int = signal.SIGTERM) -> None:
    """Stop ``pid`` (with ``stop_signal``, then SIGKILL) and what it started, once this process is gone."""
    _order(f"watch {pid} {int(stop_signal)}")


def remove_when_gone(directory: Path) -> None:
    """Remove ``directory`` once this process is gone and its helpers are stopped (what a helper
    leaves: a Prometheus's data); ours to remove meanwhile."""
    _order(f"remove {str(directory).encode().hex()}")
