"""Node lifecycle controller: marks nodes ``Unknown`` when their kubelet stops heartbeating.

Why: a kubelet crash-looping on a bad config, a partitioned node or a node whose kubelet never
came back must look like it does on a real cluster - ``Ready=Unknown`` with reason
``NodeStatusUnknown`` and the ``node.kubernetes.io/unreachable`` taints - because that is the
failure signal an orchestrator has to act on (reference section 12 point 5).

Cost model: one controller for the whole cluster. It keeps the latest heartbeat of every node
(Lease ``renewTime`` and the Ready condition's ``lastHeartbeatTime``) as floats updated by two
informers, and every ``node_monitor_period`` makes one pass over that table - no per-node tasks,
no per-node timers, nothing parsed in the pass itself.

Stalls: the kubelets and this controller share one event loop (and, in thread mode, the GIL of a
test process). When that loop stalls, every kubelet misses its heartbeat at once, which a real
fleet never does. So the controller sums how late its passes woke (``frozen``) and subtracts the
part of that sum accrued since a node's last heartbeat: time the simulator was frozen does not
count towards the grace.
A node that really stopped still goes Unknown, after a grace of the time the loop actually ran.
"""

from __future__ import annotations

import asyncio
import logging
import time
from datetime import datetime, timezone
from typing import Any, Optional

from kubesim.apiserver.client import LocalClient, local_client
from kubesim.kubelet.informer import Informer
from kubesim.kubelet.tasks import cancel_all
from kubesim.timing import Timings

log = logging.getLogger("kubesim.lifecycle")
CONDITION_TYPES = ("Ready", "MemoryPressure", "DiskPressure", "PIDPressure")
UNREACHABLE = "node.kubernetes.io/unreachable"
NOT_READY = "node.kubernetes.io/not-ready"


def _parse_time(text: Any) -> float:
    if not text:
        return 0.0
    try:
        return datetime.fromisoformat(str(text).replace("Z", "+00:00")).timestamp()
    except ValueError:
        return 0.0


def _now() -> str:
    return datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def _ready(node: dict[str, Any]) -> Optional[dict[str, Any]]:
    conditions: list[dict[str, Any]] = (node.get("status") or {}).get("conditions") or []
    for cond in conditions:
        if cond.get("type") == "Ready":
            return cond
    return None


class AlwaysReachable:
    """The controller runs inside the control plane: never partitioned."""

    def __init__(self, client: LocalClient):
        self._client = client

    def blocked(self) -> bool:
        return False

    async def list(self, path: str, params: Optional[dict[str, str]] = None) -> dict[str, Any]:
        return await self._client.list(path, params or {})

    def watch(self, path: str, params: dict[str, str]) -> Any:
        return self._client.watch(path, params)


