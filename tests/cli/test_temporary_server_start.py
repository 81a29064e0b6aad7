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
from rollout_cli.local.prefect_server import (
    REGISTER_BLOCKS,
    TemporaryServer,
    seed_home_database,
    server_env,
    template_path,
)


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
    # ready after its start-up, which registered no block type (1.2-1.9 s of CPU a start)
    with sqlite3.connect(home / "prefect.db") as db:
        assert db.execute("select count(*) from block_type").fetchone() == (0,)


@pytest.mark.parametrize("name", REGISTER_BLOCKS)
def test_a_temporary_server_registers_block_types_where_the_environment_asks(name: str) -> None:
    assert server_env({})[REGISTER_BLOCKS[0]] == "false"
    asked = server_env({name: "true", "PATH": "/bin"})
    assert asked[name] == "true" and asked["PATH"] == "/bin"
    assert [n for n in REGISTER_BLOCKS if n in asked] == [name]  # Prefect reads the first one set


def test_a_database_named_in_the_environment_is_left_to_prefect(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    template_db()
    monkeypatch.setenv("PREFECT_HOME", str(tmp_path / "prefect-home"))
    monkeypatch.setenv("PREFECT_SERVER_DATABASE_CONNECTION_URL", f"sqlite+aiosqlite:///{tmp_path / 'own.db'}")
    assert not seed_home_database()
    assert not (tmp_path / "prefect-home" / "prefect.db").exists()


def _needed(env: dict[str, str]) -> bool:
    """``needed()`` in a fresh process (Prefect not imported), with ``env`` only besides PATH."""
    import os
    import subprocess
    import sys

    code = "from rollout_cli.local import prefect_server as p; import sys; print(p.needed(), 'prefect' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], env={"PATH": os.environ["PATH"], **env}, text=True,
                         capture_output=True, check=True, cwd=Path(__file__).resolve().parents[2]).stdout.split()
    assert out[1] == "False", "needed() must not import Prefect"
    return out[0] == "True"


PROFILES = """active = "ephemeral"
[profiles.ephemeral]
PREFECT_SERVER_EPHEMERAL_ENABLED = "true"
[profiles.team]
PREFECT_API_URL = "http://prefect.example:4200/api"
"""


def test_a_url_in_the_active_profile_needs_no_temporary_server(tmp_path: Path) -> None:
    """A server started beside a configured API went unused (8 s of CPU a run): the active profile
    of profiles.toml counts as Prefect counts it, the environment's PREFECT_PROFILE first."""
    home = tmp_path / "home"
    home.mkdir()
    (home / "profiles.toml").write_text(PROFILES)
    assert _needed({"PREFECT_HOME": str(home)})
    assert not _needed({"PREFECT_HOME": str(home), "PREFECT_PROFILE": "team"})
    (home / "profiles.toml").write_text(PROFILES.replace('active = "ephemeral"', 'active = "team"'))
    assert not _needed({"PREFECT_HOME": str(home)})
    assert _needed({"PREFECT_HOME": str(home), "PREFECT_PROFILE": "ephemeral"})
    elsewhere = tmp_path / "profiles-elsewhere.toml"
    elsewhere.write_text(PROFILES)
    assert not _needed({"PREFECT_HOME": str(tmp_path / "empty"), "PREFECT_PROFILES_PATH": str(elsewhere),
                        "PREFECT_PROFILE": "team"})
    (home / "profiles.toml").write_text("active = [\n")  # unreadable: Prefect's own default then
    assert _needed({"PREFECT_HOME": str(home)})
    assert not _needed({"PREFECT_HOME": str(home), "PREFECT_API_URL": "http://127.0.0.1:1/api"})


def test_a_process_whose_prefect_is_pointed_at_an_api_needs_no_temporary_server(
        prefect_api: str, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """In a process that imported Prefect (a test's, an embedding), its settings decide: the CLI
    run in-process under the session's API started a server it never used (5 of them in one file)."""
    from rollout_cli.local.prefect_server import needed

    monkeypatch.delenv("PREFECT_API_URL", raising=False)
    monkeypatch.setenv("PREFECT_HOME", str(tmp_path))  # no profile
    assert not needed()


def test_a_template_build_waits_for_the_one_under_way_and_builds_nothing_itself(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import fcntl

    from rollout_cli.local import prefect_home
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))  # no template built here yet
    builds: list[Path] = []
    monkeypatch.setattr(prefect_home, "_build_template", builds.append)
    db = template_path()
    db.parent.mkdir(parents=True)
    got: list[Path] = []
    with open(db.parent / ".build.lock", "w") as lock:  # another builder, mid-build
        fcntl.flock(lock, fcntl.LOCK_EX)
        waiter = threading.Thread(target=lambda: got.append(template_db()))
        waiter.start()
        waiter.join(timeout=1.0)
        assert waiter.is_alive() and not got  # it waits for the lock
        db.write_bytes(b"the other builder's database")
    waiter.join(timeout=10)
    assert got == [db] and builds == []
