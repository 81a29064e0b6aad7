"""``systemctl`` and ``journalctl`` for a simulated host: argument parsing and systemd's output.

Why mirror the CLI instead of offering a bespoke API: an agent's host layer on a real node shells
out to ``systemctl show -p ActiveState,SubState,NRestarts`` and parses ``Key=value`` lines; on a
simulated node it sends the same arguments over HTTPS and parses the same text.
"""

from __future__ import annotations

from dataclasses import dataclass

from kubesim.host.layout import KUBELET_UNIT
from kubesim.host.systemd import KubeletService, HostUnit, StartFailed, UnitState, systemd_timestamp

EXIT_UNIT_NOT_FOUND = 5
EXIT_NOT_ACTIVE = 3
_STATE_VERBS = ("is-active", "is-failed")
_VERBS = frozenset(
    {
        "start", "stop", "restart", "try-restart", "reload-or-restart", "reset-failed", "show", "status",
        "enable", "disable", "is-enabled", *_STATE_VERBS,
    }
)


@dataclass(frozen=True)
class Result:
    exit_code: int
    stdout: str = ""
    stderr: str = ""

    def to_dict(self) -> dict[str, object]:
        return {"exitCode": self.exit_code, "stdout": self.stdout, "stderr": self.stderr}


def _unit_name(name: str) -> str:
    return name if "." in name else f"{name}.service"


def _state(service: KubeletService | None, other: HostUnit | None) -> UnitState:
    unit = service or other
    assert unit is not None, "a unit that is neither was answered as not found before"
    return unit.state


def _properties(service: KubeletService | None, other: HostUnit | None) -> dict[str, str]:
    state = _state(service, other)
    props = {
        "Id": other.name if other is not None else KUBELET_UNIT,
        "ActiveState": state.active_state,
        "SubState": state.sub_state,
        "Result": state.result,
        "NRestarts": str(state.n_restarts),
        "ExecMainStatus": str(state.exec_main_status),
        "ExecMainPID": str(state.exec_main_pid),
        "MainPID": str(state.exec_main_pid),
        "ActiveEnterTimestamp": systemd_timestamp(state.active_enter),
        "ActiveEnterTimestampMonotonic": str(int(state.active_enter_monotonic * 1e6)),
        "ExecMainStartTimestamp": systemd_timestamp(state.main_start),
        "ExecMainStartTimestampMonotonic": str(int(state.main_start_monotonic * 1e6)),
        "LoadState": "loaded",
    }
    if service is not None:
        unit = service.unit
        props.update(
            {
                "Restart": unit.restart,
                "RestartUSec": _usec(unit.restart_sec),
                "StartLimitBurst": str(unit.start_limit_burst),
                "StartLimitIntervalUSec": _usec(unit.start_limit_interval),
                "OnFailure": " ".join(unit.on_failure),
                "NeedDaemonReload": "yes" if service.need_daemon_reload else "no",
                "DropInPaths": " ".join(p for p in unit.sources if p.endswith(".conf")),
            }
        )
    return props


def _usec(seconds: float) -> str:
    """systemd's rendering of a time span (``10s``, ``100ms``, ``1min 30s``, ``0``)."""
    if seconds <= 0:
        return "0"
    if seconds < 1:
        return f"{int(round(seconds * 1000))}ms"
    minutes, secs = divmod(int(round(seconds)), 60)
    if minutes and secs:
        return f"{minutes}min {secs}s"
    return f"{minutes}min" if minutes else f"{secs}s"


def _show(args: list[str], props: dict[str, str]) -> Result:
    wanted: list[str] = []
    value_only = "--value" in args
    i = 0
    while i < len(args):
        arg = args[i]
        if arg in ("-p", "--property") and i + 1 < len(args):
            wanted += args[i + 1].split(",")
            i += 1
        elif arg.startswith("--property="):
            wanted += arg.split("=", 1)[1].split(",")
        elif arg.startswith("-p") and len(arg) > 2:
            wanted += arg[2:].split(",")
        i += 1
    keys = [k for k in wanted if k] or list(props)
    lines = [props.get(k, "") if value_only else f"{k}={props.get(k, '')}" for k in keys]
    return Result(0, "\n".join(lines) + "\n")


def _units(args: list[str]) -> list[str]:
    """Positional unit names (after the verb), options skipped."""
    out, skip = [], False
    for arg in args:
        if skip:
            skip = False
        elif arg in ("-p", "--property"):
            skip = True
        elif not arg.startswith("-"):
            out.append(_unit_name(arg))
    return out


