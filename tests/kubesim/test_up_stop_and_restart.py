"""``kubesim up`` as a rollout's cluster lives it: it stops within seconds of SIGTERM or Ctrl-C
while clients hold open watches (a running rollout watches nodes and Leases, ``kubectl get -w``
too), and restarted on the same state dir it serves on the same port again, so the clients of
the last run (their kubeconfigs, a Prometheus's config) reach it without being told anything."""

from __future__ import annotations

import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client, watch

from tests.conftest import api_client, wait_for
from tests.kubesim.kubectl_helpers import needs_kubectl

STOP_WITHIN_S = 10  # generous: the machine is shared; without watches it stops in about 1 s


class Up:
    """A ``kubesim up`` process in its own session (as a terminal's job would be)."""

    def __init__(self, state_dir: Path, kubeconfig: Path, name: str = "up"):
        self.kubeconfig = kubeconfig
        self.stderr = state_dir.parent / f"{name}.stderr"
        with open(self.stderr, "ab") as err:
            self.process = subprocess.Popen(
                [sys.executable, "-m", "kubesim", "up", "--nodes", "2", "--kubeconfig", str(kubeconfig),
                 "--state-dir", str(state_dir), "--time-scale", "60"],
                stdout=subprocess.PIPE, stderr=err, text=True, start_new_session=True)
        assert self.process.stdout is not None
        line = self.process.stdout.readline().strip()
        assert line.startswith("kubesim ready: server="), line + self.stderr.read_text()[-2000:]
        self.server = line.split("server=")[1].split()[0]

    def stop(self, sig: int) -> float:
        """Send ``sig``; the seconds until the process exited (or the test fails)."""
        started = time.monotonic()
        self.process.send_signal(sig)
        try:
            self.process.wait(timeout=STOP_WITHIN_S)
        except subprocess.TimeoutExpired:
            pytest.fail(f"kubesim up still running {STOP_WITHIN_S} s after {signal.Signals(sig).name}")
        return time.monotonic() - started

    def kill(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
            self.process.wait(timeout=10)


def _watch_in_background(kubeconfig: Path, list_call: str, *args: Any) -> threading.Event:
    """A watch held open as a rollout's informer holds it; set once its first event came."""
    seen = threading.Event()

    def run() -> None:
        api = api_client(kubeconfig)
        core = client.CoreV1Api(api) if list_call == "list_node" else client.CoordinationV1Api(api)
        try:
            for _ in watch.Watch().stream(getattr(core, list_call), *args, timeout_seconds=600):
                seen.set()
        except Exception:  # noqa: BLE001 - the server went away: what this test causes
            pass

    threading.Thread(target=run, daemon=True).start()
    return seen


@needs_kubectl
@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "SIGINT"])
def test_up_stops_within_seconds_while_clients_hold_watches(tmp_path: Path, sig: int) -> None:
    up = Up(tmp_path / "state", tmp_path / "kubeconfig")
    kubectl = None
    try:
        nodes = _watch_in_background(up.kubeconfig, "list_node")
        leases = _watch_in_background(up.kubeconfig, "list_namespaced_lease", "kube-node-lease")
        kubectl = subprocess.Popen(["kubectl", "--kubeconfig", str(up.kubeconfig), "get", "nodes", "--watch"],
                                   stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
        assert kubectl.stdout is not None
        assert kubectl.stdout.readline().startswith("NAME")
        wait_for(lambda: nodes.is_set() and leases.is_set(), timeout=30, what="both watches to see an event")
        took = up.stop(sig)
        assert up.process.returncode == 0, up.stderr.read_text()[-2000:]
        assert took < STOP_WITHIN_S
    finally:
        up.kill()
        if kubectl is not None:
            kubectl.kill()
            kubectl.wait(timeout=10)


def test_up_restarted_on_its_state_dir_serves_on_the_same_port_for_the_old_kubeconfig(tmp_path: Path) -> None:
    state = tmp_path / "state"
    first = Up(state, tmp_path / "kubeconfig")
    try:
        old_kubeconfig = tmp_path / "old-kubeconfig"  # what a running rollout or a Prometheus holds
        shutil.copyfile(first.kubeconfig, old_kubeconfig)
        before = client.CoreV1Api(api_client(old_kubeconfig)).read_node("node-1").metadata.uid
        first.stop(signal.SIGTERM)
    finally:
        first.kill()
    assert (state / "port").read_text().strip() == first.server.rsplit(":", 1)[1]

    second = Up(state, tmp_path / "kubeconfig", "second")
    try:
        assert second.server == first.server
        assert client.CoreV1Api(api_client(old_kubeconfig)).read_node("node-1").metadata.uid == before
    finally:
        second.kill()


def test_up_whose_last_port_is_taken_serves_on_another_and_says_so(tmp_path: Path) -> None:
    state = tmp_path / "state"
    first = Up(state, tmp_path / "kubeconfig")
    try:
        first.stop(signal.SIGTERM)
    finally:
        first.kill()
    port = int(first.server.rsplit(":", 1)[1])
    with socket.socket() as squatter:  # another program took the port meanwhile
        squatter.bind(("127.0.0.1", port))
        squatter.listen()
        second = Up(state, tmp_path / "kubeconfig", "second")
        try:
            assert second.server != first.server
            warning = second.stderr.read_text()
            assert f"port {port}, where this state dir's cluster served last, is taken" in warning
            assert f"serving on {second.server.rsplit(':', 1)[1]} instead" in warning
            assert client.CoreV1Api(api_client(second.kubeconfig)).read_node("node-1")  # the new kubeconfig works
            assert (state / "port").read_text().strip() == second.server.rsplit(":", 1)[1]
        finally:
            second.kill()
