"""Client-side rate limiting: a token bucket shared by every request of one gateway.

A 5,000-node rollout that assigns a whole batch at once would otherwise fire thousands of PATCHes
in a burst. Like client-go's ``--kube-api-qps`` / ``--kube-api-burst``, the bucket lets ``burst``
requests through at once and then ``qps`` per second. Retried attempts take a token each.

A run's bucket is an :class:`AdaptiveRate`: the policy's ``apiQps``/``apiBurst`` are a ceiling,
and the rate follows the server's answers beneath it (halved when it throttles or slows, raised
again step by step while it answers promptly), so a batch goes out as fast as the server takes
it and backs off from one that cannot.

Three kinds of request share it: :meth:`TokenBucket.acquire` reserves the next token at once (going
into debt, so callers are served in order), while :meth:`TokenBucket.acquire_spare` takes one only
when the bucket holds a whole token, i.e. when no reserved request is still waiting: requests that
inform (node Events) then never delay the ones that act. :meth:`TokenBucket.acquire_first` goes
ahead of every waiting request: the few that keep the run's view of the nodes live (a watch's
reconnect, a list after a 410), on which every decision waits. Behind a batch's 64 waiting
PATCHes at a rate the server had cut, a Lease watch's reconnect waited 14 s, long enough for
its resourceVersion to expire, and the relist that followed held the decisions up for a minute
(bench/README.md).

Thread-safe (the lock keeper renews from a background thread); the clock and sleep are injected
so tests run without waiting. A wait given a ``stop`` event ends when it is set.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import deque
from typing import Callable

# what the server's answers do to an AdaptiveRate (see its doc)
CUT_EVERY_S = 1.0  # a burst of refusals from requests already in flight halves the rate once
RAISE_EVERY_S = 1.0  # prompt answers raise it at most this often ...
RAISE_SHARE = 0.1  # ... by this share of the ceiling each time (back to the ceiling in 10 s)
SLOW_ANSWER_S = 1.0  # most requests for one object answered slower than this: the server struggles
SLOW_MIN_ANSWERS = 5  # ... out of at least this many over the last CUT_EVERY_S (one outlier is no sign)
FLOOR_QPS = 1.0

logger = logging.getLogger("rollout.gateway")


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

    def _reserve(self, *, first: bool) -> float:
        """Take a token (possibly going into debt); return how long the caller must wait: for the
        debt to be paid, or (``first``) only for a server's Retry-After."""
        with self._lock:
            self._refill()
            self._tokens -= 1.0
            wait = self._held_for() if first else max(0.0, -self._tokens / self.qps, self._held_for())
            self.waited_s += wait
            return wait

    def _held_for(self) -> float:
        """How long every request is held back whatever the tokens (a server's Retry-After)."""
        return 0.0

    # -- what the server answered (a fixed bucket ignores it; AdaptiveRate follows it) ----------

    def answered(self, latency_s: float) -> None:
        """A request for one object was answered (any answer but a throttling one) this fast."""

    def throttled(self, retry_after_s: float | None) -> None:
        """The server refused a request for load (429, or 503 with Retry-After)."""

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
        return self._acquire(stop, first=False)

    def acquire_first(self, *, stop: threading.Event | None = None) -> float:
        """Take a token ahead of every request already waiting: the debt grows by one token, so
        the requests that reserve after it wait one token longer and the rate holds. Only a
        server's Retry-After holds it back. Returns the seconds it waited."""
        return self._acquire(stop, first=True)

    def _acquire(self, stop: threading.Event | None, *, first: bool) -> float:
        if self.qps <= 0:
            return 0.0
        wait = self._reserve(first=first)
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
                held = self._held_for()
                if self._tokens >= 1.0 and not held:
                    self._tokens -= 1.0
                    return True
                wait = max(held, (1.0 - self._tokens) / self.qps)
            if not self._pause(wait, stop):
                return False


class AdaptiveRate(TokenBucket):
    """A token bucket whose rate follows the server's answers, never above ``ceiling_qps``.

    Additive increase, multiplicative decrease (as TCP does), shared by the run's requests: it
    starts at the ceiling, so a server that takes a batch at once gets it at once. A throttling
    answer (429, or 503 with Retry-After), or most requests for one object of the last
    :data:`CUT_EVERY_S` answered slower than :data:`SLOW_ANSWER_S`, halves the rate and the burst
    with it (at most once per :data:`CUT_EVERY_S`: the requests in flight answer alike); a ``Retry-After`` also
    holds every request back that long. While answers come promptly the rate rises by
    :data:`RAISE_SHARE` of the ceiling every :data:`RAISE_EVERY_S`. Never below :data:`FLOOR_QPS`.
    """

    def __init__(self, ceiling_qps: float = 20.0, burst: int = 40, *,
                 clock: Callable[[], float] = time.monotonic,
                 sleep: Callable[[float], None] = time.sleep) -> None:
        super().__init__(qps=ceiling_qps, burst=burst, clock=clock, sleep=sleep)
        self.ceiling = float(ceiling_qps)
        self.ceiling_burst = int(burst)
        self._held_until = 0.0
        self._last_cut = float("-inf")
        self._last_raise = clock()
        self.cuts = 0  # how often the server made it slow down (for the run's log and benchmarks)
        self._answers: deque[tuple[float, bool]] = deque()  # (when, slow) over the last CUT_EVERY_S
        self._slow = 0

    def _held_for(self) -> float:
        return max(0.0, self._held_until - self._clock())

    def _set_rate(self, qps: float) -> None:
        self._refill()  # the tokens earned so far, at the old rate
        self.qps = min(self.ceiling, max(min(FLOOR_QPS, self.ceiling), qps))
        self.burst = max(1, round(self.ceiling_burst * self.qps / self.ceiling))
        self._tokens = min(self._tokens, float(self.burst))

    def _cut(self, why: str) -> None:
        now = self._clock()
        if now - self._last_cut >= CUT_EVERY_S:
            self._set_rate(self.qps / 2)
            self._last_cut = now
            self.cuts += 1
            logger.info("API server %s: requests slowed to %.0f/s (ceiling %.0f/s)", why, self.qps, self.ceiling)

    def answered(self, latency_s: float) -> None:
        if self.qps <= 0:
            return
        with self._lock:
            now = self._clock()
            if self._slow_answers(now, latency_s > SLOW_ANSWER_S):
                self._cut(f"answers slowly (most over {SLOW_ANSWER_S:g} s)")
            elif self.qps < self.ceiling and min(now - self._last_raise, now - self._last_cut) >= RAISE_EVERY_S:
                self._set_rate(self.qps + RAISE_SHARE * self.ceiling)
                self._last_raise = now

    def _slow_answers(self, now: float, slow: bool) -> bool:
        """Were most of the last :data:`CUT_EVERY_S`'s answers slow (and enough to tell)?"""
        self._answers.append((now, slow))
        self._slow += slow
        while self._answers and self._answers[0][0] <= now - CUT_EVERY_S:
            self._slow -= self._answers.popleft()[1]
        return len(self._answers) >= SLOW_MIN_ANSWERS and 2 * self._slow > len(self._answers)

    def throttled(self, retry_after_s: float | None) -> None:
        if self.qps <= 0:
            return
        with self._lock:
            self._cut("throttles (429)" if not retry_after_s else f"throttles (Retry-After {retry_after_s:g} s)")
            if retry_after_s:
                self._held_until = max(self._held_until, self._clock() + retry_after_s)
