"""The temporary Prefect server of a local run, started first thing and waited for last.

Without a Prefect profile (no ``PREFECT_API_URL``), a flow run needs a Prefect API, and Prefect
starts a temporary server for it on the first flow call: about five seconds on a quiet machine
before anything else can happen. Here the server is started the moment ``rollout start`` knows
it will need one, *before* Prefect is even imported, with the command line Prefect itself uses
(``uvicorn prefect.server.api.server:create_app``, the UI off), so its start-up overlaps the
imports and the rollout's head start (``flows.head_start``); :meth:`TemporaryServer.serve` points
this process at it once it answers. It lives in a session of its own, so a Ctrl-C typed in the
terminal stops the run and not, from under it, the server the run reports its end to; it ends
with the process: :meth:`~TemporaryServer.stop` asks it to and does not wait, and the watchdog of
``rollout_cli.local_processes`` stops it even after a ``kill -9``.
"""

from __future__ import annotations

import contextlib
import importlib.util
import os
import subprocess
import sys
import threading
import time
import urllib.request
from pathlib import Path
from typing import Iterator

from rollout_cli.local_processes import free_port, start_helper

READY_TIMEOUT_S = 120.0  # a first start migrates the database: much longer than five seconds
START_ATTEMPTS = 5  # a server that exits while starting is started again (see wait_ready)


def needed() -> bool:
    """The Prefect API is a temporary server (no URL set, temporary servers allowed), as Prefect
    decides it, read from the environment without importing Prefect. A profile that sets a URL
    is honoured by the flow run itself (this answers False only from the environment: see
    :func:`rollout_cli.prefect_home.guard_temporary_server` for the full check)."""
    if os.environ.get("PREFECT_API_URL"):
        return False
    return os.environ.get("PREFECT_SERVER_EPHEMERAL_ENABLED", "true").lower() not in ("0", "false", "no")


# how Prefect itself starts its temporary server, the UI off (prefect.server.api.server.SubprocessASGIServer)
SERVER_ENV = {"PREFECT_UI_ENABLED": "0", "PREFECT__SERVER_EPHEMERAL": "1", "PREFECT__SERVER_FINAL": "1"}


def server_command(port: int) -> list[str]:
    """The command line of a temporary Prefect server on ``port`` (loopback)."""
    spec = importlib.util.find_spec("prefect")
    assert spec is not None and spec.origin is not None, "prefect is installed with the rollout"
    return [sys.executable, "-m", "uvicorn", "--app-dir", str(Path(spec.origin).parent.parent), "--factory",
            "prefect.server.api.server:create_app", "--host", "127.0.0.1", "--port", str(port),
            "--log-level", "error", "--lifespan", "on"]


class TemporaryServer:
    """A Prefect server subprocess on a free loopback port (see the module doc)."""

    def __init__(self) -> None:
        self.restarts = 0
        self.process: subprocess.Popen[bytes] | None = None
        self._spawn()

    def _spawn(self) -> None:
        self.port = free_port()
        self.api_url = f"http://127.0.0.1:{self.port}/api"
        env = {**os.environ, **SERVER_ENV, "PREFECT_SERVER_ANALYTICS_ENABLED": "false"}
        self.process = start_helper(server_command(self.port), env=env, stdin=subprocess.DEVNULL,
                                    stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)

    def wait_ready(self, timeout_s: float = READY_TIMEOUT_S, *, stop: threading.Event | None = None) -> bool:
        """Until it answers its health check (True), or ``timeout_s`` passes, ``stop`` is set or it
        exited more than :data:`START_ATTEMPTS` times (False).

        One that exits while starting is started again: on a fresh PREFECT_HOME two servers
        starting together (this command's and another shell's, `rollout approve` typed at once)
        both migrate the same database, and the one that loses exits (code 3); started again, it
        finds the database migrated."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline and self.process is not None and not (stop is not None and stop.is_set()):
            if self.process.poll() is not None:
                if self.restarts + 1 >= START_ATTEMPTS:
                    return False
                self.restarts += 1
                time.sleep(1.0)  # the other server's migration goes on meanwhile
                self._spawn()
                continue
            with contextlib.suppress(OSError):
                with urllib.request.urlopen(f"{self.api_url}/health", timeout=2) as answer:
                    if answer.status == 200:
                        return True
            time.sleep(0.1)
        return False

    @contextlib.contextmanager
    def serve(self) -> Iterator[str]:
        """Point this process's Prefect (every thread of it) at the server for the block.

        Without flow run heartbeats: they let a server mark the run of a process that died as
        crashed, and this server dies with the process. Their thread sleeps in one-second steps,
        and a flow run's end waits for it (0.4 s of a local run's 1.3 s from done to exit)."""
        import prefect.context
        from prefect.settings import PREFECT_API_URL, PREFECT_FLOWS_HEARTBEAT_FREQUENCY, temporary_settings

        with temporary_settings(updates={PREFECT_API_URL: self.api_url, PREFECT_FLOWS_HEARTBEAT_FREQUENCY: None}):
            with prefect.context._temporary_global_settings_context(prefect.context.get_settings_context()):
                yield self.api_url

    def stop(self) -> None:
        """Ask it to stop and go on: it shuts itself down (the watchdog sees to it if it does not)."""
        if self.process is not None:
            with contextlib.suppress(OSError):
                self.process.terminate()
            self.process = None
