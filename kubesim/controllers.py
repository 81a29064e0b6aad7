"""kube-controller-manager controllers (other than node lifecycle) whose effects clients can see.

* The root-CA publisher: every namespace of a real 1.23 cluster holds a ConfigMap
  ``kube-root-ca.crt`` with the cluster CA, so a client listing ConfigMaps in ``kube-system`` (or
  anywhere) never sees *only* its own objects - kubesim should not let it assume otherwise.
* The disruption controller: keeps each PodDisruptionBudget's status (``disruptionsAllowed``
  and the counts behind it) up to date from the pods it covers and their ReplicaSets' scale, by
  the rules of :mod:`kubesim.apiserver.disruption`. The Eviction subresource reads that status.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any, Optional

from kubesim.apiserver import ApiError
from kubesim.apiserver import disruption, timefmt
from kubesim.apiserver.client import local_client
from kubesim.informers import Informers
from kubesim.kubelet.informer import Informer, object_key
from kubesim.kubelet.tasks import cancel_all
from kubesim.lifecycle import AlwaysReachable

log = logging.getLogger("kubesim.controllers")
ROOT_CA_CONFIGMAP = "kube-root-ca.crt"
CONTROLLER_USER = "system:kube-controller-manager"


async def publish_root_ca(server: Any, ca_pem: bytes, retry: float = 1.0) -> None:
    """Ensure ``kube-root-ca.crt`` in every namespace, now and whenever one is created."""
    client = local_client(server, user=CONTROLLER_USER)
    while True:
        try:
            async for event in client.watch("/api/v1/namespaces", {}):
                if event["type"] == "ADDED":
                    await _ensure(client, event["object"]["metadata"]["name"], ca_pem)
        except ApiError as exc:  # injected API faults (include_control_plane); retry like an informer
            log.debug("root CA publisher: %s; retrying", exc)
        await asyncio.sleep(retry)


async def _ensure(client: Any, namespace: str, ca_pem: bytes) -> None:
    body = {"metadata": {"name": ROOT_CA_CONFIGMAP}, "data": {"ca.crt": ca_pem.decode()}}
    try:
        await client.create(f"/api/v1/namespaces/{namespace}/configmaps", body)
    except ApiError as exc:
        if exc.code not in (404, 409):  # 409: already there; 404: namespace deleted meanwhile
            raise


class DisruptionController:
    """``pkg/controller/disruption``: one status write per budget whose pods changed.

    Cost model (150,000 pods must not slow the heartbeats): a pod event looks only at the budgets
    its labels can match (an index on ``matchLabels`` pairs), each budget keeps the set of pods
    it covers, and a sync reads that set only; a new budget looks only at the pods carrying one of
    its ``matchLabels`` pairs (an index of pods by label), not at its namespace's every pod. A budget without pods costs nothing; a cluster
    without budgets holds two watches.
    """

    def __init__(
        self, server: Any, *, informers: Optional[Informers] = None, user: str = CONTROLLER_USER, retry: float = 1.0
    ):
        self.client = local_client(server, user=user, shared=True)
        # the cluster's shared pod and ReplicaSet informers, else (a controller alone) its own
        self.informers = informers or Informers(self.client)
        self._own_informers = informers is None
        self.retry = retry
        self.pods: dict[str, dict[str, Any]] = {}
        self.pods_by_namespace: dict[str, set[str]] = {}
        self._pods_by_label: dict[tuple[str, str, str], set[str]] = {}  # (namespace, key, value) -> pods
        self.budgets: dict[str, dict[str, Any]] = {}
        self.covered: dict[str, set[str]] = {}  # budget key -> keys of the pods it covers
        self._by_label: dict[tuple[str, str, str], set[str]] = {}  # (namespace, key, value) -> budgets
        self._unindexed: dict[str, set[str]] = {}  # namespace -> budgets without matchLabels
        self._dirty: set[str] = set()
        self._wake = asyncio.Event()
        reachable = AlwaysReachable(self.client)
        self.informers.pods.subscribe(self._pod_changed, lambda _old, new: self._pod_changed(new), self._pod_gone)
        self.budget_informer = Informer(
            reachable, "/apis/policy/v1/poddisruptionbudgets", {},
            on_add=self._budget_changed, on_update=lambda _old, new: self._budget_changed(new),
            on_delete=self._budget_gone,
        )

    # --------------------------------------------------------------------------- informers
    def _candidates(self, pod: Optional[dict[str, Any]]) -> set[str]:
        if pod is None:
            return set()
        namespace = pod["metadata"].get("namespace", "")
        found = set(self._unindexed.get(namespace, ()))
        for key, value in (pod["metadata"].get("labels") or {}).items():
            found |= self._by_label.get((namespace, key, value), set())
        return found

    def _pod_changed(self, pod: dict[str, Any], gone: bool = False) -> None:
        key = object_key(pod)
        old = self.pods.get(key)
        namespace = pod["metadata"].get("namespace", "")
        labels = None if gone else pod["metadata"].get("labels") or {}
        old_labels = None if old is None else old["metadata"].get("labels") or {}
        if old_labels != labels:
            self._index_labels(key, namespace, old_labels or {}, remove=True)
            self._index_labels(key, namespace, labels or {})
        if gone:
            self.pods.pop(key, None)
            self.pods_by_namespace.get(namespace, set()).discard(key)
        else:
            self.pods[key] = pod
            self.pods_by_namespace.setdefault(namespace, set()).add(key)
        for budget_key in self._candidates(old) | self._candidates(None if gone else pod):
            covered = self.covered.setdefault(budget_key, set())
            covers = not gone and disruption.budget_covers(self.budgets[budget_key], pod)
            if covers or key in covered:
                self._mark(budget_key)
            if covers:
                covered.add(key)
            else:
                covered.discard(key)

    def _pod_gone(self, pod: dict[str, Any]) -> None:
        self._pod_changed(pod, gone=True)

    def _index_labels(self, key: str, namespace: str, labels: dict[str, str], *, remove: bool = False) -> None:
        for label, value in labels.items():
            if remove:
                bucket = self._pods_by_label.get((namespace, label, value))
                if bucket is not None:
                    bucket.discard(key)
                    if not bucket:
                        del self._pods_by_label[(namespace, label, value)]
            else:
                self._pods_by_label.setdefault((namespace, label, value), set()).add(key)

    def _pods_for(self, budget: dict[str, Any]) -> set[str] | tuple[()]:
        """The pods ``budget`` may cover: those with its first ``matchLabels`` pair, else its namespace's."""
        namespace = budget["metadata"].get("namespace", "")
        match_labels = ((budget.get("spec") or {}).get("selector") or {}).get("matchLabels") or {}
        if match_labels:
            label, value = sorted(match_labels.items())[0]
            return self._pods_by_label.get((namespace, label, value), ())
        return self.pods_by_namespace.get(namespace, ())

    def _budget_changed(self, budget: dict[str, Any]) -> None:
        key = object_key(budget)
        old = self.budgets.get(key)
        self.budgets[key] = budget
        if old is None or (old.get("spec") or {}).get("selector") != (budget.get("spec") or {}).get("selector"):
            if old is not None:
                self._index(key, old, remove=True)
            self._index(key, budget)
            self.covered[key] = {p for p in self._pods_for(budget) if disruption.budget_covers(budget, self.pods[p])}
        self._mark(key)

    def _budget_gone(self, budget: dict[str, Any]) -> None:
        key = object_key(budget)
        old = self.budgets.pop(key, None)
        if old is not None:
            self._index(key, old, remove=True)
        self.covered.pop(key, None)
        self._dirty.discard(key)

    def _index(self, key: str, budget: dict[str, Any], *, remove: bool = False) -> None:
        """A budget is found through one of its matchLabels pairs (any: all must match anyway)."""
        namespace = budget["metadata"].get("namespace", "")
        match_labels = ((budget.get("spec") or {}).get("selector") or {}).get("matchLabels") or {}
        if match_labels:
            label, value = sorted(match_labels.items())[0]
            bucket = self._by_label.setdefault((namespace, label, value), set())
        else:
            bucket = self._unindexed.setdefault(namespace, set())
        if remove:
            bucket.discard(key)
        else:
            bucket.add(key)

    def _mark(self, key: str) -> None:
        self._dirty.add(key)
        self._wake.set()

    # --------------------------------------------------------------------------------- loop
    async def run(self) -> None:
        tasks = [asyncio.create_task(self.budget_informer.run())]
        if self._own_informers:
            tasks += [asyncio.create_task(self.informers.pods.run()),
                      asyncio.create_task(self.informers.replica_sets.run())]
        try:
            await self.informers.pods.wait_synced()
            await self.informers.replica_sets.wait_synced()
            await self.budget_informer.synced.wait()
            while True:
                await self._wake.wait()
                self._wake.clear()
                while self._dirty:
                    batch, self._dirty = sorted(self._dirty), set()  # not min() per budget: 15,000 budgets
                    for key in batch:
                        await self.sync(key)
                        await asyncio.sleep(0)  # one budget at a time: heartbeats go between
        finally:
            await cancel_all(tasks)

    def status_for(self, budget: dict[str, Any]) -> dict[str, Any]:
        pods = [self.pods[p] for p in self.covered.get(object_key(budget), ()) if p in self.pods]
        now = timefmt.now()
        try:
            return disruption.budget_status(budget, pods, self._scale_of, now)
        except disruption.BudgetSyncError as exc:
            return disruption.failed_status(budget, str(exc), now)

    def _scale_of(self, namespace: str, ref: dict[str, Any]) -> Optional[int]:
        """A ReplicaSet's ``spec.replicas``; any other controller (a DaemonSet: no scale
        subresource) is unknown, as to the real controller's finders."""
        if ref.get("kind") != "ReplicaSet" or ref.get("apiVersion") != "apps/v1":
            return None
        owner = self.informers.replica_sets.cache.get(f"{namespace}/{ref.get('name', '')}")
        if owner is None or owner["metadata"].get("uid") != ref.get("uid"):
            return None
        return int((owner.get("spec") or {}).get("replicas", 1))

    async def sync(self, key: str) -> None:
        budget = self.budgets.get(key)
        if budget is None:
            return
        status = self.status_for(budget)
        if status == budget.get("status"):
            return
        namespace, name = budget["metadata"]["namespace"], budget["metadata"]["name"]
        path = f"/apis/policy/v1/namespaces/{namespace}/poddisruptionbudgets/{name}/status"
        try:
            await self.client.update(path, {**budget, "status": status})
        except ApiError as exc:
            if exc.code in (404, 409):
                return  # deleted, or changed since the cache saw it: the informer brings the news
            log.debug("disruption controller: %s: %s; retrying", key, exc)
            asyncio.get_running_loop().call_later(self.retry, self._mark, key)
