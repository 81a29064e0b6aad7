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

from rollout_cli.local.processes import free_port  # noqa: E402
from rollout_cli.local.prometheus import LocalPrometheus  # noqa: E402

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
    for check in ("evictions", "allocatable-pods-vs-control", "allocatable-memory-vs-control",
                  "image-pull-backoffs-vs-control", "pod-start-vs-control", "pleg-relist-vs-control",
                  "image-removals-vs-control", "log-reopens-vs-control", "container-restarts"):
        assert f"check {check} measures windows from 3s (its interval, x20 rehearsal)" in done.stderr, done.stderr
    assert "every 15s" in done.stderr and "rollout prometheus --time-scale 20" in done.stderr
    assert writes(cluster)[before:] == []


# ------------------------------------------------------------------------------ rollout prometheus


class Served:
    """`rollout prometheus ...` (or `... sd`) started as a terminal starts a foreground job: in a
    process group of its own, which a Ctrl-C signals as a whole."""

    def __init__(self, *args: str, env: dict[str, str], ready: str) -> None:
        self.proc = subprocess.Popen([sys.executable, "-m", "rollout_cli", *args], cwd=ROOT, env=env,
                                     stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                     start_new_session=True)
        assert self.proc.stdout is not None
        self.first = ""
        deadline = time.monotonic() + 120
        for line in self.proc.stdout:
            if line.startswith(ready):
                self.first = line
                break
            assert time.monotonic() < deadline, f"no {ready!r} line within 120 s"
        assert self.first, f"ended without {ready!r}: {self.proc.wait(10)} {self.proc.stderr.read() if self.proc.stderr else ''}"
        self.said = dict(word.split("=", 1) for word in self.first.split()[2:] if "=" in word)

    def children(self) -> list[int]:
        return [int(p.parent.name) for p in Path("/proc").glob("[0-9]*/stat")
                if _field(p, 1) == str(self.proc.pid)]

    def ctrl_c(self, timeout: float = 30) -> tuple[int, str, float]:
        """SIGINT to the whole process group, as a terminal's Ctrl-C; (exit code, stderr, seconds)."""
        started = time.monotonic()
        os.killpg(self.proc.pid, 2)
        _, stderr = self.proc.communicate(timeout=timeout)
        return self.proc.returncode, stderr, time.monotonic() - started

    def end(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(10)


def _field(stat: Path, index: int) -> str:
    try:
        return stat.read_text().rsplit(")", 1)[1].split()[index]
    except (OSError, IndexError):
        return ""


def _alive(pid: int) -> bool:
    state = _field(Path(f"/proc/{pid}/stat"), 0)
    return bool(state) and state != "Z"


def _query(url: str, promql: str) -> list[dict[str, Any]]:
    import json
    import urllib.parse
    import urllib.request

    with urllib.request.urlopen(f"{url}/api/v1/query?" + urllib.parse.urlencode({"query": promql}), timeout=10) as r:
        return list(json.loads(r.read())["data"]["result"])


def test_one_command_gives_a_rehearsal_a_prometheus_that_measures_and_ctrl_c_ends_it(cluster: Any,
                                                                                     tmp_path: Path) -> None:
    """Before: no command started one (`python -m rollout_cli.local.prometheus --help` printed
    nothing); a Prometheus set up from the shipped 15 s file gave a x20 rehearsal's checks no data."""
    env = environment(tmp_path)
    served = Served("prometheus", "--kubeconfig", str(cluster.kubeconfig), "--port", "0", "--time-scale", "20",
                    env=env, ready="prometheus ready:")
    try:
        url = served.said["url"]
        nodes = set(sc.nodes(sc.gateway(cluster)))
        assert served.said["scrape_interval"] == "750ms" and served.said["up"] == str(len(nodes)), served.first
        prometheus = next(p for p in served.children()
                          if b"/usr/bin/prometheus" in Path(f"/proc/{p}/cmdline").read_bytes())
        assert os.getsid(prometheus) != os.getsid(served.proc.pid), "a Ctrl-C to the terminal would reach it"
        assert {r["metric"]["node"] for r in _query(url, 'up{job="kubelet"} == 1')} == nodes
        data = next(part for part in Path(f"/proc/{prometheus}/cmdline").read_bytes().decode().split("\0")
                    if part.startswith("--storage.tsdb.path=")).split("=", 1)[1]
        # the shipped canary, rehearsed at x20 against it, measures every check on real data
        done = rollout("start", "-c", str(config_file(cluster, tmp_path, 73)), "--name", "one-command",
                       "--time-scale", "20", "--kubeconfig", str(cluster.kubeconfig),
                       env={**env, "KUBELET_ROLLOUT_PROMETHEUS_URL": url}, timeout=600)
        assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
        status = rollout("status", "one-command", "--kubeconfig", str(cluster.kubeconfig), "-o", "json", env=env)
        import json

        analysis = json.loads(status.stdout)["analysis"]
        first = {c["name"]: c["measurements"][-1] for c in analysis[0]["checks"]}
        assert all(m["verdict"] == "pass" and not m.get("noData") for m in first.values()), first
        code, stderr, took = served.ctrl_c()
    finally:
        served.end()
    assert code == 0 and took < 30, (code, took, stderr)  # a hang guard: about 1 s here
    assert "Traceback" not in stderr and "stopped" in stderr, stderr
    assert not _alive(prometheus), "Prometheus outlived the command"
    assert not Path(data).exists(), "its data was left behind"


def test_it_refuses_a_taken_port_and_credentials_that_cannot_list_nodes(cluster: Any, tmp_path: Path) -> None:
    import socket

    env = environment(tmp_path)
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        done = rollout("prometheus", "--kubeconfig", str(cluster.kubeconfig), "--port", str(port), env=env)
    assert done.returncode == 2 and f"--port: port {port} of 127.0.0.1 is taken" in done.stderr, done.stderr
    nobody = cluster.service_account_kubeconfig("nobody", "default")
    done = rollout("prometheus", "--kubeconfig", str(nobody), "--port", "0", env=env)
    assert done.returncode == 3 and "cannot list the nodes" in done.stderr and "403" in done.stderr, done.stderr
    assert "prometheus-rbac.yaml" in done.stderr and "Traceback" not in done.stderr


def test_it_refuses_credentials_that_list_the_nodes_but_cannot_scrape_them(cluster: Any, tmp_path: Path) -> None:
    """Nodes listed, every scrape refused (no get on nodes/proxy): one error with the scrape's
    answer, exit 3."""
    lister = tmp_path / "lister.yaml"
    lister.write_text("""\
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata: {name: node-lister}
rules: [{apiGroups: [""], resources: [nodes], verbs: [list, watch]}]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata: {name: node-lister}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: node-lister}
subjects: [{kind: ServiceAccount, name: node-lister, namespace: default}]
""")
    applied = subprocess.run(["kubectl", "--kubeconfig", str(cluster.kubeconfig), "apply", "-f", str(lister)],
                             capture_output=True, text=True, timeout=60)
    assert applied.returncode == 0, applied.stderr
    kubeconfig = cluster.service_account_kubeconfig("node-lister", "default")
    done = rollout("prometheus", "--kubeconfig", str(kubeconfig), "--port", "0", "--time-scale", "20",
                   env=environment(tmp_path), timeout=180)
    assert done.returncode == 3, done.stdout + done.stderr
    assert "Prometheus could scrape none of the" in done.stderr and "403" in done.stderr, done.stderr
    assert "nodes/proxy" in done.stderr and "Traceback" not in done.stderr


def test_the_shipped_http_sd_file_scrapes_the_cluster_through_rollout_prometheus_sd(cluster: Any,
                                                                                    tmp_path: Path) -> None:
    """Any Prometheus, any cluster: the discovery endpoint alone, and the shipped file with the
    values its comment asks for put in (the API server, the CA, the scraping ServiceAccount's
    token), as a person sets up their own."""
    import base64
    import shutil

    import yaml

    env = environment(tmp_path)
    scraper = yaml.safe_load(sc.scraper_kubeconfig(cluster).read_text())
    (tmp_path / "ca.crt").write_bytes(base64.b64decode(scraper["clusters"][0]["cluster"]["certificate-authority-data"]))
    (tmp_path / "token").write_text(scraper["users"][0]["user"]["token"])
    server = scraper["clusters"][0]["cluster"]["server"].removeprefix("https://")
    sd_port, prom_port = free_port(), free_port()
    served = Served("prometheus", "sd", "--kubeconfig", str(sc.scraper_kubeconfig(cluster)), "--listen",
                    f"127.0.0.1:{sd_port}", env=env, ready="node discovery ready:")
    text = (ROOT / "deployments/prometheus/prometheus-http-sd.yml").read_text()
    text = (text.replace("/etc/prometheus/kubernetes-ca.crt", str(tmp_path / "ca.crt"))
            .replace("/etc/prometheus/kubelet-rollout-prometheus.token", str(tmp_path / "token"))
            .replace("API_SERVER", server).replace("127.0.0.1:9101", f"127.0.0.1:{sd_port}")
            .replace("scrape_interval: 15s", "scrape_interval: 1s").replace("scrape_timeout: 10s", "scrape_timeout: 1s")
            .replace("refresh_interval: 30s", "refresh_interval: 2s"))
    (tmp_path / "prometheus.yml").write_text(text)
    binary = shutil.which("prometheus")
    assert binary is not None
    prom = subprocess.Popen([binary, f"--config.file={tmp_path / 'prometheus.yml'}",
                             f"--storage.tsdb.path={tmp_path / 'data'}", f"--web.listen-address=127.0.0.1:{prom_port}",
                             "--log.level=warn"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            start_new_session=True)
    try:
        nodes = set(sc.nodes(sc.gateway(cluster)))
        assert served.said["nodes"] == str(len(nodes))
        deadline = time.monotonic() + 90
        up: set[str] = set()
        while up != nodes:
            assert time.monotonic() < deadline, f"scraped {sorted(up)} of {sorted(nodes)} within 90 s"
            time.sleep(0.5)
            try:
                up = {r["metric"]["node"] for r in _query(f"http://127.0.0.1:{prom_port}", 'up{job="kubelet"} == 1')}
            except OSError:
                continue
        code, stderr, took = served.ctrl_c()
    finally:
        prom.terminate()
        prom.wait(15)
        served.end()
    assert code == 0 and took < 30 and "Traceback" not in stderr, (code, took, stderr)


def test_ctrl_c_typed_in_a_terminal_as_soon_as_the_url_shows_ends_it_with_exit_0(cluster: Any, tmp_path: Path) -> None:
    """In a real terminal (a pty: the keyboard's ^C becomes SIGINT to the foreground process
    group). Before: a Ctrl-C typed the moment the URL showed could end it with 130, as if it had
    been interrupted while starting."""
    import contextlib
    import pty
    import select

    pid, terminal = pty.fork()
    if pid == 0:  # the child: the command in the foreground of its terminal, as a shell runs it
        os.chdir(ROOT)
        os.execve(sys.executable, [sys.executable, "-m", "rollout_cli", "prometheus", "--kubeconfig",
                                   str(cluster.kubeconfig), "--port", "0", "--time-scale", "20"],
                  environment(tmp_path))
    screen, ended = b"", 0
    try:
        deadline = time.monotonic() + 120
        while b"Ctrl-C stops it" not in screen:
            assert time.monotonic() < deadline, screen.decode(errors="replace")
            if select.select([terminal], [], [], 1)[0]:
                screen += os.read(terminal, 4096)
        typed = time.monotonic()
        os.write(terminal, b"\x03")  # the keyboard's Ctrl-C
        while True:
            done, ended = os.waitpid(pid, os.WNOHANG)
            if done:
                break
            assert time.monotonic() - typed < 10, "still running 10 s after Ctrl-C"
            if select.select([terminal], [], [], 0.2)[0]:
                with contextlib.suppress(OSError):
                    screen += os.read(terminal, 4096)
        with contextlib.suppress(OSError):
            while select.select([terminal], [], [], 0.2)[0]:
                chunk = os.read(terminal, 4096)
                if not chunk:
                    break
                screen += chunk
    finally:
        with contextlib.suppress(ChildProcessError, ProcessLookupError):
            if not os.waitpid(pid, os.WNOHANG)[0]:
                os.kill(pid, 9)
                os.waitpid(pid, 0)
        os.close(terminal)
    shown = screen.decode(errors="replace")
    assert os.waitstatus_to_exitcode(ended) == 0, shown
    assert "stopped: the Prometheus at" in shown and "Traceback" not in shown, shown
