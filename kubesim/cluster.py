"""Wiring: one asyncio loop running the API server, its HTTPS front end, the kubelets and the
node lifecycle controller - plus :class:`Cluster`, the Python API (context manager / fixture).

``run_cluster`` is what ``kubesim up`` runs. :class:`Cluster` runs the same thing either on a
background thread of the calling process (``mode="thread"``, fast, the default for tests) or as a
``python -m kubesim up`` child process (``mode="process"``, so a test can ``kill -9`` it and
restart on the same state dir). Either way clients reach it only through the kubeconfig, and
faults go through the admin endpoint ``/kubesim/v1/faults``.
"""

from __future__ import annotations

import asyncio
import logging
import os
import re
import signal
import subprocess
import sys
import tempfile
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Coroutine

from kubesim import kubeconfig as kubeconfig_mod
from kubesim.apiserver import ApiServer
from kubesim.apiserver.client import local_client
from kubesim.apiserver.http import HttpFrontend
from kubesim.apiserver.server import node_token, read_secrets
from kubesim.clusterfile import ClusterFile, NodeSpec, Workload, default_cluster, expand, load_cluster_file
from kubesim.controllers import CONTROLLER_USER, DisruptionController, publish_root_ca
from kubesim.faultclient import FaultClient
from kubesim.faults import Faults
from kubesim.host.client import Host
from kubesim.informers import Informers
from kubesim.kubelet.apipods import PodWorkers
from kubesim.owners import OwnerController
from kubesim.pki import Pki, ensure_pki
from kubesim.scheduler import Scheduler
from kubesim.timing import Timings
from kubesim.versions import DEFAULT_VERSION, KubernetesVersion
from kubesim.workloads import create_workloads, pods_per_node_workloads, start_pods

log = logging.getLogger("kubesim")
PORT_FILE = "port"  # in the state dir: the port its cluster served on last
READY_LINE = re.compile(r"^kubesim ready: server=(\S+) kubeconfig=(\S+) nodes=(\d+)$")


@dataclass
class ClusterConfig:
    """Everything ``kubesim up`` can be told."""

    nodes: int = 3  # workers (plus one control-plane node) unless cluster_file is given
    kubeconfig: Path | None = None
    state_dir: Path | None = None
    cluster_file: Path | None = None
    port: int = 0
    audit_log: Path | None = None
    gate_enabled: bool = True
    timings: Timings = field(default_factory=Timings)
    ready_timeout: float = 300.0
    # nodes whose kubelet cannot start are expected (a cluster file describing E20 on purpose):
    # ready without them instead of failing
    allow_failed_nodes: bool = False
    # extra ApiServer keyword arguments (e.g. history_capacity, authz_lag) for tests and benches
    api_options: dict[str, Any] = field(default_factory=dict)
    # "1.23" (DKC) or e.g. "1.31" (modern mode); None: the cluster file's, else 1.23
    kubernetes_version: str | None = None
    # about this many API pods on every node (kubesim.workloads); None: the cluster file's podsPerNode
    pods_per_node: int | None = None

    def _cluster_file(self) -> ClusterFile:
        return load_cluster_file(self.cluster_file) if self.cluster_file else default_cluster(self.nodes)

    def version(self) -> KubernetesVersion:
        if self.kubernetes_version is not None:
            return KubernetesVersion.parse(self.kubernetes_version)
        if self.cluster_file is not None:
            return KubernetesVersion.parse(self._cluster_file().kubernetes_version or DEFAULT_VERSION)
        return KubernetesVersion.parse(DEFAULT_VERSION)

    def node_specs(self) -> list[NodeSpec]:
        return expand(self._cluster_file(), self.version())

    def workloads(self, nodes: int) -> list[Workload]:
        """The cluster file's workloads, then ``pods_per_node``'s (the argument wins over the file's)."""
        cluster = self._cluster_file()
        per_node = self.pods_per_node if self.pods_per_node is not None else cluster.pods_per_node
        return list(cluster.workloads) + pods_per_node_workloads(per_node or 0, nodes)


