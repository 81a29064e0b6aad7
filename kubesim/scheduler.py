"""The scheduler: binds each unassigned pod to a node, through ``pods/binding``.

A node fits when it is Ready, not cordoned (``spec.unschedulable``), carries no ``NoSchedule`` or
``NoExecute`` taint the pod does not tolerate (the lifecycle controller's ``unreachable`` and
``not-ready`` taints, a control plane's), and has room under ``status.allocatable.pods`` counting
every pod bound to it that still exists (a Terminating pod still holds its place, as in the real
scheduler's cache). Among those the least loaded wins, ties by node name: spreading, and the same
placement for the same events. No resource requests, affinities or preemption.

Cost model: a heap of (bound pods, node) with lazy deletion, so a placement is O(log nodes) at
5,000 nodes; node heartbeats change nothing unless a node's fitness does. A pod that fits nowhere
waits until a node or a pod changes.
"""

from __future__ import annotations

import asyncio
import heapq
import logging
from collections import OrderedDict
from typing import Any

from kubesim.apiserver import ApiError
from kubesim.apiserver.client import local_client
from kubesim.informers import Informers
from kubesim.kubelet.informer import object_key

log = logging.getLogger("kubesim.scheduler")
SCHEDULER_USER = "system:kube-scheduler"
SCHEDULER_NAME = "default-scheduler"
_BLOCKING_EFFECTS = ("NoSchedule", "NoExecute")


def node_ready(node: dict[str, Any]) -> bool:
    conditions = (node.get("status") or {}).get("conditions") or []
    return any(c.get("type") == "Ready" and c.get("status") == "True" for c in conditions)


def tolerates(pod_spec: dict[str, Any], taint: dict[str, Any]) -> bool:
    """``v1helper.TolerationsTolerateTaint`` for the operators Exists and Equal."""
    for toleration in pod_spec.get("tolerations") or []:
        effect = toleration.get("effect")
        if effect and effect != taint.get("effect"):
            continue
        key = toleration.get("key")
        if toleration.get("operator") == "Exists":
            if not key or key == taint.get("key"):
                return True
        elif key == taint.get("key") and toleration.get("value", "") == taint.get("value", ""):
            return True
    return False


def blocking_taints(node: dict[str, Any]) -> list[dict[str, Any]]:
    return [t for t in (node.get("spec") or {}).get("taints") or [] if t.get("effect") in _BLOCKING_EFFECTS]


def pod_capacity(node: dict[str, Any]) -> int:
    try:
        return int(((node.get("status") or {}).get("allocatable") or {}).get("pods", 110))
    except (TypeError, ValueError):
        return 110


