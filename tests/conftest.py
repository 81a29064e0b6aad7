"""Shared fixtures: simulated clusters (kubesim) and clients that reach them the real way.

``kubesim_cluster(**kwargs)`` starts a :class:`kubesim.Cluster` (thread mode unless
``mode="process"``) and stops it at teardown; ``kubesim_cluster_module`` does the same once per
module for tests that can share one. Clients are the official ``kubernetes`` client over HTTPS
through the cluster's kubeconfig - never the store directly - so what the tests see is what
kubectl and the orchestrator see.
"""

from __future__ import annotations

import http.client
import json
import os
import resource
import ssl
import threading
import time
from pathlib import Path
from typing import Any, Callable, Iterator

import pytest
from hypothesis import settings

# High enough that a 10-minute trial takes 10 s; tests pass their own when they need another.
DEFAULT_TIME_SCALE = 60.0

# `make check` (the inner loop) runs every property on a small sample: HYPOTHESIS_PROFILE=check.
# A property that asks for its own number of examples asks through examples(), so the sample
# shrinks there too; `make test` runs the full numbers.
CHECK_EXAMPLES = 20
settings.register_profile("check", max_examples=CHECK_EXAMPLES)
HYPOTHESIS_PROFILE = os.environ.get("HYPOTHESIS_PROFILE", "default")
settings.load_profile(HYPOTHESIS_PROFILE)


def examples(full: int) -> int:
    """A property's ``max_examples``: ``full``, or at most the check profile's in `make check`."""
    return min(full, CHECK_EXAMPLES) if HYPOTHESIS_PROFILE == "check" else full


# What a test needs besides Python, as markers (pyproject.toml): `make check` leaves out whatever
# needs a kubesim, a Prefect API or a Prometheus. Known from the fixtures a test uses (directly or
# through another fixture), else from its folder or file, whose tests start them themselves
# (``scenario.cluster``, ``Cluster(...)``, `kubesim up`, a `rollout start` and its temporary server).
NEEDS_BY_FIXTURE = {"kubesim_cluster": "kubesim", "kubesim_cluster_module": "kubesim", "prefect_api": "prefect"}
EVERYTHING = ("kubesim", "prefect", "prometheus")
NEEDS_BY_PATH = {
    "tests/kubesim/": ("kubesim",),
    "tests/flows/": ("kubesim", "prefect"),
    "tests/rbac/": ("kubesim", "prefect"),
    "tests/flows/test_analysis.py": EVERYTHING,
    "tests/flows/test_modern.py": EVERYTHING,
    "tests/agent/test_agent_on_kubesim.py": ("kubesim",),
    "tests/cli/test_cli_on_kubesim.py": ("kubesim", "prefect"),
    "tests/cli/test_demo.py": EVERYTHING,
    "tests/cli/test_error_surface.py": ("kubesim", "prefect"),
    "tests/cli/test_first_hour_on_kubesim.py": ("kubesim", "prefect"),
    "tests/cli/test_flag_boundary.py": ("kubesim",),  # its last test counts the runs of the others
    "tests/cli/test_head_start.py": ("kubesim", "prefect"),
    "tests/cli/test_json_contract.py": ("kubesim", "prefect"),
    "tests/cli/test_kubectl_conventions.py": ("kubesim",),
    "tests/cli/test_no_leftovers.py": ("kubesim", "prefect"),
    "tests/cli/test_readme_runs.py": EVERYTHING,
    "tests/cli/test_demo_workdir.py": ("prefect",),
    "tests/cli/test_temporary_server_start.py": ("prefect",),
    "tests/cli/test_wheel.py": ("kubesim",),
    "tests/cli/test_watch_through_an_outage.py": ("kubesim", "prefect"),
    "tests/test_ui_check.py": ("kubesim", "prefect"),
}

