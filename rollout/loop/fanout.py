"""One batch's writes, sent concurrently and stopped together.

A batch's PATCHes go out ``concurrency`` at a time (the gateway's token bucket still bounds the
rate). The first error or a stop ends the fan-out at once: no node starts after it and the writes
in flight give up their retries (the request on the wire still ends by its timeout), and every
worker has ended before :func:`fan_out` returns: a thread left inside the API client when the
process exits can abort it.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from concurrent.futures import FIRST_EXCEPTION, Future, ThreadPoolExecutor, wait
from contextlib import AbstractContextManager

STOP_POLL_S = 0.1  # how soon a fan-out sees a stop


def fan_out(fn: Callable[[str], None], nodes: Sequence[str], *, concurrency: int, stop: threading.Event,
            cut_short_by: Callable[[threading.Event], AbstractContextManager[None]]) -> None:
    """``fn`` for every node, ``concurrency`` at a time, until the first error or ``stop``.

    ``cut_short_by(event)``: the calls a worker makes inside it give up once ``event`` is set (the
    gateway's). The first error is raised once every worker has ended (the journal knows what was
    meant); under a stop nothing is: the caller ends the run as stopped.
    """
    if not nodes:
        return
    ending = threading.Event()

    def one(node: str) -> None:
        if ending.is_set() or stop.is_set():
            return
        with cut_short_by(ending):
            fn(node)

    pool = ThreadPoolExecutor(max_workers=min(concurrency, len(nodes)), thread_name_prefix="write")
    failure: BaseException | None = None
    try:
        pending: set[Future[None]] = {pool.submit(one, n) for n in nodes}
        while pending and failure is None and not stop.is_set():
            done, pending = wait(pending, timeout=STOP_POLL_S, return_when=FIRST_EXCEPTION)
            failure = next((f.exception() for f in done if f.exception() is not None), None)
    finally:
        ending.set()
        pool.shutdown(wait=True, cancel_futures=True)
    if failure is not None and not stop.is_set():
        raise failure
