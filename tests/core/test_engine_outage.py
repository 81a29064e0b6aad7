"""The engine rides out a lost watch for exactly ``apiOutageTolerance``, then ends the run; and it
never decides on a view that was lost while it did something else."""

from __future__ import annotations

import threading
from typing import Any

import pytest
from test_machine_support import T0, make_plan, nodes, policy

from rollout.engine import RECONNECT_QUIET_S, Engine, OutageError
from rollout.journal import Journal


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
    engine = Engine(cluster=cluster, journal=journal, journal_rv=None, shell=None, lock=None)  # type: ignore[arg-type]
    engine._was_synced = True  # it had a live view before the watch went
    with pytest.raises(OutageError, match="apiOutageTolerance"):
        engine._wait_synced()
    assert cluster.lost.waits[0] == min(RECONNECT_QUIET_S, tolerance_s)  # a routine reconnect, silently
    assert sum(cluster.lost.waits) == pytest.approx(tolerance_s)


class _LostWhileReadingTheRequest:
    """A live view that is lost while the engine reads a person's request (the request waited out
    an outage meanwhile), and never comes back: the run is stopped while it waits for it."""

    version = 0
    watched_since = None

    def __init__(self, stop: threading.Event) -> None:
        self.synced = True
        self.stop = stop

    def wait_synced(self, timeout_s: float, *, stop: threading.Event | None = None) -> bool:
        self.stop.set()
        return False

    def snapshot(self) -> dict[str, Any]:
        return {}


class _RequestCluster:
    def __init__(self, stop: threading.Event) -> None:
        self.view = _LostWhileReadingTheRequest(stop)

    def informer(self, selector: str | None = None) -> Any:
        return self.view

    def read_request(self, rollout: str) -> None:
        self.view.synced = False
        return None

    def save_journal(self, rollout: str, data: Any, *, resource_version: str | None) -> str:
        return "2"

    def within(self, seconds: float) -> "_RequestCluster":
        return self


class _NoDecisions:
    def decided(self, *args: Any) -> None:
        raise AssertionError("decided on a view that was lost while the request was read")


class _Held:
    def check(self) -> None:
        return None


def test_a_view_lost_while_a_request_is_read_is_waited_for_before_deciding() -> None:
    stop = threading.Event()
    journal = Journal.start(make_plan(nodes(3), policy()), now=T0)
    engine = Engine(cluster=_RequestCluster(stop), journal=journal, journal_rv="1",  # type: ignore[arg-type]
                    shell=_NoDecisions(), lock=_Held(), stop=stop)  # type: ignore[arg-type]
    assert engine._loop().outcome.value == "stopped"
