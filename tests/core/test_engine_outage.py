"""The engine rides out a lost watch for exactly ``apiOutageTolerance``, then ends the run; and a
read of a person's request that the API server never answers holds up no decision."""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest
from test_machine_support import T0, make_plan, nodes, policy

from rollout.loop.engine import RECONNECT_QUIET_S, Engine, OutageError
from rollout.errors import TransientGatewayError
from rollout.journal import Journal
from rollout.loop.requests import RequestReader


class _LostInformer:
    """A watch that was live once and never comes back; records how long it was waited for."""

    version = 0
    synced = False
    watched_since = None

    def __init__(self) -> None:
        self.waits: list[float] = []

    def wait_synced(self, timeout_s: float, *, stop: threading.Event | None = None) -> bool:
        self.waits.append(timeout_s)
        return False


class _Cluster:
    def __init__(self) -> None:
        self.lost = _LostInformer()

    def informer(self, selector: str | None = None) -> Any:
        return self.lost


@pytest.mark.parametrize("tolerance_s", [2, 300])
def test_a_lost_watch_is_waited_for_the_tolerance_in_all_then_ends_the_run(tolerance_s: int) -> None:
    pol = policy(apiOutageTolerance=f"{tolerance_s}s")
    journal = Journal.start(make_plan(nodes(3), pol), now=T0)
    cluster = _Cluster()
    engine = Engine(cluster=cluster, journal=journal, journal_rv=None, watcher=_Decisions(threading.Event()), lock=None)  # type: ignore[arg-type]
    engine._was_synced = True  # it had a live view before the watch went
    with pytest.raises(OutageError, match="apiOutageTolerance"):
        engine._wait_synced()
    assert cluster.lost.waits[0] == min(RECONNECT_QUIET_S, tolerance_s)  # a routine reconnect, silently
    assert sum(cluster.lost.waits) == pytest.approx(tolerance_s)


class _LiveView:
    """A live view whose nodes never change: every wait for a change ends at once."""

    version = 0
    synced = True
    watched_since = None

    def wait_for_change(self, seen_version: int, timeout_s: float, *, stop: threading.Event | None = None) -> int:
        return 0

    def snapshot(self) -> dict[str, Any]:
        return {}


class _HungRequestCluster:
    """An API server that never answers the read of the lifecycle request: the read ends only
    when the reading thread is told to (``cut_short_by``), as the gateway's calls do."""

    def __init__(self) -> None:
        self.view = _LiveView()
        self.reads_started = threading.Semaphore(0)
        self._own = threading.local()

    def informer(self, selector: str | None = None) -> Any:
        return self.view

    @contextlib.contextmanager
    def cut_short_by(self, event: threading.Event) -> Iterator[None]:
        self._own.event = event
        yield

    def read_request(self, rollout: str) -> None:
        self.reads_started.release()
        cut_short = getattr(self._own, "event", None)
        assert cut_short is not None, "read on the deciding thread"
        cut_short.wait()
        raise TransientGatewayError("cut short")

    def save_journal(self, rollout: str, data: Any, *, resource_version: str | None) -> str:
        return "2"

    def within(self, seconds: float) -> "_HungRequestCluster":
        return self


class _Decisions:
    """Counts the decisions; stops the run after the third."""

    def __init__(self, stop: threading.Event) -> None:
        self.count = 0
        self.stop = stop

    def decided(self, *args: Any) -> None:
        self.count += 1
        if self.count == 3:
            self.stop.set()

    def batch_finished(self, *args: Any) -> None:
        return None

    def cluster_away(self, *args: Any) -> None:
        return None


class _Held:
    def check(self) -> None:
        return None


def test_a_request_read_the_api_server_never_answers_holds_up_no_decision() -> None:
    stop = threading.Event()
    cluster = _HungRequestCluster()
    decisions = _Decisions(stop)
    journal = Journal.start(make_plan(nodes(3), policy()), now=T0)
    engine = Engine(cluster=cluster, journal=journal, journal_rv="1",  # type: ignore[arg-type]
                    watcher=decisions, lock=_Held(), stop=stop)  # type: ignore[arg-type]
    engine.requests = RequestReader(cluster, journal.rollout, period_s=0.01)  # type: ignore[arg-type]
    engine.requests.start()
    assert cluster.reads_started.acquire(timeout=10), "the reader never read"
    deciding = ThreadPoolExecutor(1)
    try:
        result = deciding.submit(engine._loop).result(timeout=30)
    finally:
        engine.requests.close()  # and the hung read is cut short: close returns
        deciding.shutdown()
    assert result.outcome.value == "stopped"
    assert decisions.count == 3
