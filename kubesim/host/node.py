"""One simulated host: its files, journal, ``kubelet.service`` and what the API server exposes of it.

Why a separate object from the kubelet: on a real node the kubelet is just the main process of a
unit; the host outlives it, runs the agent's guard commands, keeps the journal, and answers
``systemctl``/``journalctl`` even while the kubelet crash-loops.
"""

from __future__ import annotations

from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Callable

from kubesim.host.journal import Journal
from kubesim.host.layout import KUBELET_UNIT, HostLayout, describe
from kubesim.host.systemctl import Result, Systemctl
from kubesim.host.systemd import KubeletService, MainProcess

ProxyHandler = Callable[[str], "tuple[int, Any]"]


class SimHost:
    """A node's host; ``attach`` the kubelet, then ``service.run()`` boots it."""

    def __init__(self, layout: HostLayout, node: str, time_scale: float, systemd_version: int = 255):
        self.layout = layout
        self.systemd_version = systemd_version
        self.node = node
        self.time_scale = time_scale
        self.logs = Journal(node)
        self.service: KubeletService | None = None
        self._process: MainProcess | None = None
        self._kubelet_endpoint: ProxyHandler | None = None

    # ---- what a modern kubelet reads (kubesim.kubelet.process.ModernHost)
    @property
    def root(self) -> Path:
        return self.layout.root

    @property
    def config_file(self) -> Path:
        return self.layout.config_file

    @property
    def dropin_dir(self) -> Path:
        return self.layout.dropin_dir

    @property
    def flags_env(self) -> Path:
        return self.layout.flags_env

    def journal(self, severity: str, message: str) -> None:
        """A kubelet log line in klog's text format, under the kubelet unit."""
        pid = self._process.pid if self._process is not None else 0
        stamp = datetime.now(timezone.utc).strftime("%m%d %H:%M:%S.%f")
        self.logs.append(KUBELET_UNIT, "kubelet", pid, f"{severity}{stamp} {pid:>7} server.go:0] {message}")

    # ---- wiring
    def attach(self, process: MainProcess, kubelet_endpoint: ProxyHandler) -> KubeletService:
        self._process = process
        self._kubelet_endpoint = kubelet_endpoint
        self.service = KubeletService(
            self.layout, self.node, process, self.logs, self.time_scale, self.systemd_version
        )
        return self.service

    def kubelet_settled(self) -> bool:
        """Nothing to wait for at boot: the kubelet unit is disabled, or its start was tried and
        did not lead to a running kubelet (an ExecStartPre= guard refused it, the unit failed)."""
        if self.service is None:
            return False
        if not self.service.is_enabled(KUBELET_UNIT):
            return True
        state = self.service.state
        return bool(state.starts) and state.sub_state in ("auto-restart", "failed", "dead")

    # ---- the kubesim-only endpoints (/kubesim/v1/hosts/NODE/...)
    async def systemctl(self, args: list[str]) -> Result:
        assert self.service is not None
        return await Systemctl(self.service)(list(args))

    def journal_tail(self, unit: str, lines: int, since: float = 0.0) -> list[str]:
        return self.logs.tail(unit, lines, since)

    def kubelet(self, path: str) -> tuple[int, Any]:
        """The host-local kubelet ports: ``healthz`` (10248) and ``configz``."""
        if self._kubelet_endpoint is None:
            return 503, "connection refused"
        return self._kubelet_endpoint(path)

    def info(self) -> dict[str, Any]:
        return {"node": self.node, **describe(self.layout)}
