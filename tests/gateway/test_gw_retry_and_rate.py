"""Pure parts of the gateway: retry predicate, Retry-After, backoff, token bucket, translation."""

from __future__ import annotations

import threading
import time
from datetime import datetime, timezone

import pytest
import tenacity
import urllib3.exceptions
from kubernetes.client.exceptions import ApiException

from rollout.errors import (
    ConflictError,
    ForbiddenError,
    GatewayError,
    NotFoundError,
    TransientGatewayError,
)
from rollout.gateway import TokenBucket, default_retrying, is_retryable, parse_retry_after
from rollout.gateway import AdaptiveRate
from rollout.gateway._ratelimit import CUT_EVERY_S, RAISE_EVERY_S, SLOW_ANSWER_S
from rollout.gateway._errors import translate_api_exception, translate_transport_error, translated
from rollout.gateway._retry import wait_retry_after_or_backoff


def api_exc(status: int, reason: str = "", *, retry_after: str | None = None) -> ApiException:
    exc = ApiException(status=status, reason="x")
    exc.body = ('{"kind":"Status","reason":"%s","message":"msg %d","code":%d}'
                % (reason, status, status))
    exc.headers = {"Retry-After": retry_after} if retry_after else {}
    return exc


@pytest.mark.parametrize("status, cls", [
    (429, TransientGatewayError), (500, TransientGatewayError), (503, TransientGatewayError),
    (504, TransientGatewayError), (0, TransientGatewayError), (404, NotFoundError),
    (409, ConflictError), (403, ForbiddenError), (422, GatewayError), (400, GatewayError),
], ids=lambda v: str(v) if isinstance(v, int) else v.__name__)
def test_each_status_translates_to_one_class_and_only_transient_ones_retry(status, cls):
    err = translate_api_exception(api_exc(status, "R"), what="get node/n1")
    assert type(err) is cls
    assert is_retryable(err) == (cls is TransientGatewayError)
    assert err.status == status and "get node/n1" in str(err)


def test_translation_keeps_status_reason_and_retry_after():
    err = translate_api_exception(api_exc(409, "AlreadyExists"), what="create configmap x")
    assert err.reason == "AlreadyExists" and "msg 409" in str(err)
    err = translate_api_exception(api_exc(429, "TooManyRequests", retry_after="3"), what="w")
    assert err.retry_after == 3.0


def test_transport_errors_are_transient_and_chained():
    with pytest.raises(TransientGatewayError) as info, translated("list nodes"):
        raise urllib3.exceptions.ProtocolError("connection reset")
    assert isinstance(info.value.__cause__, urllib3.exceptions.ProtocolError)
    assert translate_transport_error(ConnectionRefusedError(), what="x").status == 0


def test_api_exception_never_escapes_translated():
    with pytest.raises(NotFoundError) as info, translated("get node/x"):
        raise api_exc(404, "NotFound")
    assert isinstance(info.value.__cause__, ApiException)


@pytest.mark.parametrize("value, expected", [
    ("5", 5.0), (" 0 ", 0.0), ("1.5", 1.5), ("-3", 0.0), ("", None), (None, None), ("soon", None),
    ("Sun, 22 Nov 2026 10:00:10 GMT", 10.0), ("Sun, 22 Nov 2026 09:00:00 GMT", 0.0),
])
def test_retry_after_parses_seconds_and_http_dates(value, expected):
    now = datetime(2026, 11, 22, 10, 0, 0, tzinfo=timezone.utc)
    assert parse_retry_after(value, now=now) == expected


class _State:
    def __init__(self, attempt: int, exc: BaseException) -> None:
        self.attempt_number = attempt
        fut = tenacity.Future(attempt)
        fut.set_exception(exc)
        self.outcome = fut


def test_wait_uses_retry_after_capped():
    wait = wait_retry_after_or_backoff(initial_s=0.2, cap_s=30, rng=lambda: 1.0)
    assert wait(_State(1, TransientGatewayError("x", retry_after=2))) == 2
    assert wait(_State(1, TransientGatewayError("x", retry_after=3600))) == 30


