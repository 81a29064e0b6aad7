"""Retry policy for API calls, as a value.

The gateway translates every failed attempt into our own error types first (``_errors``), so the
retry decision is made on *our* vocabulary: an attempt is retried exactly when it raised a
:class:`~rollout.errors.TransientGatewayError` (HTTP 429, 5xx, connection/timeout errors). The
wait before the next attempt honours the server's ``Retry-After`` when it sent one, and otherwise
backs off exponentially with full jitter, as client-go does for throttled requests.

``default_retrying(sleep=lambda _s: None)`` gives tests a policy that retries instantly;
:func:`cut_short` makes any policy give up once an event is set (a worker told to end).
"""

from __future__ import annotations

import logging
import random
import threading
import time
from datetime import datetime, timezone
from email.utils import parsedate_to_datetime
from typing import Callable

import tenacity

from rollout.errors import TransientGatewayError

logger = logging.getLogger("rollout.gateway")

RETRYABLE_STATUS = frozenset({429, 500, 502, 503, 504})


def is_retryable_status(status: int | None) -> bool:
    """HTTP statuses worth another attempt: throttling and server-side failures (0 = no answer)."""
    return status is not None and (status == 0 or status in RETRYABLE_STATUS)


def is_retryable(exc: BaseException) -> bool:
    """The retry predicate: only transient gateway errors are retried."""
    return isinstance(exc, TransientGatewayError)


def parse_retry_after(value: str | None, *, now: datetime | None = None) -> float | None:
    """Seconds to wait from a ``Retry-After`` header (delta-seconds or an HTTP date).

    Returns None when the header is absent or unreadable; never negative.
    """
    if value is None:
        return None
    text = str(value).strip()
    if not text:
        return None
    try:
        return max(0.0, float(text))
    except ValueError:
        pass
    try:
        when = parsedate_to_datetime(text)
    except (TypeError, ValueError, IndexError):
        return None
    if when.tzinfo is None:
        when = when.replace(tzinfo=timezone.utc)
    now = now or datetime.now(timezone.utc)
    return max(0.0, (when - now).total_seconds())


class wait_retry_after_or_backoff(tenacity.wait.wait_base):
    """Wait ``Retry-After`` if the last error carried one, else exponential backoff with jitter.

    Backoff for attempt *n* is uniform in ``[0, min(cap, initial * 2**(n-1))]`` ("full jitter"),
    so many clients throttled at once do not come back in lockstep. A server-sent Retry-After is
    capped at ``cap`` too, so a misbehaving server cannot park a rollout for an hour.
    """

    def __init__(self, *, initial_s: float = 0.2, cap_s: float = 30.0,
                 rng: Callable[[], float] = random.random) -> None:
        self.initial_s = initial_s
        self.cap_s = cap_s
        self.rng = rng

    def __call__(self, retry_state: tenacity.RetryCallState) -> float:
        exc = retry_state.outcome.exception() if retry_state.outcome else None
        retry_after: float | None = getattr(exc, "retry_after", None)
        if retry_after is not None:
            return min(self.cap_s, float(retry_after))
        ceiling = min(self.cap_s, self.initial_s * 2.0 ** (retry_state.attempt_number - 1))
        return float(ceiling * self.rng())


def _log_before_sleep(retry_state: tenacity.RetryCallState) -> None:
    exc = retry_state.outcome.exception() if retry_state.outcome else None
    wait = retry_state.next_action.sleep if retry_state.next_action else 0.0
    logger.warning("API request attempt #%d failed; will retry in %.2fs: %s",
                   retry_state.attempt_number, wait, exc)


SLEEP_SLICE_S = 0.1  # how soon a backoff watching several events sees one of them set


class Pause:
    """A policy's real-time backoff sleep: it ends early once any of its events is set."""

    def __init__(self, *events: threading.Event | None) -> None:
        self.events = tuple(e for e in events if e is not None)

    def __call__(self, seconds: float) -> None:
        if not self.events:
            time.sleep(seconds)
        elif len(self.events) == 1:
            self.events[0].wait(seconds)
        else:
            deadline = time.monotonic() + seconds
            while not any(e.is_set() for e in self.events) and (left := deadline - time.monotonic()) > 0:
                self.events[0].wait(min(left, SLEEP_SLICE_S))


def default_retrying(*, attempts: int = 8, initial_s: float = 0.2, cap_s: float = 30.0,
                     sleep: Callable[[float], None] = time.sleep,
                     rng: Callable[[], float] = random.random,
                     deadline_s: float | None = None,
                     stop_event: threading.Event | None = None) -> tenacity.Retrying:
    """The gateway's standard policy: up to ``attempts`` tries of transient errors, then re-raise.

    With ``deadline_s`` the policy rides out an outage instead: it keeps retrying (backing off to
    ``cap_s``) until that much time has passed since the first attempt - a control plane that
    restarts during an upgrade must not fail a rollout. ``stop_event`` ends the retrying at once
    (Ctrl-C must not wait out a 5-minute outage); the sleep then returns early too. A ``sleep``
    other than ``time.sleep`` (a test's clock) is used as given.

    ``reraise=True``: when attempts run out the caller gets the last
    :class:`TransientGatewayError` itself, not a ``tenacity.RetryError``.
    """
    stop: tenacity.stop.stop_base = (tenacity.stop_after_delay(deadline_s) if deadline_s
                                     else tenacity.stop_after_attempt(attempts))
    if stop_event is not None:
        stop = stop | tenacity.stop_when_event_set(stop_event)
    pause = Pause(stop_event) if stop_event is not None or sleep is time.sleep else sleep
    return tenacity.Retrying(
        retry=tenacity.retry_if_exception(is_retryable),
        wait=wait_retry_after_or_backoff(initial_s=initial_s, cap_s=cap_s, rng=rng),
        stop=stop,
        sleep=pause,
        reraise=True,
        before_sleep=_log_before_sleep,
    )


def cut_short(retrying: tenacity.Retrying, event: threading.Event) -> tenacity.Retrying:
    """``retrying`` that also gives up once ``event`` is set: no attempt after it, and a backoff
    under way ends within a moment when it is a real-time :class:`Pause` (a run's stop still ends
    it too); any other sleep (a test's clock) is called as given, unless ``event`` is set."""
    given_sleep, given_stop = retrying.sleep, retrying.stop
    if isinstance(given_sleep, Pause):
        sleep: Callable[[float], None] = Pause(event, *given_sleep.events)
    else:
        def sleep(seconds: float) -> None:
            if not event.is_set():
                given_sleep(seconds)

    def stop(retry_state: tenacity.RetryCallState) -> bool:
        return event.is_set() or bool(given_stop(retry_state))

    return retrying.copy(stop=stop, sleep=sleep)
