"""A fleet's Prefect side on one machine: a real Prefect server, the deployments, a work pool and a
process worker per cluster, each worker given only its own cluster's kubeconfig.

Used by ``rollout demo --fleet``, the fleet tests and ``bench/fleet_scale.py``; the README's
Fleet section shows the same topology by hand. Every process is started here, in a session of its
own (``rollout_cli.local.processes.start_helper``: a terminal's Ctrl-C does not reach it, and it
is ended once the process that started it is gone, even by ``kill -9``), and stopped by its pid
(a worker before the server: a worker whose server is gone ignores SIGTERM).

Liveness is Prefect's: each flow run's process sends a heartbeat every 30 s (the least Prefect
allows) and the zombie-run automation of ``deployments/zombie-runs.yaml``, created here as the
README has a person create it, marks a run Crashed after 90 s without one; the fleet then
schedules it again. Workers poll every 2 s (Prefect's default: 10 s), so a run scheduled again is
picked up within seconds, and heartbeat at Prefect's default (30 s): nothing of ours reads a
worker's liveness, and each poll and heartbeat is a write the server (one per cluster) serves.

The server's database is a SQLite file (Prefect's default), or with ``database="postgres"`` a
PostgreSQL of its own on loopback (``rollout_cli.local.postgres``): what a fleet of ten needs.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import flows
from rollout_cli.local.postgres import LocalPostgres
from rollout_cli.local.processes import descendants, free_port, start_helper, stop_process, stop_process_tree

PREFECT = [sys.executable, "-m", "prefect"]
FLEET_POOL = "kubelet-rollout-fleet"  # the fleet flow's own pool: its workers hold no cluster credentials
# the package's root, so a worker anywhere imports the flows' module entrypoints
PACKAGE_ROOT = str(Path(flows.__file__).resolve().parents[1])
FAST_LIVENESS = {
    "PREFECT_WORKER_QUERY_SECONDS": "2",
    "PREFECT_FLOWS_HEARTBEAT_FREQUENCY": "30",  # a run's own, to Prefect (deployments/zombie-runs.yaml)
    "KUBELET_ROLLOUT_PROGRESS_HEARTBEAT_SECONDS": "3",  # where a cluster's rollout stands, for the screens
}
# Prefect's defaults for workers (a heartbeat every 30 s), workers still polling every second: what a
# loaded machine needs, where a SQLite server under ten clusters' runs stalls one worker's writes
# for a minute (the benchmark)
DEFAULT_LIVENESS = {"PREFECT_WORKER_QUERY_SECONDS": "1", "PREFECT_FLOWS_HEARTBEAT_FREQUENCY": "30"}
LEASE_STORAGE = "prefect.server.concurrency.lease_storage.filesystem"
ZOMBIE_AUTOMATION = Path(flows.__file__).resolve().parents[1] / "deployments" / "zombie-runs.yaml"
LIVENESS = FAST_LIVENESS  # what every process of the stack gets (the benchmark chooses)
DEPLOYMENTS = (  # (flow module:function, deployment name): what deployments/prefect.yaml deploys
    ("flows.rollout_flow:kubelet_config_rollout", "rollout"),
    ("flows.rollback_flow:kubelet_config_rollback", "rollback"),
    ("flows.fleet.flow:kubelet_config_fleet_rollout", "fleet"),
    ("flows.fleet.identity:kubelet_config_cluster_identity", "identity"),
)


def clean_env(**extra: str) -> dict[str, str]:
    """This process's environment without any Prefect setting or cluster credential, plus ``extra``."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("PREFECT_") and k != "KUBECONFIG"}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [PACKAGE_ROOT, os.environ.get("PYTHONPATH")]))
    env.update({"PREFECT_SERVER_ANALYTICS_ENABLED": "false", "PREFECT_SERVER_LOGGING_LEVEL": "WARNING",
                **LIVENESS, **extra})
    return env