def test_backoff_is_exponential_with_full_jitter_and_capped():
    top = wait_retry_after_or_backoff(initial_s=0.2, cap_s=5, rng=lambda: 1.0)
    assert [top(_State(n, TransientGatewayError("x"))) for n in (1, 2, 3, 4, 10)] == \
        [0.2, 0.4, 0.8, 1.6, 5]
    low = wait_retry_after_or_backoff(initial_s=0.2, cap_s=5, rng=lambda: 0.25)
    assert low(_State(3, TransientGatewayError("x"))) == pytest.approx(0.2)


def test_default_retrying_retries_transient_then_reraises_ours():
    sleeps: list[float] = []
    calls = []

    def flaky():
        calls.append(1)
        raise TransientGatewayError("boom", retry_after=1)

    with pytest.raises(TransientGatewayError, match="boom"):
        default_retrying(attempts=4, sleep=sleeps.append)(flaky)
    assert len(calls) == 4 and sleeps == [1, 1, 1]


def test_default_retrying_does_not_retry_permanent_errors():
    calls = []

    def conflict():
        calls.append(1)
        raise ConflictError("409")

    with pytest.raises(ConflictError):
        default_retrying(sleep=lambda s: None)(conflict)
    assert len(calls) == 1


class FakeMono:
    def __init__(self) -> None:
        self.t = 0.0

    def __call__(self) -> float:
        return self.t

    def sleep(self, s: float) -> None:
        self.t += s


def test_token_bucket_allows_burst_then_qps():
    mono = FakeMono()
    bucket = TokenBucket(qps=10, burst=5, clock=mono, sleep=mono.sleep)
    waits = [bucket.acquire() for _ in range(25)]
    assert waits[:5] == [0.0] * 5
    assert all(w > 0 for w in waits[5:])
    # 20 requests beyond the burst at 10 qps take 2 s of simulated time
    assert mono.t == pytest.approx(2.0)


def test_token_bucket_refills_while_idle_but_not_beyond_burst():
    mono = FakeMono()
    bucket = TokenBucket(qps=10, burst=3, clock=mono, sleep=mono.sleep)
    for _ in range(3):
        bucket.acquire()
    mono.t += 100  # long idle: refill capped at burst
    assert [bucket.acquire() for _ in range(3)] == [0.0, 0.0, 0.0]
    assert bucket.acquire() == pytest.approx(0.1)


def test_token_bucket_5000_requests_never_exceed_rate():
    mono = FakeMono()
    stamps = []
    bucket = TokenBucket(qps=50, burst=100, clock=mono, sleep=mono.sleep)
    for _ in range(5000):
        bucket.acquire()
        stamps.append(mono.t)
    # in any 1-second window at most burst + qps requests start
    j = 0
    for i, t in enumerate(stamps):
        while stamps[j] < t - 1.0:
            j += 1
        assert i - j + 1 <= 150
    assert mono.t == pytest.approx((5000 - 100) / 50)


def test_token_bucket_disabled_with_zero_qps():
    bucket = TokenBucket(qps=0, sleep=lambda s: (_ for _ in ()).throw(AssertionError("slept")))
    assert all(bucket.acquire() == 0.0 for _ in range(1000))


def test_a_stop_ends_a_wait_for_the_rate_limit():
    bucket = TokenBucket(qps=0.5, burst=1)  # the next token in 2 s
    bucket.acquire()
    stop = threading.Event()
    threading.Timer(0.1, stop.set).start()
    started = time.monotonic()
    bucket.acquire(stop=stop)
    assert time.monotonic() - started < 1.5


def test_a_spare_token_is_taken_only_after_every_reserved_one():
    """Node Events (acquire_spare) never take a token a waiting write reserved (acquire)."""
    mono = FakeMono()
    writes_waiting = [True]  # their turns are reserved; while they wait, time does not move

    def sleep(seconds: float) -> None:
        if not writes_waiting[0]:
            mono.sleep(seconds)

    bucket = TokenBucket(qps=10, burst=1, clock=mono, sleep=sleep)
    waits = [bucket.acquire() for _ in range(4)]  # the burst, then three writes in turn
    assert waits == pytest.approx([0.0, 0.1, 0.2, 0.3])
    writes_waiting[0] = False
    assert bucket.acquire_spare()
    assert mono.t == pytest.approx(0.4)  # after the last write's turn, with a token of its own