class Systemctl:
    """The verbs an agent needs, on one host."""

    def __init__(self, service: KubeletService):
        self.service = service

    def _lookup(self, unit: str) -> tuple[KubeletService | None, HostUnit | None]:
        if unit == KUBELET_UNIT:
            return self.service, None
        other = self.service.other(unit)
        return (None, other) if other.exists() else (None, None)

    async def __call__(self, args: list[str]) -> Result:
        args = [a for a in args if a not in ("--no-pager", "--quiet", "-q", "--no-ask-password", "--no-block")]
        if not args:
            return Result(1, stderr="Too few arguments.\n")
        verb, rest = args[0], args[1:]
        if verb == "daemon-reload":
            self.service.daemon_reload()
            return Result(0)
        if verb not in _VERBS:
            return Result(1, stderr=f'Unknown command verb "{verb}".\n')
        units = _units(rest)
        if not units and verb != "show":
            return Result(1, stderr="Too few arguments.\n")
        for unit in units or [KUBELET_UNIT]:
            service, other = self._lookup(unit)
            if service is None and other is None:
                if verb in _STATE_VERBS:
                    return Result(EXIT_NOT_ACTIVE if verb == "is-active" else 1, "inactive\n")
                return Result(EXIT_UNIT_NOT_FOUND, stderr=f"Unit {unit} not found.\n")
        return await self._dispatch(verb, rest, units or [KUBELET_UNIT])

    async def _dispatch(self, verb: str, rest: list[str], units: list[str]) -> Result:
        outputs: list[Result] = []
        for unit in units:
            service, other = self._lookup(unit)
            outputs.append(await self._one(verb, rest, unit, service, other))
        code = max(r.exit_code for r in outputs)
        return Result(code, "".join(r.stdout for r in outputs), "".join(r.stderr for r in outputs))

    async def _one(
        self, verb: str, rest: list[str], unit: str, service: KubeletService | None, other: HostUnit | None
    ) -> Result:
        if verb == "show":
            return _show(rest, _properties(service, other))
        if verb == "is-active":
            state = _state(service, other).active_state
            return Result(0 if state == "active" else EXIT_NOT_ACTIVE, state + "\n")
        if verb == "is-failed":
            state = _state(service, other).active_state
            return Result(0 if state == "failed" else 1, state + "\n")
        if verb == "status":
            return self._status(unit, _properties(service, other))
        if verb in ("enable", "disable", "is-enabled"):
            return await self._enablement(verb, rest, unit)
        if other is not None:
            return await self._other(verb, other)
        assert service is not None
        return await self._kubelet(verb, service)

    async def _kubelet(self, verb: str, service: KubeletService) -> Result:
        try:
            if verb == "start":
                await service.start()
            elif verb == "stop":
                await service.stop()
            elif verb in ("restart", "reload-or-restart"):
                await service.restart()
            elif verb == "try-restart":
                if service.state.active_state in ("active", "activating"):
                    await service.restart()
            elif verb == "reset-failed":
                service.reset_failed()
            else:
                return Result(1, stderr=f'Unknown command verb "{verb}".\n')
        except StartFailed as failed:
            return Result(1, stderr=_job_failed(KUBELET_UNIT, failed.why))
        return Result(0)

    async def _other(self, verb: str, unit: HostUnit) -> Result:
        if verb in ("start", "restart", "try-restart", "reload-or-restart"):
            if verb != "start":
                await unit.stop()
            unit.start()
            await unit.wait()  # a oneshot's start job ends when ExecStart= is done, a daemon's at once
            if unit.state.active_state == "failed":
                return Result(1, stderr=_job_failed(unit.name, "control-process"))
            return Result(0)
        if verb == "stop":
            await unit.stop()
            return Result(0)
        if verb == "reset-failed":
            if unit.state.active_state == "failed":
                unit.state.active_state, unit.state.sub_state = "inactive", "dead"
            return Result(0)
        return Result(1, stderr=f'Unknown command verb "{verb}".\n')

    async def _enablement(self, verb: str, rest: list[str], unit: str) -> Result:
        if verb == "is-enabled":
            enabled = self.service.is_enabled(unit)
            return Result(0 if enabled else 1, "enabled\n" if enabled else "disabled\n")
        if verb == "enable":
            self.service.enable(unit)
            if "--now" in rest:
                return await self._dispatch("start", [], [unit])
            return Result(0)
        self.service.disable(unit)
        if "--now" in rest:
            return await self._dispatch("stop", [], [unit])
        return Result(0)

    def _status(self, unit: str, props: dict[str, str]) -> Result:
        active = props["ActiveState"]
        since = props["ActiveEnterTimestamp"]
        text = (
            f"* {unit}\n"
            f"     Loaded: loaded\n"
            f"     Active: {active} ({props['SubState']}){' since ' + since if since else ''}\n"
            f"   Main PID: {props['ExecMainPID']}\n"
        )
        return Result(0 if active == "active" else EXIT_NOT_ACTIVE, text)


def _job_failed(unit: str, why: str) -> str:
    if why == "start-limit-hit":
        return (
            f"Job for {unit} failed.\n"
            f'See "systemctl status {unit}" and "journalctl -xeu {unit}" for details.\n'
        )
    return (
        f"Job for {unit} failed because the control process exited with error code.\n"
        f'See "systemctl status {unit}" and "journalctl -xeu {unit}" for details.\n'
    )
