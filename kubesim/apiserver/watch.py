"""Watch fan-out: one queue per watcher, found through indexes instead of a scan.

5,000 kubelets each hold a watch on their own Node (``fieldSelector=metadata.name=<node>``) and on
their ConfigMap, so a write must reach the interested watchers without visiting all of them:
watchers that pin a name live in ``by_name[(resource, name)]``, the rest in ``general[resource]``.
Fan-out is synchronous with the write, so a watcher's queue always holds every matching event up to
the store's current resourceVersion - which is what makes a BOOKMARK with that RV truthful.
"""

from __future__ import annotations

import asyncio
from collections import deque
from dataclasses import dataclass
from typing import Any, Iterable

from .jsonutil import loads
from .selectors import Selector


class StoredObject:
    """One version of an object: its JSON bytes (always) and the parsed dict (while current)."""

    __slots__ = ("raw", "rv", "name", "namespace", "_obj")

    def __init__(self, obj: dict[str, Any] | None, raw: bytes, rv: int, name: str, namespace: str):
        self._obj = obj
        self.raw = raw
        self.rv = rv
        self.name = name
        self.namespace = namespace

    @property
    def obj(self) -> dict[str, Any]:
        """The parsed object - shared, never mutate it (use :meth:`copy`)."""
        if self._obj is None:
            return self.copy()
        return self._obj

    def copy(self) -> dict[str, Any]:
        obj: dict[str, Any] = loads(self.raw)  # the store keeps only JSON objects
        return obj

    def release(self) -> None:
        """Drop the parsed form of a superseded version; history keeps only the bytes."""
        self._obj = None


@dataclass(frozen=True)
class Event:
    type: str  # ADDED | MODIFIED | DELETED
    new: StoredObject  # for DELETED: the last state with the deletion's resourceVersion
    old: StoredObject | None

    @property
    def rv(self) -> int:
        return self.new.rv


class Watcher:
    """A watch's filter and its pending events."""

    def __init__(self, resource: str, namespace: str, selector: Selector, *, max_queue: int = 100_000):
        self.resource = resource
        self.namespace = namespace
        self.selector = selector
        self.name = selector.name
        # a selector of exactly metadata.name=X is satisfied by the index lookup alone
        self._trivial = not selector.labels and all(f.field == "metadata.name" and f.equal for f in selector.fields)
        self.queue: deque[tuple[str, StoredObject]] = deque()
        self._wake = asyncio.Event()
        self.closed = False
        self.max_queue = max_queue
        self.owner: Any = None  # the authz.User who opened it: kubesim's own are spared API faults

    def _matches(self, stored: StoredObject) -> bool:
        if self.namespace and stored.namespace != self.namespace:
            return False
        if self.name is not None and stored.name != self.name:
            return False
        return self._trivial or self.selector.matches(stored.obj)

    def translate(self, event: Event) -> tuple[str, StoredObject] | None:
        """The event this watcher sees: selector transitions become ADDED/DELETED (real semantics)."""
        if event.type == "ADDED":
            return ("ADDED", event.new) if self._matches(event.new) else None
        if event.type == "DELETED":
            return ("DELETED", event.new) if self._matches(event.new) else None
        now_ok = self._matches(event.new)
        was_ok = event.old is not None and self._matches(event.old)
        if now_ok and was_ok:
            return ("MODIFIED", event.new)
        if now_ok:
            return ("ADDED", event.new)
        if was_ok:
            return ("DELETED", event.new)
        return None

    def offer(self, item: tuple[str, StoredObject]) -> None:
        if self.closed:
            return
        if len(self.queue) >= self.max_queue:
            self.close()  # a consumer this slow gets its watch closed, like the real watch cache
            return
        self.queue.append(item)
        self._wake.set()

    def close(self) -> None:
        self.closed = True
        self._wake.set()

    async def wait(self, timeout: float | None) -> bool:
        """Wait until an event is queued or the watcher is closed; False on timeout."""
        if self.queue or self.closed:
            return True
        self._wake.clear()
        try:
            await asyncio.wait_for(self._wake.wait(), timeout)
        except asyncio.TimeoutError:
            return False
        return True


class WatchHub:
    def __init__(self) -> None:
        self.by_name: dict[tuple[str, str], set[Watcher]] = {}
        self.general: dict[str, set[Watcher]] = {}

    def add(self, watcher: Watcher) -> None:
        if watcher.name is not None:
            self.by_name.setdefault((watcher.resource, watcher.name), set()).add(watcher)
        else:
            self.general.setdefault(watcher.resource, set()).add(watcher)

    def remove(self, watcher: Watcher) -> None:
        if watcher.name is not None:
            bucket = self.by_name.get((watcher.resource, watcher.name))
        else:
            bucket = self.general.get(watcher.resource)
        if bucket is not None:
            bucket.discard(watcher)
            if not bucket and watcher.name is not None:
                del self.by_name[(watcher.resource, watcher.name)]

    def dispatch(self, resource: str, event: Event) -> None:
        for watcher in self._interested(resource, event.new.name):
            item = watcher.translate(event)
            if item is not None:
                watcher.offer(item)

    def _interested(self, resource: str, name: str) -> Iterable[Watcher]:
        named = self.by_name.get((resource, name))
        general = self.general.get(resource)
        if named:
            yield from list(named)
        if general:
            yield from list(general)

    def all(self) -> list[Watcher]:
        watchers = [w for bucket in self.general.values() for w in bucket]
        return watchers + [w for bucket in self.by_name.values() for w in bucket]

    def close_all(self) -> int:
        watchers = self.all()
        for watcher in watchers:
            watcher.close()
        return len(watchers)

    def count(self) -> int:
        return sum(len(b) for b in self.general.values()) + sum(len(b) for b in self.by_name.values())