def test_a_watch_reconnect_goes_ahead_of_the_waiting_writes_and_the_rate_holds():
    """The informer's requests (acquire_first) are not queued behind a batch's PATCHes; the
    writes reserved after it wait one token longer, so the bucket's rate is unchanged."""
    mono = FakeMono()
    bucket = TokenBucket(qps=10, burst=1, clock=mono, sleep=lambda _s: None)  # time stands still
    assert [bucket.acquire() for _ in range(4)] == pytest.approx([0.0, 0.1, 0.2, 0.3])  # writes in turn
    assert bucket.acquire_first() == 0.0  # at once, ahead of the three waiting
    assert bucket.acquire() == pytest.approx(0.5)  # the next write: one token later than without it


def test_a_watch_reconnect_still_honours_a_servers_retry_after():
    mono = FakeMono()
    rate = AdaptiveRate(ceiling_qps=10, burst=5, clock=mono, sleep=mono.sleep)
    rate.throttled(2.0)
    assert rate.acquire_first() == pytest.approx(2.0)


def test_a_stop_ends_a_wait_for_a_spare_token_without_taking_one():
    bucket = TokenBucket(qps=0.5, burst=1)
    bucket.acquire()
    stop = threading.Event()
    threading.Timer(0.1, stop.set).start()
    assert bucket.acquire_spare(stop=stop) is False
    assert bucket.acquire_spare(stop=stop) is False  # set: nothing taken, at once


# -- the adaptive rate: the policy's apiQps/apiBurst a ceiling, the server's answers the rate -----


def test_the_adaptive_rate_starts_at_its_ceiling():
    """A server that takes a 500-node batch gets it at once: burst, then the ceiling's rate."""
    mono = FakeMono()
    bucket = AdaptiveRate(ceiling_qps=500, burst=250, clock=mono, sleep=mono.sleep)
    for _ in range(500):
        bucket.acquire()
        bucket.answered(0.01)
    assert mono.t == pytest.approx(0.5) and bucket.qps == 500 and bucket.cuts == 0


def test_a_throttling_answer_halves_the_rate_once_per_burst_and_retry_after_holds_every_request():
    mono = FakeMono()
    bucket = AdaptiveRate(ceiling_qps=400, burst=200, clock=mono, sleep=mono.sleep)
    for _ in range(32):  # the requests in flight are refused alike: one cut, not 32
        bucket.throttled(2.0)
    assert (bucket.qps, bucket.burst, bucket.cuts) == (200, 100, 1)
    assert bucket.acquire() == pytest.approx(2.0), "held back as the server asked"
    mono.t += 1.0
    bucket.throttled(None)
    assert bucket.qps == 100 and bucket.cuts == 2


def test_slow_answers_cut_the_rate_and_prompt_ones_raise_it_back_to_the_ceiling_in_steps():
    mono = FakeMono()
    bucket = AdaptiveRate(ceiling_qps=100, burst=100, clock=mono, sleep=mono.sleep)
    bucket.answered(SLOW_ANSWER_S + 1)
    assert bucket.qps == 100, "one slow answer is no sign"
    for _ in range(3):
        bucket.answered(0.01)
    for _ in range(4):
        bucket.answered(SLOW_ANSWER_S + 1)
    assert bucket.qps == 50, "most answers of the last second slow"
    rates = []
    for _ in range(8):
        mono.t += RAISE_EVERY_S
        bucket.answered(0.01)
        rates.append(bucket.qps)
    assert rates == pytest.approx([60, 70, 80, 90, 100, 100, 100, 100])
    for _ in range(20):
        mono.t += CUT_EVERY_S
        bucket.throttled(None)
    assert bucket.qps == 1.0, "never below one request a second"


def test_a_run_backs_off_from_a_server_that_throttles_it(fake):
    """Through the gateway: 429s with Retry-After slow every later request of the run down."""
    from gw_helpers import make_gateway, node_obj

    fake.put("nodes", node_obj("n1"))
    gw = make_gateway(fake.url)
    gw.limit_rate(300, 300)
    fake.state.failures = [(429, "1")] * 3
    started = time.monotonic()
    gw.read_node("n1")
    assert time.monotonic() - started >= 1.0, "Retry-After honoured"
    assert isinstance(gw.rate_limiter, AdaptiveRate) and gw.rate_limiter.qps < 300
