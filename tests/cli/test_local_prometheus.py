"""The shipped Prometheus configurations (deployments/prometheus/) and the one `rollout prometheus`
runs: which build takes which file (Debian's promtool says), and that the local Prometheus runs the
shipped http-sd file itself, only with this machine's values put in."""

from __future__ import annotations

import os
import shutil
import subprocess
from datetime import timedelta
from pathlib import Path

import pytest
import yaml

from rollout.policy import load_policy_ref
from rollout.policy.durations import parse_duration
from rollout_cli.local.prometheus import (
    SHIPPED_SCRAPE_INTERVAL,
    SHIPPED_SCRAPE_TIMEOUT,
    SHIPPED_SD_HOST,
    SHIPPED_SD_PORT,
    SD_PATH,
    scrape_config,
)

ROOT = Path(__file__).resolve().parents[2]
SHIPPED = ROOT / "deployments/prometheus"
HTTP_SD, KUBERNETES_SD = SHIPPED / "prometheus-http-sd.yml", SHIPPED / "prometheus-kubernetes-sd.yml"


def _load(path: Path) -> dict:
    return yaml.safe_load(path.read_text())


def _promtool(doc: dict, tmp_path: Path, name: str) -> subprocess.CompletedProcess[str]:
    """`promtool check config` of ``doc``, its credential files made to exist (promtool opens them)."""
    promtool = shutil.which("promtool")
    assert promtool is not None, "Debian's prometheus is installed with the project (make system-deps)"
    job = doc["scrape_configs"][0]
    for key, path in (("tls_config", "ca_file"), ("authorization", "credentials_file")):
        local = tmp_path / Path(job[key][path]).name
        local.write_text("x")
        job[key][path] = str(local)
    config = tmp_path / name
    config.write_text(yaml.safe_dump(doc))
    return subprocess.run([promtool, "check", "config", str(config)], capture_output=True, text=True, timeout=60)


def test_debians_build_takes_the_http_sd_file(tmp_path: Path) -> None:
    checked = _promtool(_load(HTTP_SD), tmp_path, "http-sd.yml")
    assert checked.returncode == 0, checked.stdout + checked.stderr


def test_debians_build_refuses_the_kubernetes_sd_file_for_its_discovery_alone(tmp_path: Path) -> None:
    """The file is for builds with kubernetes_sd_configs (upstream's): Debian's refuses exactly that
    section, and takes the rest of the file once the discovery is http-sd's."""
    checked = _promtool(_load(KUBERNETES_SD), tmp_path, "kubernetes-sd.yml")
    assert checked.returncode != 0 and "field kubernetes_sd_configs not found" in checked.stdout + checked.stderr
    doc = _load(KUBERNETES_SD)
    job = doc["scrape_configs"][0]
    job["http_sd_configs"] = job.pop("kubernetes_sd_configs") and _load(HTTP_SD)["scrape_configs"][0]["http_sd_configs"]
    checked = _promtool(doc, tmp_path, "kubernetes-sd-rest.yml")
    assert checked.returncode == 0, checked.stdout + checked.stderr


def test_the_local_prometheus_runs_the_shipped_http_sd_file() -> None:
    """Before: the local Prometheus built its own configuration (1 s scrapes, no scrape timeout),
    equal to the shipped file in its relabelling only."""
    shipped = _load(HTTP_SD)
    job = shipped["scrape_configs"][0]
    made = scrape_config(server="https://API_SERVER",
                         credentials={"tls_config": job["tls_config"], "authorization": job["authorization"]},
                         sd_url=f"http://{SHIPPED_SD_HOST}:{SHIPPED_SD_PORT}{SD_PATH}")
    assert made == shipped
    assert parse_duration(shipped["global"]["scrape_interval"]) == SHIPPED_SCRAPE_INTERVAL
    assert parse_duration(shipped["global"]["scrape_timeout"]) == SHIPPED_SCRAPE_TIMEOUT


def test_the_two_shipped_files_scrape_alike() -> None:
    http, kubernetes = _load(HTTP_SD), _load(KUBERNETES_SD)
    assert http["global"] == kubernetes["global"]
    relabel = [dict(r) for r in kubernetes["scrape_configs"][0]["relabel_configs"]]
    relabel[2]["replacement"] = "API_SERVER"
    assert relabel == http["scrape_configs"][0]["relabel_configs"]


@pytest.mark.parametrize("scale", [20.0, 40.0])
def test_a_rehearsal_scrapes_as_much_faster_as_its_clock(scale: float, tmp_path: Path) -> None:
    credentials = {"tls_config": {"ca_file": "ca.crt"}, "authorization": {"credentials_file": "token"}}
    made = scrape_config(server="https://127.0.0.1:6443", credentials=credentials, sd_url="http://127.0.0.1:1/targets",
                         interval=SHIPPED_SCRAPE_INTERVAL / scale)
    checked = _promtool(yaml.safe_load(yaml.safe_dump(made)), tmp_path, "rehearsal.yml")
    assert checked.returncode == 0, checked.stdout + checked.stderr
    interval = parse_duration(made["global"]["scrape_interval"])
    assert interval == SHIPPED_SCRAPE_INTERVAL / scale
    assert parse_duration(made["global"]["scrape_timeout"]) <= interval  # Prometheus refuses a longer one
    assert made["scrape_configs"][0]["relabel_configs"][2]["replacement"] == "127.0.0.1:6443"


@pytest.mark.parametrize("policy", ["canary", "cautious"])
@pytest.mark.parametrize("scale", [1.0, 20.0, 40.0])
def test_the_shipped_policies_measure_at_least_two_shipped_scrapes_apart(policy: str, scale: float) -> None:
    """A check's shortest window is its interval (its first measurement): with fewer than two
    scrapes in it a rate() has no data. At a rehearsal's scale, `rollout prometheus --time-scale`
    scrapes as much faster."""
    scrape = parse_duration(_load(HTTP_SD)["global"]["scrape_interval"]) / scale
    checks = load_policy_ref(policy).rehearsal(scale).analysis.checks
    assert checks
    assert all(c.interval >= 2 * scrape for c in checks), [(c.name, c.interval) for c in checks]
    assert timedelta(0) < scrape


def test_the_module_run_by_itself_names_the_command_to_run() -> None:
    """Before: `python -m rollout_cli.local.prometheus --help` printed nothing and exited 0 (the
    discovery endpoint existed only as a class); the command is `rollout prometheus [sd]`."""
    import sys

    shown = subprocess.run([sys.executable, "-m", "rollout_cli.local.prometheus", "--help"], cwd=ROOT,
                           capture_output=True, text=True, timeout=60)
    assert shown.returncode == 2 and "rollout prometheus sd" in shown.stderr, shown.stderr
    helped = subprocess.run([sys.executable, "-m", "rollout_cli", "prometheus", "--help"], cwd=ROOT,
                            capture_output=True, text=True, timeout=60, env={**os.environ, "COLUMNS": "200"})
    assert helped.returncode == 0 and "--kubeconfig" in helped.stdout and "sd" in helped.stdout, helped.stdout
