"""What every local server of ours (a Prefect server, a Prometheus, a PostgreSQL, a worker) needs
from this machine: a free loopback port, and a stop that does not wait forever. Standard library
only: ``rollout_cli.prefect_server`` runs before anything heavy is imported."""

from __future__ import annotations

import signal
import socket
import subprocess
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