# Where the suite's time goes, started first: pytest-xdist hands each worker whole files in this
# order (`make test` passes --no-loadscope-reorder: by default xdist starts the files with the
# most tests first, the core's quick property tests, and a long flow file began 16 minutes in).
# The longest files by name (a CI run's --durations, in minutes of wall time under load), then by
# folder; the run ends on many short files rather than with one worker still in a long one.
START_FIRST = (
    "tests/flows/test_fleet.py",  # 12 (a run stopped, and a worker killed, past Prefect's 90 s liveness bound)
    "tests/flows/test_modern.py",  # 9.5
    "tests/flows/test_drains_at_fleet_size.py",  # 6.7 (20 nodes, 20 agents, a Prometheus: one process)
    "tests/cli/test_terminal_ctrl_c.py",  # 6.7
    "tests/cli/test_readme_runs.py",  # 6
    "tests/flows/test_run_loop.py",  # 5.9
    "tests/cli/test_head_start.py",  # 5.4
    "tests/flows/test_deployments.py",  # 4.7
    "tests/cli/test_flag_boundary.py",  # 3.9
    "tests/flows/test_exit_codes.py",
    "tests/flows/test_late_and_gone.py",
    "tests/flows/test_lock_holders.py",
    "tests/cli/test_demo.py",
    "tests/flows/test_at_scale.py",
    "tests/cli/test_helper_sessions.py",
    "tests/core/test_input_fuzz.py",
    # 1-2 minutes each, in folders that start last: they ended the run 50 s after the other workers (ci-63)
    "tests/analysis/test_prometheus_cli.py", "tests/gateway/test_gw_kubesim.py", "tests/rbac/test_minimal.py",
    "tests/cli/test_watch_through_an_outage.py",
    "tests/core/test_analysis_compare.py",
    "tests/flows/", "tests/cli/", "tests/test_types.py", "tests/agent/", "tests/kubesim/", "tests/rbac/",
)


def pytest_configure(config: pytest.Config) -> None:
    """Build Prefect's migrated template database once, as xdist starts its workers: on a fresh
    machine (none in the temp dir) each worker's first Prefect API, and each `rollout` command its
    tests start, migrated its own at once (about 20 s of CPU each), and six at the run's start on
    two CPUs kept servers from answering within their bound (a CI run's 58 errors). Begun here, it
    holds the build's lock before any worker has imported its tests, so they wait for this one
    build (``template_db``) and collect meanwhile. Not for a selection without Prefect (`make check`)."""
    if hasattr(config, "workerinput") or "not prefect" in (config.option.markexpr or ""):
        return
    from rollout_cli.local.prefect_home import template_db

    threading.Thread(target=template_db, name="prefect-template-db", daemon=True).start()


# Where the suite's CPU goes (CI has two CPUs and 20 minutes): with ROLLOUT_TEST_CPU_LOG set to a
# file, each test appends its nodeid, wall seconds and CPU seconds (this process's threads and the
# children it waited for: a subprocess's `rollout`, a server a fixture stopped), when it ended and
# on which xdist worker, as a JSON line.
# `bench/suite_cpu.py` sums them by file (a child dropped unwaited counts where a later Popen reaps it).
CPU_LOG = os.environ.get("ROLLOUT_TEST_CPU_LOG")


def _cpu_seconds() -> float:
    own, children = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None) -> Iterator[None]:
    if not CPU_LOG:
        yield
        return
    wall, cpu = time.monotonic(), _cpu_seconds()
    yield
    line = {"test": item.nodeid, "wall": round(time.monotonic() - wall, 2), "cpu": round(_cpu_seconds() - cpu, 2),
            "end": round(time.time(), 2), "worker": os.environ.get("PYTEST_XDIST_WORKER", "")}
    with open(CPU_LOG, "a") as log:
        log.write(json.dumps(line) + "\n")


@pytest.hookimpl(tryfirst=True)  # marked before `-m` selects
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        for marker in _needs(item):
            item.add_marker(marker)

    def rank(item: pytest.Item) -> int:
        return next((i for i, prefix in enumerate(START_FIRST) if item.nodeid.startswith(prefix)),
                    len(START_FIRST))

    items.sort(key=rank)  # stable: in each group, the collection order


def _needs(item: pytest.Item) -> set[str]:
    needs = {NEEDS_BY_FIXTURE[name] for name in getattr(item, "fixturenames", ()) if name in NEEDS_BY_FIXTURE}
    for path, markers in NEEDS_BY_PATH.items():
        if item.nodeid.startswith(path):
            needs.update(markers)
    return needs


