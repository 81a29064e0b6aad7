"""The object store: one global resourceVersion, per-resource history for watch resume, WAL.

Objects are kept as :class:`StoredObject` (cached JSON bytes + parsed dict), so a list of 5,000
nodes is a byte concatenation and an in-process read is one ``orjson.loads``. A pod's parsed form
shares its short strings with every other pod's (``sys.intern``): 150,000 pods repeat the same
images, phases, condition types, timestamps and node names, about a third of a parsed pod. Every write bumps
the global resourceVersion, is logged (when a state dir is given), appended to its resource's
history (a bounded ring, like the API server's watch cache; resuming from before it is 410 Gone)
and fanned out to watchers before the write returns.
"""

from __future__ import annotations

import builtins
import sys
from collections import deque
from typing import Any, Iterable

from . import errors
from .jsonutil import dumps, loads
from .resources import ALL_RESOURCES
from .wal import Wal
from .watch import Event, StoredObject, Watcher, WatchHub


class History:
    """The last ``capacity`` events of one resource, also indexed by object key."""

    def __init__(self, capacity: int, floor: int):
        self.capacity = capacity
        self.floor = floor  # watching from an RV below this needs events we no longer have
        self.events: deque[tuple[str, Event]] = deque()
        self.by_key: dict[str, deque[Event]] = {}

    def append(self, key: str, event: Event) -> None:
        self.events.append((key, event))
        self.by_key.setdefault(key, deque()).append(event)
        if len(self.events) > self.capacity:
            old_key, old = self.events.popleft()
            bucket = self.by_key[old_key]
            bucket.popleft()
            if not bucket:
                del self.by_key[old_key]
            self.floor = old.rv

    def since(self, rv: int, key: str | None) -> list[Event]:
        """Events with resourceVersion > rv (oldest first); 410 if some were already dropped."""
        if rv < self.floor:
            raise errors.expired(rv, self.floor)
        source: Iterable[Any]
        if key is not None:
            source = reversed(self.by_key.get(key, ()))
            picked = []
            for event in source:
                if event.rv <= rv:
                    break
                picked.append(event)
        else:
            picked = []
            for _, event in reversed(self.events):
                if event.rv <= rv:
                    break
                picked.append(event)
        picked.reverse()
        return picked


SHARED_STRINGS = frozenset({"pods"})  # resources whose objects' short strings are interned
_SHORT = 64


def share_strings(node: Any) -> None:
    """Replace every short string value in ``node`` (a parsed JSON object) by its interned copy."""
    items = node.items() if isinstance(node, dict) else enumerate(node)
    for key, value in items:
        kind = type(value)
        if kind is str:
            if len(value) <= _SHORT:
                node[key] = sys.intern(value)
        elif kind is dict or kind is list:
            share_strings(value)


def key_parts(key: str) -> tuple[str, str, str]:
    resource, namespace, name = key.split("/", 2)
    return resource, namespace, name