def kill_tree(pid: int) -> None:
    """``kill -9`` a process and every process it started (a worker and its flow runs: a pod lost)."""
    for child in descendants(pid):
        with contextlib.suppress(ProcessLookupError):
            os.kill(child, signal.SIGKILL)
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGKILL)


@dataclass
class PrefectServer:
    """``prefect server start`` on a free loopback port, its database copied from the template, or
    the PostgreSQL database at ``database_url`` (migrated when the server starts)."""

    home: Path
    port: int = 0
    proc: subprocess.Popen[Any] | None = None
    database_url: str = ""

    def __post_init__(self) -> None:
        # the server runs in ``home`` and finds its database and PREFECT_HOME by these paths: a
        # relative one would be resolved twice ("unable to open database file")
        self.home = self.home.resolve()

    @property
    def api_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/api"

    def env(self, **extra: str) -> dict[str, str]:
        """The environment of a process that talks to this server (a worker, the CLI)."""
        return clean_env(PREFECT_API_URL=self.api_url, PREFECT_HOME=str(self.home / "client"), **extra)

    def start(self, timeout: float = 90) -> PrefectServer:
        from rollout_cli.local.prefect_home import template_db

        self.home.mkdir(parents=True, exist_ok=True)
        if self.database_url:
            database = {"PREFECT_SERVER_DATABASE_CONNECTION_URL": self.database_url}
        else:
            db = self.home / "prefect.db"
            if not db.exists():
                shutil.copyfile(template_db(), db)
            database = {"PREFECT_SERVER_DATABASE_CONNECTION_URL": f"sqlite+aiosqlite:///{db}",
                        "PREFECT_SERVER_DATABASE_MIGRATE_ON_START": "false"}
        self.port = self.port or free_port()
        # concurrency leases (a fleet's disruption budget) kept on disk: a server started again
        # still knows who holds which slot (Prefect's default keeps them in memory, and slots
        # taken before a restart would then be held for good)
        env = clean_env(PREFECT_HOME=str(self.home), PREFECT_API_URL=self.api_url,
                        PREFECT_SERVER_CONCURRENCY_LEASE_STORAGE=LEASE_STORAGE, **database)
        with open(self.home / "server.log", "ab") as log:
            self.proc = start_helper([*PREFECT, "server", "start", "--host", "127.0.0.1", "--port", str(self.port)],
                                     env=env, cwd=self.home, stdout=log, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"prefect server exited ({self.proc.returncode}); see {self.home / 'server.log'}")
            with contextlib.suppress(OSError):
                with urllib.request.urlopen(f"{self.api_url}/health", timeout=2) as answer:
                    if answer.status == 200:
                        return self
            time.sleep(0.3)
        raise RuntimeError(f"prefect server never became healthy; see {self.home / 'server.log'}")

    def stop(self) -> None:
        if self.proc is not None:
            stop_process(self.proc, signal.SIGTERM)
            self.proc = None

    def post(self, path: str, body: Mapping[str, Any]) -> Any:
        request = urllib.request.Request(f"{self.api_url}{path}", data=json.dumps(body).encode(), method="POST",
                                         headers={"content-type": "application/json"})
        # SQLite makes a busy server wait up to 60 s for its write lock: wait longer than that
        with urllib.request.urlopen(request, timeout=90) as answer:
            return json.loads(answer.read())


