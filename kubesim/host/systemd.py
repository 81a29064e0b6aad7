"""A service manager with systemd semantics for one host's ``kubelet.service`` (and the units an
agent installs: an ``OnFailure=`` oneshot, or the agent itself as a host daemon).

Why simulate systemd rather than a bare restart loop: on a modern node the service manager is what
turns a bad drop-in into a crash loop (``Restart=always``), what an agent's guard hooks into
(``ExecStartPre=`` before every start, ``OnFailure=`` once the unit gives up), and what a health
check reads (``NRestarts``, ``ActiveState``, ``Result``). Commands run as real subprocesses with
``HOST_ROOT`` set, so a guard written for a real host runs unchanged.

State names and journal lines follow systemd 249-255. Periods (``RestartSec``,
``StartLimitIntervalSec``, ``TimeoutStartSec``) are divided by the cluster's time scale.
"""

from __future__ import annotations

import asyncio
import collections
import logging
import os
import time
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Mapping, Optional, Protocol

from kubesim.host.journal import Journal
from kubesim.host.layout import KUBELET_UNIT, WANTS_DIR, HostLayout
from kubesim.host.unitfile import Command, UnitSettings, fingerprint, load_unit

log = logging.getLogger("kubesim.host")


class MainProcess(Protocol):
    """The unit's main process (the simulated kubelet): one ``run_once`` per process life."""

    @property
    def pid(self) -> int: ...

    async def run_once(self, environment: Mapping[str, str]) -> int: ...

    def terminate(self) -> None: ...

    async def before_restart(self) -> None:
        """Hold an automatic restart (kubesim's slow-restart / never-return node faults)."""
        ...


@dataclass
class UnitState:
    """What ``systemctl show`` reports for a unit."""

    active_state: str = "inactive"
    sub_state: str = "dead"
    result: str = "success"
    n_restarts: int = 0
    exec_main_status: int = 0
    exec_main_pid: int = 0
    active_enter: float = 0.0  # wall clock
    active_enter_monotonic: float = 0.0
    main_start: float = 0.0
    main_start_monotonic: float = 0.0
    starts: collections.deque[float] = field(default_factory=lambda: collections.deque(maxlen=64))


def systemd_timestamp(wall: float) -> str:
    if not wall:
        return ""
    return datetime.fromtimestamp(wall, timezone.utc).strftime("%a %Y-%m-%d %H:%M:%S UTC")


def _die_with_parent() -> None:
    """In the child: SIGKILL when kubesim dies, even by ``kill -9`` (a host's processes do not
    outlive its machine). Linux ``prctl(PR_SET_PDEATHSIG)``; elsewhere a no-op."""
    try:
        import ctypes

        ctypes.CDLL(None, use_errno=True).prctl(1, 9)  # PR_SET_PDEATHSIG, SIGKILL
    except (OSError, AttributeError):
        pass


class CommandRunner:
    """Runs unit commands as subprocesses on behalf of one host (env, cwd, path resolution)."""

    def __init__(self, layout: HostLayout, node: str, journal: Journal, time_scale: float):
        self.layout = layout
        self.node = node
        self.journal = journal
        self.time_scale = time_scale

    def environment(self, unit: UnitSettings) -> dict[str, str]:
        env = dict(os.environ)
        env.update(unit.environment)
        env["HOST_ROOT"] = str(self.layout.root.resolve())
        env["KUBESIM_NODE"] = self.node
        return env

    def resolve(self, argv0: str) -> str:
        """A host-absolute program path is looked up under the host root first."""
        if argv0.startswith("/"):
            candidate = self.layout.path(argv0)
            if candidate.is_file():
                return str(candidate)
        return argv0

    async def run(
        self, unit: UnitSettings, command: Command, journal_unit: str, timeout: float | None = -1.0
    ) -> int:
        """Run to completion (within ``TimeoutStartSec`` unless ``timeout`` is None: a daemon);
        output goes to ``journal_unit``."""
        ident = os.path.basename(command.argv[0])
        argv = [self.resolve(command.argv[0]), *command.argv[1:]]
        try:
            proc = await asyncio.create_subprocess_exec(
                *argv,
                cwd=str(self.layout.root),
                env=self.environment(unit),
                stdin=asyncio.subprocess.DEVNULL,
                stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.STDOUT,
                start_new_session=True,
                preexec_fn=_die_with_parent,
            )
        except OSError as exc:
            self.journal.append(journal_unit, "(" + ident + ")", 0, f"{exc.strerror}: {argv[0]}")
            self.journal.systemd(journal_unit, f"{journal_unit}: Failed to locate executable {argv[0]}: {exc.strerror}")
            return 203  # EXIT_EXEC
        try:
            limit = unit.timeout_start / self.time_scale if timeout is not None else None
            await asyncio.wait_for(self._pump(proc, ident, journal_unit), limit)
        except asyncio.TimeoutError:
            await self._kill(proc)
            return -1
        except asyncio.CancelledError:  # the job was cancelled (systemctl stop): no orphans
            await self._kill(proc)
            raise
        return await proc.wait()

    @staticmethod
    async def _kill(proc: asyncio.subprocess.Process) -> None:
        try:
            os.killpg(proc.pid, 9)
        except ProcessLookupError:
            pass
        await proc.wait()

    async def _pump(self, proc: asyncio.subprocess.Process, ident: str, journal_unit: str) -> None:
        assert proc.stdout is not None
        async for raw in proc.stdout:
            self.journal.append(journal_unit, ident, proc.pid, raw.decode(errors="replace").rstrip("\n"))
        await proc.wait()


