"""The fleet's shared Node watch on protocol cases kubesim cannot produce on demand."""

from __future__ import annotations

import threading
from collections.abc import Iterator, Mapping
from typing import Any

from rollout.errors import GatewayError

from kubelet_rollout_agent.fleet import NodeWatch


def _node(name: str, rv: str) -> dict[str, Any]:
    return {"metadata": {"name": name, "resourceVersion": rv}}


class _Server:
    """Lists at rv 5 (then 9); the first watch is refused with 410 Gone, a later one sends an event."""

    def __init__(self, stop: threading.Event) -> None:
        self.stop = stop
        self.lists = 0
        self.watched_from: list[str] = []

    def request(self, method: str, path: str, **_: Any) -> dict[str, Any]:
        self.lists += 1
        rv = "5" if self.lists == 1 else "9"
        return {"items": [_node("n1", rv)], "metadata": {"resourceVersion": rv}}

    def stream(self, path: str, *, query: Mapping[str, str], timeout_s: float) -> Iterator[dict[str, Any]]:
        self.watched_from.append(query["resourceVersion"])
        if len(self.watched_from) == 1:
            gone = GatewayError("watch /api/v1/nodes: HTTP 410 Gone: too old resource version")
            gone.status = 410  # type: ignore[attr-defined]
            raise gone
        yield {"type": "MODIFIED", "object": _node("n1", "10")}
        self.stop.set()


def test_a_410_when_connecting_lists_again_instead_of_retrying_the_same_version() -> None:
    stop = threading.Event()
    server = _Server(stop)
    watch = NodeWatch(server, retry_s=0.01)  # type: ignore[arg-type]
    watch.run(stop)
    assert server.watched_from == ["5", "9"]
    assert server.lists == 2
    assert watch.resource_version("n1") == "10"


def test_an_older_version_never_replaces_a_newer_one() -> None:
    watch = NodeWatch(None)  # type: ignore[arg-type]
    watch.offer(_node("n1", "12"))
    watch.offer(_node("n1", "11"))
    assert watch.resource_version("n1") == "12"
