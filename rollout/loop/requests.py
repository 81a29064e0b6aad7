"""A person's lifecycle request (``rollout pause/resume/abort/promote``), read off the decision thread.

The request is an annotation on the rollout's journal (``Cluster.read_request``), and reading it
is a round trip to the API server. Made on the thread that decides, every slow answer held up the
decision behind it; at 20,000 nodes a busy API server can take tenths of a second to answer. So
one thread of its own reads the annotation every ``period_s`` and keeps what it read; the engine
applies that when it next decides (``machine.apply_request`` applies a request once, by its id).

A failed read is logged and tried again at the next period: the node watches, not this reader,
tell the engine whether the API server is there.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Mapping

from rollout.errors import GatewayError
from rollout.ports import Cluster

log = logging.getLogger("rollout.requests")


class RequestReader:
    """Reads a rollout's pending lifecycle request in the background; :meth:`close` ends it."""

    def __init__(self, cluster: Cluster, rollout: str, *, period_s: float) -> None:
        self._cluster = cluster
        self._rollout = rollout
        self._period_s = period_s
        self._closing = threading.Event()
        self._latest: Mapping[str, str] | None = None
        self._thread: threading.Thread | None = None
        self._failing = False
        self._reading = threading.Lock()

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="lifecycle-requests", daemon=True)
        self._thread.start()

    def latest(self) -> Mapping[str, str] | None:
        """The request the last read found (None: none pending, or nothing read yet)."""
        return self._latest

    def read_now(self) -> Mapping[str, str] | None:
        """Read it on the caller's thread, now (the caller must see a request that just came)."""
        # one read at a time: a slower read finishing last must not put back an older request,
        # which would count as new again once a later one was applied
        with self._reading:
            self._latest = self._cluster.read_request(self._rollout)
            return self._latest

    def close(self) -> None:
        """End the reader; a read under way is cut short (seconds at worst)."""
        self._closing.set()
        if self._thread is not None:
            self._thread.join()

    def _run(self) -> None:
        with self._cluster.cut_short_by(self._closing):
            while not self._closing.wait(self._period_s):
                try:
                    self.read_now()
                except GatewayError as exc:
                    if not self._failing and not self._closing.is_set():
                        log.warning("could not read the rollout's lifecycle requests (tried again every %.0f s): %s",
                                    self._period_s, exc)
                    self._failing = True
                else:
                    self._failing = False