class HostUnit:
    """Any other host unit an agent installs: ``Type=oneshot`` (e.g. an ``OnFailure=`` target: run
    ``ExecStart=`` once per start) or ``Type=simple`` (a daemon such as the agent itself: the
    ``ExecStart=`` process is the main process, restarted per ``Restart=``/``RestartSec=``).

    The unit file is read at each start (systemd loads a unit it has not loaded yet on demand).
    """

    def __init__(self, name: str, runner: CommandRunner):
        self.name = name
        self.runner = runner
        self.state = UnitState()
        self.runs = 0
        self._task: Optional[asyncio.Task[None]] = None

    def exists(self) -> bool:
        return (self.runner.layout.unit_dir / self.name).is_file()

    @property
    def journal(self) -> Journal:
        return self.runner.journal

    def start(self) -> None:
        if self._task is not None and not self._task.done():
            return  # already active/activating: systemd merges the job
        self.state.n_restarts = 0
        self._task = asyncio.create_task(self._run(), name=f"{self.runner.node}-{self.name}")
        self._task.add_done_callback(_log_crash)

    async def wait(self) -> None:
        """Until a oneshot finished (a daemon: until it runs)."""
        while self._task is not None and not self._task.done() and self.state.sub_state in ("dead", "start"):
            await asyncio.sleep(0.01)
        if self._task is not None and self._task.done():
            await asyncio.gather(self._task, return_exceptions=True)

    async def stop(self) -> None:
        if self._task is not None and not self._task.done():
            self._task.cancel()  # cancelling the runner kills the process group
            await asyncio.gather(self._task, return_exceptions=True)
            self.journal.systemd(self.name, f"Stopped {self.name}.")
        if self.state.active_state != "failed":
            self.state.active_state, self.state.sub_state = "inactive", "dead"

    def cancel(self) -> None:
        if self._task is not None:
            self._task.cancel()

    async def _run(self) -> None:
        unit = load_unit(self.runner.layout.unit_dir, self.name)
        self.runs += 1
        self.state.active_state, self.state.sub_state = "activating", "start"
        self.journal.systemd(self.name, f"Starting {self.name}...")
        if unit.type == "oneshot":
            await self._oneshot(unit)
        else:
            await self._daemon(unit)

    async def _oneshot(self, unit: UnitSettings) -> None:
        code = 0
        for command in unit.exec_start:
            code = await self.runner.run(unit, command, self.name)
            if code != 0 and not command.ignore_failure:
                break
            code = 0
        self._exited(code)
        if code == 0:
            self.journal.systemd(self.name, f"Finished {self.name}.")

    async def _daemon(self, unit: UnitSettings) -> None:
        if not unit.exec_start:
            self.journal.systemd(self.name, f"{self.name}: Service has no ExecStart= setting. Refusing.")
            self._exited(1)
            return
        while True:
            self.state.active_state, self.state.sub_state = "active", "running"
            self.state.active_enter, self.state.active_enter_monotonic = time.time(), time.monotonic()
            self.journal.systemd(self.name, f"Started {self.name}.")
            code = await self.runner.run(unit, unit.exec_start[0], self.name, timeout=None)
            failed = code != 0
            if not (unit.restart == "always" or (unit.restart == "on-failure" and failed)):
                self._exited(code)
                return
            self.state.exec_main_status = code
            self.state.active_state, self.state.sub_state = "activating", "auto-restart"
            await asyncio.sleep(unit.restart_sec / self.runner.time_scale)
            self.state.n_restarts += 1
            self.journal.systemd(
                self.name, f"{self.name}: Scheduled restart job, restart counter is at {self.state.n_restarts}."
            )

    def _exited(self, code: int) -> None:
        self.state.exec_main_status = code
        if code == 0:
            self.state.active_state, self.state.sub_state, self.state.result = "inactive", "dead", "success"
            self.journal.systemd(self.name, f"{self.name}: Deactivated successfully.")
        else:
            self.state.active_state, self.state.sub_state, self.state.result = "failed", "failed", "exit-code"
            self.journal.systemd(self.name, f"{self.name}: Main process exited, code=exited, status={code}/FAILURE")
            self.journal.systemd(self.name, f"{self.name}: Failed with result 'exit-code'.")