@dataclass
class RunningCluster:
    server: ApiServer
    http: HttpFrontend
    kubeconfig: Path
    specs: list[NodeSpec]
    tasks: list[asyncio.Task[Any]]
    state_dir: Path = Path(".")
    timings: Timings = field(default_factory=Timings)
    faults: Faults = field(default_factory=Faults)
    ca_pem: bytes = b""
    modern: bool = False
    pod_workers: PodWorkers | None = None

    @property
    def url(self) -> str:
        return self.http.url

    async def add_node(self, spec: NodeSpec) -> None:
        """A node joins the running cluster (its kubelet registers it), as a new machine would."""
        if self.modern:
            tasks, kubelets = _start_hosts(self.server, [spec], self.state_dir, self.timings, self.faults,
                                           (self.url, self.ca_pem))
        else:
            tasks, kubelets = _start_nodes(self.server, [spec], self.state_dir, self.timings, self.faults)
        if self.pod_workers is not None:
            for name, kubelet in kubelets.items():
                self.pod_workers.add_kubelet(name, kubelet)
        self.specs.append(spec)
        self.tasks.extend(tasks)

    async def stop(self) -> None:
        for task in self.tasks:
            task.cancel()
        await asyncio.gather(*self.tasks, return_exceptions=True)
        await self.http.stop()
        self.server.close()


def _kubelet_factory() -> Callable[..., Any] | None:
    try:
        from kubesim.kubelet import SimKubelet
    except ImportError:  # the kubelet package is optional while it is being built
        return None
    return SimKubelet


def _lifecycle(server: ApiServer, timings: Timings) -> Any | None:
    try:
        from kubesim.lifecycle import NodeLifecycleController
    except ImportError:
        return None
    return NodeLifecycleController(server, timings, user="system:kube-controller-manager")


async def start_cluster(config: ClusterConfig) -> RunningCluster:
    """Start everything and wait until every node is Ready; the caller owns ``stop()``."""
    state_dir = Path(config.state_dir or tempfile.mkdtemp(prefix="kubesim-"))
    state_dir.mkdir(parents=True, exist_ok=True)
    timings = config.timings
    faults = Faults(time_scale=timings.time_scale)  # its clock is the fleet's (workload shifts)
    version = config.version()
    server = ApiServer(
        kubernetes_version=str(version),
        state_dir=state_dir,
        gate_enabled=config.gate_enabled,
        faults=faults,
        time_scale=timings.time_scale,
        audit_log=config.audit_log,
        **config.api_options,
    )
    pki = ensure_pki(state_dir / "pki")
    http, url = await _serve(server, pki, state_dir, config.port)
    kubeconfig = Path(config.kubeconfig or state_dir / "kubeconfig")
    kubeconfig_mod.write(kubeconfig, url, pki.ca_pem, server.admin_token)
    if kubeconfig != state_dir / "kubeconfig":  # ``kubesim token --state-dir`` finds the admin here
        kubeconfig_mod.write(state_dir / "kubeconfig", url, pki.ca_pem, server.admin_token)
    specs = config.node_specs()
    if version.modern:
        tasks, kubelets = _start_hosts(server, specs, state_dir, timings, faults, (url, pki.ca_pem))
    else:
        tasks, kubelets = _start_nodes(server, specs, state_dir, timings, faults)
    tasks.append(asyncio.create_task(publish_root_ca(server, pki.ca_pem), name="root-ca-cert-publisher"))
    pod_controllers = _start_pod_controllers(server, kubelets, timings, tasks)
    pod_workers = pod_controllers.pod_workers
    controller = _lifecycle(server, timings)
    if controller is not None:
        tasks.append(asyncio.create_task(controller.run(), name="node-lifecycle-controller"))
    running = RunningCluster(server, http, kubeconfig, specs, tasks, state_dir, timings, faults, pki.ca_pem,
                             version.modern, pod_workers)
    pending = {s.name for s in specs}
    try:
        await asyncio.wait_for(
            wait_ready(server, pending, kubelets, config.gate_enabled, allow_failed=config.allow_failed_nodes),
            config.ready_timeout,
        )
    except asyncio.TimeoutError:
        await running.stop()
        raise NotReadyError(_not_ready_message(pending, kubelets, config.ready_timeout)) from None
    except BaseException:
        await running.stop()
        raise
    workloads = config.workloads(len(specs))
    if workloads:  # once the nodes are Ready, so their pods spread over every node
        try:
            await _start_workloads(server, workloads, pod_controllers)
        except BaseException:
            await running.stop()
            raise
    return running


@dataclass
class PodControllers:
    informers: Informers
    owners: OwnerController
    scheduler: Scheduler
    pod_workers: PodWorkers


