"""Node Events beside the run: none while a batch's writes go out, and those the run ends before
sending come back to the engine, dated when what they report happened, to be handed off."""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Iterator
from datetime import datetime, timedelta, timezone

from rollout.loop.node_events import NodeEventQueue, PendingEvent

T0 = datetime(2026, 11, 23, 10, 0, tzinfo=timezone.utc)


class _Cluster:
    """Records Events; ``open`` closed makes every send wait (an API server slow to take them)."""

    def __init__(self) -> None:
        self.sent: list[str] = []
        self.open = threading.Event()
        self.open.set()

    def record_node_event(self, node: str, reason: str, message: str, type: str = "Normal", *,
                          at: datetime | None = None) -> bool:
        self.open.wait(5)
        self.sent.append(node)
        return True

    @contextlib.contextmanager
    def cut_short_by(self, event: threading.Event) -> Iterator[None]:
        yield


def _wait_for(condition, timeout: float = 5.0) -> None:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline
        time.sleep(0.01)


def test_no_event_goes_out_while_a_batchs_writes_do() -> None:
    cluster = _Cluster()
    events = NodeEventQueue(cluster, clock=lambda: T0)  # type: ignore[arg-type]
    events.start()
    try:
        with events.writing():
            events.put("n1", "KubeletConfigAssigned", "assigned")
            time.sleep(0.3)
            assert cluster.sent == [], "the writes have the API server to themselves"
        _wait_for(lambda: cluster.sent == ["n1"])
    finally:
        events.close()


def test_the_events_a_run_ends_before_sending_come_back_dated_for_hand_off() -> None:
    cluster = _Cluster()
    clock = iter(T0 + timedelta(seconds=i) for i in range(10))
    events = NodeEventQueue(cluster, clock=lambda: next(clock), senders=1)  # type: ignore[arg-type]
    events.start()
    cluster.open.clear()  # the API server does not take them
    for node in ("n1", "n2", "n3"):
        events.put(node, "KubeletConfigAssigned", f"assigned {node}")
    assert not events.drain(timeout_s=0.2, stop=threading.Event())
    cluster.open.set()  # the one in flight lands; the others were never sent
    unsent = events.close()
    assert unsent == [PendingEvent("n2", "KubeletConfigAssigned", "assigned n2", "Normal", T0 + timedelta(seconds=1)),
                      PendingEvent("n3", "KubeletConfigAssigned", "assigned n3", "Normal", T0 + timedelta(seconds=2))]
    assert cluster.sent == ["n1"]
