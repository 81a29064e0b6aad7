"""Node Events, sent beside the run: they tell people what happened to their nodes, and never
hold up a decision.

The engine puts an Event here for every write it makes (assigned, reverted, failed, halted); a
few sender threads record them, each Event taking only a token no other request waits for (the
gateway's rule), and none while a batch's writes go out (:meth:`NodeEventQueue.writing`): a
batch's Events follow its writes, while its kubelets restart, so a slow API server makes them
late, never the rollout. At the end of a run the engine gives them a moment
(:meth:`NodeEventQueue.drain`), then :meth:`~NodeEventQueue.close` ends the senders and returns
what was not recorded.
"""

from __future__ import annotations

import contextlib
import logging
import queue
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import datetime

from rollout.ports import Cluster

log = logging.getLogger("rollout.engine")  # the run's log: an Event is part of the run

EVENT_SENDERS = 8  # node Events in flight at once (a slow API server must not make them a backlog)


@dataclass(frozen=True)
class PendingEvent:
    """A node Event not recorded yet, dated when what it reports happened."""

    node: str
    reason: str
    message: str
    type: str
    at: datetime


class NodeEventQueue:
    """Node Events, sent beside the run by :data:`EVENT_SENDERS` threads: they inform people and
    never delay a decision (the gateway sends one only with a token no other request waits for).

    :meth:`close` ends the senders for good: the queued Events are dropped, the ones in flight give
    up their retries, and every sender has ended when it returns (a thread left inside the API
    client when the interpreter exits can abort the process).
    """

    def __init__(self, cluster: Cluster, *, clock: Callable[[], datetime],
                 senders: int = EVENT_SENDERS) -> None:
        self._cluster = cluster
        self._clock = clock
        self._senders = senders
        self._queue: queue.Queue[PendingEvent | None] = queue.Queue()
        self._closing = threading.Event()
        self._writes_done = threading.Event()  # cleared while a batch's writes go out
        self._writes_done.set()
        self._threads: list[threading.Thread] = []
        self._unsent: list[PendingEvent] = []  # Events the run ended before they were recorded
        self._lock = threading.Lock()

    def start(self) -> None:
        for i in range(self._senders):
            thread = threading.Thread(target=self._run, name=f"node-events-{i}", daemon=True)
            thread.start()
            self._threads.append(thread)

    def put(self, node: str, reason: str, message: str, type: str = "Normal") -> None:
        self._queue.put(PendingEvent(node, reason, message, type, self._clock()))

    @contextlib.contextmanager
    def writing(self) -> Iterator[None]:
        """No Event goes out inside the block: a batch's writes have the API server to themselves
        (its kubelets answer them at once; the Events can wait a second)."""
        self._writes_done.clear()
        try:
            yield
        finally:
            self._writes_done.set()

    def drain(self, *, timeout_s: float, stop: threading.Event) -> bool:
        """Wait until every queued Event was sent (True), or ``timeout_s`` passed or a stop was
        asked for (False: a Ctrl-C never waits for Events)."""
        deadline = time.monotonic() + timeout_s
        while self._queue.unfinished_tasks and time.monotonic() < deadline and not stop.is_set():
            stop.wait(0.05)
        return not self._queue.unfinished_tasks

    def close(self) -> list[PendingEvent]:
        """End the senders (see the class); returns the Events that were not recorded."""
        if self._closing.is_set():
            return []
        self._closing.set()
        self._writes_done.set()
        for _ in self._threads:
            self._queue.put(None)  # wakes a sender waiting for work
        for thread in self._threads:
            thread.join()  # one request in flight at most, and cut short: seconds at worst
        while True:
            try:
                if (item := self._queue.get_nowait()) is not None:
                    self._given_up(item)
            except queue.Empty:
                return list(self._unsent)

    def _given_up(self, event: PendingEvent) -> None:
        with self._lock:
            self._unsent.append(event)

    def _run(self) -> None:
        with self._cluster.cut_short_by(self._closing):
            while (item := self._queue.get()) is not None and not self._closing.is_set():
                self._writes_done.wait()
                try:
                    sent = self._cluster.record_node_event(item.node, item.reason, item.message, item.type,
                                                           at=item.at)
                except Exception as exc:  # noqa: BLE001 - an Event is never worth a failed rollout
                    log.warning("node %s: event %s not recorded: %s", item.node, item.reason, exc)
                    continue
                finally:
                    self._queue.task_done()
                if not sent and self._closing.is_set():
                    self._given_up(item)  # cut short by the close (a refusal was logged by the gateway)
            if item is not None:
                self._given_up(item)  # taken after the close