def _start_pod_controllers(
    server: ApiServer, kubelets: dict[str, Any], timings: Timings, tasks: list[asyncio.Task[Any]]
) -> PodControllers:
    """What runs API pods, as a real control plane and kubelets do: the owners' controllers, the
    scheduler, each kubelet's pod workers, the disruption controller, over shared informers."""
    informers = Informers(local_client(server, user=CONTROLLER_USER, shared=True))
    pods = PodControllers(informers, OwnerController(server, informers), Scheduler(server, informers),
                          PodWorkers(server, informers, kubelets, timings))
    parts: dict[str, Any] = {
        "disruption-controller": DisruptionController(server, informers=informers),
        "owner-controller": pods.owners,
        "scheduler": pods.scheduler,
        "kubelet-pod-workers": pods.pod_workers,
    }
    for name, part in parts.items():
        tasks.append(asyncio.create_task(part.run(), name=name))
    for shared in informers.all():
        tasks.append(asyncio.create_task(shared.run(), name=f"informer-{shared.informer.path}"))
    return pods


async def _start_workloads(server: ApiServer, workloads: list[Workload], pods: PodControllers,
                           catch_up: float = 10.0) -> None:
    """The workloads' objects, then the new ReplicaSets' pods in bulk (``kubesim.workloads``),
    once the scheduler has seen every node as it is now (so the pods spread over all of them),
    with the owner controller held meanwhile."""
    pods.owners.hold()
    try:
        replica_sets = await create_workloads(server, workloads)
        if not replica_sets:
            return
        newest_node = max((s.rv for s in server.store.list("nodes")), default=0)
        try:
            await asyncio.wait_for(pods.informers.nodes.wait_seen(newest_node), catch_up)
            await asyncio.wait_for(pods.informers.pods.wait_synced(), catch_up)
        except asyncio.TimeoutError:  # the controllers create what is not started here
            log.warning("the scheduler has not seen the nodes within %gs: the workloads' pods go through the API",
                        catch_up)
            return
        started = await start_pods(server, replica_sets, pods.owners, pods.scheduler, pods.pod_workers)
        log.info("started %d pods of %d ReplicaSets", started, len(replica_sets))
    finally:
        pods.owners.release()


async def _serve(server: ApiServer, pki: Pki, state_dir: Path, port: int) -> tuple[HttpFrontend, str]:
    """The HTTPS front end on ``port``; without one, on the port this state dir served on last, so
    clients of the last run (a rollout's watches, a Prometheus) reconnect; that port taken, on a
    free one, said so. The port served on is recorded in ``<state-dir>/port``."""
    record = state_dir / PORT_FILE
    recorded = _recorded_port(record) if not port else None
    http = HttpFrontend(server, pki, port=port or recorded or 0)
    try:
        url = await http.start()
    except OSError as exc:
        if recorded is None:
            raise
        await http.stop()
        http = HttpFrontend(server, pki, port=0)
        url = await http.start()
        log.warning("port %d, where this state dir's cluster served last, is taken (%s): serving on %d instead; "
                    "clients of the last run (a running rollout, a Prometheus) need the new kubeconfig",
                    recorded, exc.strerror or exc, http.port)
    record.write_text(f"{http.port}\n")
    return http, url


def _recorded_port(record: Path) -> int | None:
    try:
        port = int(record.read_text().strip())
    except (OSError, ValueError):
        return None
    return port if 0 < port < 65536 else None


class NodeStartError(RuntimeError):
    """A node's kubelet cannot start, and nothing said such nodes are expected."""

    def __init__(self, node: str, reason: str):
        super().__init__(
            f"node {node}: the kubelet cannot start: {reason} "
            "(--allow-failed-nodes / Cluster(allow_failed_nodes=True) if this node is meant to fail)"
        )
        self.node = node
        self.reason = reason


class NotReadyError(RuntimeError):
    """Nodes did not become Ready within the ready timeout."""


def _not_ready_message(pending: set[str], kubelets: dict[str, Any], timeout: float) -> str:
    """Which nodes are still not Ready and what their kubelets are doing, for the operator."""
    details = []
    for name in sorted(pending)[:10]:
        kubelet = kubelets.get(name)
        state = getattr(kubelet, "state", "no kubelet")
        details.append(f"{name} (kubelet {state})")
    more = f" and {len(pending) - 10} more" if len(pending) > 10 else ""
    return f"nodes not Ready within {timeout:g}s: {', '.join(details)}{more}"


