"""Each batch of a rollout as a task run of its flow run: what the Prefect UI's run graph shows.

The engine runs the whole rollout inside the flow (``rollout.loop.engine``), so without this the graph
held only ``prepare config`` and ``plan``. A batch lasts from its assignment until it is done or
failed, across many decisions of the loop, so its task run is a thread of the flow's task runner
that waits for the batch's end (:meth:`BatchRuns.finish`); it logs the batch's nodes when it starts
and each node's phase and time when it ends (summed up for a large batch, :func:`node_lines`: 500
log lines took the flow run's log a second to ship after the last node was done), returns the nodes
with their outcome and seconds, and ends Failed (a failed batch) or Cancelled (a run stopped during
it), with the reason as its message. A run that ends, however it ends, closes
every batch it opened (:meth:`BatchRuns.close`).
"""

from __future__ import annotations

import statistics
import threading
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from prefect import get_run_logger, task
from prefect.cache_policies import NO_CACHE
from prefect.futures import PrefectFuture
from prefect.states import Cancelled, Failed

from rollout.report import SHOWN_NODES, BatchResult, NodeRow, landed, named


@dataclass
class _Open:
    ended: threading.Event = field(default_factory=threading.Event)
    result: BatchResult | None = None
    stopped: str = ""
    future: PrefectFuture[Any] | None = None


class BatchRuns:
    """The task runs of one flow run's batches, opened and finished as the engine goes."""

    def __init__(self) -> None:
        self._open: dict[int, _Open] = {}

    def start(self, index: int, label: str, nodes: Sequence[str]) -> None:
        """Open batch ``index``'s task run (once: a resumed batch is opened when first seen)."""
        if index in self._open:
            return
        opened = self._open[index] = _Open()
        runner = task(name="batch", task_run_name=f"batch {label}", cache_policy=NO_CACHE,
                      description="One batch of the rollout: its nodes, from their assignment to the batch's end.",
                      log_prints=False)(_waiting_for(opened))
        opened.future = runner.submit(label=label, nodes=list(nodes))

    def finish(self, index: int, result: BatchResult) -> None:
        opened = self._open.get(index)
        if opened is not None and not opened.ended.is_set():
            opened.result = result
            opened.ended.set()

    def close(self, why: str) -> None:
        """End every batch still open (the run ended, or was stopped, during it) and wait for them."""
        for opened in self._open.values():
            if not opened.ended.is_set():
                opened.stopped = why
                opened.ended.set()
        for opened in self._open.values():
            if opened.future is not None:
                opened.future.wait(timeout=30)


def _waiting_for(opened: _Open) -> Callable[..., Any]:
    def batch(label: str, nodes: list[str]) -> Any:
        log = get_run_logger()
        log.info("batch %s: %d node(s): %s", label, len(nodes), named(nodes))
        opened.ended.wait()
        result = opened.result
        if result is None:
            return Cancelled(message=opened.stopped or "the run ended before this batch did")
        for line in node_lines(result.rows):
            log.info("%s", line)
        summary = {"nodes": {r.node: {"phase": r.phase, "seconds": r.seconds} for r in result.rows},
                   "outcome": result.outcome}
        if result.outcome.startswith("failed"):
            return Failed(message=result.reason or f"batch {label} failed", data=summary)
        return summary

    return batch


def node_lines(rows: Sequence[NodeRow]) -> list[str]:
    """The batch's end in its task run's log: each node's phase and time, or, for many nodes, the
    first that did not land one by one (a count of the others, per phase) and those that did summed
    up per phase (their times' range, median and slowest three)."""
    def one(row: NodeRow) -> str:
        took = f" in {row.seconds}s" if row.seconds is not None else ""
        return f"{row.node}: {row.phase}{took}" + (f": {row.error}" if row.error else "")

    if len(rows) <= SHOWN_NODES:  # a batch this small: a line per node
        return [one(row) for row in rows]
    trouble = [r for r in rows if not landed(r)]
    lines = [one(row) for row in trouble[:SHOWN_NODES]]
    more = Counter(r.phase for r in trouble[SHOWN_NODES:])
    lines += [f"... and {count} more node(s) {phase}" for phase, count in sorted(more.items())]
    settled = [r for r in rows if landed(r)]
    for phase in sorted({r.phase for r in settled}):
        of_phase = [r for r in settled if r.phase == phase]
        timed = sorted((r for r in of_phase if r.seconds is not None), key=lambda r: r.seconds or 0.0)
        if not timed:
            lines.append(f"{len(of_phase)} node(s) {phase}")
            continue
        slowest = ", ".join(f"{r.node} {r.seconds}s" for r in reversed(timed[-3:]))
        lines.append(f"{len(of_phase)} node(s) {phase} in {timed[0].seconds}s to {timed[-1].seconds}s "
                     f"(median {statistics.median(r.seconds or 0.0 for r in timed):.1f}s; slowest: {slowest})")
    return lines
