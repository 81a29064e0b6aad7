"""Two shells at once on a fresh PREFECT_HOME (`rollout start`, and `rollout approve` typed at once):
their temporary Prefect servers both migrate the same new database and the one that loses exits
(code 3). Before, that ended the rollout with exit 130 ("the temporary Prefect server did not
start"); the server that exits while starting is started again and finds the database migrated."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest

from rollout_cli.local.prefect_server import TemporaryServer


def test_temporary_servers_started_together_on_a_fresh_prefect_home_all_come_up(tmp_path: Path,
                                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("PREFECT_API_URL", raising=False)
    monkeypatch.setenv("PREFECT_HOME", str(tmp_path / "prefect-home"))
    (tmp_path / "prefect-home").mkdir()
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
