"""``SimKubelet``: one node's kubelet *process* under a babysitter (systemd ``Restart=always``).

Why model processes: DKC applies a config by exiting (code 0) and being restarted (E1), rolls back
only at Bootstrap (6.8), and a config that validates but cannot run on the host crash-loops with
no rollback (11.2). Each loop iteration below is one process life: parse flags + local config,
Bootstrap, BirthCry (``Starting kubelet.``), StartSync, then either run with heartbeats until the
controller asks to restart, or - if the host rejects the config - die after ``crash_window``.

Modern mode (a ``host`` is given): no DKC; each process life reads ``--config``, the
``--config-dir`` drop-ins and ``kubeadm-flags.env`` from the simulated host (``dropins``), and the
host's service manager (``kubesim.host.systemd``) is the babysitter instead of :meth:`run`.
"""

from __future__ import annotations

import asyncio
import collections
import json
import logging
import re
import time
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Mapping, Optional, Protocol

from kubesim.apiserver.client import local_client
from kubesim.clusterfile import KubeletSetup, NodeSpec
from kubesim.faults import Faults
from kubesim.kubelet import nodeobject, runtime_checks
from kubesim.kubelet import status as st
from kubesim.kubelet.apiclient import NodeClient
from kubesim.kubelet.controller import BootstrapError, ConfigFailure, Controller
from kubesim.kubelet.dropins import CommandLine, StartError, load_start_config, parse_kubeadm_args
from kubesim.kubelet.gates import FeatureGates, GateError
from kubesim.kubelet.heartbeat import Heartbeat
from kubesim.kubelet.kubeletconfig import (
    Config,
    FlagError,
    LoadError,
    apply_flags,
    decode_payload,
    local_config,
    parse_flags,
    resolve_relative_paths,
)
from kubesim.kubelet.metrics import KubeletMetrics
from kubesim.kubelet.store import FsStore, Source, StoreError
from kubesim.kubelet.tasks import cancel_all
from kubesim.kubelet.validation import ValidationError, validate
from kubesim.kubelet.workload import Workload
from kubesim.timing import Timings

log = logging.getLogger("kubesim.kubelet")
DKC_GATE_ERROR = "the DynamicKubeletConfig feature gate must be enabled in order to use the --dynamic-config-dir flag"
OLD_GATE_ERROR = "failed to bootstrap Kubelet config controller, you must enable the DynamicKubeletConfig feature gate"


# INFO lines worth keeping in the on-disk journal next to warnings and errors
_JOURNAL_INFO = (
    "Starting kubelet.",
    "kubelet config controller: Kubelet restarting",
    "kubelet config controller: updated last",
    "kubelet config controller: starting controller",
    "kubelet process exiting",
)


def _deprecation(minor: int) -> str:
    removal = "1.23" if minor == 22 else "1.24 or later"
    return (
        "Flag --dynamic-config-dir has been deprecated, Feature DynamicKubeletConfig is deprecated in 1.22 and "
        f"will not move to GA. It is planned to be removed from Kubernetes in the version {removal}. Please use "
        "alternative ways to update kubelet configuration."
    )


class ModernHost(Protocol):
    """What a modern kubelet needs from its simulated host (``kubesim.host``)."""

    @property
    def root(self) -> Path: ...

    @property
    def config_file(self) -> Path: ...

    @property
    def dropin_dir(self) -> Path: ...

    @property
    def flags_env(self) -> Path: ...

    def journal(self, severity: str, message: str) -> None: ...


def _go_quote(text: str) -> str:
    """klog's quoting of an ``err=`` value."""
    return text.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def _read(path: Path) -> str:
    try:
        return path.read_text()
    except OSError:
        return ""  # EnvironmentFile=- : a missing file is no error


class StartupError(Exception):
    """The process exits before Bootstrap (flags, local config, E20)."""


