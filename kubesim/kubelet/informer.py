"""A minimal client-go style informer: list, then watch from the list's resourceVersion.

Why: the DKC controller reacts to informer *events* (Add on the initial list, Update when the
object changed, Delete), not to polling - which is why every kubelet start pokes the sync loop
(E6) and why a ConfigMap cache may lag the API (E11). After a watch error (410 Gone, a dropped
stream, a partition) the informer relists and replays the difference as Add/Update/Delete,
like ``Reflector`` + ``DeltaFIFO.Replace``.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any, Callable, Optional, Protocol

log = logging.getLogger("kubesim.kubelet.informer")

Handler = Callable[..., None]


class ListWatcher(Protocol):
    def blocked(self) -> bool: ...
    async def list(self, path: str, params: Optional[dict[str, str]] = None) -> dict[str, Any]: ...
    def watch(self, path: str, params: dict[str, str]) -> Any: ...


def object_key(obj: dict[str, Any]) -> str:
    meta = obj.get("metadata") or {}
    ns = meta.get("namespace") or ""
    return f"{ns}/{meta.get('name', '')}" if ns else str(meta.get("name", ""))


class Informer:
    """List+watch ``path`` with ``params``; keeps ``cache`` and calls the handlers."""

    def __init__(
        self,
        client: ListWatcher,
        path: str,
        params: dict[str, str],
        *,
        on_add: Handler,
        on_update: Handler,
        on_delete: Handler,
        retry_delay: float = 1.0,
    ):
        self.client = client
        self.path = path
        self.params = params
        self.on_add, self.on_update, self.on_delete = on_add, on_update, on_delete
        self.cache: dict[str, dict[str, Any]] = {}
        self.synced = asyncio.Event()
        self.retry_delay = retry_delay
        self._rv = ""

    def get(self, key: str) -> Optional[dict[str, Any]]:
        return self.cache.get(key)

    @property
    def resource_version(self) -> int:
        """The resourceVersion seen last (the list's, an event's, a bookmark's); 0 before the list."""
        try:
            return int(self._rv or 0)
        except ValueError:
            return 0

    async def run(self) -> None:
        while True:
            if self.client.blocked():
                await self._wait_unblocked()
            try:
                await self._list()
                await self._watch()
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # noqa: BLE001 - any failure: back off and relist, like Reflector
                log.debug("informer %s %s: %s", self.path, self.params, exc)
                await asyncio.sleep(self.retry_delay)

    async def _wait_unblocked(self) -> None:
        while self.client.blocked():
            await asyncio.sleep(min(self.retry_delay, 0.5))

    async def _list(self) -> None:
        result = await self.client.list(self.path, dict(self.params))
        self._rv = str((result.get("metadata") or {}).get("resourceVersion", ""))
        fresh = {object_key(item): item for item in result.get("items") or []}
        for key, obj in fresh.items():
            old = self.cache.get(key)
            self.cache[key] = obj
            if old is None:
                self.on_add(obj)
            else:
                self.on_update(old, obj)
        for key in [k for k in self.cache if k not in fresh]:
            self.on_delete(self.cache.pop(key))
        self.synced.set()

    async def _watch(self) -> None:
        while True:
            params = dict(self.params, resourceVersion=self._rv, allowWatchBookmarks="true")
            async for event in self.client.watch(self.path, params):
                if self.client.blocked():
                    return  # partitioned: this event never arrived; relist once reachable
                if not self._handle(event):
                    return
            if self.client.blocked():
                return

    def _handle(self, event: dict[str, Any]) -> bool:
        kind, obj = event.get("type"), event.get("object") or {}
        if kind == "ERROR":
            return False  # 410 Gone or similar: relist
        rv = str((obj.get("metadata") or {}).get("resourceVersion", ""))
        if rv:
            self._rv = rv
        if kind == "BOOKMARK":
            return True
        key = object_key(obj)
        if kind == "ADDED" or (kind == "MODIFIED" and key not in self.cache):
            self.cache[key] = obj
            self.on_add(obj)
        elif kind == "MODIFIED":
            old = self.cache[key]
            self.cache[key] = obj
            self.on_update(old, obj)
        elif kind == "DELETED":
            old = self.cache.pop(key, obj)
            self.on_delete(old)
        return True
