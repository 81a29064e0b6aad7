"""Many agents in one process (a simulated fleet) sharing one Node watch.

Why: each agent waits on a watch of its own Node. With a thousand agents in one process that is a
thousand open watch streams, each re-opened after every change and followed by a GET of the Node,
and a thousand connections held out of the shared client's pool (so every other request opens a
new TLS connection). Here one list+watch of all Nodes feeds a cache; each agent's
:class:`WatchedNodeApi` reads its Node from the cache and waits on its own wake-up, so the agent's
loop, rules and per-node semantics are unchanged: it still sees every change of its Node, at once.

A real node runs one agent with its own watch; this is only for ``run --kubesim-fleet``.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Mapping
from typing import Any

from rollout.errors import GatewayError
from rollout.gateway import is_older

from kubelet_rollout_agent.api import NodeApi, RawApi

logger = logging.getLogger("kubelet_rollout_agent.fleet")


def _newer(candidate: Mapping[str, Any], current: Mapping[str, Any] | None) -> bool:
    """Whether ``candidate`` may replace ``current``: a watch event for an older change can
    arrive after a PATCH answer already gave us a newer version (the orchestrator's rule)."""
    if current is None:
        return True
    return not is_older(_rv(candidate), _rv(current))


def _rv(node: Mapping[str, Any]) -> str:
    return str((node.get("metadata") or {}).get("resourceVersion", ""))


class NodeWatch:
    """One list+watch of every Node; the latest version of each, and a wake-up per node."""

    def __init__(self, raw: RawApi, *, timeout_s: float = 300.0, retry_s: float = 1.0) -> None:
        self.raw = raw
        self.timeout_s = timeout_s
        self.retry_s = retry_s
        self._nodes: dict[str, dict[str, Any]] = {}
        self._wake: dict[str, threading.Event] = {}
        self._lock = threading.Lock()
        self._synced = threading.Event()
        self._rv = ""
        self._thread: threading.Thread | None = None

    # -- the cache, as the agents see it ------------------------------------------------------

    def _event(self, name: str) -> threading.Event:
        with self._lock:
            return self._wake.setdefault(name, threading.Event())

    def get(self, name: str) -> dict[str, Any] | None:
        with self._lock:
            return self._nodes.get(name)

    def resource_version(self, name: str) -> str:
        return _rv(self.get(name) or {})

    def offer(self, node: Mapping[str, Any]) -> None:
        """A version of a Node (from the stream, a list, or an agent's own PATCH answer)."""
        name = str((node.get("metadata") or {}).get("name", ""))
        if not name:
            return
        with self._lock:
            if not _newer(node, self._nodes.get(name)):
                return
            self._nodes[name] = dict(node)
            wake = self._wake.setdefault(name, threading.Event())
        wake.set()

    def forget(self, name: str) -> None:
        with self._lock:
            self._nodes.pop(name, None)
            wake = self._wake.setdefault(name, threading.Event())
        wake.set()

    def wait_for_change(self, name: str, resource_version: str, timeout_s: float) -> bool:
        """Until ``name``'s cached version differs from ``resource_version``; False on timeout."""
        wake = self._event(name)
        deadline = time.monotonic() + max(0.0, timeout_s)
        while True:
            wake.clear()  # cleared before the check: a change after it sets it again
            if self.resource_version(name) != resource_version:
                return True
            remaining = deadline - time.monotonic()
            if remaining <= 0 or not wake.wait(remaining):
                return False

    # -- the stream ---------------------------------------------------------------------------

    def start(self, stop: threading.Event, *, sync_timeout_s: float = 60.0) -> None:
        """Start watching in a daemon thread; return once the first list is in the cache."""
        self._thread = threading.Thread(target=self.run, args=(stop,), name="node-watch", daemon=True)
        self._thread.start()
        if not self._synced.wait(sync_timeout_s):
            raise GatewayError(f"the shared Node watch did not list the nodes within {sync_timeout_s:g}s")

    def _list(self) -> None:
        answer = self.raw.request("GET", "/api/v1/nodes")
        items = answer.get("items") or [] if isinstance(answer, dict) else []
        names = set()
        for node in items:
            names.add(node["metadata"]["name"])
            self.offer(node)
        with self._lock:
            gone = set(self._nodes) - names
        for name in gone:
            self.forget(name)
        self._rv = str((answer.get("metadata") or {}).get("resourceVersion", ""))
        self._synced.set()

    def run(self, stop: threading.Event) -> None:
        """List, then watch from the list's resourceVersion; resume on a dropped stream, list
        again on 410 Gone (the same as an informer)."""
        while not stop.is_set():
            try:
                if not self._rv:
                    self._list()
                self._watch_once(stop)
            except GatewayError as exc:
                if getattr(exc, "status", None) == 410:  # the same resourceVersion would get 410 forever
                    self._rv = ""
                logger.info("shared node watch: %s; again in %ss", exc, self.retry_s)
                stop.wait(self.retry_s)

    def _watch_once(self, stop: threading.Event) -> None:
        query = {"watch": "true", "resourceVersion": self._rv, "timeoutSeconds": str(int(self.timeout_s)),
                 "allowWatchBookmarks": "true"}
        for event in self.raw.stream("/api/v1/nodes", query=query, timeout_s=self.timeout_s):
            if stop.is_set():
                return
            kind, obj = event.get("type"), event.get("object") or {}
            if kind == "ERROR":
                logger.info("shared node watch: %s; listing again", obj.get("message", obj))
                self._rv = ""
                return
            rv = _rv(obj)
            if rv:
                self._rv = rv
            if kind in ("ADDED", "MODIFIED"):
                self.offer(obj)
            elif kind == "DELETED":
                self.forget(str((obj.get("metadata") or {}).get("name", "")))


class WatchedNodeApi(NodeApi):
    """A node's agent API whose Node reads and waits come from a shared :class:`NodeWatch`.

    Every other call (ConfigMaps, events, PATCHes, configz) goes to the API server as before.
    """

    def __init__(self, raw: RawApi, node: str, watch: NodeWatch, **kwargs: Any) -> None:
        super().__init__(raw, node, **kwargs)
        self.watch = watch

    def get_node(self) -> dict[str, Any]:
        cached = self.watch.get(self.node)
        if cached is None:  # not (yet) in the cache: ask, as a lone agent would
            cached = super().get_node()
            self.watch.offer(cached)
        return dict(cached)

    def wait_for_change(self, resource_version: str, timeout_s: float) -> bool:
        return self.watch.wait_for_change(self.node, resource_version, timeout_s)

    def patch_annotations(self, annotations: Mapping[str, str | None]) -> dict[str, Any]:
        # the answer is the Node as written: the agent's next look must not see its old version
        node = super().patch_annotations(annotations)
        self.watch.offer(node)
        return node
