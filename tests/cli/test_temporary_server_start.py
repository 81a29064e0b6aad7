"""Two shells at once on a fresh PREFECT_HOME (`rollout start`, and `rollout approve` typed at once):
their temporary Prefect servers both migrate the same new database and the one that loses exits
(code 3). Before, that ended the rollout with exit 130 ("the temporary Prefect server did not
start"); the server that exits while starting is started again and finds the database migrated.

A fresh PREFECT_HOME is given a copy of the migrated template database when one was built (the
demo builds it): then nothing migrates at all."""

from __future__ import annotations

import sqlite3
import tempfile
import threading
from pathlib import Path

import pytest

from rollout_cli.local.prefect_home import template_db
from rollout_cli.local.prefect_server import TemporaryServer, seed_home_database, template_path


def test_temporary_servers_started_together_on_a_fresh_prefect_home_all_come_up(tmp_path: Path,
                                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("PREFECT_API_URL", raising=False)
    monkeypatch.setenv("PREFECT_HOME", str(tmp_path / "prefect-home"))
    (tmp_path / "prefect-home").mkdir()
    (tmp_path / "no-template").mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path / "no-template"))  # as on a machine that ran no demo
    assert not template_path().exists()
    servers = [TemporaryServer() for _ in range(3)]
    ready: dict[int, bool] = {}
    try:
        waits = [threading.Thread(target=lambda i=i, s=s: ready.__setitem__(i, s.wait_ready(timeout_s=180)))
                 for i, s in enumerate(servers)]
        for wait in waits:
            wait.start()
        for wait in waits:
            wait.join()
    finally:
        for server in servers:
            server.stop()
    assert ready == {0: True, 1: True, 2: True}, [s.restarts for s in servers]


def _revision(db: Path) -> str:
    with sqlite3.connect(db) as conn:
        return str(conn.execute("select version_num from alembic_version").fetchone()[0])


def test_a_fresh_prefect_home_is_seeded_once_from_the_template_and_its_server_comes_up(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    template = template_db()
    home = tmp_path / "prefect-home"
    monkeypatch.delenv("PREFECT_API_URL", raising=False)
    monkeypatch.delenv("PREFECT_SERVER_DATABASE_CONNECTION_URL", raising=False)
    monkeypatch.setenv("PREFECT_HOME", str(home))
    assert seed_home_database() and _revision(home / "prefect.db") == _revision(template)
    first = (home / "prefect.db").stat().st_ino
    assert not seed_home_database() and (home / "prefect.db").stat().st_ino == first  # never replaced
    assert not [p.name for p in home.iterdir() if ".seed-" in p.name]  # no copy left behind
    server = TemporaryServer()
    try:
        assert server.wait_ready(timeout_s=120)
    finally:
        server.stop()


def test_a_database_named_in_the_environment_is_left_to_prefect(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    template_db()
    monkeypatch.setenv("PREFECT_HOME", str(tmp_path / "prefect-home"))
    monkeypatch.setenv("PREFECT_SERVER_DATABASE_CONNECTION_URL", f"sqlite+aiosqlite:///{tmp_path / 'own.db'}")
    assert not seed_home_database()
    assert not (tmp_path / "prefect-home" / "prefect.db").exists()
