"""systemd unit files, as far as the kubelet's service needs them.

Why parse real unit syntax: an agent installs its guard the way it would on a real node (a drop-in
in ``kubelet.service.d`` with ``ExecStartPre=``/``OnFailure=``), and the simulated service manager
must honour exactly what it wrote - including systemd's quirks: drop-ins apply in file-name order,
list settings accumulate and an empty assignment resets them, and nothing changes before
``daemon-reload``.
"""

from __future__ import annotations

import hashlib
import re
import shlex
from dataclasses import dataclass, field
from pathlib import Path

_LIST_KEYS = {("Service", "ExecStartPre"), ("Service", "ExecStart"), ("Service", "Environment"), ("Unit", "OnFailure")}
_SPAN = re.compile(r"(\d+(?:\.\d+)?)\s*(us|ms|msec|s|sec|second|seconds|m|min|minute|minutes|h|hr|hour|hours)?")
_SPAN_SECONDS = {
    None: 1.0, "us": 1e-6, "ms": 1e-3, "msec": 1e-3, "s": 1.0, "sec": 1.0, "second": 1.0, "seconds": 1.0,
    "m": 60.0, "min": 60.0, "minute": 60.0, "minutes": 60.0, "h": 3600.0, "hr": 3600.0, "hour": 3600.0,
    "hours": 3600.0,
}


class UnitFileError(ValueError):
    """A setting the service manager cannot use (logged; the setting is ignored, as systemd does)."""


@dataclass(frozen=True)
class Command:
    """One ``ExecStartPre=``/``ExecStart=`` line."""

    argv: tuple[str, ...]
    ignore_failure: bool = False  # the "-" prefix

    @classmethod
    def parse(cls, text: str) -> "Command":
        ignore = False
        while text and text[0] in "-@+!:":
            ignore = ignore or text[0] == "-"
            text = text[1:]
        argv = tuple(shlex.split(text))
        if not argv:
            raise UnitFileError("empty command line")
        return cls(argv, ignore)


@dataclass(frozen=True)
class UnitSettings:
    """The effective settings of one unit after its drop-ins."""

    name: str
    type: str = "simple"  # simple | oneshot (others are treated as simple)
    exec_start_pre: tuple[Command, ...] = ()
    exec_start: tuple[Command, ...] = ()
    environment: dict[str, str] = field(default_factory=dict)
    restart: str = "no"
    restart_mode: str = "normal"  # systemd 254+: normal | direct
    restart_sec: float = 0.1  # systemd's default RestartSec=100ms
    start_limit_interval: float = 10.0  # DefaultStartLimitIntervalSec
    start_limit_burst: int = 5  # DefaultStartLimitBurst
    timeout_start: float = 90.0  # DefaultTimeoutStartSec
    on_failure: tuple[str, ...] = ()
    sources: tuple[str, ...] = ()
    warnings: tuple[str, ...] = ()


def parse_timespan(text: str) -> float:
    """systemd time span (``10``, ``10s``, ``1min 30s``, ``500ms``, ``infinity`` = 0 = off) -> seconds."""
    text = text.strip()
    if text in ("infinity", ""):
        return 0.0
    pos, total = 0, 0.0
    for match in _SPAN.finditer(text):
        if text[pos : match.start()].strip():
            break
        total += float(match.group(1)) * _SPAN_SECONDS[match.group(2)]
        pos = match.end()
    if text[pos:].strip() or pos == 0:
        raise UnitFileError(f"invalid time span {text!r}")
    return total


def _lines(text: str) -> list[str]:
    """Logical lines: comments dropped, backslash continuations joined."""
    out: list[str] = []
    pending = ""
    for raw in text.splitlines():
        line = raw.strip()
        if not pending and (not line or line[0] in "#;"):
            continue
        if line.endswith("\\"):
            pending += line[:-1] + " "
            continue
        out.append(pending + line)
        pending = ""
    if pending:
        out.append(pending)
    return out


def parse_assignments(text: str) -> list[tuple[str, str, str]]:
    """``[(section, key, value)]`` in file order."""
    section = ""
    out: list[tuple[str, str, str]] = []
    for line in _lines(text):
        if line.startswith("[") and line.endswith("]"):
            section = line[1:-1].strip()
        elif "=" in line:
            key, value = line.split("=", 1)
            out.append((section, key.strip(), value.strip()))
    return out