class Store:
    def __init__(self, wal: Wal | None = None, history_capacity: int = 4096):
        self.rv = 0
        self.wal = wal
        self.hub = WatchHub()
        self._objects: dict[str, dict[str, StoredObject]] = {r.name: {} for r in ALL_RESOURCES}
        # pods by spec.nodeName: a kubelet's or a drain's list of one node's pods reads its own,
        # not all 150,000 (254 ms a list at 30,000 pods, with a drain listing 90 nodes a round)
        self._pods_by_node: dict[str, set[str]] = {}
        self._node_of_pod: dict[str, str] = {}  # what the index holds, whatever a writer did to the old dict
        if wal is not None:
            self._restore(wal)
        self.histories = {r.name: History(history_capacity, self.rv) for r in ALL_RESOURCES}

    def _restore(self, wal: Wal) -> None:
        rv, objects = wal.load()
        self.rv = rv
        for key, raw in objects.items():
            resource, namespace, name = key_parts(key)
            obj = loads(raw)
            if resource in SHARED_STRINGS:
                share_strings(obj)
            obj_rv = int((obj.get("metadata") or {}).get("resourceVersion") or 0)
            self._objects[resource][key] = StoredObject(obj, raw, obj_rv, name, namespace)
            if resource == "pods":
                self._index_pod(key, obj)

    # --- reads -----------------------------------------------------------------------------

    def get(self, resource: str, key: str) -> StoredObject | None:
        return self._objects[resource].get(key)

    def list(self, resource: str, namespace: str = "") -> list[StoredObject]:
        objects = self._objects[resource]
        keys = sorted(objects)
        if namespace:
            prefix = f"{resource}/{namespace}/"
            keys = [k for k in keys if k.startswith(prefix)]
        return [objects[k] for k in keys]

    def pods_on(self, node: str, namespace: str = "") -> builtins.list[StoredObject]:  # `list` here is the method above
        """The pods bound to ``node`` (``spec.nodeName``), in key order as :meth:`list`."""
        keys = sorted(self._pods_by_node.get(node, ()))
        if namespace:
            prefix = f"pods/{namespace}/"
            keys = [k for k in keys if k.startswith(prefix)]
        pods = self._objects["pods"]
        return [pods[k] for k in keys]

    def _index_pod(self, key: str, new: dict[str, Any] | None) -> None:
        before = self._node_of_pod.get(key, "")
        after = ((new or {}).get("spec") or {}).get("nodeName") or ""
        if before == after:
            return
        if before:
            on = self._pods_by_node[before]
            on.discard(key)
            if not on:
                del self._pods_by_node[before]
            del self._node_of_pod[key]
        if after:
            self._pods_by_node.setdefault(after, set()).add(key)
            self._node_of_pod[key] = after

    def count(self, resource: str) -> int:
        return len(self._objects[resource])

    # --- writes ----------------------------------------------------------------------------

    def write(self, resource: str, key: str, obj: dict[str, Any]) -> StoredObject:
        """Create or replace ``key`` with ``obj`` (whose resourceVersion is set here)."""
        old = self._objects[resource].get(key)
        self.rv += 1
        obj["metadata"]["resourceVersion"] = str(self.rv)
        raw = dumps(obj)
        if resource in SHARED_STRINGS:
            share_strings(obj)
        meta = obj["metadata"]
        stored = StoredObject(obj, raw, self.rv, meta.get("name", ""), meta.get("namespace", "") or "")
        if self.wal is not None:
            self.wal.put(self.rv, key, raw)
        self._objects[resource][key] = stored
        if resource == "pods":
            self._index_pod(key, obj)
        self._publish(resource, key, Event("MODIFIED" if old else "ADDED", stored, old))
        if old is not None:
            old.release()
        return stored

    def remove(self, resource: str, key: str) -> StoredObject:
        old = self._objects[resource].pop(key)
        if resource == "pods":
            self._index_pod(key, None)
        self.rv += 1
        obj = old.copy()
        obj["metadata"]["resourceVersion"] = str(self.rv)
        gone = StoredObject(obj, dumps(obj), self.rv, old.name, old.namespace)
        if self.wal is not None:
            self.wal.delete(self.rv, key)
        self._publish(resource, key, Event("DELETED", gone, old))
        old.release()
        gone.release()
        return gone

    def _publish(self, resource: str, key: str, event: Event) -> None:
        self.histories[resource].append(key, event)
        self.hub.dispatch(resource, event)
        if self.wal is not None and self.wal.needs_compaction():
            self.compact()

    def compact(self) -> None:
        if self.wal is None:
            return
        items = ((key, s.raw) for objects in self._objects.values() for key, s in objects.items())
        self.wal.compact(self.rv, items)

    # --- watch -----------------------------------------------------------------------------

    def start_watch(
        self, watcher: Watcher, since: int | None, key: str | None
    ) -> builtins.list[tuple[str, StoredObject]]:  # `list` here is the method above
        """Register ``watcher`` and return what it must see first (synchronously: no gap, no dup).

        ``since`` None means "current state first": a synthetic ADDED per matching object.
        """
        if since is None:
            stored = self.list(watcher.resource, watcher.namespace)
            initial = [("ADDED", s) for s in stored if watcher.translate(Event("ADDED", s, None))]
        else:
            events = self.histories[watcher.resource].since(since, key)
            initial = [item for item in (watcher.translate(e) for e in events) if item is not None]
        self.hub.add(watcher)
        return initial

    def close(self) -> None:
        if self.wal is not None:
            self.wal.close()
