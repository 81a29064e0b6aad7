"""A Prometheus for the analysis, as a person meets it on kubesim: `rollout start` asks the one it
is given before it writes anything. Real processes (`python -m rollout_cli`), a real kubesim and
Debian's prometheus on loopback; what was written is read from kubesim's audit log."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Iterator

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "flows"))
import scenario as sc  # noqa: E402

from rollout_cli.local_processes import free_port  # noqa: E402
from rollout_cli.local_prometheus import LocalPrometheus  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
SHIPPED_SCRAPE_S = 15.0


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    with sc.cluster(tmp_path_factory.mktemp("prom-cli"), general=3) as c:
        yield c


def rollout(*args: str, env: dict[str, str], timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "rollout_cli", *args], cwd=ROOT, env=env, capture_output=True,
                          text=True, timeout=timeout)


def environment(tmp_path: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("KUBELET_ROLLOUT_", "PREFECT_", "KUBECONFIG"))}
    env.update(PREFECT_HOME=str(tmp_path / "prefect"), PREFECT_SERVER_ANALYTICS_ENABLED="false",
               PYTHONPATH=str(ROOT), COLUMNS="200")
    return env


def writes(c: Any) -> list[dict[str, Any]]:
    """Every write of ours (not a kubelet's or kubesim's own controllers')."""
    return [e for e in c.audit_log.events() if e.get("verb") in ("create", "update", "patch", "delete")
            and not str((e.get("user") or {}).get("username", "")).startswith("system:")]


def config_file(c: Any, tmp_path: Path, max_pods: int) -> Path:
    path = tmp_path / "kubelet.yaml"
    path.write_text(sc.config_text(sc.gateway(c), maxPods=max_pods))
    return path


def test_start_refuses_a_prometheus_out_of_reach_at_once_and_writes_nothing(cluster: Any, tmp_path: Path) -> None:
    """Before: the canary was written, then the analysis rode out the dead Prometheus for
    outageTolerance (2 real minutes) while status said it was measuring."""
    before = len(writes(cluster))
    wrong = f"http://127.0.0.1:{free_port()}"
    started = time.monotonic()
    done = rollout("start", "-c", str(config_file(cluster, tmp_path, 71)), "--name", "wrong-url", "--time-scale", "20",
                   "--kubeconfig", str(cluster.kubeconfig), "--prometheus", wrong, env=environment(tmp_path),
                   timeout=60)
    assert done.returncode == 2, done.stdout + done.stderr
    assert time.monotonic() - started < 30
    assert f"--prometheus: the Prometheus at {wrong} cannot measure" in done.stderr and "out of reach" in done.stderr
    assert "hint:" in done.stderr and "KUBELET_ROLLOUT_PROMETHEUS_URL" in done.stderr
    assert "Traceback" not in done.stderr + done.stdout
    assert writes(cluster)[before:] == []
    assert sc.gateway(cluster).load_journal("wrong-url") is None


def test_start_refuses_a_rehearsal_whose_windows_hold_less_than_two_scrapes(cluster: Any, tmp_path: Path) -> None:
    """The shipped canary at x20 measures every 3 s: a Prometheus scraping every 15 s (the shipped
    interval) gives its rate() checks no data, and noData: pass let the analysis pass unmeasured."""
    scraper = sc.scraper_kubeconfig(cluster)
    before = len(writes(cluster))
    with LocalPrometheus(scraper, scrape_interval_s=SHIPPED_SCRAPE_S) as prom:
        deadline = time.monotonic() + 60
        while not prom.target_health():
            assert time.monotonic() < deadline, "no kubelet target discovered within 60 s"
            time.sleep(0.3)
        env = {**environment(tmp_path), "KUBELET_ROLLOUT_PROMETHEUS_URL": prom.url}
        done = rollout("start", "-c", str(config_file(cluster, tmp_path, 72)), "--name", "short-windows",
                       "--time-scale", "20", "--kubeconfig", str(cluster.kubeconfig), env=env, timeout=60)
    assert done.returncode == 2, done.stdout + done.stderr
    for check in ("evictions", "pod-start-p95-vs-control", "container-restarts"):
        assert f"check {check} measures windows from 3s (its interval, x20 rehearsal)" in done.stderr, done.stderr
    assert "every 15s" in done.stderr and "rollout prometheus --time-scale 20" in done.stderr
    assert writes(cluster)[before:] == []