class NodeLifecycleController:
    """``node-lifecycle-controller`` reduced to heartbeat monitoring and unreachable taints."""

    def __init__(self, server: Any, timings: Timings, *, user: str = "admin"):
        self.client = local_client(server, user=user)
        self.timings = timings
        self.first_seen: dict[str, float] = {}
        self.node_beat: dict[str, float] = {}
        self.lease_beat: dict[str, float] = {}
        self.frozen = 0.0  # seconds the loop was stalled, summed over the controller's life
        self.frozen_at_beat: dict[str, float] = {}  # ``frozen`` when each node last heartbeat
        reachable = AlwaysReachable(self.client)
        self.nodes = Informer(
            reachable,
            "/api/v1/nodes",
            {},
            on_add=self._node_seen,
            on_update=lambda _old, new: self._node_seen(new),
            on_delete=self._node_gone,
        )
        self.leases = Informer(
            reachable,
            "/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases",
            {},
            on_add=self._lease_seen,
            on_update=lambda _old, new: self._lease_seen(new),
            on_delete=self._lease_gone,
        )

    # --------------------------------------------------------------------------- informers
    def _node_seen(self, node: dict[str, Any]) -> None:
        name = node["metadata"]["name"]
        if name not in self.first_seen:
            self.first_seen[name] = time.time()
            self.frozen_at_beat[name] = self.frozen
        self._beat(self.node_beat, name, _parse_time((_ready(node) or {}).get("lastHeartbeatTime")))

    def _beat(self, table: dict[str, float], name: str, at: float) -> None:
        if at > table.get(name, 0.0):
            self.frozen_at_beat[name] = self.frozen
        table[name] = at

    def _node_gone(self, node: dict[str, Any]) -> None:
        name = node["metadata"]["name"]
        self.first_seen.pop(name, None)
        self.node_beat.pop(name, None)
        self.frozen_at_beat.pop(name, None)

    def _lease_gone(self, lease: dict[str, Any]) -> None:
        self.lease_beat.pop(lease["metadata"]["name"], None)

    def _lease_seen(self, lease: dict[str, Any]) -> None:
        self._beat(self.lease_beat, lease["metadata"]["name"], _parse_time((lease.get("spec") or {}).get("renewTime")))

    # --------------------------------------------------------------------------------- loop
    async def run(self) -> None:
        tasks = [asyncio.create_task(self.nodes.run()), asyncio.create_task(self.leases.run())]
        try:
            await self.nodes.synced.wait()
            period = self.timings.scaled("node_monitor_period")
            while True:
                due = time.monotonic() + period
                await asyncio.sleep(period)
                self.frozen += max(0.0, time.monotonic() - due)
                await self.monitor()
        finally:
            await cancel_all(tasks)

    def stale_nodes(self, now: float) -> list[str]:
        """Nodes whose newest heartbeat (lease, Ready, first sight) is older than the grace,
        not counting the time the loop was frozen since."""
        grace = self.timings.scaled("node_monitor_grace")
        return [
            name
            for name, seen in self.first_seen.items()
            if now - max(seen, self.node_beat.get(name, 0.0), self.lease_beat.get(name, 0.0))
            - (self.frozen - self.frozen_at_beat.get(name, self.frozen))
            > grace
        ]

    async def monitor(self) -> None:
        now = time.time()
        for name in self.stale_nodes(now):
            node = self.nodes.get(name)
            if node is not None and (_ready(node) or {}).get("status") != "Unknown":
                await self._mark_unknown(node)
        await self._reconcile_taints()

    async def _mark_unknown(self, node: dict[str, Any]) -> None:
        name = node["metadata"]["name"]
        existing = {c.get("type"): c for c in (node.get("status") or {}).get("conditions") or []}
        now = _now()
        conditions = []
        for kind in CONDITION_TYPES:
            old = existing.get(kind)
            reason, message = (
                ("NodeStatusUnknown", "Kubelet stopped posting node status.")
                if old
                else ("NodeStatusNeverUpdated", "Kubelet never posted node status.")
            )
            cond = {
                "type": kind,
                "status": "Unknown",
                "reason": reason,
                "message": message,
                "lastTransitionTime": now,
                "lastHeartbeatTime": (old or {}).get("lastHeartbeatTime") or now,
            }
            conditions.append(cond)
        try:
            await self.client.patch(
                f"/api/v1/nodes/{name}/status", {"status": {"conditions": conditions}}, patch_type="strategic"
            )
            log.info("node %s: Ready -> Unknown (Kubelet stopped posting node status.)", name)
        except Exception as exc:  # noqa: BLE001 - next pass retries
            log.warning("node %s: failed to mark Unknown: %s", name, exc)

    async def _reconcile_taints(self) -> None:
        """Add/remove the NoSchedule/NoExecute ``unreachable``/``not-ready`` taints per Ready status."""
        for name, node in list(self.nodes.cache.items()):
            status = (_ready(node) or {}).get("status")
            wanted = {"Unknown": UNREACHABLE, "False": NOT_READY}.get(str(status))
            taints = (node.get("spec") or {}).get("taints") or []
            kept = [t for t in taints if t.get("key") not in (UNREACHABLE, NOT_READY)]
            managed = {(t.get("key"), t.get("effect")) for t in taints if t.get("key") in (UNREACHABLE, NOT_READY)}
            target = {(wanted, "NoSchedule"), (wanted, "NoExecute")} if wanted else set()
            if managed == target:
                continue
            new = kept + [
                {"key": key, "effect": effect, **({"timeAdded": _now()} if effect == "NoExecute" else {})}
                for key, effect in sorted(target)
            ]
            try:
                await self.client.patch(f"/api/v1/nodes/{name}", {"spec": {"taints": new or None}}, patch_type="merge")
            except Exception as exc:  # noqa: BLE001
                log.debug("node %s: taint update failed: %s", name, exc)
