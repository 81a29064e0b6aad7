"""`rollout.prometheus.probe`: whether a Prometheus can measure a policy's checks, asked before a
run writes anything, of real Prometheus servers (Debian's, on loopback) whose targets are set up
to be each case: kubelets scraped every 15 s (the shipped interval), no kubelet at all, kubelets
that are all down; and of a port nothing listens on and a web server that is not a Prometheus."""

from __future__ import annotations

import contextlib
import json
import shutil
import subprocess
import threading
import time
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, Iterator

import pytest
import yaml

from rollout.errors import FlagError
from rollout.policy import load_policy, load_policy_ref
from rollout.prometheus import PrometheusClient, PrometheusSettings, probe, ready_metrics_source
from rollout_cli.local.processes import free_port, stop_process

SHIPPED_SCRAPE = "15s"


@contextlib.contextmanager
def prometheus(tmp_path: Path, *, interval: str, targets: list[dict[str, Any]]) -> Iterator[str]:
    """A Prometheus scraping ``targets`` (static, job ``kubelet``) every ``interval``; yields its
    URL once it has scraped every target once."""
    binary = shutil.which("prometheus")
    assert binary is not None, "Debian's prometheus is installed with the project (make system-deps)"
    port = free_port()
    config = tmp_path / "prometheus.yml"
    config.write_text(yaml.safe_dump({
        "global": {"scrape_interval": interval, "scrape_timeout": "1s"},
        "scrape_configs": [{"job_name": "kubelet", "static_configs": targets}]}))
    proc = subprocess.Popen([binary, f"--config.file={config}", f"--storage.tsdb.path={tmp_path / 'data'}",
                             f"--web.listen-address=127.0.0.1:{port}", "--log.level=warn"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    url = f"http://127.0.0.1:{port}"
    wanted = sum(len(group["targets"]) for group in targets)
    try:
        deadline = time.monotonic() + 60
        while True:
            assert proc.poll() is None, "prometheus exited"
            assert time.monotonic() < deadline, "prometheus did not discover its targets within 60 s"
            if len([t for t in _active(url) if t["health"] != "unknown"]) >= wanted:
                break
            time.sleep(0.2)
        yield url
    finally:
        stop_process(proc, 15, timeout=15)


@pytest.fixture(scope="module")
def shipped_interval(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A Prometheus scraping a 'kubelet' (itself, labelled as node-1) every 15 s."""
    port = free_port()
    path = tmp_path_factory.mktemp("shipped")
    binary = shutil.which("prometheus")
    assert binary is not None
    config = path / "prometheus.yml"
    config.write_text(yaml.safe_dump({
        "global": {"scrape_interval": SHIPPED_SCRAPE, "scrape_timeout": "10s"},
        "scrape_configs": [{"job_name": "kubelet", "static_configs": [
            {"targets": [f"127.0.0.1:{port}"], "labels": {"node": "node-1"}}]}]}))
    proc = subprocess.Popen([binary, f"--config.file={config}", f"--storage.tsdb.path={path / 'data'}",
                             f"--web.listen-address=127.0.0.1:{port}", "--log.level=warn"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 60
        while not _active(url):
            assert proc.poll() is None and time.monotonic() < deadline, "prometheus did not discover its target"
            time.sleep(0.2)
        yield url
    finally:
        stop_process(proc, 15, timeout=15)


def _active(url: str) -> list[dict[str, Any]]:
    try:
        with urllib.request.urlopen(f"{url}/api/v1/targets?state=active", timeout=2) as answer:
            return list(json.loads(answer.read())["data"]["activeTargets"])
    except (OSError, ValueError, KeyError):
        return []


def source(url: str) -> PrometheusClient:
    return PrometheusClient(PrometheusSettings(address=url))


def test_a_prometheus_scraping_kubelets_often_enough_passes(shipped_interval: str) -> None:
    assert probe(source(shipped_interval), load_policy_ref("canary")) == []
    assert probe(source(shipped_interval), load_policy_ref("cautious")) == []


def test_a_rehearsal_against_the_shipped_scrape_interval_is_refused_naming_each_check(shipped_interval: str) -> None:
    """Before: at x20 the shipped canary measured windows of 3 s on 15 s scrapes: its rate() and
    increase() checks returned no data on every batch (noData: pass) and the analysis passed
    without measuring."""
    rehearsal = load_policy_ref("canary").rehearsal(20)
    problems = probe(source(shipped_interval), rehearsal)
    gating = rehearsal.analysis.gating  # a dry-run check is measured, never refused for its windows
    assert len(problems) == len(gating), problems
    for check, problem in zip(gating, problems):
        assert f"check {check.name} " in problem and "3s" in problem and "every 15s" in problem, problem
        assert "x20 rehearsal" in problem and "rollout prometheus --time-scale 20" in problem
    names = [check.name for check in gating]
    assert "noData: pass" in problems[names.index("pod-start-vs-control")]


def test_a_dry_run_check_is_not_refused_for_its_windows(shipped_interval: str, tmp_path: Path) -> None:
    policy = tmp_path / "p.yaml"
    policy.write_text(yaml.safe_dump({"steps": [1, "100%"], "analysis": {"checks": [
        {"name": "tried", "query": 'sum(kubelet_evictions{node=~"{{nodes}}"})', "condition": "< 1",
         "noData": "pass", "interval": "5s", "dryRun": True},
        {"name": "gating", "query": 'sum(kubelet_evictions{node=~"{{nodes}}"})', "condition": "< 1",
         "noData": "pass", "interval": "29s"}]}}))
    problems = probe(source(shipped_interval), load_policy(policy))
    assert len(problems) == 1 and "check gating " in problems[0] and "30s" in problems[0], problems


def test_a_port_nothing_listens_on_is_out_of_reach_and_said_at_once() -> None:
    started = time.monotonic()
    problems = probe(source(f"http://127.0.0.1:{free_port()}"), load_policy_ref("canary"))
    assert len(problems) == 1 and "out of reach" in problems[0], problems
    assert time.monotonic() - started < 5


@contextlib.contextmanager
def web_server(status: int) -> Iterator[str]:
    """A web server that is no Prometheus: a page at /, ``status`` for anything else."""

    class Page(BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802
            self.send_response(200 if self.path == "/" else status)
            self.end_headers()
            self.wfile.write(b"<html>Prefect</html>" if self.path == "/" else b"no")

        def log_message(self, *args: Any) -> None:
            return None

    server = ThreadingHTTPServer(("127.0.0.1", 0), Page)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


def test_a_web_server_that_is_not_a_prometheus_is_named_so() -> None:
    with web_server(404) as url:
        problems = probe(source(url), load_policy_ref("canary"))
    assert len(problems) == 1 and "does not answer as a Prometheus does" in problems[0] and "404" in problems[0], problems


def test_a_refusal_of_our_credentials_and_a_token_file_we_cannot_read_say_which_flag(shipped_interval: str,
                                                                                   tmp_path: Path) -> None:
    with web_server(401) as url:
        problems = probe(source(url), load_policy_ref("canary"))
    assert len(problems) == 1 and "401" in problems[0] and "--prometheus-token-file" in problems[0], problems
    unreadable = PrometheusClient(PrometheusSettings(address=shipped_interval, token_file=str(tmp_path / "gone")))
    problems = probe(unreadable, load_policy_ref("canary"))
    assert len(problems) == 1 and problems[0].startswith("cannot read the Prometheus token file"), problems


def test_a_prometheus_that_scrapes_no_kubelet_is_refused(tmp_path: Path) -> None:
    """Its only target has no `node` label: the checks' node=~"..." selectors would find nothing."""
    with prometheus(tmp_path, interval="1s", targets=[{"targets": [f"127.0.0.1:{free_port()}"]}]) as url:
        problems = probe(source(url), load_policy_ref("canary"))
    assert len(problems) == 1 and "scrapes no kubelet" in problems[0] and "`node` label" in problems[0], problems


def test_a_prometheus_whose_kubelets_are_all_down_is_refused_with_the_scrape_error(tmp_path: Path) -> None:
    closed = free_port()
    with prometheus(tmp_path, interval="1s", targets=[{"targets": [f"127.0.0.1:{closed}"],
                                                        "labels": {"node": "node-1"}}]) as url:
        problems = probe(source(url), load_policy_ref("canary"))
    assert len(problems) == 1 and "none of the 1 kubelet targets" in problems[0], problems
    assert "node-1" in problems[0] and "connection refused" in problems[0], problems


def test_kubelets_whose_last_scrapes_failed_after_they_were_up_are_not_refused(tmp_path: Path) -> None:
    """Before: a loaded machine timed out one round of the demo's fast scrapes just as `rollout demo`
    asked, every target read down, and the demo exited 2 ("none of the 12 kubelet targets ... is
    up"). A kubelet up within the last minutes is scraped; one never up is not (above)."""
    with metrics_server() as (port, stop):
        with prometheus(tmp_path, interval="1s", targets=[{"targets": [f"127.0.0.1:{port}"],
                                                            "labels": {"node": "node-1"}}]) as url:
            assert [t["health"] for t in _active(url)] == ["up"]
            stop()
            deadline = time.monotonic() + 30
            while [t["health"] for t in _active(url)] != ["down"]:
                assert time.monotonic() < deadline, "the target never read down"
                time.sleep(0.2)
            assert probe(source(url), load_policy_ref("canary")) == []


@contextlib.contextmanager
def metrics_server() -> Iterator[tuple[int, Any]]:
    """A kubelet's /metrics, as far as a scrape cares; yields its port and a function that stops it."""

    class Metrics(BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802
            self.send_response(200)
            self.send_header("Content-Type", "text/plain; version=0.0.4")
            self.end_headers()
            self.wfile.write(b"kubelet_running_pods 3\n")

        def log_message(self, *args: Any) -> None:
            return None

    server = ThreadingHTTPServer(("127.0.0.1", 0), Metrics)
    threading.Thread(target=server.serve_forever, daemon=True).start()

    def stop() -> None:
        server.shutdown()
        server.server_close()

    try:
        yield server.server_address[1], stop
    finally:
        with contextlib.suppress(OSError):
            server.server_close()


def test_a_policy_without_checks_asks_nothing() -> None:
    assert probe(source(f"http://127.0.0.1:{free_port()}"), load_policy_ref("fast")) == []


def test_the_refusal_names_the_flag_and_how_to_fix_it(shipped_interval: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """Before: a wrong --prometheus was found only after the canary was written, and the hint of a
    missing one said to fix the policy file."""
    monkeypatch.delenv("KUBELET_ROLLOUT_PROMETHEUS_URL", raising=False)
    with pytest.raises(FlagError) as missing:
        ready_metrics_source(load_policy_ref("canary"))
    assert missing.value.source == "--prometheus" and "policy file" not in missing.value.advice
    assert "KUBELET_ROLLOUT_PROMETHEUS_URL" in missing.value.advice and "rollout prometheus" in missing.value.advice
    with pytest.raises(FlagError) as short:
        ready_metrics_source(load_policy_ref("canary").rehearsal(20), address=shipped_interval)
    assert short.value.source == "--prometheus"
    assert len(short.value.problems) == len(load_policy_ref("canary").analysis.gating) == 10
    assert ready_metrics_source(load_policy_ref("canary"), address=shipped_interval) is not None
    assert ready_metrics_source(load_policy_ref("canary").rehearsal(20), address=shipped_interval, probed=False)


@pytest.mark.parametrize("content", ["kind: KubeletConfiguration\n", None], ids=["not a certificate", "missing"])
def test_a_ca_file_that_holds_no_certificate_is_one_clear_refusal(tmp_path: Path, content: str | None) -> None:
    """Found by the flag-boundary walk: a YAML file given as --prometheus-ca-file raised an
    SSLError out of `rollout plan` and `validate` (a traceback, exit 1)."""
    ca = tmp_path / "ca.yaml"
    if content is not None:
        ca.write_text(content)
    with pytest.raises(FlagError) as refused:
        ready_metrics_source(load_policy_ref("canary"), address="http://127.0.0.1:9", ca_file=str(ca), probed=False)
    assert str(ca) in str(refused.value) and "--prometheus-ca-file" in str(refused.value)
