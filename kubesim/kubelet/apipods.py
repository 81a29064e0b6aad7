"""The kubelets' pod workers for API pods: what each node's kubelet does with the pods bound to it.

* A pod bound to the node and still Pending is started: one status write (``Running``, the
  ``Ready`` condition True, ``podIP``, ``hostIP``, ``startTime``, a running container status),
  by the node's own identity (``system:node:NAME``, through the node authorizer and
  NodeRestriction), conditional on the resourceVersion it read, as the status manager writes.
* A Terminating pod (``deletionTimestamp``) is removed once its grace period is over (scaled by
  the time scale): a DELETE with grace 0 by the node, as the kubelet does after stopping the
  containers.
* While a node's kubelet is not running (crashed, down, restarting) or cannot reach the API
  (partition), its pods stay as they are: nothing new starts there and nothing Terminating goes
  away; the work waits for the kubelet to come back.

One shared pod informer serves every node, not a watch per kubelet (``spec.nodeName=NAME``):
5,000 watches each filtering 150,000 pods' events would cost more than the whole simulation.
Status writes go in the background, a few dozen between yields to the event loop, so
heartbeats keep their timing while a large cluster's pods start.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
from collections import deque
from typing import Any

from kubesim.apiserver import ApiError
from kubesim.apiserver import timefmt
from kubesim.apiserver.client import LocalClient, local_client
from kubesim.informers import Informers
from kubesim.kubelet import nodeobject
from kubesim.kubelet.informer import object_key
from kubesim.timing import Timings

log = logging.getLogger("kubesim.kubelet.apipods")
_RECHECK_SECONDS = 0.5  # how often parked work looks for its kubelet (real seconds)
_BATCH = 50


def pod_ip(node_index: int, serial: int) -> str:
    """A /24 per node out of 100.64.0.0/10 (carrier-grade NAT space: clashes with nothing here)."""
    return f"100.{64 + node_index // 256}.{node_index % 256}.{serial % 253 + 2}"


def running_status(pod: dict[str, Any], host_ip: str, ip: str) -> dict[str, Any]:
    now = timefmt.fmt_time(timefmt.now())
    status = dict(pod.get("status") or {})
    conditions = [
        {"type": kind, "status": "True", "lastTransitionTime": now}
        for kind in ("Initialized", "Ready", "ContainersReady", "PodScheduled")
    ]
    containers = []
    for container in (pod.get("spec") or {}).get("containers") or []:
        image = str(container.get("image", ""))
        digest = hashlib.sha256(f"{pod['metadata'].get('uid')}/{container.get('name')}".encode()).hexdigest()
        containers.append({
            "name": container.get("name", ""), "ready": True, "started": True, "restartCount": 0,
            "image": image, "imageID": f"{image.split(':')[0]}@sha256:{digest}", "containerID": f"containerd://{digest}",
            "state": {"running": {"startedAt": now}},
        })
    status.update(phase="Running", conditions=conditions, hostIP=host_ip, podIP=ip, podIPs=[{"ip": ip}],
                  startTime=now, containerStatuses=containers)
    return status


class PodWorkers:
    """Starts and finishes the API pods of every simulated kubelet (see the module docstring)."""

    def __init__(self, server: Any, informers: Informers, kubelets: dict[str, Any], timings: Timings):
        self.server = server
        self.informers = informers
        self.kubelets = kubelets
        self.timings = timings
        self._index = {name: i for i, name in enumerate(kubelets)}
        self._serial: dict[str, int] = {}
        self._clients: dict[str, LocalClient] = {}
        self._queue: deque[str] = deque()
        self._queued: set[str] = set()
        self._parked: dict[str, set[str]] = {}  # node -> pod keys waiting for its kubelet
        self._deadlines: dict[str, tuple[str, asyncio.TimerHandle]] = {}  # terminating pod -> (stamp, timer)
        self._due: set[str] = set()  # terminating pods whose grace is over
        self._wake = asyncio.Event()
        informers.pods.subscribe(self._pod_changed, lambda _old, new: self._pod_changed(new), self._pod_gone)

    def add_kubelet(self, name: str, kubelet: Any) -> None:
        """A node that joined the running cluster."""
        self._index.setdefault(name, len(self._index))
        self.kubelets[name] = kubelet

    def alive(self, node: str) -> bool:
        kubelet = self.kubelets.get(node)
        return kubelet is not None and kubelet.state == "running" and not kubelet.client.blocked()

    # --------------------------------------------------------------------------- informer
    def _pod_changed(self, pod: dict[str, Any]) -> None:
        if not (pod.get("spec") or {}).get("nodeName"):
            return
        key = object_key(pod)
        stamp = pod["metadata"].get("deletionTimestamp")
        if stamp:
            self._schedule_removal(key, stamp)
        elif (pod.get("status") or {}).get("phase", "Pending") == "Pending":
            self._enqueue(key)

    def _pod_gone(self, pod: dict[str, Any]) -> None:
        key = object_key(pod)
        deadline = self._deadlines.pop(key, None)
        if deadline is not None:
            deadline[1].cancel()
        self._due.discard(key)
        node = (pod.get("spec") or {}).get("nodeName")
        if node:
            self._parked.get(node, set()).discard(key)

    def _schedule_removal(self, key: str, stamp: str) -> None:
        current = self._deadlines.get(key)
        if current is not None and current[0] == stamp:
            return
        if current is not None:
            current[1].cancel()  # the grace was shortened
        moment = timefmt.parse(stamp)
        remaining = max(0.0, (moment - timefmt.now()).total_seconds()) if moment is not None else 0.0
        timer = asyncio.get_running_loop().call_later(remaining / self.timings.time_scale, self._grace_over, key)
        self._deadlines[key] = (stamp, timer)

    def _grace_over(self, key: str) -> None:
        self._due.add(key)
        self._enqueue(key)

    def _enqueue(self, key: str) -> None:
        if key not in self._queued:
            self._queued.add(key)
            self._queue.append(key)
            self._wake.set()

    # ------------------------------------------------------------------------------- loop
    async def run(self) -> None:
        recheck = asyncio.create_task(self._recheck_parked())
        try:
            while True:
                await self._wake.wait()
                self._wake.clear()
                done = 0
                while self._queue:
                    key = self._queue.popleft()
                    self._queued.discard(key)
                    if await self._work(key):
                        done += 1
                        if done % _BATCH == 0:
                            await asyncio.sleep(0)  # heartbeats go between
        finally:
            recheck.cancel()

    async def _recheck_parked(self) -> None:
        while True:
            await asyncio.sleep(_RECHECK_SECONDS)
            for node in [n for n, keys in self._parked.items() if keys and self.alive(n)]:
                for key in sorted(self._parked.pop(node)):
                    self._enqueue(key)

    async def _work(self, key: str) -> bool:
        """Start or remove one pod; False if there was nothing to do for it now."""
        pod = self.informers.pods.cache.get(key)
        if pod is None:
            return False
        node = (pod.get("spec") or {}).get("nodeName") or ""
        terminating = bool(pod["metadata"].get("deletionTimestamp"))
        if terminating and key not in self._due:
            return False  # its timer brings it back
        if not terminating and (pod.get("status") or {}).get("phase", "Pending") != "Pending":
            return False
        if not self.alive(node):
            self._parked.setdefault(node, set()).add(key)
            return False
        try:
            if terminating:
                await self._remove(node, pod)
            else:
                await self._start(node, pod)
        except ApiError as exc:
            if exc.code not in (404, 409):  # gone, or changed since read: the informer brings the news
                log.debug("kubelet %s: pod %s: %s", node, key, exc)
        except ConnectionError:  # partitioned meanwhile: try again once it is back
            self._parked.setdefault(node, set()).add(key)
        return True

    def _client(self, node: str) -> LocalClient:
        client = self._clients.get(node)
        if client is None:
            client = self._clients[node] = local_client(self.server, user=f"system:node:{node}", shared=True)
        return client

    def started_status(self, node: str, pod: dict[str, Any]) -> dict[str, Any]:
        """The status ``node``'s kubelet writes when it starts ``pod`` (the next IP of its range)."""
        serial = self._serial[node] = self._serial.get(node, 0) + 1
        ip = pod_ip(self._index.get(node, 0), serial)
        return running_status(pod, nodeobject.node_ip(self.kubelets[node].spec), ip)

    async def _start(self, node: str, pod: dict[str, Any]) -> None:
        status = self.started_status(node, pod)
        meta = pod["metadata"]
        path = f"/api/v1/namespaces/{meta['namespace']}/pods/{meta['name']}/status"
        await self._client(node).update(path, {**pod, "status": status})

    async def _remove(self, node: str, pod: dict[str, Any]) -> None:
        meta = pod["metadata"]
        path = f"/api/v1/namespaces/{meta['namespace']}/pods/{meta['name']}"
        await self._client(node).delete(path, {"gracePeriodSeconds": 0})