def kubelet_minor(version: str) -> int:
    match = re.match(r"v?1\.(\d+)", version)
    return int(match.group(1)) if match else 23


LocalResult = tuple[Config, dict[str, Any], FeatureGates, list[str]]
# results are shared read-only between kubelets with the same setup (nothing mutates them)
_LOCAL_CACHE: dict[str, "LocalResult | StartupError"] = {}


def _load_local(setup: KubeletSetup, minor: int, dkc: bool) -> LocalResult:
    try:
        flag_values = parse_flags(setup.flags)
        local, warnings = local_config(setup.config, minor)
    except (FlagError, LoadError) as exc:
        raise StartupError(f"failed to load kubelet config file, error: {exc}") from exc
    local = apply_flags(local, flag_values, setup.feature_gates)
    try:
        gates = validate(local, FeatureGates(dkc_default=minor < 22), kubelet_minor=minor)
    except ValidationError as exc:
        raise StartupError(f"failed to validate kubelet configuration, error: {exc}") from exc
    except GateError as exc:
        raise StartupError(f"failed to set feature gates from initial flags-based config: {exc}") from exc
    if dkc and not gates.enabled("DynamicKubeletConfig"):
        # E20: 1.22/1.23 need the gate explicitly; older kubelets fail later, in the controller
        raise StartupError(DKC_GATE_ERROR if minor >= 22 else OLD_GATE_ERROR)
    return local, flag_values, gates, warnings