class Scheduler:
    """``kube-scheduler`` reduced to taints, cordon, readiness and pod counts."""

    def __init__(self, server: Any, informers: Informers, *, user: str = SCHEDULER_USER):
        self.client = local_client(server, user=user, shared=True)
        self.informers = informers
        self.pending: OrderedDict[str, None] = OrderedDict()  # unassigned pod keys, oldest first
        self.bound: dict[str, str] = {}  # pod key -> its node
        self.load: dict[str, int] = {}  # node -> pods bound to it
        self.capacity: dict[str, int] = {}  # node -> allocatable pods, for fitting nodes only
        self.taints: dict[str, list[dict[str, Any]]] = {}  # fitting node -> its blocking taints
        self._heap: list[tuple[int, str]] = []
        self._wake = asyncio.Event()
        informers.pods.subscribe(self._pod_added, self._pod_updated, self._pod_deleted)
        informers.nodes.subscribe(self._node_changed, lambda _old, new: self._node_changed(new), self._node_deleted)

    # --------------------------------------------------------------------------- informers
    def _pod_added(self, pod: dict[str, Any]) -> None:
        key = object_key(pod)
        node = (pod.get("spec") or {}).get("nodeName")
        if node:
            self.pending.pop(key, None)
            if key not in self.bound:
                self.bound[key] = node
                self._set_load(node, self.load.get(node, 0) + 1)
        elif not pod["metadata"].get("deletionTimestamp") and _ours(pod):
            self.pending[key] = None
            self._wake.set()

    def _pod_updated(self, _old: dict[str, Any], pod: dict[str, Any]) -> None:
        self._pod_added(pod)

    def _pod_deleted(self, pod: dict[str, Any]) -> None:
        key = object_key(pod)
        self.pending.pop(key, None)
        node = self.bound.pop(key, None)
        if node is not None:
            self._set_load(node, self.load.get(node, 1) - 1)
            if self.pending:
                self._wake.set()  # room freed

    def _node_changed(self, node: dict[str, Any]) -> None:
        name = node["metadata"]["name"]
        fits = node_ready(node) and not (node.get("spec") or {}).get("unschedulable")
        capacity, taints = pod_capacity(node), blocking_taints(node)
        if not fits:
            self.capacity.pop(name, None)
            self.taints.pop(name, None)
            return
        if self.capacity.get(name) == capacity and self.taints.get(name) == taints:
            return  # a heartbeat: nothing the scheduler looks at changed
        self.capacity[name], self.taints[name] = capacity, taints
        self.load.setdefault(name, 0)
        heapq.heappush(self._heap, (self.load[name], name))
        if self.pending:
            self._wake.set()

    def _node_deleted(self, node: dict[str, Any]) -> None:
        name = node["metadata"]["name"]
        self.capacity.pop(name, None)
        self.taints.pop(name, None)

    def _set_load(self, node: str, load: int) -> None:
        self.load[node] = load
        if node in self.capacity:
            heapq.heappush(self._heap, (load, node))
            if len(self._heap) > 4 * len(self.capacity) + 1024:  # drop the stale entries now and then
                self._heap = [(self.load[n], n) for n in self.capacity]
                heapq.heapify(self._heap)

    # --------------------------------------------------------------------------- placement
    def pick(self, pod: dict[str, Any]) -> str | None:
        """The least loaded fitting node, ties by name; None when none fits."""
        spec = pod.get("spec") or {}
        skipped: list[tuple[int, str]] = []
        chosen = None
        while self._heap:
            load, name = heapq.heappop(self._heap)
            if name not in self.capacity or self.load.get(name) != load:
                continue  # stale entry (a newer one is in the heap, or the node no longer fits)
            skipped.append((load, name))
            if load < self.capacity[name] and all(tolerates(spec, t) for t in self.taints[name]):
                chosen = name
                break
        for entry in skipped:
            heapq.heappush(self._heap, entry)
        return chosen

    async def run(self) -> None:
        await self.informers.pods.wait_synced()
        await self.informers.nodes.wait_synced()
        while True:
            await self._wake.wait()
            self._wake.clear()
            await self._schedule_pending()

    async def _schedule_pending(self) -> None:
        for index, key in enumerate(list(self.pending)):
            if key not in self.pending:
                continue
            pod = self.informers.pods.cache.get(key)
            if pod is None or (pod.get("spec") or {}).get("nodeName"):
                self.pending.pop(key, None)
                continue
            node = self.pick(pod)
            if node is None:
                continue  # unschedulable for now: retried on the next node or pod change
            await self._bind(key, pod, node)
            if index % 100 == 99:
                await asyncio.sleep(0)  # heartbeats go between

    async def _bind(self, key: str, pod: dict[str, Any], node: str) -> None:
        namespace, name = pod["metadata"]["namespace"], pod["metadata"]["name"]
        body = {"apiVersion": "v1", "kind": "Binding", "metadata": {"name": name, "namespace": namespace},
                "target": {"apiVersion": "v1", "kind": "Node", "name": node}}
        try:
            await self.client.create(f"/api/v1/namespaces/{namespace}/pods/{name}/binding", body)
        except ApiError as exc:
            if exc.code not in (404, 409):  # gone or taken meanwhile: the informer brings the news
                log.debug("scheduler: binding %s to %s: %s; retrying", key, node, exc)
                asyncio.get_running_loop().call_later(1.0, self._wake.set)
            return
        self.assume(key, node)

    def assume(self, key: str, node: str) -> None:
        """Count ``key`` on ``node`` at once (the scheduler cache's "assume"), before the watch says so."""
        self.pending.pop(key, None)
        if key not in self.bound:
            self.bound[key] = node
            self._set_load(node, self.load.get(node, 0) + 1)


def _ours(pod: dict[str, Any]) -> bool:
    return bool((pod.get("spec") or {}).get("schedulerName", SCHEDULER_NAME) == SCHEDULER_NAME)
