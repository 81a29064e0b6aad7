"""Scripted faults, switchable while the cluster runs.

One ``Faults`` value is shared by the API server (request-level faults) and the simulated kubelets
(node-level faults). It is plain data: the components consult it at the moment a fault could
apply, so flipping a field takes effect on the next request or the next kubelet step. It is
changed through ``Cluster.faults`` (Python), ``kubesim fault`` (CLI) or the admin endpoint
``/kubesim/v1/faults`` - all three go through :meth:`Faults.apply`.
"""

from __future__ import annotations

import random
import threading
import time
from dataclasses import asdict, dataclass, field
from typing import Any, Sequence

from kubesim.noise import Shift, shift_from


@dataclass
class NodeFault:
    """Faults of one simulated node."""

    # the kubelet never comes back after its next exit (babysitter gives up / machine gone)
    never_return: bool = False
    # extra seconds (unscaled) added to every restart of this kubelet
    slow_restart: float = 0.0
    # network partition: no heartbeats, no lease renewals, no API access from the kubelet
    partitioned: bool = False


@dataclass
class ApiFault:
    """Request-level faults of the API server: they hit API clients (kubectl, the orchestrator).

    kubesim's own parts are spared unless asked: kubelets (``include_nodes``) and the in-process
    control plane, i.e. the node-lifecycle controller and the root-CA publisher
    (``include_control_plane``). A storm that also hit the lifecycle controller would make its
    informers miss heartbeats and flap healthy nodes to Unknown - a failure of the simulator, not
    of the API the client under test sees.
    """

    error_rate: float = 0.0  # fraction of requests answered with an error
    error_codes: tuple[int, ...] = (500, 429)  # picked at random per failed request
    retry_after: int = 1  # Retry-After seconds on 429
    latency: float = 0.0  # added seconds per request (real seconds, not scaled)
    drop_watches: bool = False  # close every open watch stream now and each new one after a moment
    # the network path goes silent, nothing is closed: open watch streams stop delivering bytes and
    # requests get no answer, on every connection open when it is switched on and every one that
    # carries a request while it is on; switched off, new connections are served again, but a
    # connection that went silent stays silent (a dropped NAT entry, a dead load balancer)
    blackhole: bool = False
    include_nodes: bool = False  # also fault requests made by kubelets (system:node:*)
    include_control_plane: bool = False  # also fault kubesim's own controllers


@dataclass
class Faults:
    api: ApiFault = field(default_factory=ApiFault)
    nodes: dict[str, NodeFault] = field(default_factory=dict)
    seed: int | None = None
    # fleet-wide workload shifts injected at run time (kubesim.noise): every node's workload reads
    # them, on the fleet's clock (simulated seconds since the cluster started)
    shifts: list[Shift] = field(default_factory=list)
    time_scale: float = 1.0
    started: float = field(default_factory=time.monotonic)
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False, compare=False)
    _rng: random.Random = field(default_factory=random.Random, repr=False, compare=False)

    def now(self) -> float:
        """The fleet's clock: simulated seconds since the cluster started."""
        return (time.monotonic() - self.started) * self.time_scale

    def active_shifts(self) -> Sequence[Shift]:
        return self.shifts

    def node(self, name: str) -> NodeFault:
        """The node's faults (an all-off value when none were set)."""
        return self.nodes.get(name) or NodeFault()

    def pick_api_error(self, *, is_node: bool) -> int | None:
        """An HTTP code to fail this request with, or None to serve it."""
        api = self.api
        if api.error_rate <= 0 or (is_node and not api.include_nodes):
            return None
        with self._lock:
            if self._rng.random() >= api.error_rate:
                return None
            return self._rng.choice(api.error_codes)

    def apply(self, change: dict[str, Any]) -> None:
        """Merge a change such as ``{"api": {"error_rate": 0.3}, "nodes": {"n1": {"partitioned": true}}}``.

        ``{"reset": true}`` clears everything first (runtime shifts too). ``{"shifts": [{"for": "10m",
        "podStart": 2.0}]}`` adds fleet-wide shifts from now (``at`` later); ``{"shifts": null}``
        ends them all. Unknown keys raise ``ValueError``.
        """
        with self._lock:
            if change.get("reset"):
                self.api = ApiFault()
                self.nodes = {}
                self.shifts = []
            for key, value in (change.get("api") or {}).items():
                if not hasattr(self.api, key):
                    raise ValueError(f"unknown api fault {key!r}")
                if key == "error_codes":
                    value = tuple(int(v) for v in value)
                setattr(self.api, key, value)
            for name, values in (change.get("nodes") or {}).items():
                fault = self.nodes.setdefault(name, NodeFault())
                if values is None:
                    del self.nodes[name]
                    continue
                for key, value in values.items():
                    if not hasattr(fault, key):
                        raise ValueError(f"unknown node fault {key!r}")
                    setattr(fault, key, value)
            if "seed" in change:
                self.seed = change["seed"]
                self._rng.seed(self.seed)
            if "shifts" in change:
                added = change["shifts"]
                if added is None:
                    self.shifts = []
                else:
                    if not isinstance(added, list) or not all(isinstance(s, dict) for s in added):
                        raise ValueError("shifts must be a list of objects such as {\"for\": \"10m\", \"podStart\": 2}")
                    now = self.now()
                    self.shifts = [*self.shifts, *(shift_from(s, now) for s in added)]
            unknown = set(change) - {"api", "nodes", "reset", "seed", "shifts"}
            if unknown:
                raise ValueError(f"unknown fault section(s): {', '.join(sorted(unknown))}")

    def to_dict(self) -> dict[str, Any]:
        with self._lock:
            return {
                "api": asdict(self.api),
                "nodes": {name: asdict(f) for name, f in self.nodes.items()},
                "seed": self.seed,
                "shifts": [s.to_dict() for s in self.shifts],
                "now": self.now(),
            }
