"""The owners of pods: ReplicaSet and DaemonSet controllers, and the garbage collector's part.

* ReplicaSet (``pkg/controller/replicaset``): keeps ``spec.replicas`` active pods - a pod that is
  Terminating (``deletionTimestamp``) or finished does not count, so an evicted pod is replaced at
  once by a new one (new name, new uid), which the scheduler places. Surplus pods are deleted,
  unassigned and not-ready ones first, then the newest.
* DaemonSet (``pkg/controller/daemon``): one pod on every node whose taints its pods tolerate.
  Its pods tolerate ``unschedulable`` (and not-ready, unreachable, the pressures), as the real
  controller adds to every daemon pod, so a cordoned node keeps its daemon pod and gets a new one
  when it is deleted; a daemon pod is never placed on another node. kubesim's controller sets
  ``spec.nodeName`` itself (as DaemonSets did before 1.12) rather than going through the
  scheduler with a node affinity.
* Garbage collection: pods whose controller is gone are deleted (a background cascade).

Every pod carries its controller's ``ownerReferences`` entry (``controller: true``); both kinds
write their ``status`` (what ``kubectl get rs``/``ds`` print). Pod creations go in bursts of at
most :data:`BURST` per owner per pass (the real ``burstReplicas``), yielding to the event loop
between pods so heartbeats are not held up.
"""

from __future__ import annotations

import asyncio
import copy
import logging
from typing import Any, Callable, Optional

from kubesim.apiserver import ApiError
from kubesim.apiserver.client import local_client
from kubesim.controllers import CONTROLLER_USER
from kubesim.informers import Informers
from kubesim.kubelet.informer import object_key
from kubesim.scheduler import blocking_taints, tolerates

log = logging.getLogger("kubesim.owners")
BURST = 500
APPS_V1 = "apps/v1"
_FINISHED = ("Succeeded", "Failed")
# what the DaemonSet controller adds to each daemon pod (util.AddOrUpdateDaemonPodTolerations)
DAEMON_TOLERATIONS = tuple(
    {"key": f"node.kubernetes.io/{key}", "operator": "Exists", "effect": effect}
    for key, effect in (
        ("not-ready", "NoExecute"),
        ("unreachable", "NoExecute"),
        ("disk-pressure", "NoSchedule"),
        ("memory-pressure", "NoSchedule"),
        ("pid-pressure", "NoSchedule"),
        ("unschedulable", "NoSchedule"),
    )
)


def active(pod: Optional[dict[str, Any]]) -> bool:
    """``controller.IsPodActive``; ``None`` is a pod just created, not yet in the cache."""
    if pod is None:
        return True
    return not pod["metadata"].get("deletionTimestamp") and (pod.get("status") or {}).get("phase") not in _FINISHED


def ready(pod: Optional[dict[str, Any]]) -> bool:
    if pod is None:
        return False
    conditions = (pod.get("status") or {}).get("conditions") or []
    return any(c.get("type") == "Ready" and c.get("status") == "True" for c in conditions)


def controller_of(pod: dict[str, Any]) -> Optional[dict[str, Any]]:
    for ref in pod["metadata"].get("ownerReferences") or []:
        if ref.get("controller") and ref.get("apiVersion") == APPS_V1 and ref.get("kind") in ("ReplicaSet", "DaemonSet"):
            return dict(ref)
    return None


def pod_for(owner: dict[str, Any], kind: str, node: str = "") -> dict[str, Any]:
    """A new pod from ``owner``'s template (``controller.GetPodFromTemplate``)."""
    template = (owner.get("spec") or {}).get("template") or {}
    template_meta = template.get("metadata") or {}
    meta = owner["metadata"]
    ref = {"apiVersion": APPS_V1, "kind": kind, "name": meta["name"], "uid": meta["uid"], "controller": True,
           "blockOwnerDeletion": True}
    spec = copy.deepcopy(template.get("spec") or {})
    if node:
        spec["nodeName"] = node
        known = {(t.get("key"), t.get("effect")) for t in spec.get("tolerations") or []}
        spec["tolerations"] = (spec.get("tolerations") or []) + [
            dict(t) for t in DAEMON_TOLERATIONS if (t["key"], t["effect"]) not in known
        ]
    pod_meta: dict[str, Any] = {"generateName": f"{meta['name']}-", "labels": dict(template_meta.get("labels") or {}),
                                "ownerReferences": [ref]}
    if template_meta.get("annotations"):
        pod_meta["annotations"] = dict(template_meta["annotations"])
    return {"apiVersion": "v1", "kind": "Pod", "metadata": pod_meta, "spec": spec}


