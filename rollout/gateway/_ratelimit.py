"""Client-side rate limiting: a token bucket shared by every request of one gateway.

A 5,000-node rollout that assigns a whole batch at once would otherwise fire thousands of PATCHes
in a burst. Like client-go's ``--kube-api-qps`` / ``--kube-api-burst``, the bucket lets ``burst``
requests through at once and then ``qps`` per second. Retried attempts take a token each.

Two kinds of request share it: :meth:`TokenBucket.acquire` reserves the next token at once (going
into debt, so callers are served in order), while :meth:`TokenBucket.acquire_spare` takes one only
when the bucket holds a whole token, i.e. when no reserved request is still waiting: requests that
inform (node Events) then never delay the ones that act.

Thread-safe (the lock keeper renews from a background thread); the clock and sleep are injected
so tests run without waiting. A wait given a ``stop`` event ends when it is set.
"""

from __future__ import annotations

import threading
import time
from typing import Callable


class TokenBucket:
    """``acquire()`` blocks until a token is available; ``qps <= 0`` disables limiting."""

    def __init__(self, qps: float = 20.0, burst: int = 40, *,
                 clock: Callable[[], float] = time.monotonic,
                 sleep: Callable[[float], None] = time.sleep) -> None:
        if burst < 1:
            raise ValueError(f"burst must be >= 1, got {burst}")
        self.qps = float(qps)
        self.burst = int(burst)
        self._clock = clock
        self._sleep = sleep
        self._tokens = float(burst)
        self._last = clock()
        self._lock = threading.Lock()
        self.waited_s = 0.0  # total time callers were held back (for reports/benchmarks)

    def _refill(self) -> None:
        now = self._clock()
        elapsed = max(0.0, now - self._last)
        self._last = now
        self._tokens = min(float(self.burst), self._tokens + elapsed * self.qps)

    def _reserve(self) -> float:
        """Take a token (possibly going into debt); return how long the caller must wait."""
        with self._lock:
            self._refill()
            self._tokens -= 1.0
            if self._tokens >= 0:
                return 0.0
            wait = -self._tokens / self.qps
            self.waited_s += wait
            return wait

    def _pause(self, seconds: float, stop: threading.Event | None) -> bool:
        """Wait ``seconds``; False when ``stop`` was set first."""
        if stop is None:
            self._sleep(seconds)
            return True
        return not stop.wait(seconds)

    def acquire(self, *, stop: threading.Event | None = None) -> float:
        """Wait for one token; returns the seconds it had to wait (0.0 when a token was free).

        ``stop`` ends the wait early (the token stays spent): the caller looks at it before sending.
        """
        if self.qps <= 0:
            return 0.0
        wait = self._reserve()
        if wait > 0:
            self._pause(wait, stop)
        return wait

    def acquire_spare(self, *, stop: threading.Event | None = None) -> bool:
        """Take a token only once the bucket holds a whole one: after every request that reserved
        one with :meth:`acquire` has been served. False (no token taken) when ``stop`` was set."""
        if self.qps <= 0:
            return stop is None or not stop.is_set()
        while True:
            with self._lock:
                self._refill()
                if self._tokens >= 1.0:
                    self._tokens -= 1.0
                    return True
                wait = (1.0 - self._tokens) / self.qps
            if not self._pause(wait, stop):
                return False
