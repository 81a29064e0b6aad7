"""The Prefect a local process talks to: a private, throw-away API, and the temporary server's life.

The CLI runs flows in its own process, against whatever Prefect API the profile names or, with
none, a temporary server of its own (``rollout_cli.local.prefect_server``, in a session of its own
and ended by the process, even after a ``kill -9``); :func:`drain` sends the last logs and events
before it ends.
:func:`ephemeral_prefect` is a private API of its own (the demo, the tests, the benchmarks; never
``~/.prefect``).

``prefect_test_harness`` pays 12-14 s per session for database migrations. Here the migrated
SQLite database is built once per Prefect version into a template (``prefect server database
upgrade``), copied into a fresh ``PREFECT_HOME`` and served by Prefect's own subprocess ASGI
server with migrations off: about half the start-up cost. Heartbeats are turned off through
``temporary_settings`` (the environment cannot express ``None``) because their thread join costs
~1 s per sync flow; production runs keep them, they are what detects crashed runs.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any, Iterator

import prefect

from rollout.errors import FlagError, GatewayError
from rollout_cli.local.processes import start_helper
from rollout_cli.local.prefect_server import (
    READY_TIMEOUT_S,
    TemporaryServer,
    needed,
    pointed_at,
    recorded_server,
    server_command,
    server_env,
    template_path,
)

QUIET_ENV = {
    "PREFECT_SERVER_ANALYTICS_ENABLED": "false",
    "PREFECT_LOGGING_TO_API_BATCH_INTERVAL": "0.5",
    "PREFECT_SERVER_UI_SHOW_PROMOTIONAL_CONTENT": "false",
}


def template_db() -> Path:
    """A migrated Prefect SQLite database for this Prefect version (built once, then reused).

    Builders that start together (test workers, the demo beside a benchmark) wait on a file lock
    for the first one's build: each build migrates for ~20 s of CPU."""
    db = template_path()
    root = db.parent
    if db.exists():
        return db
    root.mkdir(parents=True, exist_ok=True)
    with open(root / ".build.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # released when the file closes, or when this process dies
        if not db.exists():  # another builder's, published while this one waited
            _build_template(db)
    return db


def _build_template(db: Path) -> None:
    building = Path(tempfile.mkdtemp(prefix="tmpl-", dir=db.parent.parent))
    env = {**os.environ, **QUIET_ENV, "PREFECT_HOME": str(building)}
    env.pop("PREFECT_API_URL", None)
    env["PREFECT_SERVER_DATABASE_CONNECTION_URL"] = f"sqlite+aiosqlite:///{building / 'prefect.db'}"
    try:
        subprocess.run(
            [sys.executable, "-m", "prefect", "server", "database", "upgrade", "-y"],
            env=env, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, timeout=180,
        )
        tmp = db.parent / f".prefect.db.{os.getpid()}"
        shutil.copyfile(building / "prefect.db", tmp)
        os.replace(tmp, db)  # atomic: a reader that skips the lock sees the whole file or none
    finally:
        shutil.rmtree(building, ignore_errors=True)


@contextlib.contextmanager
def ephemeral_prefect(home: Path | None = None, *, heartbeat: bool = False) -> Iterator[str]:
    """Run a private Prefect API for the duration of the block; yields its URL.

    Everything (database, results, local storage) lives under ``home`` (a temp dir if None).
    """
    from prefect.server.api.server import SubprocessASGIServer
    from prefect.settings import (
        PREFECT_API_URL,
        PREFECT_FLOWS_HEARTBEAT_FREQUENCY,
        PREFECT_HOME,
        PREFECT_SERVER_ANALYTICS_ENABLED,
        PREFECT_SERVER_DATABASE_CONNECTION_URL,
        PREFECT_SERVER_DATABASE_MIGRATE_ON_START,
        temporary_settings,
    )

    home = Path(home or tempfile.mkdtemp(prefix="rollout-prefect-")).resolve()  # the server's child reads it
    home.mkdir(parents=True, exist_ok=True)
    db = home / "prefect.db"
    if not db.exists():
        shutil.copyfile(template_db(), db)
    updates = {
        PREFECT_HOME: str(home),
        PREFECT_SERVER_DATABASE_CONNECTION_URL: f"sqlite+aiosqlite:///{db}",
        PREFECT_SERVER_DATABASE_MIGRATE_ON_START: False,
        PREFECT_SERVER_ANALYTICS_ENABLED: False,
    }
    if not heartbeat:
        updates[PREFECT_FLOWS_HEARTBEAT_FREQUENCY] = None
    for key, value in QUIET_ENV.items():
        os.environ.setdefault(key, value)
    with contextlib.ExitStack() as stack:
        stack.enter_context(temporary_settings(updates=updates))
        prior = SubprocessASGIServer._instances.pop(None, None)
        server = _helper_server_class()()  # registers itself as the process's server (for None)
        server.start(timeout=int(READY_TIMEOUT_S))
        stack.enter_context(temporary_settings(updates={PREFECT_API_URL: server.api_url}))
        stack.enter_context(
            prefect.context._temporary_global_settings_context(prefect.context.get_settings_context())
        )
        try:
            yield server.api_url
        finally:
            drain()
            server.stop()
            if prior is not None:
                SubprocessASGIServer._instances[None] = prior
            else:
                SubprocessASGIServer._instances.pop(None, None)


def _helper_server_class() -> type[Any]:
    from prefect.server.api.server import SubprocessASGIServer

    class HelperServer(SubprocessASGIServer):
        """Prefect's temporary server as a helper of ours: in a session of its own (a terminal's
        Ctrl-C stops the command, which stops its server in turn) and watched (gone with us,
        even after a kill -9)."""

        def _run_uvicorn_command(self) -> subprocess.Popen[Any]:
            from prefect.settings import get_current_settings

            env = server_env({**os.environ, **get_current_settings().to_environment_variables(exclude_unset=True)})
            return start_helper(server_command(int(self.port or 0)), env=env)

    return HelperServer


def drain() -> None:
    """Send the logs and events this process still holds to the Prefect API."""
    import inspect

    from prefect.events.worker import EventsWorker
    from prefect.logging.handlers import APILogWorker
    from prefect.utilities.asyncutils import run_coro_as_sync

    async def logs_then_events() -> None:
        with contextlib.suppress(RuntimeError):
            logs = APILogWorker.instance().drain()
            if inspect.isawaitable(logs):
                await logs
        events = EventsWorker.drain_all()
        if inspect.isawaitable(events):
            await events

    with contextlib.suppress(Exception):
        run_coro_as_sync(logs_then_events())


@contextlib.contextmanager
def prefect_api() -> Iterator[None]:
    """The Prefect API for a command that only asks Prefect (`rollout approve`, `reject`, a
    `promote` at a gate): the configured one (PREFECT_API_URL, a profile); else the temporary
    server of a local run of this PREFECT_HOME (it serves the same database, so it knows every
    gate of it), asked at once; else a quiet temporary server of the command's own. Prefect's own
    temporary server took as long to start (seconds) and logged its start and stop on the screen."""
    from prefect.settings import PREFECT_API_URL, PREFECT_HOME

    if PREFECT_API_URL.value():
        yield
        return
    live = recorded_server(Path(PREFECT_HOME.value()))
    if live is not None:
        with pointed_at(live):
            yield
        return
    if not needed():
        raise FlagError("no Prefect API: PREFECT_API_URL is not set, temporary servers are turned off "
                        "(PREFECT_SERVER_EPHEMERAL_ENABLED), and no local run serves this PREFECT_HOME",
                        advice="set PREFECT_API_URL to the Prefect server the rollout runs on")
    server = TemporaryServer()
    try:
        if not server.wait_ready():
            raise GatewayError("the temporary Prefect server did not start", advice=NO_SERVER_ADVICE)
        with server.serve(record=False):  # its life is this command's: nobody else should ask it
            yield
    finally:
        server.stop()


NO_SERVER_ADVICE = "run the command again, or point PREFECT_API_URL at the Prefect server the rollout uses"
