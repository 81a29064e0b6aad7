"""`rollout demo --fleet --workdir ./fleetdemo`: a relative work dir, as a person types it; and a
work dir the demo cannot use is one line, not a traceback.

The fleet stack's processes run in directories of their own (the Prefect server in its home, each
worker in the logs dir), so a relative path handed to them is resolved again from there: the
server's SQLite file was not found ("unable to open database file", "prefect server exited (3)").
Here the piece that failed runs as the real process, from a relative path.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import urllib.request
from pathlib import Path

from rollout_cli.local.fleet_stack import FleetStack, PrefectServer

ROOT = Path(__file__).resolve().parents[2]


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


def test_a_demo_that_cannot_write_its_work_dir_says_so_in_one_line(tmp_path: Path) -> None:
    (tmp_path / "demo" / "demo-cluster.yaml").mkdir(parents=True)  # where the demo writes its cluster file
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}
    done = subprocess.run([sys.executable, "-m", "rollout_cli", "demo", "--workdir", "./demo"], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 1
    assert "Traceback" not in done.stderr
    assert done.stderr.strip().splitlines() == [
        f"error: the demo stopped: [Errno 21] Is a directory: '{tmp_path / 'demo' / 'demo-cluster.yaml'}'"]
