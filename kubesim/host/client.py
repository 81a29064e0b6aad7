"""``Cluster.host(node)``: a simulated host seen from a test, over the same HTTPS endpoints an agent
uses (so it works for a cluster in this process and for a ``kubesim up`` child process alike).

Files are read and written directly under ``root`` (same machine), like an agent on the host.
"""

from __future__ import annotations

import json
import ssl
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kubesim import kubeconfig as kubeconfig_mod
from kubesim.host import layout


class HostError(RuntimeError):
    """The host endpoint could not be reached or refused the request."""


@dataclass(frozen=True)
class SystemctlResult:
    exit_code: int
    stdout: str
    stderr: str


@dataclass(frozen=True)
class Host:
    """One node's host: ``root`` plus systemctl/journal/kubelet-port calls (admin or node creds)."""

    root: Path
    node: str
    kubeconfig: Path  # whose credentials to use (the admin's by default)

    # ---- files
    def path(self, host_path: str) -> Path:
        return self.root / host_path.lstrip("/")

    @property
    def config_file(self) -> Path:
        return self.path(layout.CONFIG_FILE)

    @property
    def dropin_dir(self) -> Path:
        return self.path(layout.DROPIN_DIR)

    @property
    def unit_dropin_dir(self) -> Path:
        return self.path(f"{layout.UNIT_DIR}/{layout.KUBELET_UNIT}.d")

    @property
    def unit_dir(self) -> Path:
        return self.path(layout.UNIT_DIR)

    @property
    def flags_env(self) -> Path:
        return self.path(layout.FLAGS_ENV)

    @property
    def node_kubeconfig(self) -> Path:
        """The node's own credentials, as kubeadm leaves them on the host."""
        return self.path(layout.KUBECONFIG)

    def as_node(self) -> "Host":
        """The same host, driven with the node's own credentials."""
        return Host(self.root, self.node, self.node_kubeconfig)

    # ---- endpoints
    def _request(self, method: str, action: str, body: Any = None, query: dict[str, str] | None = None) -> Any:
        info = kubeconfig_mod.read(self.kubeconfig)
        context = ssl.create_default_context(cadata=info.ca_pem.decode())
        url = f"{info.server}/kubesim/v1/hosts/{self.node}/{action}"
        if query:
            url += "?" + urllib.parse.urlencode(query)
        request = urllib.request.Request(
            url,
            data=json.dumps(body).encode() if body is not None else None,
            method=method,
            headers={"Authorization": f"Bearer {info.token}", "Content-Type": "application/json"},
        )
        try:
            with urllib.request.urlopen(request, context=context, timeout=120) as response:
                raw = response.read()
        except urllib.error.HTTPError as exc:
            raise HostError(f"host endpoint answered {exc.code}: {exc.read().decode(errors='replace')}") from None
        except urllib.error.URLError as exc:
            raise HostError(f"cannot reach kubesim at {info.server}: {exc.reason}") from None
        try:
            return json.loads(raw)
        except ValueError:
            return raw.decode()

    def systemctl(self, *args: str) -> SystemctlResult:
        """``systemctl ARGS`` on the host, e.g. ``systemctl("restart", "kubelet")``."""
        answer = self._request("POST", "systemctl", {"args": list(args)})
        return SystemctlResult(int(answer["exitCode"]), answer.get("stdout", ""), answer.get("stderr", ""))

    def show(self, *properties: str, unit: str = "kubelet") -> dict[str, str]:
        """``systemctl show -p A,B unit`` parsed into a dict."""
        out = self.systemctl("show", "-p", ",".join(properties), unit).stdout
        return dict(line.split("=", 1) for line in out.splitlines() if "=" in line)

    def journal(self, unit: str = "kubelet", lines: int = 50, since: float = 0.0) -> list[str]:
        """``journalctl -u UNIT -n LINES [--since @SINCE]`` (``since``: unix seconds)."""
        query = {"unit": unit, "lines": str(lines), "since": repr(since)}
        return list(self._request("GET", "journal", query=query)["lines"])

    def healthz(self) -> tuple[int, str]:
        """The kubelet's ``127.0.0.1:10248/healthz``: (200, "ok") or (503, reason)."""
        try:
            return 200, str(self._request("GET", "kubelet/healthz"))
        except HostError as exc:
            return 503, str(exc)

    def configz(self) -> dict[str, Any]:
        """The running kubelet's merged config (``{"kubeletconfig": {...}}``)."""
        return dict(self._request("GET", "kubelet/configz"))
