"""Fault controls over the admin endpoint ``/kubesim/v1/faults`` (Python API and ``kubesim fault``).

Going through HTTP (not a shared object) means the same calls work for a cluster in this process
and for a ``kubesim up`` in another one; the server applies them with ``Faults.apply``.
"""

from __future__ import annotations

import json
import ssl
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any, Iterable

from kubesim import kubeconfig as kubeconfig_mod


class FaultError(RuntimeError):
    pass


class FaultClient:
    def __init__(self, kubeconfig: str | Path):
        self.info = kubeconfig_mod.read(Path(kubeconfig))

    def _request(self, method: str, body: dict[str, Any] | None = None) -> dict[str, Any]:
        context = ssl.create_default_context(cadata=self.info.ca_pem.decode())
        data = json.dumps(body).encode() if body is not None else None
        request = urllib.request.Request(
            self.info.server + "/kubesim/v1/faults",
            data=data,
            method=method,
            headers={"Authorization": f"Bearer {self.info.token}", "Content-Type": "application/json"},
        )
        try:
            with urllib.request.urlopen(request, context=context, timeout=30) as response:
                answer: dict[str, Any] = json.loads(response.read())
                return answer
        except urllib.error.HTTPError as exc:
            detail = exc.read().decode(errors="replace")
            raise FaultError(f"fault endpoint answered {exc.code}: {detail}") from None
        except urllib.error.URLError as exc:
            raise FaultError(f"cannot reach kubesim at {self.info.server}: {exc.reason}") from None

    def get(self) -> dict[str, Any]:
        return self._request("GET")

    def apply(self, change: dict[str, Any]) -> dict[str, Any]:
        return self._request("PUT", change)

    # --- node faults -----------------------------------------------------------------------

    def partition(self, node: str) -> dict[str, Any]:
        """Cut the node off: no heartbeats, lease renewals or API access from its kubelet."""
        return self.apply({"nodes": {node: {"partitioned": True}}})

    def heal(self, node: str) -> dict[str, Any]:
        """End a partition."""
        return self.apply({"nodes": {node: {"partitioned": False}}})

    def never_return(self, node: str, value: bool = True) -> dict[str, Any]:
        """The kubelet does not come back after its next exit."""
        return self.apply({"nodes": {node: {"never_return": value}}})

    def slow_restart(self, node: str, seconds: float) -> dict[str, Any]:
        return self.apply({"nodes": {node: {"slow_restart": float(seconds)}}})

    # --- API faults ------------------------------------------------------------------------

    def api_errors(
        self,
        rate: float,
        codes: Iterable[int] = (500, 429),
        *,
        include_nodes: bool = False,
        retry_after: int = 1,
        include_control_plane: bool = False,
    ) -> dict[str, Any]:
        return self.apply(
            {
                "api": {
                    "error_rate": float(rate),
                    "error_codes": list(codes),
                    "include_nodes": include_nodes,
                    "retry_after": retry_after,
                    "include_control_plane": include_control_plane,
                }
            }
        )

    def latency(self, seconds: float, *, include_control_plane: bool | None = None) -> dict[str, Any]:
        return self.apply({"api": _with_scope({"latency": float(seconds)}, include_control_plane)})

    def drop_watches(self, on: bool = True, *, include_control_plane: bool | None = None) -> dict[str, Any]:
        return self.apply({"api": _with_scope({"drop_watches": on}, include_control_plane)})

    def blackhole(self, on: bool = True, *, include_nodes: bool | None = None) -> dict[str, Any]:
        """Silence the network path (see ``ApiFault.blackhole``); ``on=False`` heals it for new
        connections. Its own requests (a new connection each) always get through."""
        change: dict[str, Any] = {"blackhole": on}
        if include_nodes is not None:
            change["include_nodes"] = include_nodes
        return self.apply({"api": change})

    def reset(self) -> dict[str, Any]:
        return self.apply({"reset": True})

    # --- fleet-wide workload shifts ------------------------------------------------------------

    def shift(
        self,
        *,
        pod_start: float = 1.0,
        memory: float = 1.0,
        churn: float = 1.0,
        cpu: float = 1.0,
        for_: str | float = "10m",
        at: str | float = "0s",
    ) -> dict[str, Any]:
        """A shift of every node's workload alike, from ``at`` after now for ``for_`` (simulated
        time): pod starts ``pod_start`` times as long, ``memory``/``cpu`` times the use, pods
        coming and going ``churn`` times as often (``kubesim.noise``)."""
        change = {"for": _duration_text(for_), "at": _duration_text(at), "podStart": pod_start, "memory": memory,
                  "churn": churn, "cpu": cpu}
        return self.apply({"shifts": [change]})

    def end_shifts(self) -> dict[str, Any]:
        """End every shift injected at run time (the cluster file's keep their schedule)."""
        return self.apply({"shifts": None})


def _duration_text(value: str | float) -> str:
    return f"{value}s" if isinstance(value, (int, float)) else value


def _with_scope(change: dict[str, Any], include_control_plane: bool | None) -> dict[str, Any]:
    """Leave the control-plane scope as it is unless the caller says (``None``: unchanged)."""
    if include_control_plane is not None:
        change["include_control_plane"] = include_control_plane
    return change