def unit_sources(unit_dir: Path, name: str) -> list[Path]:
    """The unit file and its ``<name>.d/*.conf`` drop-ins, in the order systemd applies them."""
    sources = [unit_dir / name] if (unit_dir / name).is_file() else []
    dropin_dir = unit_dir / f"{name}.d"
    if dropin_dir.is_dir():
        sources += sorted((p for p in dropin_dir.iterdir() if p.name.endswith(".conf") and p.is_file()), key=lambda p: p.name)
    return sources


def fingerprint(unit_dir: Path, name: str) -> str:
    """Changes whenever a source file changes (for ``NeedDaemonReload``)."""
    digest = hashlib.sha256()
    for path in unit_sources(unit_dir, name):
        digest.update(str(path).encode())
        try:
            digest.update(path.read_bytes())
        except OSError:
            pass
    return digest.hexdigest()


def load_unit(unit_dir: Path, name: str) -> UnitSettings:
    """Read a unit with its drop-ins; unknown keys are ignored, bad values warned about."""
    values: dict[tuple[str, str], list[str]] = {}
    sources = unit_sources(unit_dir, name)
    for path in sources:
        try:
            text = path.read_text()
        except OSError:
            continue
        for section, key, value in parse_assignments(text):
            slot = values.setdefault((section, key), [])
            if (section, key) in _LIST_KEYS:
                if value:
                    slot.append(value)
                else:
                    slot.clear()  # an empty assignment resets a list setting
            else:
                slot[:] = [value]
    return _settings(name, values, tuple(str(p) for p in sources))


def _settings(name: str, values: dict[tuple[str, str], list[str]], sources: tuple[str, ...]) -> UnitSettings:
    warnings: list[str] = []

    def last(section: str, *keys: str) -> str | None:
        found = None
        for key in keys:
            if values.get((section, key)):
                found = values[(section, key)][-1]
        return found

    def commands(key: str) -> tuple[Command, ...]:
        out = []
        for text in values.get(("Service", key), []):
            try:
                out.append(Command.parse(text))
            except (UnitFileError, ValueError) as exc:
                warnings.append(f"{name}: invalid {key}={text}: {exc}, ignoring")
        return tuple(out)

    def span(section: str, default: float, *keys: str) -> float:
        text = last(section, *keys)
        if text is None:
            return default
        try:
            return parse_timespan(text)
        except UnitFileError as exc:
            warnings.append(f"{name}: {exc}, ignoring")
            return default

    environment: dict[str, str] = {}
    for text in values.get(("Service", "Environment"), []):
        for word in shlex.split(text):
            key, _, value = word.partition("=")
            environment[key] = value
    restart = last("Service", "Restart") or "no"
    if restart not in ("no", "always", "on-failure", "on-abnormal", "on-abort", "on-watchdog", "on-success"):
        warnings.append(f"{name}: invalid Restart={restart}, ignoring")
        restart = "no"
    burst_text = last("Unit", "StartLimitBurst")
    burst = int(burst_text) if burst_text and burst_text.isdigit() else 5
    on_failure = tuple(unit for text in values.get(("Unit", "OnFailure"), []) for unit in text.split())
    return UnitSettings(
        name=name,
        type=last("Service", "Type") or "simple",
        exec_start_pre=commands("ExecStartPre"),
        exec_start=commands("ExecStart"),
        environment=environment,
        restart=restart,
        restart_mode=last("Service", "RestartMode") or "normal",
        restart_sec=span("Service", 0.1, "RestartSec"),
        # [Service] StartLimitInterval= is the old spelling (kubeadm's unit still has it)
        start_limit_interval=span(
            "Unit", span("Service", 10.0, "StartLimitInterval"), "StartLimitInterval", "StartLimitIntervalSec"
        ),
        start_limit_burst=burst,
        timeout_start=span("Service", 90.0, "TimeoutStartSec", "TimeoutSec") or 90.0,
        on_failure=tuple(u if "." in u else f"{u}.service" for u in on_failure),
        sources=sources,
        warnings=tuple(warnings),
    )