class OwnerController:
    """The ReplicaSet and DaemonSet controllers and the pods' garbage collection, on one loop."""

    def __init__(self, server: Any, informers: Informers, *, user: str = CONTROLLER_USER, retry: float = 1.0):
        self.client = local_client(server, user=user, shared=True)
        self.informers = informers
        self.retry = retry
        self.pods_of: dict[str, set[str]] = {}  # owner uid -> keys of its pods
        self.owner_of_uid: dict[str, tuple[str, str]] = {}  # owner uid -> (kind, key)
        self.node_taints: dict[str, list[dict[str, Any]]] = {}
        self._dirty: set[tuple[str, str]] = set()
        self._orphans: set[str] = set()  # pod keys whose controller is gone
        self._assumed_nodes: dict[str, str] = {}  # daemon pods created, not yet in the cache -> node
        self._wake = asyncio.Event()
        self._released = asyncio.Event()  # cleared while the initial pods are created in bulk
        self._released.set()
        informers.pods.subscribe(self._pod_changed, lambda old, new: self._pod_changed(new, old), self._pod_gone)
        for kind, shared in (("ReplicaSet", informers.replica_sets), ("DaemonSet", informers.daemon_sets)):
            changed = self._owner_handler(kind)
            shared.subscribe(changed, _on_new(changed), self._owner_gone)
        informers.nodes.subscribe(self._node_changed, lambda _old, new: self._node_changed(new), self._node_gone)

    # --------------------------------------------------------------------------- informers
    def _mark(self, kind: str, key: str) -> None:
        self._dirty.add((kind, key))
        self._wake.set()

    def _pod_changed(self, pod: dict[str, Any], old: Optional[dict[str, Any]] = None) -> None:
        ref = controller_of(pod)
        if ref is None:
            return
        key = object_key(pod)
        self.pods_of.setdefault(ref["uid"], set()).add(key)
        self._assumed_nodes.pop(key, None)
        owner = self.owner_of_uid.get(ref["uid"])
        if owner is not None:
            self._mark(*owner)
        elif self._owners_synced():
            self._orphans.add(key)
            self._wake.set()

    def _pod_gone(self, pod: dict[str, Any]) -> None:
        ref = controller_of(pod)
        if ref is None:
            return
        key = object_key(pod)
        self.pods_of.get(ref["uid"], set()).discard(key)
        self._orphans.discard(key)
        owner = self.owner_of_uid.get(ref["uid"])
        if owner is not None:
            self._mark(*owner)

    def _owner_handler(self, kind: str) -> Callable[[dict[str, Any]], None]:
        def changed(owner: dict[str, Any]) -> None:
            self.owner_of_uid[owner["metadata"]["uid"]] = (kind, object_key(owner))
            self._mark(kind, object_key(owner))

        return changed

    def _owner_gone(self, owner: dict[str, Any]) -> None:
        uid = owner["metadata"]["uid"]
        self.owner_of_uid.pop(uid, None)
        self._orphans |= self.pods_of.pop(uid, set())
        self._wake.set()

    def _node_changed(self, node: dict[str, Any]) -> None:
        name = node["metadata"]["name"]
        taints = blocking_taints(node)
        if self.node_taints.get(name) == taints:
            return  # a heartbeat: no daemon pod placement changes
        self.node_taints[name] = taints
        self._mark_daemon_sets()

    def _node_gone(self, node: dict[str, Any]) -> None:
        self.node_taints.pop(node["metadata"]["name"], None)
        self._mark_daemon_sets()

    def _mark_daemon_sets(self) -> None:
        for key in self.informers.daemon_sets.cache:
            self._mark("DaemonSet", key)

    def _owners_synced(self) -> bool:
        return self.informers.replica_sets.informer.synced.is_set() and self.informers.daemon_sets.informer.synced.is_set()

    # ------------------------------------------------------------------------ initial pods
    def hold(self) -> None:
        """No sync passes until :meth:`release`: the initial ReplicaSets' pods are being created
        in bulk (``kubesim.workloads.start_pods``), which :meth:`expect` tells the controller of."""
        self._released.clear()

    def release(self) -> None:
        self._released.set()
        self._wake.set()

    def expect(self, owner: dict[str, Any], pod_key: str) -> None:
        """``pod_key`` was created for ``owner``: counted now, before the informer brings it (nor
        is the pod taken for an orphan should it come before its owner)."""
        meta = owner["metadata"]
        if meta["uid"] not in self.owner_of_uid:
            self.owner_of_uid[meta["uid"]] = (owner.get("kind") or "ReplicaSet", object_key(owner))
        self.pods_of.setdefault(meta["uid"], set()).add(pod_key)

    # --------------------------------------------------------------------------------- loop
    async def run(self) -> None:
        for shared in self.informers.all():
            await shared.wait_synced()
        self._orphans |= {k for uid, keys in self.pods_of.items() if uid not in self.owner_of_uid for k in keys}
        while True:
            await self._released.wait()
            await self._wake.wait()
            if not self._released.is_set():
                continue  # held meanwhile: release() wakes the loop again
            self._wake.clear()
            while self._dirty and self._released.is_set():
                batch, self._dirty = sorted(self._dirty), set()  # not min() per owner: 15,000 ReplicaSets
                for index, (kind, key) in enumerate(batch):
                    if not self._released.is_set():  # held mid-pass: the rest waits for release()
                        self._dirty.update(batch[index:])
                        break
                    await self._sync(kind, key)
            await self._collect_orphans()

    async def _sync(self, kind: str, key: str) -> None:
        try:
            await (self.sync_replica_set(key) if kind == "ReplicaSet" else self.sync_daemon_set(key))
        except ApiError as exc:
            log.debug("%s %s: %s; retrying", kind, key, exc)
            asyncio.get_running_loop().call_later(self.retry, self._mark, kind, key)
        await asyncio.sleep(0)

    def _pods(self, owner: dict[str, Any]) -> list[tuple[str, Optional[dict[str, Any]]]]:
        cache = self.informers.pods.cache
        return [(k, cache.get(k)) for k in sorted(self.pods_of.get(owner["metadata"]["uid"], ()))]

    async def sync_replica_set(self, key: str) -> None:
        owner = self.informers.replica_sets.cache.get(key)
        if owner is None:
            return
        pods = [(k, p) for k, p in self._pods(owner) if active(p)]
        want = int((owner.get("spec") or {}).get("replicas", 1))
        if len(pods) < want:
            await self._create(owner, "ReplicaSet", [""] * (want - len(pods)), key)
        elif len(pods) > want:
            surplus = sorted(pods, key=_deletion_rank)[: len(pods) - want]
            await self._delete([k for k, _ in surplus])
        status = {
            "replicas": len(pods),
            "fullyLabeledReplicas": len(pods),
            "readyReplicas": sum(1 for _, p in pods if ready(p)),
            "availableReplicas": sum(1 for _, p in pods if ready(p)),
            "observedGeneration": owner["metadata"].get("generation", 1),
        }
        await self._write_status(owner, "replicasets", status)

    async def sync_daemon_set(self, key: str) -> None:
        owner = self.informers.daemon_sets.cache.get(key)
        if owner is None:
            return
        template_spec = ((owner.get("spec") or {}).get("template") or {}).get("spec") or {}
        probe = {"tolerations": list(template_spec.get("tolerations") or []) + list(DAEMON_TOLERATIONS)}
        # ``nodeShouldRunDaemonPod``: a NoSchedule taint keeps a new pod off a node, only a
        # NoExecute one evicts the pod it has (an unreachable node keeps its daemon pod)
        wanted = {n for n, taints in self.node_taints.items() if all(tolerates(probe, t) for t in taints)}
        kept = {n for n, taints in self.node_taints.items()
                if all(tolerates(probe, t) for t in taints if t.get("effect") == "NoExecute")}
        on_node: dict[str, list[tuple[str, Optional[dict[str, Any]]]]] = {}
        creating = set()
        for k, p in self._pods(owner):
            if p is None:
                creating.add(self._assumed_nodes.get(k, ""))
            elif active(p):
                on_node.setdefault((p.get("spec") or {}).get("nodeName", ""), []).append((k, p))
        missing = sorted(n for n in wanted if n not in on_node and n not in creating)
        extra = [k for n, pods in on_node.items() for k, _ in (pods if n not in kept else pods[1:])]
        await self._create(owner, "DaemonSet", missing, key)
        await self._delete(extra)
        scheduled = [n for n in wanted if n in on_node]
        ready_nodes = sum(1 for n in scheduled if any(ready(p) for _, p in on_node[n]))
        status = {
            "desiredNumberScheduled": len(wanted),
            "currentNumberScheduled": len(scheduled),
            "numberMisscheduled": sum(1 for n in on_node if n not in wanted),
            "numberReady": ready_nodes,
            "updatedNumberScheduled": len(scheduled),
            "numberAvailable": ready_nodes,
            "observedGeneration": owner["metadata"].get("generation", 1),
        }
        if len(wanted) > ready_nodes:
            status["numberUnavailable"] = len(wanted) - ready_nodes
        await self._write_status(owner, "daemonsets", status)

    async def _create(self, owner: dict[str, Any], kind: str, nodes: list[str], key: str) -> None:
        namespace = owner["metadata"]["namespace"]
        for node in nodes[:BURST]:
            created = await self.client.create(f"/api/v1/namespaces/{namespace}/pods", pod_for(owner, kind, node))
            pod_key = object_key(created)
            # counted at once (the real controller's expectations): the next pass does not create it again
            self.pods_of.setdefault(owner["metadata"]["uid"], set()).add(pod_key)
            if node:
                self._assumed_nodes[pod_key] = node
            await asyncio.sleep(0)
        if len(nodes) > BURST:
            self._mark(kind, key)

    async def _delete(self, keys: list[str]) -> None:
        for key in keys:
            namespace, name = key.split("/", 1)
            try:
                await self.client.delete(f"/api/v1/namespaces/{namespace}/pods/{name}")
            except ApiError as exc:
                if exc.code != 404:
                    raise
            await asyncio.sleep(0)

    async def _write_status(self, owner: dict[str, Any], resource: str, status: dict[str, Any]) -> None:
        if owner.get("status") == status:
            return
        meta = owner["metadata"]
        path = f"/apis/apps/v1/namespaces/{meta['namespace']}/{resource}/{meta['name']}/status"
        try:
            await self.client.update(path, {**owner, "status": status})
        except ApiError as exc:
            if exc.code not in (404, 409):  # gone, or changed since: the informer brings the news
                raise

    async def _collect_orphans(self) -> None:
        orphans, self._orphans = sorted(self._orphans), set()
        cache = self.informers.pods.cache
        await self._delete([k for k in orphans if k in cache and not self._owned(cache[k])])

    def _owned(self, pod: dict[str, Any]) -> bool:
        """Its controller is known (again, or by now): not an orphan after all."""
        ref = controller_of(pod)
        return ref is not None and ref["uid"] in self.owner_of_uid


def _on_new(handler: Callable[[dict[str, Any]], None]) -> Callable[[dict[str, Any], dict[str, Any]], None]:
    return lambda _old, new: handler(new)


def _deletion_rank(entry: tuple[str, Optional[dict[str, Any]]]) -> tuple[int, int, str]:
    """``ActivePodsWithRanks``, reduced: unassigned first, then not ready, then the newest."""
    _, pod = entry
    if pod is None:
        return (0, 0, "")
    assigned = 1 if (pod.get("spec") or {}).get("nodeName") else 0
    created = pod["metadata"].get("creationTimestamp", "")
    newest_first = "".join(chr(0x10FFFF - ord(c)) for c in created)
    return (assigned, 1 if ready(pod) else 0, newest_first)