def _start_nodes(
    server: ApiServer, specs: list[NodeSpec], state_dir: Path, timings: Timings, faults: Faults
) -> tuple[list[asyncio.Task[Any]], dict[str, Any]]:
    """One task per kubelet; returns the tasks and the kubelets by node name."""
    factory = _kubelet_factory()
    tasks: list[asyncio.Task[Any]] = []
    kubelets: dict[str, Any] = {}
    for spec in specs:
        node_dir = state_dir / "nodes" / spec.name
        node_dir.mkdir(parents=True, exist_ok=True)
        if factory is not None:
            kubelet = kubelets[spec.name] = factory(spec, server, node_dir, timings, faults)
            runner: Coroutine[Any, Any, Any] = kubelet.run()
        else:
            runner = _register_stub_node(server, spec)
        tasks.append(asyncio.create_task(runner, name=f"kubelet-{spec.name}"))
    return tasks, kubelets


def _start_hosts(
    server: ApiServer,
    specs: list[NodeSpec],
    state_dir: Path,
    timings: Timings,
    faults: Faults,
    endpoint: tuple[str, bytes],
) -> tuple[list[asyncio.Task[Any]], dict[str, Any]]:
    """Modern mode: a simulated host per node whose service manager runs the kubelet."""
    from kubesim.host.layout import HostLayout, provision
    from kubesim.host.node import SimHost
    from kubesim.kubelet import SimKubelet

    url, ca_pem = endpoint
    tasks, kubelets = [], {}
    for spec in specs:
        node_dir = state_dir / "nodes" / spec.name
        layout = HostLayout(node_dir / "host")
        user = f"system:node:{spec.name}"
        provision(layout, spec, kubeconfig_mod.render(url, ca_pem, server.node_token(spec.name), user=user))
        host = SimHost(layout, spec.name, timings.time_scale, spec.host.systemd_version)
        kubelet = kubelets[spec.name] = SimKubelet(spec, server, node_dir, timings, faults, host=host)
        service = host.attach(kubelet, kubelet.proxy)
        server.hosts[spec.name] = host
        tasks.append(asyncio.create_task(service.run(), name=f"host-{spec.name}"))
    return tasks, kubelets


async def _register_stub_node(server: ApiServer, spec: NodeSpec) -> None:
    """Without the kubelet package: register a Ready Node so the API side can be exercised."""
    client = local_client(server, user=f"system:node:{spec.name}")
    node = {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": spec.name, "labels": dict(spec.labels)},
        "status": {
            "capacity": dict(spec.capacity),
            "allocatable": dict(spec.capacity),
            "conditions": [
                {
                    "type": "Ready",
                    "status": "True",
                    "reason": "KubeletReady",
                    "message": "kubelet is posting ready status",
                }
            ],
            "nodeInfo": {
                "kubeletVersion": spec.kubelet.version,
                "osImage": spec.host.os_image,
                "kernelVersion": spec.host.kernel_version,
                "containerRuntimeVersion": spec.host.container_runtime,
            },
        },
    }
    try:
        await client.create("/api/v1/nodes", node)
    except Exception:  # noqa: BLE001 - already registered (restart on a state dir)
        pass


def _is_ready(obj: dict[str, Any]) -> bool:
    conditions: list[dict[str, Any]] = (obj.get("status") or {}).get("conditions") or []
    for cond in conditions:
        if cond.get("type") == "Ready":
            return cond.get("status") == "True"
    return False


def _settled(stored: Any, kubelet: Any, gate_enabled: bool) -> bool:
    """Ready, and for a DKC kubelet its ``status.config`` reported (E3's ``{}``) unless the API
    gate strips it: what a client of a freshly started cluster may rely on. A modern host whose
    kubelet unit is disabled has nothing to wait for."""
    host = getattr(kubelet, "host", None)
    if host is not None and host.service is not None and not host.service.is_enabled("kubelet.service"):
        return True
    if stored is None or not _is_ready(stored.obj):
        return False
    reports_config = gate_enabled and getattr(kubelet, "dkc", False)
    return not reports_config or "config" in (stored.obj.get("status") or {})


def _host_failure(kubelet: Any) -> str:
    """Modern mode: the host's service manager tried the kubelet unit and it is not running."""
    host = getattr(kubelet, "host", None)
    if host is None or not host.kubelet_settled():
        return ""
    state = host.service.state
    return f"kubelet.service is {state.sub_state} after {state.starts} start(s) (see the host's journal)"


