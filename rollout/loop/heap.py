"""A run's heap: no full garbage collection walks what start-up built, in the middle of a decision.

CPython's full collections walk the orchestrator's whole heap (the node list, the plan, the
informer's view: millions of long-lived objects at scale), often while a batch lands, and collect
next to nothing; one that falls between a batch's last node and the decision that sees it holds
that decision up. Freezing what start-up built is not enough: the loop's own view (every node's
observation, renewed by its Lease every few seconds) grows back within minutes. The numbers are in
``bench/README.md``.

* ``quiet_start``: while a run starts, only the young generations are collected (a short-lived
  reference cycle is still freed); used where start-up has a known end (a run's, until its loop begins: ``rollout.run``).
* ``frozen_while``: while the engine's loop runs, what existed when it began is frozen
  (``gc.freeze``: no collection walks it) and a full collection comes only every
  :data:`RARE` young collections (minutes, not seconds, apart at 20,000 nodes), so few can fall
  on a decision; the young generations are collected as usual. Thawed when the loop ends, so a
  process that runs many rollouts (tests, a worker) frees what the last one left, at its next full
  collection, still a rare one: right after the loop, a full collection of everything just thawed
  would hold the run's end (its report, its exit) up.
* ``freeze_more``: a local run's flow run attaches after its loop began (Prefect's import and
  its flow run's machinery, a few hundred thousand objects, came later): frozen too, while a
  loop runs (after it, nothing is: no loop would thaw it).

Both also give the C heap's free pages back to the system (glibc's ``malloc_trim``; nothing
elsewhere): start-up's big buffers (the node list's JSON, its parse) otherwise stay resident,
free, through the whole run.
"""

from __future__ import annotations

import ctypes
import functools
import gc
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager

NEVER = 2**30  # middle-generation collections between full collections: none
RARE = 1000  # ... while a loop runs (CPython's default is 10)


_LOCK = threading.Lock()
_DEFAULT = gc.get_threshold()[2]  # full collections as the process had them
_starting = 0  # runs inside quiet_start
_running = 0  # loops inside frozen_while (the CLI runs one; tests and fleets may run several)
_looped = False  # a loop ran in this process: its old generation stays rarely collected


def _apply() -> None:
    """The full collections' threshold for the state the process is in (under the lock)."""
    young, middle, _ = gc.get_threshold()
    gc.set_threshold(young, middle, NEVER if _starting else RARE if _running or _looped else _DEFAULT)


@contextmanager
def quiet_start() -> Iterator[None]:
    """No full collection until the block ends."""
    global _starting
    with _LOCK:
        _starting += 1
        _apply()
    try:
        yield
    finally:
        with _LOCK:
            _starting -= 1
            _apply()


@contextmanager
def frozen_while() -> Iterator[None]:
    """Freeze the objects that exist now, and collect them rarely, for the block's length."""
    global _running, _looped
    with _LOCK:
        _running += 1
        _looped = True
        gc.freeze()
        _apply()
        give_back_free_heap()
    try:
        yield
    finally:
        with _LOCK:
            _running -= 1
            if not _running:
                gc.unfreeze()
            _apply()


def freeze_more() -> None:
    """Freeze what exists now as well, if a loop is running (it thaws it when it ends)."""
    with _LOCK:
        if _running:
            gc.freeze()
            give_back_free_heap()


def give_back_free_heap() -> None:
    """Return the C heap's free pages to the system, where the C library can (a few ms)."""
    trim = _malloc_trim()
    if trim is not None:
        trim(0)


@functools.cache
def _malloc_trim() -> Callable[[int], int] | None:
    try:
        trim: Callable[[int], int] = ctypes.CDLL(None).malloc_trim  # glibc's; musl and macOS have none
    except (OSError, AttributeError):
        return None
    return trim
