"""A killed local run leaves nothing running: its temporary Prefect server goes with it."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "flows"))
import scenario as sc  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]


def _children(pid: int) -> set[int]:
    out = set()
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[1]) == pid:
            out.add(int(stat.parent.name))
    return out


def _alive(pid: int) -> bool:
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return False
    return fields[0] != "Z"


def test_kill_9_of_a_local_run_takes_its_temporary_prefect_server_along(tmp_path: Path) -> None:
    with sc.cluster(tmp_path, general=2) as c:
        gw = sc.gateway(c)
        cfg = tmp_path / "kubelet.yaml"
        cfg.write_text(sc.config_text(gw, maxPods=98))
        pol = tmp_path / "policy.yaml"
        pol.write_text(sc.policy(approval={"after": [0], "timeout": "5m"}))
        env = {k: v for k, v in os.environ.items() if not k.startswith("PREFECT_API")}
        env.update(PREFECT_HOME=str(tmp_path / "prefect-home"), PREFECT_SERVER_ANALYTICS_ENABLED="false",
                   PYTHONPATH=str(ROOT))
        proc = subprocess.Popen([sys.executable, "-m", "rollout_cli", "start", "--config", str(cfg), "--policy",
                                 str(pol), "--name", "leftover", "--kubeconfig", str(c.kubeconfig)],
                                cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            server: set[int] = set()
            deadline = time.monotonic() + 120
            while time.monotonic() < deadline and not server:
                server = {p for p in _children(proc.pid)
                          if b"uvicorn" in Path(f"/proc/{p}/cmdline").read_bytes()
                          or b"prefect" in Path(f"/proc/{p}/cmdline").read_bytes()}
                assert proc.poll() is None, "the run ended before its server was seen"
                time.sleep(0.2)
            assert server, "no temporary Prefect server was started"
            os.kill(proc.pid, signal.SIGKILL)
            proc.wait(timeout=10)
            deadline = time.monotonic() + 15
            while time.monotonic() < deadline and any(_alive(p) for p in server):
                time.sleep(0.2)
            assert not any(_alive(p) for p in server), "the temporary Prefect server outlived its run"
        finally:
            if proc.poll() is None:
                proc.kill()
