"""The temporary Prefect server of a local run, started first thing and waited for last.

Without a Prefect profile (no ``PREFECT_API_URL``), a flow run needs a Prefect API, and Prefect
starts a temporary server for it on the first flow call: about five seconds on a quiet machine
before anything else can happen. Here the server is started the moment ``rollout start`` knows
it will need one, *before* Prefect is even imported, with the command line Prefect itself uses
(``uvicorn prefect.server.api.server:create_app``, the UI off), so its start-up overlaps the
imports and the run, begun at once (``rollout.run.Run``); :meth:`TemporaryServer.serve` points
this process at it once it answers. It lives in a session of its own, so a Ctrl-C typed in the
terminal stops the run and not, from under it, the server the run reports its end to; it ends
with the process: :meth:`~TemporaryServer.stop` asks it to and does not wait, and the watchdog of
``rollout_cli.local.processes`` stops it even after a ``kill -9``.
"""

from __future__ import annotations

import contextlib
import importlib.metadata
import importlib.util
import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
import tomllib
import urllib.request
from pathlib import Path
from typing import Iterator, Mapping

from rollout_cli.local.processes import free_port, start_helper

READY_TIMEOUT_S = 120.0  # a first start migrates the database: much longer than five seconds
START_ATTEMPTS = 5  # a server that exits while starting is started again (see wait_ready)


def needed() -> bool:
    """The Prefect API is a temporary server (no URL set, temporary servers allowed), as Prefect
    decides it: from the environment and the active profile, without importing Prefect; where
    this process already did, from its settings. A server started when a URL was set elsewhere
    (a ``prefect.toml``) goes unused: about 8 s of CPU for nothing, measured."""
    if "prefect.settings" in sys.modules:
        from prefect.settings import PREFECT_API_URL

        if PREFECT_API_URL.value():
            return False
    profile = _active_profile()
    if os.environ.get("PREFECT_API_URL") or profile.get("PREFECT_API_URL"):
        return False
    ephemeral = os.environ.get("PREFECT_SERVER_EPHEMERAL_ENABLED") or profile.get("PREFECT_SERVER_EPHEMERAL_ENABLED")
    return str(ephemeral or "true").lower() not in ("0", "false", "no")


def _active_profile() -> dict[str, object]:
    """The settings of the active profile of Prefect's profiles file, as Prefect finds both
    (``PREFECT_PROFILES_PATH`` or ``$PREFECT_HOME/profiles.toml``; ``PREFECT_PROFILE`` or its
    ``active``); empty when there is none or it is unreadable."""
    home = Path(os.path.expanduser(os.environ.get("PREFECT_HOME") or "~/.prefect"))
    path = Path(os.path.expanduser(os.environ.get("PREFECT_PROFILES_PATH") or home / "profiles.toml"))
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
        profile = data["profiles"][os.environ.get("PREFECT_PROFILE") or data["active"]]
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError, KeyError, TypeError):
        return {}
    return dict(profile) if isinstance(profile, dict) else {}


def template_path() -> Path:
    """Where the migrated SQLite database of this Prefect version is kept once built
    (``rollout_cli.local.prefect_home.template_db``: the demo, the tests, the benchmarks)."""
    version = importlib.metadata.version("prefect")
    return Path(tempfile.gettempdir()) / f"kubelet-rollout-prefect-{version}" / "prefect.db"


def seed_home_database() -> bool:
    """Give a PREFECT_HOME without a database a copy of the migrated template, when one was built
    and the database is Prefect's default (no connection URL in the environment): the temporary
    server then starts in about 7 s of CPU instead of migrating an empty database for about 20 s
    (measured on this project's machine). Created only where none exists (a hard link of a whole
    copy: a second process seeding the same home at once, or a server that already opened the
    file, never sees it replaced). True if it seeded."""
    if any(os.environ.get(key) for key in ("PREFECT_SERVER_DATABASE_CONNECTION_URL", "PREFECT_API_DATABASE_CONNECTION_URL")):
        return False
    template = template_path()
    home = Path(os.path.expanduser(os.environ.get("PREFECT_HOME") or "~/.prefect"))
    database = home / "prefect.db"
    if database.exists() or not template.exists():
        return False
    copy = home / f".prefect.db.seed-{os.getpid()}"
    try:
        home.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(template, copy)
        os.link(copy, database)
        return True
    except OSError:  # another process seeded it first, or the home is not writable: Prefect decides
        return False
    finally:
        with contextlib.suppress(OSError):
            copy.unlink()


# how Prefect itself starts its temporary server, the UI off (prefect.server.api.server.SubprocessASGIServer)
SERVER_ENV = {"PREFECT_UI_ENABLED": "0", "PREFECT__SERVER_EPHEMERAL": "1", "PREFECT__SERVER_FINAL": "1"}
# Prefect's names for the setting that registers every block type in the database as a server
# starts (settings/models/server/root.py), the first one set winning
REGISTER_BLOCKS = ("PREFECT_SERVER_REGISTER_BLOCKS_ON_START", "PREFECT_API_BLOCKS_REGISTER_ON_START")


