"""A run stopped by request says how to resume it and, mid-drain, which nodes it leaves cordoned:
a person who presses Ctrl-C while a batch is drained should not find out from `kubectl get nodes`."""

from __future__ import annotations

import threading
from typing import Any

from test_machine_support import T0, make_plan, nodes, policy

from rollout.journal import Journal
from rollout.loop.engine import Engine


class _Cluster:
    """Takes the journal's last save; nothing else is asked of it on a stop."""

    def __init__(self) -> None:
        self.saved = 0

    def save_journal(self, rollout: str, data: Any, *, resource_version: str | None) -> str:
        self.saved += 1
        return "2"

    def within(self, seconds: float) -> "_Cluster":
        return self

    def informer(self, selector: str | None = None) -> "_View":
        return _View()


class _View:
    watched_since = None

    def snapshot(self) -> dict[str, Any]:
        return {}


class _Quiet:
    def decided(self, *args: Any) -> None:
        return None

    def batch_finished(self, *args: Any) -> None:
        return None


def _stopped(journal: Journal) -> str:
    cluster = _Cluster()
    engine = Engine(cluster=cluster, journal=journal, journal_rv="1", watcher=_Quiet(),  # type: ignore[arg-type]
                    lock=None, stop=threading.Event())
    result = engine._stopped()
    assert result.outcome.value == "stopped" and cluster.saved == 1
    return result.message


def test_a_stop_mid_drain_names_the_nodes_it_leaves_cordoned() -> None:
    journal = Journal.start(make_plan(nodes(4), policy()), now=T0)
    first = journal.plan.batches[0].nodes
    said = _stopped(journal.with_cordoned(first, at=T0))
    assert "run it again with the same name to resume" in said
    assert f"{len(first)} node(s) stay cordoned until then" in said and all(n in said for n in first), said


def test_a_stop_with_nothing_cordoned_says_only_how_to_resume() -> None:
    journal = Journal.start(make_plan(nodes(4), policy()), now=T0)
    first = journal.plan.batches[0].nodes
    said = _stopped(journal.with_cordoned(first, at=T0).with_uncordoned(first, at=T0))
    assert said.endswith("run it again with the same name to resume"), said
