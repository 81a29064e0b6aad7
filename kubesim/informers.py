"""Shared informers: one list+watch per resource for all of kubesim's controllers.

Why: the scheduler, the owner controllers, the kubelets' pod workers and the disruption
controller all follow every pod. A cache each would hold 150,000 pods four times over and fan
every pod event out to four watches; client-go's ``SharedInformerFactory`` shares one, and so does
kubesim. Handlers run in subscription order, synchronously, on the event loop.
"""

from __future__ import annotations

import asyncio
from typing import Any, Callable

from kubesim.apiserver.client import LocalClient
from kubesim.kubelet.informer import Informer
from kubesim.lifecycle import AlwaysReachable

Added = Callable[[dict[str, Any]], None]
Updated = Callable[[dict[str, Any], dict[str, Any]], None]


class SharedInformer:
    """An :class:`Informer` of ``path`` whose events go to every subscriber."""

    def __init__(self, client: LocalClient, path: str):
        self._subscribers: list[tuple[Added, Updated, Added]] = []
        self.informer = Informer(
            AlwaysReachable(client), path, {}, on_add=self._add, on_update=self._update, on_delete=self._delete
        )

    @property
    def cache(self) -> dict[str, dict[str, Any]]:
        return self.informer.cache

    def subscribe(self, on_add: Added, on_update: Updated, on_delete: Added) -> None:
        """Events from now on; a subscriber that joins after the first list replays the cache itself."""
        self._subscribers.append((on_add, on_update, on_delete))

    async def wait_synced(self) -> None:
        await self.informer.synced.wait()

    async def wait_seen(self, rv: int, poll: float = 0.02) -> None:
        """Until the events up to resourceVersion ``rv`` have reached the subscribers."""
        await self.wait_synced()
        while self.informer.resource_version < rv:
            await asyncio.sleep(poll)

    async def run(self) -> None:
        await self.informer.run()

    def _add(self, obj: dict[str, Any]) -> None:
        for on_add, _, _ in self._subscribers:
            on_add(obj)

    def _update(self, old: dict[str, Any], new: dict[str, Any]) -> None:
        for _, on_update, _ in self._subscribers:
            on_update(old, new)

    def _delete(self, obj: dict[str, Any]) -> None:
        for _, _, on_delete in self._subscribers:
            on_delete(obj)


class Informers:
    """The cluster's shared informers, started together (``run``)."""

    def __init__(self, client: LocalClient):
        self.pods = SharedInformer(client, "/api/v1/pods")
        self.nodes = SharedInformer(client, "/api/v1/nodes")
        self.replica_sets = SharedInformer(client, "/apis/apps/v1/replicasets")
        self.daemon_sets = SharedInformer(client, "/apis/apps/v1/daemonsets")

    def all(self) -> list[SharedInformer]:
        return [self.pods, self.nodes, self.replica_sets, self.daemon_sets]