class _ClusterFactory:
    def __init__(self, tmp_path_factory: pytest.TempPathFactory):
        self._tmp = tmp_path_factory
        self.clusters: list[Any] = []

    def __call__(self, nodes: int = 3, **kwargs: Any) -> Any:
        from kubesim import Cluster

        kwargs.setdefault("time_scale", DEFAULT_TIME_SCALE)
        kwargs.setdefault("state_dir", self._tmp.mktemp("kubesim"))
        kwargs.setdefault("ready_timeout", 120)
        cluster = Cluster(nodes, **kwargs).start()
        self.clusters.append(cluster)
        return cluster

    def stop_all(self) -> None:
        while self.clusters:
            self.clusters.pop().stop()


@pytest.fixture
def kubesim_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Callable[..., Any]]:
    """Factory: ``cluster = kubesim_cluster(nodes=3, time_scale=60, trial_period="10m")``."""
    factory = _ClusterFactory(tmp_path_factory)
    yield factory
    factory.stop_all()


@pytest.fixture(scope="module")
def kubesim_cluster_module(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Callable[..., Any]]:
    """The same factory, but clusters live for the whole test module."""
    factory = _ClusterFactory(tmp_path_factory)
    yield factory
    factory.stop_all()


def api_client(kubeconfig: str | Path) -> Any:
    """A ``kubernetes.client.ApiClient`` for a kubeconfig (the admin one or a node's)."""
    from kubernetes import config

    return config.new_client_from_config(config_file=str(kubeconfig))


def raw_request(
    kubeconfig: str | Path,
    method: str,
    path: str,
    body: bytes | dict | list | None = None,
    headers: dict[str, str] | None = None,
    token: str | None = None,
) -> tuple[int, dict[str, str], bytes]:
    """One HTTPS request with full control over headers and body: ``(status, headers, body)``.

    ``http.client`` rather than urllib: urllib invents a form Content-Type for bodies.
    """
    from urllib.parse import urlsplit

    from kubesim.kubeconfig import read

    info = read(Path(kubeconfig))
    data = json.dumps(body).encode() if isinstance(body, (dict, list)) else body
    url = urlsplit(info.server)
    context = ssl.create_default_context(cadata=info.ca_pem.decode())
    conn = http.client.HTTPSConnection(url.hostname, url.port, context=context, timeout=30)
    all_headers = dict(headers or {})
    if token != "":
        all_headers["Authorization"] = f"Bearer {token or info.token}"
    try:
        conn.request(method, path, body=data, headers=all_headers)
        response = conn.getresponse()
        return response.status, dict(response.getheaders()), response.read()
    finally:
        conn.close()


def wait_for(condition: Callable[[], Any], timeout: float = 20.0, interval: float = 0.2, what: str = "") -> Any:
    """Poll ``condition`` until it returns something truthy (bounded); return that value. A poll is
    usually a request to a kubesim in this process: five a second, not twenty, leave the CPU to
    what is being waited for (a test catching a shorter state passes its own ``interval``)."""
    deadline = time.monotonic() + timeout
    last_error: Exception | None = None
    while time.monotonic() < deadline:
        try:
            value = condition()
            if value:
                return value
        except Exception as exc:  # noqa: BLE001 - keep polling, report the last error
            last_error = exc
        time.sleep(interval)
    raise AssertionError(
        f"timed out waiting for {what or condition}" + (f" (last error: {last_error})" if last_error else "")
    )


@pytest.fixture(scope="session")
def prefect_api(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """One private Prefect API per test process (``rollout_cli.local.prefect_home.ephemeral_prefect``:
    a template-DB copy served by Prefect's subprocess server, heartbeats off, ``PREFECT_HOME`` in a
    temp dir). One, not one per folder: two session APIs in one process left this process's client
    on the last one entered while a test handed its subprocesses the other."""
    from rollout_cli.local.prefect_home import ephemeral_prefect

    with ephemeral_prefect(tmp_path_factory.mktemp("prefect-home")) as url:
        yield url