def server_env(base: Mapping[str, str]) -> dict[str, str]:
    """A temporary server's environment: ``base``, Prefect's own for its temporary server, and no
    block types registered unless the environment asks for it. Nothing a rollout runs uses a
    block, the server is gone with the command, and registering them was 1.2-1.9 s of the 5-7 s of
    CPU a start takes (measured: bench/README.md, "The temporary server's start"); a server
    started later on the same PREFECT_HOME (``prefect server start``) registers them itself."""
    defaults = {} if any(name in base for name in REGISTER_BLOCKS) else {REGISTER_BLOCKS[0]: "false"}
    return {**defaults, **base, **SERVER_ENV}


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
        self._record: Path | None = None  # where serve() said it serves (see recorded_server)
        seed_home_database()
        self._spawn()

    def _spawn(self) -> None:
        self.port = free_port()
        self.api_url = f"http://127.0.0.1:{self.port}/api"
        env = {**server_env(os.environ), "PREFECT_SERVER_ANALYTICS_ENABLED": "false"}
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
    def serve(self, *, record: bool = True) -> Iterator[str]:
        """Point this process's Prefect (every thread of it) at the server for the block and,
        with ``record``, say so under PREFECT_HOME (:func:`recorded_server`): `rollout approve`
        in another shell asks this server instead of starting one of its own.

        Without flow run heartbeats: they let a server mark the run of a process that died as
        crashed, and this server dies with the process. Their thread sleeps in one-second steps,
        and a flow run's end waits for it (0.4 s of a local run's 1.3 s from done to exit)."""
        with pointed_at(self.api_url), self._recorded() if record else contextlib.nullcontext():
            yield self.api_url

    @contextlib.contextmanager
    def _recorded(self) -> Iterator[None]:
        from prefect.settings import PREFECT_HOME

        assert self.process is not None, "served while it runs"
        record = Path(PREFECT_HOME.value()) / SERVERS_DIR / f"{self.process.pid}.json"
        with contextlib.suppress(OSError):
            record.parent.mkdir(parents=True, exist_ok=True)
            written = record.with_suffix(f".{os.getpid()}.tmp")
            written.write_text(json.dumps({"api_url": self.api_url, "server_pid": self.process.pid,
                                           "owner_pid": os.getpid()}))
            os.replace(written, record)  # whole or absent for a reader
        self._record = record
        try:
            yield
        finally:
            self._forget()

    def _forget(self) -> None:
        record, self._record = self._record, None
        if record is not None:
            with contextlib.suppress(OSError):
                record.unlink()

    def stop(self) -> None:
        """Ask it to stop and go on: it shuts itself down (the watchdog sees to it if it does not)."""
        self._forget()
        if self.process is not None:
            with contextlib.suppress(OSError):
                self.process.terminate()
            self.process = None


@contextlib.contextmanager
def pointed_at(api_url: str) -> Iterator[str]:
    """This process's Prefect (every thread of it) asks ``api_url`` for the block, with no flow
    run heartbeats (see :meth:`TemporaryServer.serve`)."""
    import prefect.context
    from prefect.settings import PREFECT_API_URL, PREFECT_FLOWS_HEARTBEAT_FREQUENCY, temporary_settings

    with temporary_settings(updates={PREFECT_API_URL: api_url, PREFECT_FLOWS_HEARTBEAT_FREQUENCY: None}):
        with prefect.context._temporary_global_settings_context(prefect.context.get_settings_context()):
            yield api_url


# where a served temporary server is recorded, one file per server, under PREFECT_HOME: every
# server of one PREFECT_HOME serves the same database, so any live one knows every gate of it
SERVERS_DIR = "kubelet-rollout-servers"
RECORDED_HEALTH_S = 2.0  # a live server answers its health check in milliseconds


def recorded_server(prefect_home: Path) -> str | None:
    """The API URL of a temporary server a local run serves from ``prefect_home`` and that
    answers now; records of servers (or runs) that are gone are removed."""
    for record in sorted((prefect_home / SERVERS_DIR).glob("*.json")):
        try:
            said = json.loads(record.read_text())
            url, pids = str(said["api_url"]), (int(said["server_pid"]), int(said["owner_pid"]))
        except (OSError, ValueError, KeyError, TypeError):
            continue  # being written, or not ours to judge
        if not all(_alive(pid) for pid in pids):
            with contextlib.suppress(OSError):
                record.unlink()
            continue
        with contextlib.suppress(OSError, ValueError):
            with urllib.request.urlopen(f"{url}/health", timeout=RECORDED_HEALTH_S) as answer:
                if answer.status == 200:
                    return url
    return None


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # another user's process: alive
    return True
