"""A run's heap: no full garbage collection walks what start-up built, in the middle of a decision.

Measured at 20,000 nodes (``bench/README.md``): CPython's full collections of the orchestrator's
heap (the node list, the plan, the informer's view: millions of long-lived objects) took 0.2 to
0.56 s each, every 10 to 25 s while a batch landed, and collected next to nothing; one that fell
between a batch's last node and the decision that saw it doubled the observation lag. Nine more
(1.7 s together) ran during start-up, while the 20,000 nodes were parsed and planned.

* ``quiet_start``: while a run starts, only the young generations are collected (a short-lived
  reference cycle is still freed); used where start-up has a known end (the CLI's head start).
* ``frozen_while``: while the engine's loop runs, what existed when it began is frozen
  (``gc.freeze``: no collection walks it); what the loop allocates is collected as usual, and a
  full collection walks only that. Thawed when the loop ends, so a process that runs many
  rollouts (tests, a worker) frees what the last one left.
* ``freeze_more``: a head start's flow run attaches after its loop began (Prefect's import and
  its flow run's machinery, a few hundred thousand objects, came later): frozen too, while a
  loop runs (after it, nothing is: no loop would thaw it).
"""

from __future__ import annotations

import gc
import threading
from collections.abc import Iterator
from contextlib import contextmanager

NEVER = 2**30  # young collections between full collections


@contextmanager
def quiet_start() -> Iterator[None]:
    """No full collection until the block ends (the thresholds are restored then)."""
    young, middle, old = gc.get_threshold()
    gc.set_threshold(young, middle, NEVER)
    try:
        yield
    finally:
        gc.set_threshold(young, middle, old)


_LOOPS = threading.Condition()
_running = 0  # loops inside frozen_while (the CLI runs one; tests and fleets may run several)


@contextmanager
def frozen_while() -> Iterator[None]:
    """Freeze the objects that exist now for the block's length."""
    global _running
    with _LOOPS:
        _running += 1
        gc.freeze()
    try:
        yield
    finally:
        with _LOOPS:
            _running -= 1
            if not _running:
                gc.unfreeze()


def freeze_more() -> None:
    """Freeze what exists now as well, if a loop is running (it thaws it when it ends)."""
    with _LOOPS:
        if _running:
            gc.freeze()
