"""The fleet stack's Prefect server on a PostgreSQL of its own (``bench/fleet_scale.py``'s default):
Debian's PostgreSQL started on loopback as a program, Prefect migrating it and serving from it,
everything stopped with the stack. A real server, as a fleet's users run one."""

from __future__ import annotations

import os
import shutil
import socket
import tempfile
from pathlib import Path

import pytest

from rollout_cli.local.fleet_stack import PrefectServer, create_pool
from rollout_cli.local.postgres import LocalPostgres, reachable_workdir


def _serving(port: int) -> bool:
    with socket.socket() as s:
        return s.connect_ex(("127.0.0.1", port)) == 0


def test_a_prefect_server_migrates_and_serves_from_its_own_postgres() -> None:
    work = reachable_workdir("prefect-pg-")  # not under pytest's 0700 tmp: as root it runs as `postgres`
    try:
        _migrates_and_serves(work)
    finally:
        shutil.rmtree(work, ignore_errors=True)


def _migrates_and_serves(work: Path) -> None:
    postgres = LocalPostgres(work / "postgres")
    with postgres.running():
        assert postgres.url.startswith("postgresql+asyncpg://") and _serving(postgres.port)
        server = PrefectServer(work / "prefect", database_url=postgres.url).start(timeout=180)
        try:
            create_pool(server, "kubelet-rollout-c01")
            pools = server.post("/work_pools/filter", {})
            assert "kubelet-rollout-c01" in {p["name"] for p in pools}
            assert not (work / "prefect" / "prefect.db").exists()  # nothing went to a SQLite file
        finally:
            server.stop()
        # the data outlives a restart of the database: a stack started again finds its pools
        postgres.stop()
        postgres.start()
        server = PrefectServer(work / "prefect", database_url=postgres.url).start(timeout=180)
        try:
            assert "kubelet-rollout-c01" in {p["name"] for p in server.post("/work_pools/filter", {})}
        finally:
            server.stop()
    assert not _serving(postgres.port)


def test_a_directory_postgres_cannot_enter_is_named_before_anything_starts() -> None:
    if os.geteuid() != 0:
        pytest.skip("only as root does PostgreSQL run as another user (`postgres`)")
    private = Path(tempfile.mkdtemp(prefix="prefect-pg-private-"))  # 0700, root's
    try:
        with pytest.raises(RuntimeError, match=f"cannot enter {private}"):
            LocalPostgres(private / "postgres").start()
        assert not (private / "postgres" / "data").exists()  # initdb never ran
    finally:
        shutil.rmtree(private, ignore_errors=True)
