"""Client-side rate limiting: a token bucket shared by every request of one gateway.

A 5,000-node rollout that assigns a whole batch at once would otherwise fire thousands of PATCHes
in a burst. Like client-go's ``--kube-api-qps`` / ``--kube-api-burst``, the bucket lets ``burst``
requests through at once and then ``qps`` per second. Retried attempts take a token each.

Thread-safe (the lock keeper renews from a background thread); the clock and sleep are injected
so tests run without waiting.
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

    def _reserve(self) -> float:
        """Take a token (possibly going into debt); return how long the caller must wait."""
        with self._lock:
            now = self._clock()
            elapsed = max(0.0, now - self._last)
            self._last = now
            self._tokens = min(float(self.burst), self._tokens + elapsed * self.qps)
            self._tokens -= 1.0
            if self._tokens >= 0:
                return 0.0
            wait = -self._tokens / self.qps
            self.waited_s += wait
            return wait

    def acquire(self) -> float:
        """Wait for one token; returns the seconds waited (0.0 when a token was free)."""
        if self.qps <= 0:
            return 0.0
        wait = self._reserve()
        if wait > 0:
            self._sleep(wait)
        return wait
