"""`rollout demo --fleet --workdir ./fleetdemo`: a relative work dir, as a person types it.

The fleet stack's processes run in directories of their own (the Prefect server in its home, each
worker in the logs dir), so a relative path handed to them is resolved again from there: the
server's SQLite file was not found ("unable to open database file", "prefect server exited (3)").
Here the piece that failed runs as the real process, from a relative path.
"""

from __future__ import annotations

import json
import urllib.request
from pathlib import Path

import pytest

from rollout_cli.fleet_stack import FleetStack, PrefectServer

pytestmark = pytest.mark.prefect


def test_the_fleet_stacks_prefect_server_starts_from_a_relative_home(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    server = PrefectServer(Path("fleetdemo") / "stack" / "prefect")
    try:
        server.start(timeout=120)
        with urllib.request.urlopen(f"{server.api_url}/work_pools/filter", data=b"{}", timeout=30) as answer:
            assert json.loads(answer.read()) == []  # its database answers
    finally:
        server.stop()
    assert (tmp_path / "fleetdemo" / "stack" / "prefect" / "prefect.db").is_file()
    assert not (tmp_path / "fleetdemo" / "stack" / "prefect" / "fleetdemo").exists()  # not resolved twice


def test_the_fleet_stack_gives_its_processes_absolute_paths(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    stack = FleetStack(Path("fleetdemo/stack"), {"dev": Path("fleetdemo/dev/kubesim/kubeconfig")})
    # a worker runs in the logs dir with KUBECONFIG in its environment: relative, it names nothing there
    assert stack.kubeconfigs["dev"] == tmp_path / "fleetdemo" / "dev" / "kubesim" / "kubeconfig"
    assert stack.server.home == tmp_path / "fleetdemo" / "stack" / "prefect"
    assert stack.server.env()["PREFECT_HOME"] == str(tmp_path / "fleetdemo" / "stack" / "prefect" / "client")
