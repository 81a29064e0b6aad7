"""A watch stream read line by line (``rollout.gateway._watch.events``): a gap between two lines
longer than the watch's silence bound means this process was frozen, and the bound (the Lease
watch's takes the informer's lock) is asked only when a gap is long enough to matter: at 20,000
nodes Lease lines come 2,000 a second."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator

import pytest

from rollout.gateway import _wire
from rollout.gateway._watch import FROZEN_MARGIN_S, Silent, Watch, events

LINE = b'{"type":"MODIFIED","object":{"kind":"Lease","apiVersion":"coordination.k8s.io/v1",' \
       b'"metadata":{"name":"n1","namespace":"kube-node-lease","resourceVersion":"%d"}}}\n'


class Stream:
    """What urllib3 hands the watch: lines, then the end of the stream."""

    def __init__(self, lines: int) -> None:
        self.lines = lines

    def stream(self, amt: object = None, decode_content: bool = False) -> Iterator[bytes]:
        for i in range(self.lines):
            yield LINE % (i + 1)

    def close(self) -> None:
        pass


def _read(watch: Watch, lines: int, bound: float) -> tuple[int, int]:
    asked = 0

    def silence_s() -> float:
        nonlocal asked
        asked += 1
        return bound

    got = sum(1 for _ in events(watch, Stream(lines), _wire.Lease, stop=threading.Event(), responses={},
                                silence_s=silence_s))
    return got, asked


def test_lines_that_come_promptly_never_ask_for_the_silence_bound() -> None:
    watch = Watch("leases", heard=time.monotonic())
    assert _read(watch, 2_000, bound=20.0) == (2_000, 0)


def test_a_line_after_a_gap_beyond_the_bound_is_not_read_on() -> None:
    watch = Watch("leases", heard=time.monotonic() - (20.0 + FROZEN_MARGIN_S + 1))
    with pytest.raises(Silent, match="not read for"):
        _read(watch, 3, bound=20.0)


def test_a_gap_beyond_the_margin_but_within_the_bound_is_read_on() -> None:
    watch = Watch("leases", heard=time.monotonic() - (FROZEN_MARGIN_S + 1))
    assert _read(watch, 3, bound=20.0) == (3, 1)


def test_the_lease_watchs_bound_follows_the_shortest_lease_held() -> None:
    """Half the shortest Lease duration held, kept as Leases come and change (not a walk over
    every Lease at each read)."""
    from datetime import datetime, timezone

    from rollout.gateway import NodeInformer

    inf = NodeInformer(object(), now=lambda: datetime.now(timezone.utc))  # type: ignore[arg-type]

    def bound() -> float:
        return inf._silence_bound(inf._lease_watch)

    assert bound() == 20.0  # none held: the kubelet's 40 s
    for i in range(1_000):
        inf._apply_lease(f"n{i}", _wire.LeaseInfo(renewed=None, duration_s=40.0))
    inf._apply_lease("short", _wire.LeaseInfo(renewed=None, duration_s=4.0))
    assert bound() == 2.0
    inf._apply_lease("short", _wire.LeaseInfo(renewed=None, duration_s=40.0))  # its duration changed
    assert bound() == 20.0
    inf._apply_lease("n0", _wire.LeaseInfo(renewed=None, duration_s=None))  # no duration: not counted
    assert bound() == 20.0
