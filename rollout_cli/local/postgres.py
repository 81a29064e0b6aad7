"""A real PostgreSQL on loopback, for a Prefect server that many workers and runs write to at once.

Prefect's default database is a SQLite file, and SQLite takes one writer at a time: under a fleet
of ten clusters (eleven workers heartbeating, ten rollouts logging and reporting progress) its
server answered a health check in 14 s and refused workers' heartbeats with "database is locked",
so stages started late and a live worker could be judged offline. Prefect's answer for that load
is PostgreSQL; ``bench/fleet_scale.py`` runs on one (``--database postgres``, its default) and
``rollout_cli.local.fleet_stack`` starts it when asked.

Debian's ``postgresql-15`` (``make system-deps``) is used as a program, never as the system
service: a throwaway cluster (``initdb``) in a directory of the caller's, on a free loopback port,
its superuser ``prefect`` trusted on loopback only, stopped (fast shutdown) when the context ends.
PostgreSQL refuses to run as root; as root it runs as the ``postgres`` user the package created.
"""

from __future__ import annotations

import contextlib
import os
import pwd
import shutil
import signal
import stat
import subprocess
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rollout_cli.local.processes import free_port, start_helper, stop_process

DATABASE = "prefect"
SUPERUSER = "prefect"


def bindir() -> Path:
    """Where Debian keeps the server's programs (``initdb``, ``postgres``): not on PATH."""
    found = sorted(Path("/usr/lib/postgresql").glob("*/bin/postgres"), key=lambda p: int(p.parents[1].name))
    if found:
        return found[-1].parent
    on_path = shutil.which("postgres")
    if on_path:
        return Path(on_path).parent
    raise RuntimeError("PostgreSQL is not installed: run `make system-deps` (Debian's postgresql-15)")


def reachable_workdir(prefix: str) -> Path:
    """A new temporary directory the server's owner can pass through to its data: ``mkdtemp``
    makes it 0700, and as root PostgreSQL runs as ``postgres``."""
    work = Path(tempfile.mkdtemp(prefix=prefix))
    work.chmod(0o755)
    return work


@dataclass
class LocalPostgres:
    """A PostgreSQL cluster in ``root`` (created on first start), serving on loopback."""

    root: Path
    port: int = 0
    proc: subprocess.Popen[Any] | None = None

    def __post_init__(self) -> None:
        self.root = self.root.resolve()  # handed to initdb and postgres, which may run as another user

    @property
    def url(self) -> str:
        """Prefect's ``PREFECT_SERVER_DATABASE_CONNECTION_URL`` for this database."""
        return f"postgresql+asyncpg://{SUPERUSER}@127.0.0.1:{self.port}/{DATABASE}"

    def _as(self) -> dict[str, Any]:
        """Popen's arguments that run a program as the owner of the data (``postgres`` under root)."""
        if os.geteuid() != 0:
            return {}
        owner = pwd.getpwnam("postgres")
        return {"user": owner.pw_uid, "group": owner.pw_gid, "extra_groups": []}

    def start(self, timeout: float = 60) -> LocalPostgres:
        programs = bindir()
        data, sockets = self.root / "data", self.root / "sockets"
        self.root.mkdir(parents=True, exist_ok=True)
        sockets.mkdir(exist_ok=True)
        ids = self._as()
        if ids:
            self._check_reachable(ids["user"], ids["group"])
        for path in (self.root, sockets):
            if ids:
                os.chown(path, ids["user"], ids["group"])
        fresh = not (data / "PG_VERSION").exists()
        if fresh:
            subprocess.run([str(programs / "initdb"), "-D", str(data), "-U", SUPERUSER, "--auth=trust", "-E", "UTF8",
                            "--no-sync"], check=True, capture_output=True, timeout=120, **ids)
        self.port = self.port or free_port()
        with open(self.root / "postgres.log", "ab") as log:
            if ids:
                os.chown(self.root / "postgres.log", ids["user"], ids["group"])
            # SIGINT when its process is gone: a fast shutdown (rollout_cli.local.processes)
            self.proc = start_helper([str(programs / "postgres"), "-D", str(data), "-h", "127.0.0.1", "-p",
                                      str(self.port), "-k", str(sockets), "-c", "max_connections=200"],
                                     stop_signal=signal.SIGINT, stdout=log, stderr=subprocess.STDOUT, **ids)
        self._wait_ready(programs, timeout)
        if fresh:
            subprocess.run([str(programs / "createdb"), "-h", "127.0.0.1", "-p", str(self.port), "-U", SUPERUSER,
                            DATABASE], check=True, capture_output=True, timeout=60)
        return self

    def _check_reachable(self, uid: int, gid: int) -> None:
        """A clear error instead of initdb's when the owner cannot pass through a directory above
        ``root`` (a 0700 temporary directory of root's, say)."""
        for parent in self.root.resolve().parents:
            info = parent.stat()
            bit = stat.S_IXUSR if info.st_uid == uid else stat.S_IXGRP if info.st_gid == gid else stat.S_IXOTH
            if not info.st_mode & bit:
                raise RuntimeError(f"PostgreSQL runs as `postgres` here, which cannot enter {parent} "
                                   f"(mode {stat.filemode(info.st_mode)}): put its directory where it can "
                                   "(rollout_cli.local.postgres.reachable_workdir)")

    def _wait_ready(self, programs: Path, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            assert self.proc is not None
            if self.proc.poll() is not None:
                raise RuntimeError(f"postgres exited ({self.proc.returncode}); see {self.root / 'postgres.log'}")
            ready = subprocess.run([str(programs / "pg_isready"), "-h", "127.0.0.1", "-p", str(self.port), "-q"],
                                   capture_output=True, timeout=10)
            if ready.returncode == 0:
                return
            time.sleep(0.2)
        raise RuntimeError(f"postgres did not accept connections in {timeout:.0f} s; see {self.root / 'postgres.log'}")

    def stop(self) -> None:
        if self.proc is not None:  # SIGINT: a fast shutdown, the sessions ended, nothing kept waiting
            stop_process(self.proc, signal.SIGINT, timeout=30)
        self.proc = None

    @contextlib.contextmanager
    def running(self) -> Iterator[LocalPostgres]:
        try:
            yield self.start()
        finally:
            self.stop()