class SimKubelet:
    """Simulated kubelet of one node; ``run()`` forever, ``configz()`` while it runs."""

    def __init__(
        self,
        spec: NodeSpec,
        server: Any,
        node_dir: Path,
        timings: Timings,
        faults: Faults,
        host: Optional[ModernHost] = None,
    ):
        self.spec = spec
        self.name = spec.name
        self.node_dir = Path(node_dir)
        self.timings = timings
        self.faults = faults
        self.client = NodeClient(local_client(server, user=f"system:node:{spec.name}"), spec.name, faults)
        self.store = FsStore(self.node_dir / "dynamic-config")
        self.state = "down"
        self.starts = 0
        self.exit_codes: list[int] = []
        # why the last run exited before it could serve (flags, local config, E20); "" once a run
        # got past start-up. ``kubesim up`` reports it instead of waiting for a node that cannot come.
        self.startup_error = ""
        self.controller: Optional[Controller] = None
        self._config: Optional[Config] = None
        self._exit: Optional[asyncio.Future[int]] = None
        self._log_lines: collections.deque[str] = collections.deque(maxlen=400)
        self.minor = kubelet_minor(spec.kubelet.version)
        self.host = host
        self.dkc = spec.kubelet.dynamic_config_dir and self.minor <= 23 and host is None
        self._environment: dict[str, str] = {}
        # the node's pods outlive kubelet restarts; the metrics registry is the process's
        self.workload = Workload(spec, shifts=faults)  # fleet-wide shifts and clock: the cluster's
        self.metrics: Optional[KubeletMetrics] = None
        server.node_proxy[spec.name] = self.proxy

    # ------------------------------------------------------------------------------ logging
    def log(self, level: int, msg: str) -> None:
        severity = "DIWEF"[min(max(level // 10, 1), 5) - 1]
        line = f"{severity}{datetime.now(timezone.utc).strftime('%m%d %H:%M:%S.%f')} kubelet[{self.starts}] {msg}"
        self._log_lines.append(line)
        if self.host is not None and level >= logging.INFO:
            self.host.journal(severity, msg)
        if level >= logging.WARNING or msg.startswith(_JOURNAL_INFO):
            self._journal(line)
        # one notch quieter in Python logging than klog's severity: 5,000 kubelets each logging
        # "could not get Node" at start-up would drown a terminal; the ring buffer keeps the truth
        log.log(max(logging.DEBUG, level - 10), "%s: %s", self.name, msg)

    def _journal(self, line: str) -> None:
        """``<node_dir>/kubelet.log``: what "see Kubelet log for details" points at, on disk."""
        try:
            with open(self.node_dir / "kubelet.log", "a") as fh:
                fh.write(line + "\n")
        except OSError:
            pass

    def logs(self) -> list[str]:
        """Recent log lines of this node's kubelet (journal-like, across restarts)."""
        return list(self._log_lines)

    # -------------------------------------------------------------------------------- configz
    def configz(self) -> dict[str, Any]:
        if self._config is None:
            return {}
        return {"kubeletconfig": nodeobject.render(self._config)}

    def proxy(self, path: str) -> tuple[int, dict[str, Any] | str]:
        path = path.strip("/")
        if self.state != "running" or self._config is None or self.client.blocked():
            message = (
                f"error trying to reach service: dial tcp {nodeobject.node_ip(self.spec)}:10250: "
                "connect: connection refused"
            )
            return 503, {
                "kind": "Status",
                "apiVersion": "v1",
                "metadata": {},
                "status": "Failure",
                "message": message,
                "reason": "ServiceUnavailable",
                "code": 503,
            }
        if path == "configz":
            return 200, self.configz()
        if path == "healthz":
            return (200, "ok") if self.host is not None else (200, {"status": "ok"})
        if path == "metrics" and self.metrics is not None:
            return 200, self.metrics.text(self.workload)
        return 404, {
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Failure",
            "message": "404 page not found",
            "reason": "NotFound",
            "code": 404,
        }

    # ------------------------------------------------------------------------------ lifecycle
    async def run(self) -> None:
        """The babysitter: start the process, restart it after ``restart_delay`` as systemd would."""
        while True:
            code = await self._run_process()
            self.exit_codes.append(code)
            if code == 0 and not self.spec.kubelet.restart_always:
                self.state = "down"  # Restart=on-failure and a clean exit: stays down (E1)
                self.log(logging.INFO, "kubelet.service: Succeeded.")
                await asyncio.Event().wait()
            self.state = "restarting" if code == 0 else "crashed"
            delay = self.timings.scaled("restart_delay") + self.faults.node(self.name).slow_restart
            await asyncio.sleep(delay)
            while self.faults.node(self.name).never_return:
                self.state = "down"
                await asyncio.sleep(1.0)

    @property
    def _root_dir(self) -> Path:
        """The kubelet's ``--root-dir`` (cpu/memory manager state files): on a modern host the real
        ``/var/lib/kubelet``, so an agent changing a manager policy must remove the state file."""
        return self.host.root / "var/lib/kubelet" if self.host is not None else self.node_dir

    # ------------------------------------------------------------------ modern: one process life
    @property
    def pid(self) -> int:
        """A stable fake pid per process life (journal lines, ``ExecMainPID``)."""
        return 1000 + 37 * self.starts

    async def run_once(self, environment: Mapping[str, str]) -> int:
        """One process life under the host's service manager; returns the exit code."""
        self._environment = dict(environment)
        code = await self._run_process()
        self.exit_codes.append(code)
        self.state = "down" if code == 0 else "crashed"
        return code

    def terminate(self) -> None:
        """SIGTERM from the service manager: exit 0 now."""
        self._request_exit(0, "SIGTERM")

    async def before_restart(self) -> None:
        """The node faults that delay (``slow_restart``) or prevent (``never_return``) a restart."""
        await asyncio.sleep(self.faults.node(self.name).slow_restart)
        while self.faults.node(self.name).never_return:
            self.state = "down"
            await asyncio.sleep(min(1.0, self.timings.scaled("restart_delay")))

    async def _run_process(self) -> int:
        self.starts += 1
        self.state = "running"
        self._exit = asyncio.get_running_loop().create_future()
        self._config = None
        self.metrics = None
        tasks: list[asyncio.Task[Any]] = []
        try:
            await asyncio.sleep(self.timings.scaled("startup_delay"))
            return await self._start(tasks)
        except StartupError as exc:
            self.startup_error = str(exc)
            # a modern kubelet's main logs the error returned by its command (cmd/kubelet/kubelet.go)
            self.log(logging.ERROR, f'"command failed" err="{_go_quote(str(exc))}"' if self.host else str(exc))
            return 1
        finally:
            await cancel_all(tasks)
            self._config = None
            self.controller = None
            self.metrics = None

    async def _start(self, tasks: list[asyncio.Task[Any]]) -> int:
        started = time.monotonic()
        local, flag_values, process_gates = self._local()
        cfg = local
        metrics = KubeletMetrics(self.minor, dkc=self.dkc)
        self.workload.kubelet_restarted()
        if self.dkc and self.minor >= 22:
            self.log(logging.WARNING, _deprecation(self.minor))
        if self.dkc:
            self.controller = Controller(
                node=self.name,
                store=self.store,
                timings=self.timings,
                log=self.log,
                loader=lambda source: self._load_checkpoint(source, flag_values, process_gates),
                request_exit=self._request_exit,
                on_status_push=metrics.config_status,
            )
            try:
                dynamic = self.controller.bootstrap()
            except BootstrapError as exc:
                raise StartupError(f"failed to determine a valid configuration, error: {exc}") from exc
            cfg = dynamic if dynamic is not None else local
        self._config = cfg
        self.metrics = metrics
        metrics.started((time.monotonic() - started) * self.timings.time_scale)
        self.startup_error = ""
        self.log(logging.INFO, "Starting kubelet.")
        tasks.append(asyncio.create_task(self._birth_cry()))
        if self.controller is not None:
            tasks.append(asyncio.create_task(self.controller.trial_loop()))
            tasks.extend(asyncio.create_task(loop()) for loop in self.controller.start_sync(self.client))
        failure = runtime_checks.runtime_failure(cfg, self.spec.host, self._root_dir)
        if failure:
            return await self._crash_window(failure)
        runtime_checks.record_manager_state(cfg, self._root_dir)
        self._start_heartbeat(cfg, tasks)
        tasks.append(asyncio.create_task(self._run_workload(cfg, metrics)))
        assert self._exit is not None
        return await self._exit

    async def _crash_window(self, failure: str) -> int:
        """Up long enough for StartSync (a rescue is possible), then the fatal error."""
        assert self._exit is not None
        try:
            return await asyncio.wait_for(asyncio.shield(self._exit), self.timings.scaled("crash_window"))
        except asyncio.TimeoutError:
            self.log(logging.CRITICAL, failure)
            return 1

    def _start_heartbeat(self, cfg: Config, tasks: list[asyncio.Task[Any]]) -> None:
        informer = self.controller.node_informer if self.controller else None
        beat = Heartbeat(
            spec=self.spec,
            client=self.client,
            cfg=cfg,
            timings=self.timings,
            log=self.log,
            cached_node=lambda: informer.get(self.name) if informer else None,
            memory_pressure=lambda: self.workload.memory_pressure,
        )
        tasks += [
            asyncio.create_task(beat.register()),
            asyncio.create_task(beat.status_loop()),
            asyncio.create_task(beat.lease_loop()),
        ]

    async def _run_workload(self, cfg: Config, metrics: KubeletMetrics) -> None:
        """The pods under this process's config, one simulated ``workload_period`` at a time."""
        period = self.timings.workload_period
        while True:
            await asyncio.sleep(self.timings.scaled("workload_period"))
            metrics.observe(self.workload.step(cfg, period))

    def restart(self, code: int = 0) -> None:
        """``systemctl restart kubelet`` (code 0) or a crash (non-zero): the process exits now."""
        self.log(logging.INFO, f"kubelet process exiting with code {code} (external restart)")
        self._request_exit(code, "external restart")

    def _request_exit(self, code: int, reason: str) -> None:
        if self._exit is not None and not self._exit.done():
            self._exit.set_result(code)

    async def _birth_cry(self) -> None:
        """``Starting kubelet.`` (through the event recorder: best effort, retried a few times)."""
        now = nodeobject.now_rfc3339()
        body = {
            "apiVersion": "v1",
            "kind": "Event",
            # the recorder names events <object>.<hex unix nanos>, like the restart event (E19)
            "metadata": {"name": f"{self.name}.{time.time_ns():x}", "namespace": "default"},
            "involvedObject": {"kind": "Node", "name": self.name, "uid": self.name, "namespace": ""},
            "reason": "Starting",
            "message": "Starting kubelet.",
            "type": "Normal",
            "count": 1,
            "firstTimestamp": now,
            "lastTimestamp": now,
            "source": {"component": "kubelet", "host": self.name},
        }
        for _ in range(12):
            try:
                await self.client.create("/api/v1/namespaces/default/events", body)
                return
            except Exception:  # noqa: BLE001 - events are best effort
                await asyncio.sleep(max(0.5, self.timings.scaled("sync_period") / 10))

    # --------------------------------------------------------------------------- configs
    def _local(self) -> tuple[Config, dict[str, Any], FeatureGates]:
        """Flags + ``--config`` file + flag precedence, validated: the process's baseline."""
        if self.host is not None:
            return self._from_host(self.host)
        key = json.dumps([self.spec.kubelet.model_dump(mode="json"), self.minor, self.dkc], sort_keys=True)
        if key not in _LOCAL_CACHE:  # pools share one setup: 5,000 nodes, a handful of decodes
            try:
                _LOCAL_CACHE[key] = _load_local(self.spec.kubelet, self.minor, self.dkc)
            except StartupError as exc:
                _LOCAL_CACHE[key] = exc
        result = _LOCAL_CACHE[key]
        if isinstance(result, StartupError):
            raise result
        local, flag_values, gates, warnings = result
        for warning in warnings:
            self.log(logging.WARNING, warning)
        return local, flag_values, gates

    def _from_host(self, host: ModernHost) -> tuple[Config, dict[str, Any], FeatureGates]:
        """Modern mode: base file + drop-ins + kubeadm-flags.env, read fresh at every start."""
        try:
            flags, gates = parse_kubeadm_args(_read(host.flags_env))
            cmd = CommandLine(
                config=host.config_file,
                config_dir=host.dropin_dir if self.spec.kubelet.config_dir else None,
                flags=flags,
                feature_gates=gates,
                environment=self._environment,
            )
            started = load_start_config(cmd, self.minor, host.root)
        except StartError as exc:
            raise StartupError(str(exc)) from exc
        for warning in started.warnings:
            self.log(logging.WARNING, warning)
        return started.config, {}, started.gates

    def _load_checkpoint(self, source: Source, flag_values: dict[str, Any], gates: FeatureGates) -> Config:
        """``loadConfig``: load, transform (flag precedence), validate - each with its own reason."""
        try:
            cfg, warnings = decode_payload(self.store.load(source))
        except (StoreError, LoadError) as exc:
            raise ConfigFailure(st.LOAD_ERROR, str(exc)) from exc
        cm = source["configMap"]
        resolve_relative_paths(cfg, str(self.store.checkpoint_dir(cm["uid"], cm["resourceVersion"])))
        for warning in warnings:
            self.log(logging.WARNING, "kubelet config controller: " + warning)
        try:
            cfg = apply_flags(cfg, flag_values, self.spec.kubelet.feature_gates)
        except Exception as exc:  # noqa: BLE001 - transform failure
            raise ConfigFailure(st.INTERNAL_ERROR, str(exc)) from exc
        try:
            validate(cfg, gates, kubelet_minor=self.minor)
        except ValidationError as exc:
            raise ConfigFailure(st.VALIDATE_ERROR, str(exc)) from exc
        return cfg