@dataclass
class Worker:
    """A process worker on one pool; ``env`` is all it holds (a cluster's KUBECONFIG, or nothing)."""

    pool: str
    name: str
    env: dict[str, str]
    logs: Path
    proc: subprocess.Popen[Any] | None = None

    def __post_init__(self) -> None:
        self.logs = self.logs.resolve()  # its working directory

    def start(self) -> Worker:
        self.logs.mkdir(parents=True, exist_ok=True)
        with open(self.logs / f"{self.name}.log", "ab") as log:
            self.proc = start_helper([*PREFECT, "worker", "start", "--pool", self.pool, "--name", self.name,
                                      "--type", "process"], stop_signal=signal.SIGINT, env=self.env, cwd=self.logs,
                                     stdout=log, stderr=subprocess.STDOUT)
        return self

    def kill(self) -> None:
        """A worker lost with its machine: it and its flow runs' processes, ``kill -9``."""
        if self.proc is not None:
            kill_tree(self.proc.pid)
            self.proc.wait(timeout=10)
            self.proc = None

    def stop(self) -> None:
        """Stopped as a person stops it (Ctrl-C), and its flow runs' processes with it."""
        if self.proc is not None:
            stop_process_tree(self.proc, signal.SIGINT)
            self.proc = None


def create_zombie_automation(server: PrefectServer, spec: Path = ZOMBIE_AUTOMATION) -> None:
    """``prefect automation create --from-file deployments/zombie-runs.yaml``, as the README shows."""
    done = subprocess.run([*PREFECT, "automation", "create", "--from-file", str(spec)], env=server.env(),
                          capture_output=True, text=True, timeout=120)
    if done.returncode != 0:
        raise RuntimeError(f"prefect automation create failed: {done.stdout[-2000:]}{done.stderr[-2000:]}")


def create_pool(server: PrefectServer, pool: str) -> None:
    with contextlib.suppress(Exception):  # already there
        server.post("/work_pools/", {"name": pool, "type": "process"})


def deploy_prefect_yaml(server: PrefectServer, prefect_yaml: Path) -> None:
    """``prefect deploy --all`` of a checkout's ``deployments/prefect.yaml``, as the README shows."""
    done = subprocess.run([*PREFECT, "--no-prompt", "deploy", "--all", "--prefect-file", str(prefect_yaml)],
                          env=server.env(), cwd=prefect_yaml.parents[1], capture_output=True, text=True, timeout=180)
    if done.returncode != 0:
        raise RuntimeError(f"prefect deploy failed: {done.stdout[-2000:]}{done.stderr[-2000:]}")


def apply_deployments(server: PrefectServer, *, pool: str = "kubelet-rollout") -> None:
    """The rollout, rollback and fleet deployments as ``deployments/prefect.yaml`` defines them
    (module entrypoints, no pull step), applied from the installed package in a child process."""
    script = (
        "import importlib, sys\n"
        "from prefect.deployments.runner import EntrypointType\n"
        "for entry, name, pool in (a.split('|') for a in sys.argv[1:]):\n"
        "    module, fn = entry.split(':')\n"
        "    flow = getattr(importlib.import_module(module), fn)\n"
        "    flow.to_deployment(name=name, work_pool_name=pool, entrypoint_type=EntrypointType.MODULE_PATH,\n"
        "                       tags=['kubelet-rollout']).apply()\n"
    )
    args = [f"{entry}|{name}|{FLEET_POOL if name == 'fleet' else pool}" for entry, name in DEPLOYMENTS]
    subprocess.run([sys.executable, "-c", script, *args], env=server.env(), check=True, capture_output=True,
                   timeout=180)


