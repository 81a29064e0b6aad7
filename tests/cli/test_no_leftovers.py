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
                          if b"prefect.server.api.server" in Path(f"/proc/{p}/cmdline").read_bytes()}
                assert proc.poll() is None, "the run ended before its server was seen"
                time.sleep(0.2)
            assert server, "no temporary Prefect server was started"
            time.sleep(1.0)  # a person's kill comes later than the first instant of the server's life
            os.kill(proc.pid, signal.SIGKILL)
            proc.wait(timeout=10)
            deadline = time.monotonic() + 15
            while time.monotonic() < deadline and any(_alive(p) for p in server):
                time.sleep(0.2)
            assert not any(_alive(p) for p in server), "the temporary Prefect server outlived its run"
        finally:
            if proc.poll() is None:
                proc.kill()


def test_kill_9_of_a_process_that_started_a_local_prometheus_takes_it_and_its_data_along(tmp_path: Path) -> None:
    """A Prometheus of ours lives in a session of its own (a terminal's Ctrl-C must not reach it
    from under a running rollout), so nothing else ends it: the watchdog does, and removes its data."""
    from kubesim.cluster import Cluster

    script = ("import sys, time\nfrom rollout_cli.local.prometheus import LocalPrometheus\n"
              "p = LocalPrometheus(sys.argv[1]).start()\nprint(p.process.pid, p.dir, flush=True)\ntime.sleep(600)\n")
    with Cluster(nodes=1, state_dir=tmp_path / "kubesim", time_scale=sc.TIME_SCALE) as c:
        proc = subprocess.Popen([sys.executable, "-c", script, str(c.kubeconfig)], cwd=ROOT, stdout=subprocess.PIPE,
                                text=True, env={**os.environ, "PYTHONPATH": str(ROOT)})
        try:
            assert proc.stdout is not None
            pid, data = proc.stdout.readline().split()
            prometheus = int(pid)
            assert _alive(prometheus) and Path(data).is_dir()
            assert os.getsid(prometheus) != os.getsid(proc.pid), "Prometheus shares the session of its starter"
            os.kill(proc.pid, signal.SIGKILL)
            proc.wait(timeout=10)
            deadline = time.monotonic() + 15
            while time.monotonic() < deadline and (_alive(prometheus) or Path(data).exists()):
                time.sleep(0.2)
            assert not _alive(prometheus), "the Prometheus outlived the process that started it"
            assert not Path(data).exists(), "its data directory was left behind"
        finally:
            if proc.poll() is None:
                proc.kill()