def _cannot_start(kubelet: Any) -> str:
    """Why the kubelet exited before serving (flags, local config, E20), or "" if it did not."""
    if _host_failure(kubelet):
        return _host_failure(kubelet)
    if kubelet is None or getattr(kubelet, "starts", 0) < 1:
        return ""
    if getattr(kubelet, "state", "") not in ("crashed", "down"):
        return ""
    return getattr(kubelet, "startup_error", "") or ""


def _down_after_start(kubelet: Any) -> bool:
    """Crashed or down after at least one start: with ``allow_failed_nodes`` nothing to wait for."""
    return bool(_host_failure(kubelet)) or (
        kubelet is not None
        and getattr(kubelet, "starts", 0) >= 1
        and getattr(kubelet, "state", "") in ("crashed", "down")
    )


async def wait_ready(
    server: ApiServer,
    pending: set[str],
    kubelets: dict[str, Any],
    gate_enabled: bool,
    poll: float = 0.05,
    *,
    allow_failed: bool = False,
) -> None:
    """Poll the store (not the API: no audit noise) until every node in ``pending`` has settled;
    removes them from ``pending`` as they do, so a timeout can say which are left.

    A kubelet whose start-up failed (deterministic: the same flags and local config fail again on
    every restart) raises :class:`NodeStartError` at once, unless ``allow_failed``: then it, and
    any kubelet down after a start, is simply not waited for (E20 described on purpose).
    """
    while pending:
        for name in list(pending):
            kubelet = kubelets.get(name)
            if _settled(server.store.get("nodes", f"nodes//{name}"), kubelet, gate_enabled):
                pending.discard(name)
            elif allow_failed and _down_after_start(kubelet):
                reason = _cannot_start(kubelet) or f"kubelet {getattr(kubelet, 'state', '')}"
                log.warning("node %s is not Ready (%s); not waiting for it (allow_failed_nodes)", name, reason)
                pending.discard(name)
            elif not allow_failed and _cannot_start(kubelet):
                raise NodeStartError(name, _cannot_start(kubelet))
        if pending:
            await asyncio.sleep(poll)


async def run_cluster(
    config: ClusterConfig,
    *,
    on_ready: Callable[[RunningCluster], None] | None = None,
    stop: asyncio.Event | None = None,
) -> None:
    """``kubesim up``: start, announce, serve until ``stop`` is set (or SIGINT/SIGTERM), stop."""
    stop = stop or asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        try:
            loop.add_signal_handler(sig, stop.set)
        except (NotImplementedError, RuntimeError, ValueError):  # not the main thread
            pass
    running = await start_cluster(config)
    try:
        if on_ready is not None:
            on_ready(running)
        await stop.wait()
    finally:
        await running.stop()


# --- the Python API ----------------------------------------------------------------------------


class AuditLogFile:
    """The audit log: a path plus a reader for its events."""

    def __init__(self, path: Path):
        self.path = path

    def __fspath__(self) -> str:
        return str(self.path)

    def __str__(self) -> str:
        return str(self.path)

    def events(self, **match: Any) -> list[dict[str, Any]]:
        """All events so far, optionally filtered, e.g. ``events(verb="patch")``."""
        import json

        if not self.path.exists():
            return []
        out = []
        for line in self.path.read_text().splitlines():
            try:
                event = json.loads(line)
            except ValueError:
                continue  # a line being written right now
            if all(event.get(k) == v for k, v in match.items()):
                out.append(event)
        return out


