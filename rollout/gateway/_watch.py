"""One watch over all nodes, resumable, relisted on 410.

The orchestrator never polls nodes one by one: it lists once, then follows a single
``GET /api/v1/nodes?watch=true&allowWatchBookmarks=true&resourceVersion=RV`` stream. The stream is
read raw (``_preload_content=False``) and each line is validated into the small wire model, so a
busy 5,000-node cluster costs a few microseconds per event. The resourceVersion is tracked here
(the SDK's ``deserialize=False`` mode does not track it and replays events after a reconnect),
from every event and from BOOKMARKs. When the server ends the stream we reconnect from that RV;
when it answers 410 Gone we relist, emit the relisted nodes, and DELETED for nodes that vanished.
"""

from __future__ import annotations

import contextlib
import json
import logging
import math
import threading
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Iterator

from kubernetes.watch.watch import iter_resp_lines

from rollout.errors import GatewayError, TransientGatewayError
from rollout.model import NodeObservation

from . import _wire
from ._errors import TRANSPORT_ERRORS, translated

if TYPE_CHECKING:
    from ._gateway import KubeGateway

logger = logging.getLogger("rollout.gateway")


@dataclass(frozen=True)
class NodeEvent:
    """One change of one node. ``type``: ADDED, MODIFIED or DELETED.

    ``relisted`` marks events synthesised from a (re)list rather than received on the stream.
    """

    type: str
    node: NodeObservation
    resource_version: str
    relisted: bool = False


