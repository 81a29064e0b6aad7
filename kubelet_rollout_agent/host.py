"""The node's host, as the agent needs it: files under a root, a service manager, the kubelet.

Why a protocol: the same agent runs on a real node (a privileged pod that sees the host's
filesystem under a mount and reaches systemd through ``nsenter``) and on kubesim's simulated
hosts (a directory per node, a service manager driven over HTTPS). Everything above this module
speaks only :class:`Host`; host paths are always written host-absolute (``/etc/kubernetes/...``)
and mapped under ``root`` by :meth:`Host.path`.
"""

from __future__ import annotations

import logging
import os
import subprocess
import urllib.error
import urllib.request
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Protocol

from kubelet_rollout_agent import names
from kubelet_rollout_agent.state import UnitStatus

logger = logging.getLogger("kubelet_rollout_agent.host")

# Lines of the kubelet's log that say the config is at fault (modern-kubelet.md, "Signals").
ERROR_MARKERS = ("failed to load kubelet", "failed to merge kubelet", "failed to validate kubelet",
                 "command failed", "failed to run kubelet")  # compared lower-cased
_SHOW_PROPERTIES = "ActiveState,SubState,NRestarts,ExecMainStartTimestamp"


@dataclass(frozen=True)
class CommandResult:
    exit_code: int
    stdout: str = ""
    stderr: str = ""

    @property
    def ok(self) -> bool:
        return self.exit_code == 0


class Host(Protocol):
    """What the agent does on its node. ``root`` is where host-absolute paths live."""

    node: str
    root: Path

    def path(self, host_path: str) -> Path:
        """A host-absolute path as a local one (``root / host_path``)."""
        ...

    def systemctl(self, *args: str) -> CommandResult:
        """Run ``systemctl ARGS`` on the host."""
        ...

    def journal(self, unit: str = names.KUBELET_UNIT, lines: int = 50) -> list[str]:
        """The unit's last journal lines, oldest first."""
        ...

    def kubelet_healthz(self) -> bool:
        """The kubelet's ``127.0.0.1:10248/healthz`` answers ok."""
        ...

    def kubelet_configz(self) -> dict[str, Any] | None:
        """The running kubelet's configz (``{"kubeletconfig": {...}}``); None while it is down."""
        ...


def under_root(root: Path, host_path: str) -> Path:
    return root / host_path.lstrip("/")


def parse_show(text: str) -> dict[str, str]:
    """``systemctl show`` output (``Key=value`` lines) as a dict."""
    pairs = (line.split("=", 1) for line in text.splitlines() if "=" in line)
    return {key.strip(): value.strip() for key, value in pairs}


def _timestamp(text: str) -> datetime | None:
    """systemd's ``Tue 2026-11-24 02:06:13 UTC``; None for empty or other zones."""
    try:
        return datetime.strptime(text, "%a %Y-%m-%d %H:%M:%S UTC").replace(tzinfo=timezone.utc)
    except ValueError:
        return None


def unit_status(host: Host, unit: str = names.KUBELET_UNIT) -> UnitStatus:
    """The unit's state and restart counter; an empty status when systemctl cannot tell."""
    result = host.systemctl("show", unit, "-p", _SHOW_PROPERTIES)
    if not result.ok:
        logger.warning("node %s: systemctl show %s failed: %s", host.node, unit, result.stderr.strip())
        return UnitStatus()
    props = parse_show(result.stdout)
    restarts = props.get("NRestarts", "0")
    return UnitStatus(active_state=props.get("ActiveState", ""),
                      n_restarts=int(restarts) if restarts.isdigit() else 0,
                      started_at=_timestamp(props.get("ExecMainStartTimestamp", "")))


def last_error_line(host: Host, lines: int = 200) -> str:
    """The kubelet's last log line that names a config failure ("" when none)."""
    try:
        journal = host.journal(names.KUBELET_UNIT, lines)
    except Exception as exc:  # the journal is a hint; never let it stop a rollback
        logger.info("node %s: journal unavailable: %s", host.node, exc)
        return ""
    return next((line.strip() for line in reversed(journal) if any(m in line.lower() for m in ERROR_MARKERS)), "")


class SystemdHost:
    """A real node, seen from a privileged pod (or from the host itself).

    Files: under ``root`` (the hostPath mount, ``/host`` in the DaemonSet; ``$HOST_ROOT`` or
    ``/`` when running on the host). systemd: ``systemctl``/``journalctl`` run in the host's
    namespaces through ``nsenter -t 1`` (needs ``hostPID`` and privileges), so they talk to the
    host's systemd, not to a container's. healthz: plain HTTP on the host network. configz comes
    through the API server's node proxy (``configz`` callable), which needs no kubelet client
    certificate on the agent's side.
    """

    NSENTER = ("nsenter", "-t", "1", "-m", "-u", "-i", "-n", "-p")

    def __init__(self, node: str, *, root: Path | None = None,
                 configz: Callable[[], dict[str, Any] | None] = lambda: None,
                 command_prefix: Sequence[str] | None = None,
                 healthz_url: str = "http://127.0.0.1:10248/healthz",
                 run: Callable[..., subprocess.CompletedProcess[str]] = subprocess.run) -> None:
        self.node = node
        self.root = root or Path(os.environ.get("HOST_ROOT") or "/")
        self._configz = configz
        self._prefix = tuple(self.NSENTER if command_prefix is None else command_prefix)
        self._healthz_url = healthz_url
        self._run = run

    def path(self, host_path: str) -> Path:
        return under_root(self.root, host_path)

    def _command(self, *argv: str, timeout: float = 120.0) -> CommandResult:
        try:
            done = self._run([*self._prefix, *argv], capture_output=True, text=True,
                             timeout=timeout, check=False)
        except (OSError, subprocess.SubprocessError) as exc:
            return CommandResult(127, "", f"{argv[0]}: {exc}")
        return CommandResult(done.returncode, done.stdout, done.stderr)

    def systemctl(self, *args: str) -> CommandResult:
        return self._command("systemctl", *args)

    def journal(self, unit: str = names.KUBELET_UNIT, lines: int = 50) -> list[str]:
        result = self._command("journalctl", "-u", unit, "-n", str(lines), "--no-pager", "-o", "short")
        return result.stdout.splitlines() if result.ok else []

    def kubelet_healthz(self) -> bool:
        try:
            with urllib.request.urlopen(self._healthz_url, timeout=5) as resp:  # noqa: S310 - fixed local URL
                return bool(resp.status == 200)
        except (urllib.error.URLError, OSError):
            return False

    def kubelet_configz(self) -> dict[str, Any] | None:
        return self._configz()