class Cluster:
    """A running simulated cluster; ``with Cluster(nodes=3, time_scale=60) as c: ...``.

    Timing overrides are keyword arguments named like the :class:`Timings` fields
    (``trial_period="10s"``, ``restart_delay=2``); ``time_scale`` divides them all.
    """

    def __init__(
        self,
        nodes: int = 3,
        *,
        cluster_file: str | Path | None = None,
        state_dir: str | Path | None = None,
        kubeconfig: str | Path | None = None,
        port: int = 0,
        audit_log: str | Path | None = None,
        gate_enabled: bool = True,
        time_scale: float = 1.0,
        mode: str = "thread",
        ready_timeout: float = 300.0,
        allow_failed_nodes: bool = False,
        api_options: dict[str, Any] | None = None,
        kubernetes_version: str | None = None,
        pods_per_node: int | None = None,
        **timing_overrides: float | str,
    ):
        if mode not in ("thread", "process"):
            raise ValueError("mode must be 'thread' or 'process'")
        # absolute: these paths reach a `kubesim up` child, node agents and whoever reads them later
        self.state_dir = Path(state_dir or tempfile.mkdtemp(prefix="kubesim-")).resolve()
        self.state_dir.mkdir(parents=True, exist_ok=True)
        self.timings = Timings().with_overrides(time_scale=time_scale, **timing_overrides)
        self.config = ClusterConfig(
            nodes=nodes,
            kubeconfig=Path(kubeconfig or self.state_dir / "kubeconfig").resolve(),
            state_dir=self.state_dir,
            cluster_file=Path(cluster_file).resolve() if cluster_file else None,
            port=port,
            audit_log=Path(audit_log or self.state_dir / "audit.log").resolve(),
            gate_enabled=gate_enabled,
            timings=self.timings,
            ready_timeout=ready_timeout,
            allow_failed_nodes=allow_failed_nodes,
            api_options=dict(api_options or {}),
            kubernetes_version=kubernetes_version,
            pods_per_node=pods_per_node,
        )
        if mode == "process" and api_options:
            raise ValueError("api_options need mode='thread'")
        self.mode = mode
        self.server = ""
        self.api: ApiServer | None = None  # thread mode: the in-process server (for white-box checks)
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._stop: asyncio.Event | None = None
        self._running: RunningCluster | None = None
        self._process: subprocess.Popen[str] | None = None

    # --- properties ------------------------------------------------------------------------

    @property
    def kubeconfig(self) -> Path:
        assert self.config.kubeconfig is not None
        return self.config.kubeconfig

    @property
    def time_scale(self) -> float:
        return self.timings.time_scale

    @property
    def audit_log(self) -> AuditLogFile:
        assert self.config.audit_log is not None
        return AuditLogFile(self.config.audit_log)

    @property
    def faults(self) -> FaultClient:
        return FaultClient(self.kubeconfig)

    @property
    def node_names(self) -> list[str]:
        return [s.name for s in self.config.node_specs()]

    def node_dir(self, name: str) -> Path:
        return self.state_dir / "nodes" / name

    def node_token(self, name: str) -> str:
        """Bearer token of ``system:node:<name>`` (to act as that kubelet over HTTP)."""
        secrets = read_secrets(self.state_dir)
        if secrets is None:
            raise RuntimeError("the cluster has not started yet")
        return node_token(secrets[0], name)

    def node_kubeconfig(self, name: str) -> Path:
        """A kubeconfig that authenticates as ``system:node:<name>``."""
        info = kubeconfig_mod.read(self.kubeconfig)
        path = self.state_dir / "kubeconfigs" / f"{name}.kubeconfig"
        kubeconfig_mod.write(path, info.server, info.ca_pem, self.node_token(name), user=f"system:node:{name}")
        return path

    def service_account_kubeconfig(self, name: str, namespace: str = "default") -> Path:
        """A kubeconfig that authenticates as ServiceAccount ``namespace/name`` (created if needed):
        it can do exactly what RBAC grants that account - to rehearse least-privilege roles."""
        from kubesim.tokens import service_account_kubeconfig

        path = self.state_dir / "kubeconfigs" / f"sa-{namespace}-{name}.kubeconfig"
        kubeconfig_mod.write_text(path, service_account_kubeconfig(self.kubeconfig, namespace, name))
        return path

    def host(self, name: str) -> Host:
        """Modern mode: node ``name``'s simulated host (files under ``.root``, systemctl, journal)."""
        if not self.config.version().modern:
            raise RuntimeError("simulated hosts exist only in modern mode (kubernetes_version >= 1.24)")
        if name not in self.node_names:
            raise KeyError(f"no node {name!r}")
        return Host(self.node_dir(name) / "host", name, self.kubeconfig)

    # --- lifecycle -------------------------------------------------------------------------

    def start(self) -> "Cluster":
        if self.mode == "process":
            self._start_process()
        else:
            self._start_thread()
        return self

    def _start_thread(self) -> None:
        started = threading.Event()
        failure: list[BaseException] = []

        def on_ready(running: RunningCluster) -> None:
            self._running, self.api, self.server = running, running.server, running.url
            started.set()

        async def main() -> None:
            self._stop = asyncio.Event()
            try:
                await run_cluster(self.config, on_ready=on_ready, stop=self._stop)
            except BaseException as exc:  # noqa: BLE001 - reported to the starting thread
                failure.append(exc)
                started.set()

        def thread_main() -> None:
            self._loop = asyncio.new_event_loop()
            self._loop.run_until_complete(main())
            self._loop.close()

        self._thread = threading.Thread(target=thread_main, name="kubesim", daemon=True)
        self._thread.start()
        started.wait()
        if failure:
            self._thread.join()
            raise RuntimeError(f"kubesim failed to start: {failure[0]!r}") from failure[0]

    def _start_process(self) -> None:
        cmd = [sys.executable, "-m", "kubesim", "up", *self._cli_args()]
        with open(self.state_dir / "kubesim.log", "ab") as stderr:  # the child keeps its own handle
            self._process = subprocess.Popen(
                cmd, stdout=subprocess.PIPE, stderr=stderr, text=True, start_new_session=True
            )
        assert self._process.stdout is not None
        for line in self._process.stdout:
            match = READY_LINE.match(line.strip())
            if match:
                self.server = match.group(1)
                return
        code = self._process.wait()
        log_tail = (self.state_dir / "kubesim.log").read_text(errors="replace").strip().splitlines()[-1:]
        raise RuntimeError(f"kubesim up exited with {code} before it was ready: {' '.join(log_tail)}")

    def _cli_args(self) -> list[str]:
        cfg = self.config
        args = [
            "--nodes",
            str(cfg.nodes),
            "--kubeconfig",
            str(cfg.kubeconfig),
            "--state-dir",
            str(cfg.state_dir),
            "--port",
            str(cfg.port),
            "--audit-log",
            str(cfg.audit_log),
            "--time-scale",
            str(self.time_scale),
        ]
        if cfg.cluster_file:
            args += ["--cluster", str(cfg.cluster_file)]
        if cfg.kubernetes_version:
            args += ["--kubernetes-version", cfg.kubernetes_version]
        if not cfg.gate_enabled:
            args += ["--feature-gates", "DynamicKubeletConfig=false"]
        if cfg.allow_failed_nodes:
            args.append("--allow-failed-nodes")
        if cfg.pods_per_node is not None:
            args += ["--pods-per-node", str(cfg.pods_per_node)]
        defaults = Timings()
        for name in Timings.flag_names():
            attr = name.replace("-", "_")
            if getattr(self.timings, attr) != getattr(defaults, attr):
                args += [f"--{name}", f"{getattr(self.timings, attr)}s"]
        return args

    def add_node(self, name: str, *, like: str | None = None) -> None:
        """Thread mode: start one more node, a copy of node ``like`` (default: the last one) but
        for its name; it registers itself like any kubelet (not waited for)."""
        if self._running is None:
            raise RuntimeError("add_node() needs a thread-mode cluster")
        specs = self._running.specs
        template = next((s for s in specs if s.name == like), specs[-1]) if like else specs[-1]
        labels = dict(template.labels, **{"kubernetes.io/hostname": name})
        spec = template.model_copy(update={"name": name, "labels": labels})
        self.run(self._running.add_node(spec))

    def run(self, coro: Coroutine[Any, Any, Any], timeout: float | None = 60) -> Any:
        """Thread mode: run a coroutine on the cluster's loop (e.g. an in-process client call)."""
        if self._loop is None:
            raise RuntimeError("run() needs a thread-mode cluster")
        return asyncio.run_coroutine_threadsafe(coro, self._loop).result(timeout)

    def stop(self) -> None:
        if self._process is not None:
            if self._process.poll() is None:
                self._process.send_signal(signal.SIGTERM)
                try:
                    self._process.wait(30)
                except subprocess.TimeoutExpired:
                    self.kill()
            self._process = None
        if self._thread is not None and self._loop is not None and self._stop is not None:
            self._loop.call_soon_threadsafe(self._stop.set)
            self._thread.join(60)
            self._thread = None

    def kill(self) -> None:
        """Process mode: ``kill -9`` the kubesim process (nothing gets to clean up)."""
        if self._process is None:
            raise RuntimeError("kill() needs a process-mode cluster")
        os.killpg(self._process.pid, signal.SIGKILL)
        self._process.wait()
        self._process = None

    def __enter__(self) -> "Cluster":
        return self.start()

    def __exit__(self, *exc: Any) -> None:
        self.stop()