def _log_crash(task: "asyncio.Task[None]") -> None:
    """A bug in the simulator must not vanish silently in a background task."""
    if not task.cancelled() and task.exception() is not None:
        log.error("%s crashed", task.get_name(), exc_info=task.exception())


class StartFailed(Exception):
    """A start job failed (``systemctl start`` prints systemd's job failure message)."""

    def __init__(self, unit: str, why: str):
        self.unit = unit
        self.why = why
        super().__init__(why)


class KubeletService:
    """``kubelet.service`` on one host: start/stop/restart, auto-restart, start limit, OnFailure."""

    def __init__(
        self,
        layout: HostLayout,
        node: str,
        process: MainProcess,
        journal: Journal,
        time_scale: float,
        systemd_version: int = 255,
    ):
        self.layout = layout
        self.systemd_version = systemd_version
        self.node = node
        self.process = process
        self.journal = journal
        self.time_scale = time_scale
        self.runner = CommandRunner(layout, node, journal, time_scale)
        self.state = UnitState()
        self.unit = load_unit(layout.unit_dir, KUBELET_UNIT)
        self._loaded = fingerprint(layout.unit_dir, KUBELET_UNIT)
        self._cycle: Optional[asyncio.Task[None]] = None
        self._started: Optional[asyncio.Future[None]] = None
        self._stopping = False
        # set when the unit ends up dead/failed without an automatic restart; the counter is
        # flushed at the next start, so it can still be read in between (service_enter_dead)
        self._flush_n_restarts = False
        self.units: dict[str, HostUnit] = {}

    # ----------------------------------------------------------------------------- unit files
    def daemon_reload(self) -> None:
        self.unit = load_unit(self.layout.unit_dir, KUBELET_UNIT)
        self._loaded = fingerprint(self.layout.unit_dir, KUBELET_UNIT)
        for warning in self.unit.warnings:
            self.journal.systemd(KUBELET_UNIT, warning)

    @property
    def need_daemon_reload(self) -> bool:
        return fingerprint(self.layout.unit_dir, KUBELET_UNIT) != self._loaded

    def other(self, name: str) -> HostUnit:
        """Another unit of this host by name (it may not exist: see ``HostUnit.exists``)."""
        if name not in self.units:
            self.units[name] = HostUnit(name, self.runner)
        return self.units[name]

    # ------------------------------------------------------------------------ enable / boot
    def wants_dir(self) -> Path:
        return self.layout.unit_dir / WANTS_DIR

    def is_enabled(self, name: str) -> bool:
        return (self.wants_dir() / name).is_symlink() or (self.wants_dir() / name).exists()

    def enable(self, name: str) -> None:
        self.wants_dir().mkdir(parents=True, exist_ok=True)
        link = self.wants_dir() / name
        if not link.is_symlink():
            link.symlink_to(f"../{name}")

    def disable(self, name: str) -> None:
        link = self.wants_dir() / name
        if link.is_symlink() or link.exists():
            link.unlink()

    # ------------------------------------------------------------------------------ commands
    async def start(self) -> None:
        """``systemctl start``: returns once the process runs; raises :class:`StartFailed`."""
        if self.state.active_state in ("active", "activating") and self._cycle and not self._cycle.done():
            if self.state.sub_state != "auto-restart":
                return
            self._cycle.cancel()  # a start during RestartSec starts at once (the restart job is replaced)
            await asyncio.gather(self._cycle, return_exceptions=True)
        if self._flush_n_restarts:  # service.c: the first start after the unit went dead or failed
            self.state.n_restarts, self._flush_n_restarts = 0, False
        loop = asyncio.get_running_loop()
        self._started = loop.create_future()
        self._stopping = False
        self._cycle = asyncio.create_task(self._run_cycle(), name=f"{self.node}-kubelet.service")
        self._cycle.add_done_callback(_log_crash)
        await asyncio.shield(self._started)

    async def stop(self) -> None:
        """``systemctl stop``: SIGTERM the process, no auto-restart."""
        if self._cycle is None or self._cycle.done():
            if self.state.active_state == "failed":
                return  # stop leaves a failed unit failed
            self._set("inactive", "dead")
            return
        self._stopping = True
        self.journal.systemd(KUBELET_UNIT, "Stopping kubelet.service - kubelet: The Kubernetes Node Agent...")
        if self.state.sub_state == "running":
            self.process.terminate()
            await asyncio.gather(self._cycle, return_exceptions=True)
        else:
            self._cycle.cancel()
            await asyncio.gather(self._cycle, return_exceptions=True)
        self._set("inactive", "dead")
        self.state.result = "success"
        self._flush_n_restarts = True
        self.journal.systemd(KUBELET_UNIT, "kubelet.service: Deactivated successfully.")
        self.journal.systemd(KUBELET_UNIT, "Stopped kubelet.service - kubelet: The Kubernetes Node Agent.")

    async def restart(self) -> None:
        await self.stop()
        await self.start()

    def reset_failed(self) -> None:
        self.state.starts.clear()
        self.state.n_restarts = 0
        if self.state.active_state == "failed":
            self._set("inactive", "dead")
            self.state.result = "success"

    # ------------------------------------------------------------------------------- the cycle
    def _set(self, active: str, sub: str) -> None:
        if active == "active" and self.state.active_state != "active":
            self.state.active_enter, self.state.active_enter_monotonic = time.time(), time.monotonic()
        self.state.active_state, self.state.sub_state = active, sub

    def _report(self, error: Optional[StartFailed]) -> None:
        if self._started is not None and not self._started.done():
            if error is None:
                self._started.set_result(None)
            else:
                self._started.set_exception(error)

    def _start_limit_hit(self) -> bool:
        interval = self.unit.start_limit_interval / self.time_scale
        burst = self.unit.start_limit_burst
        now = time.monotonic()
        if interval <= 0 or burst <= 0:
            return False
        recent = [t for t in self.state.starts if now - t < interval]
        return len(recent) >= burst

    async def _run_cycle(self) -> None:
        """Start attempts until the process runs and exits for good (or the unit fails)."""
        try:
            while True:
                if self._start_limit_hit():
                    self.journal.systemd(KUBELET_UNIT, "kubelet.service: Start request repeated too quickly.")
                    self._fail("start-limit-hit")
                    self._report(StartFailed(KUBELET_UNIT, "start-limit-hit"))
                    return
                self.state.starts.append(time.monotonic())
                failed = await self._attempt()
                if self._stopping:
                    return
                if not self._should_restart(failed):
                    self._finish(failed)
                    return
                if failed and self._restart_passes_through_failed():
                    self._trigger_on_failure()
                await self._auto_restart_wait()
        except asyncio.CancelledError:
            self._report(StartFailed(KUBELET_UNIT, "canceled"))
            raise

    async def _attempt(self) -> bool:
        """One start: ExecStartPre= then the main process; True when it ended in failure."""
        self._set("activating", "start-pre")
        for command in self.unit.exec_start_pre:
            code = await self.runner.run(self.unit, command, KUBELET_UNIT)
            if code != 0 and not command.ignore_failure:
                self.state.result = "timeout" if code == -1 else "exit-code"
                status = "killed" if code == -1 else f"exited, status={code}/FAILURE"
                self.journal.systemd(KUBELET_UNIT, f"kubelet.service: Control process exited, code={status}")
                self.journal.systemd(KUBELET_UNIT, f"kubelet.service: Failed with result '{self.state.result}'.")
                self.journal.systemd(KUBELET_UNIT, "Failed to start kubelet.service - kubelet: The Kubernetes Node Agent.")
                self._report(StartFailed(KUBELET_UNIT, "control-process"))
                return True
        self._set("active", "running")
        self.state.main_start, self.state.main_start_monotonic = time.time(), time.monotonic()
        self.state.exec_main_pid = self.process.pid
        self.journal.systemd(KUBELET_UNIT, "Started kubelet.service - kubelet: The Kubernetes Node Agent.")
        self._report(None)
        code = await self.process.run_once(self.unit.environment)
        self.state.exec_main_status = code
        self.state.exec_main_pid = 0
        if self._stopping:
            return False
        if code == 0:
            self.journal.systemd(KUBELET_UNIT, "kubelet.service: Deactivated successfully.")
            self.state.result = "success"
            return False
        self.journal.systemd(KUBELET_UNIT, f"kubelet.service: Main process exited, code=exited, status={code}/FAILURE")
        self.journal.systemd(KUBELET_UNIT, "kubelet.service: Failed with result 'exit-code'.")
        self.state.result = "exit-code"
        return True

    def _should_restart(self, failed: bool) -> bool:
        return self.unit.restart == "always" or (self.unit.restart == "on-failure" and failed)

    async def _auto_restart_wait(self) -> None:
        self._set("activating", "auto-restart")
        await asyncio.sleep(self.unit.restart_sec / self.time_scale)
        await self.process.before_restart()
        self.state.n_restarts += 1
        self.journal.systemd(
            KUBELET_UNIT, f"kubelet.service: Scheduled restart job, restart counter is at {self.state.n_restarts}."
        )
        self.journal.systemd(KUBELET_UNIT, "Stopped kubelet.service - kubelet: The Kubernetes Node Agent.")

    def _finish(self, failed: bool) -> None:
        self._flush_n_restarts = True
        if failed:
            self._fail(self.state.result)
        else:
            self._set("inactive", "dead")

    def _fail(self, result: str) -> None:
        self._flush_n_restarts = True
        self.state.result = result
        self._set("failed", "failed")
        if result == "start-limit-hit":
            self.journal.systemd(KUBELET_UNIT, "kubelet.service: Failed with result 'start-limit-hit'.")
            self.journal.systemd(KUBELET_UNIT, "Failed to start kubelet.service - kubelet: The Kubernetes Node Agent.")
        self._trigger_on_failure()

    def _restart_passes_through_failed(self) -> bool:
        """systemd 254+ with the default ``RestartMode=normal``: a failure followed by an automatic
        restart still enters ``failed`` for a moment (``SERVICE_FAILED_BEFORE_AUTO_RESTART``), so
        ``OnFailure=`` runs on *every* crash; older systemd, or ``RestartMode=direct``, only when
        the unit finally gives up."""
        return self.systemd_version >= 254 and self.unit.restart_mode != "direct"

    def _trigger_on_failure(self) -> None:
        if self.unit.on_failure:
            self.journal.systemd(KUBELET_UNIT, "kubelet.service: Triggering OnFailure= dependencies.")
        for name in self.unit.on_failure:
            target = self.other(name)
            if target.exists():
                target.start()
            else:
                self.journal.systemd(KUBELET_UNIT, f"Failed to enqueue OnFailure= job, ignoring: Unit {name} not found.")

    # --------------------------------------------------------------------------- background
    async def run(self) -> None:
        """Boot: start every enabled unit (kubelet first; a failing start is left to Restart=)."""
        try:
            if self.is_enabled(KUBELET_UNIT):
                try:
                    await self.start()
                except StartFailed:
                    pass
            for name in sorted(p.name for p in self.wants_dir().glob("*") if p.name != KUBELET_UNIT):
                unit = self.other(name)
                if unit.exists():
                    unit.start()
            await asyncio.Event().wait()
        finally:
            await self.close()

    async def close(self) -> None:
        if self._cycle is not None:
            self._cycle.cancel()
            await asyncio.gather(self._cycle, return_exceptions=True)
        for unit in self.units.values():
            unit.cancel()
        await asyncio.gather(*(u.stop() for u in self.units.values()), return_exceptions=True)

