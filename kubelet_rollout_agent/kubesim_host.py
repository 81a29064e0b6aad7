"""A kubesim simulated host: real files under its host root, systemd over kubesim's HTTPS API.

Why it exists: kubesim's modern mode gives every node a host root
(``<state-dir>/nodes/<node>/host``) and a systemd-like service manager reached at
``/kubesim/v1/hosts/<node>/...`` on the simulated API server. An agent pointed at it runs the
same code as on a real node; only this class differs from :class:`~.host.SystemdHost`.

Credentials: the node's own (``system:node:<node>``, the host's ``/etc/kubernetes/kubelet.conf``),
as a real agent on the host would have; kubesim allows a node to drive only its own host.
Nothing here imports kubesim: it is spoken to over HTTP only.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

from rollout.errors import GatewayError
from rollout.names import SIMULATOR_MARKER

from kubelet_rollout_agent import names
from kubelet_rollout_agent.api import RawApi
from kubelet_rollout_agent.host import CommandResult, under_root

NODE_KUBECONFIG = "/etc/kubernetes/kubelet.conf"


def kubesim_time_scale(raw: RawApi) -> float:
    """How many times faster than the wall clock kubesim runs its kubelets and hosts: the field
    of ``/version`` only kubesim serves (docs/kubesim.md). ``GatewayError`` when the API server
    is not kubesim."""
    answer = raw.request("GET", "/version")
    marker = answer.get(SIMULATOR_MARKER) if isinstance(answer, dict) else None
    try:
        scale = float(marker) if marker is not None else 0.0
    except ValueError:
        scale = 0.0
    if not (math.isfinite(scale) and scale > 0):
        version = answer.get("gitVersion", "?") if isinstance(answer, dict) else "?"
        raise GatewayError(f"the API server (version {version}) is not kubesim: its /version has no valid "
                           f"{SIMULATOR_MARKER}, so these are not simulated hosts")
    return scale


class KubesimHost:
    """``root``: the node's host root; ``raw``: requests with credentials allowed on this host."""

    def __init__(self, node: str, *, root: Path, raw: RawApi) -> None:
        self.node = node
        self.root = root
        self._raw = raw

    @property
    def _base(self) -> str:
        return f"/kubesim/v1/hosts/{self.node}"

    def path(self, host_path: str) -> Path:
        return under_root(self.root, host_path)

    def systemctl(self, *args: str) -> CommandResult:
        answer = self._raw.request("POST", f"{self._base}/systemctl", body={"args": list(args)})
        return CommandResult(int(answer.get("exitCode", 1)), str(answer.get("stdout", "")),
                             str(answer.get("stderr", "")))

    def journal(self, unit: str = names.KUBELET_UNIT, lines: int = 50) -> list[str]:
        answer = self._raw.request("GET", f"{self._base}/journal", query={"unit": unit, "lines": str(lines)})
        return [str(line) for line in answer.get("lines", [])] if isinstance(answer, dict) else []

    def kubelet_healthz(self) -> bool:
        try:
            self._raw.request("GET", f"{self._base}/kubelet/healthz", retry=False)
        except GatewayError:
            return False  # 503 while the kubelet is down
        return True

    def kubelet_configz(self) -> dict[str, Any] | None:
        try:
            answer = self._raw.request("GET", f"{self._base}/kubelet/configz", retry=False)
        except GatewayError:
            return None
        return answer if isinstance(answer, dict) else None