@dataclass
class FleetStack:
    """A Prefect server, the deployments, and a pool with one worker per cluster (plus the fleet's)."""

    workdir: Path
    kubeconfigs: Mapping[str, Path]  # cluster -> its kubeconfig: given to its worker, and only to it
    prefect_yaml: Path | None = None  # deploy this file (a checkout's); None: the same deployments, applied
    database: str = "sqlite"  # the server's: "sqlite" (Prefect's default) or "postgres" (a local PostgreSQL)
    server: PrefectServer = field(init=False)
    workers: dict[str, Worker] = field(default_factory=dict)
    postgres: LocalPostgres | None = field(init=False, default=None)

    def __post_init__(self) -> None:
        if self.database not in ("sqlite", "postgres"):
            raise ValueError(f"database must be 'sqlite' or 'postgres', not {self.database!r}")
        # every path here reaches a process that runs in a directory of its own
        self.workdir = self.workdir.resolve()
        self.kubeconfigs = {name: Path(path).resolve() for name, path in self.kubeconfigs.items()}
        self.server = PrefectServer(self.workdir / "prefect")

    @staticmethod
    def pool_of(cluster_name: str) -> str:
        return f"kubelet-rollout-{cluster_name}"

    def identity_of(self, cluster_name: str) -> dict[str, str]:
        """A cluster's ``identity`` block for the fleet file (``rollout fleet identify``)."""
        return identity_of(self.kubeconfigs[cluster_name])

    def start(self) -> FleetStack:
        if self.database == "postgres":
            self.postgres = LocalPostgres(self.workdir / "postgres").start()
            self.server.database_url = self.postgres.url
        self.server.start(timeout=180 if self.postgres else 90)  # a new PostgreSQL is migrated first
        for pool in ("kubelet-rollout", FLEET_POOL, *map(self.pool_of, self.kubeconfigs)):
            create_pool(self.server, pool)
        if self.prefect_yaml is not None:
            deploy_prefect_yaml(self.server, self.prefect_yaml)
        else:
            apply_deployments(self.server)
        create_zombie_automation(self.server)
        self.start_worker(None)
        for cluster in self.kubeconfigs:
            self.start_worker(cluster)
        return self

    def start_worker(self, cluster_name: str | None, *, name: str = "", kubeconfig: Path | None = None) -> Worker:
        """The worker of a cluster (its kubeconfig and nothing else; ``kubeconfig``: a miswired one,
        for tests), or the fleet's (none at all)."""
        held = kubeconfig or (self.kubeconfigs[cluster_name] if cluster_name else None)
        env = self.server.env(**({"KUBECONFIG": str(held)} if held else {}))
        pool = self.pool_of(cluster_name) if cluster_name else FLEET_POOL
        worker = Worker(pool=pool, name=name or f"{pool}-worker", env=env, logs=self.workdir / "workers").start()
        self.workers[cluster_name or ""] = worker
        return worker

    def stop(self) -> None:
        # all at once: each worker may take its graceful-stop timeout, and they are independent
        with ThreadPoolExecutor(max_workers=max(1, len(self.workers))) as stopping:
            list(stopping.map(Worker.stop, self.workers.values()))
        self.server.stop()
        if self.postgres is not None:
            self.postgres.stop()

    @contextlib.contextmanager
    def running(self) -> Iterator[FleetStack]:
        try:
            yield self.start()
        finally:
            self.stop()


def identity_of(kubeconfig: Path) -> dict[str, str]:
    """What identifies the cluster ``kubeconfig`` reaches, as a fleet file names it."""
    from rollout.gateway import open_gateway

    gateway = open_gateway(str(kubeconfig))
    try:
        return gateway.cluster_identity().given()
    finally:
        gateway.close()


@contextlib.contextmanager
def kubesim_clusters(workdir: Path, layouts: Mapping[str, str], *, time_scale: float,
                     **timings: Any) -> Iterator[dict[str, Any]]:
    """Several independent simulated clusters on this machine, one per cluster file text in
    ``layouts``: each serves on its own free port, with its own state dir and kubeconfig
    (``workdir/NAME/kubesim/kubeconfig``), PKI and tokens, so one's credentials open no other.
    The same as one ``kubesim up --state-dir DIR --kubeconfig FILE`` per cluster (docs/kubesim.md)."""
    from kubesim.cluster import Cluster

    clusters: dict[str, Any] = {}
    workdir = workdir.resolve()
    try:
        for name, text in layouts.items():
            (workdir / name).mkdir(parents=True, exist_ok=True)
            (workdir / name / "cluster.yaml").write_text(text)
            clusters[name] = Cluster(cluster_file=workdir / name / "cluster.yaml", state_dir=workdir / name / "kubesim",
                                     time_scale=time_scale, **timings).start()
        yield clusters
    finally:
        for cluster in clusters.values():
            cluster.stop()