class NodeWatch:
    """Iterate node changes; ``resource_version`` is where to resume afterwards.

    ``timeout_s`` bounds the whole iteration (the server is asked to end the stream by then, so
    a quiet cluster does not block past it); ``stop`` (a ``threading.Event``) ends it between
    events. Without a starting ``resource_version`` the watch first lists and yields every node
    as a relisted ADDED event.
    """

    def __init__(self, gateway: "KubeGateway", *, selector: str | None,
                 resource_version: str | None, timeout_s: float | None,
                 stop: threading.Event | None, server_timeout_s: int,
                 lease_refresh_s: float | None) -> None:
        self._gw = gateway
        self._selector = selector
        self.resource_version = resource_version or ""
        self._timeout_s = timeout_s
        self._stop = stop or threading.Event()
        self._server_timeout_s = server_timeout_s
        self._lease_refresh_s = lease_refresh_s
        self._known: set[str] = set()
        self._leases: dict[str, _wire.LeaseInfo] = {}
        self._leases_at = -math.inf
        self._resp: Any = None
        self.relists = 0
        self.reconnects = 0
        self.events = 0

    def close(self) -> None:
        """End the iteration; safe from another thread (unblocks a read in progress)."""
        self._stop.set()
        resp, self._resp = self._resp, None
        if resp is not None:
            # shutdown() wakes a thread blocked reading the socket; closing a dead one may fail
            with contextlib.suppress(Exception):
                resp.shutdown()
            with contextlib.suppress(Exception):
                resp.close()

    def __iter__(self) -> Iterator[NodeEvent]:
        deadline = None if self._timeout_s is None else time.monotonic() + self._timeout_s
        try:
            if not self.resource_version:
                yield from self._relist()
                if self._stop.is_set():
                    return
            idle_streams = 0
            while not self._stop.is_set():
                remaining = None if deadline is None else deadline - time.monotonic()
                if remaining is not None and remaining <= 0:
                    return
                got = 0
                try:
                    for event in self._stream(remaining):
                        got += 1
                        if event is not None:
                            yield event
                        if self._stop.is_set():
                            return
                except _Gone:
                    yield from self._relist()
                    continue  # the loop re-checks stop
                except _Broken as exc:
                    logger.warning("node watch interrupted at rv %s: %s", self.resource_version,
                                   exc.__cause__ or exc)
                self.reconnects += 1
                idle_streams = 0 if got else idle_streams + 1
                if idle_streams:  # a stream that closes at once: do not spin
                    self._gw._sleep(min(1.0, 0.05 * 2 ** min(idle_streams, 5)))
        finally:
            self.close()

    # -- internals -------------------------------------------------------------------------

    def _refresh_leases(self, *, force: bool) -> None:
        due = self._lease_refresh_s is not None and (
            time.monotonic() - self._leases_at >= self._lease_refresh_s)
        if force or due:
            self._leases = self._gw._lease_infos()
            self._leases_at = time.monotonic()

    def _observe(self, node: _wire.Node) -> NodeObservation:
        return _wire.to_observation(node, lease=self._leases.get(node.metadata.name),
                                    observed_at=self._gw._now())

    def _relist(self) -> Iterator[NodeEvent]:
        nodes, rv = self._gw._list_wire_nodes(self._selector)
        self._refresh_leases(force=True)
        self.relists += 1
        logger.info("node watch (re)listed %d nodes at rv %s", len(nodes), rv)
        seen = {node.metadata.name for node in nodes}
        gone = sorted(self._known - seen)
        self._known = seen
        self.resource_version = rv
        for node in nodes:
            yield NodeEvent("ADDED", self._observe(node), rv, relisted=True)
            if self._stop.is_set():
                return
        for name in gone:
            yield NodeEvent("DELETED", NodeObservation(name=name, observed_at=self._gw._now()),
                            rv, relisted=True)
            if self._stop.is_set():
                return

    def _stream(self, remaining: float | None) -> Iterator[NodeEvent | None]:
        server_timeout = self._server_timeout_s
        if remaining is not None:
            server_timeout = max(1, min(server_timeout, math.ceil(remaining)))
        try:
            self._resp = self._gw._open_node_watch(
                resource_version=self.resource_version, selector=self._selector,
                timeout_seconds=server_timeout)
        except GatewayError as exc:
            if getattr(exc, "status", None) == 410:
                raise _Gone() from exc
            raise
        what = "watch nodes"
        resp = self._resp
        try:
            with translated(what):
                for line in iter_resp_lines(resp):  # type: ignore[no-untyped-call]
                    if line:
                        yield self._event(line)
        except Exception as exc:
            if self._stop.is_set():  # closed under us (close() from another thread): just end
                return
            if isinstance(exc, TransientGatewayError):
                # the stream broke after it was opened: reconnect from the RV we have. (Failing
                # to *open* it, after the whole retry policy, is raised to the caller instead.)
                raise _Broken() from exc
            raise
        finally:
            self._resp = None
            with contextlib.suppress(Exception):
                resp.release_conn()

    def _event(self, line: str) -> NodeEvent | None:
        try:
            return self._parse_event(line)
        except ValueError as exc:  # JSON or pydantic: the server sent something unreadable
            raise GatewayError(f"watch nodes: unreadable event {line[:200]!r}: {exc}") from exc

    def _parse_event(self, line: str) -> NodeEvent | None:
        raw = json.loads(line)
        kind = raw.get("type", "")
        obj = raw.get("object") or {}
        if kind == "ERROR":
            code = obj.get("code")
            if code == 410:
                logger.info("node watch rv %s expired (%s); relisting",
                            self.resource_version, obj.get("message", ""))
                raise _Gone()
            raise TransientGatewayError(f"watch nodes: ERROR event {code}: {obj.get('message', '')}")
        rv = ((obj.get("metadata") or {}).get("resourceVersion")) or self.resource_version
        self.resource_version = rv
        if kind == "BOOKMARK":
            return None
        node = _wire.Node.model_validate(obj)
        self.events += 1
        self._refresh_leases(force=False)
        name = node.metadata.name
        if kind == "DELETED":
            self._known.discard(name)
        else:
            self._known.add(name)
        obs = self._observe(node)
        logger.debug("node %s: %s at rv %s (error=%r)", name, kind, rv, obs.error)
        return NodeEvent(kind, obs, rv)


class _Gone(Exception):
    """410: the watched resourceVersion is too old; relist."""


class _Broken(Exception):
    """The open stream failed mid-way; reconnect."""


__all__ = ["NodeEvent", "NodeWatch", "TRANSPORT_ERRORS"]
