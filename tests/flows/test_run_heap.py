"""A run's heap (rollout.loop.heap): start-up is not walked by full collections, the loop's garbage is
still freed, and a process that runs many rollouts gets its memory back after each."""

from __future__ import annotations

import gc
import weakref
from pathlib import Path

import pytest

from rollout.loop.heap import NEVER, RARE, _malloc_trim, freeze_more, frozen_while, quiet_start


class _Cycle:
    def __init__(self) -> None:
        self.me = self


def test_while_starting_only_the_young_generations_are_collected_and_after_it_all_again():
    before = gc.get_threshold()
    with quiet_start():
        assert gc.get_threshold() == (*before[:2], NEVER)
        cycle = _Cycle()
        alive = weakref.ref(cycle)
        del cycle
        gc.collect(0)
        assert alive() is None  # a young reference cycle is still freed
    assert gc.get_threshold() == before


def test_the_loop_freezes_what_start_up_built_and_thaws_it_when_it_ends():
    built = _Cycle()
    kept = weakref.ref(built)
    before = gc.get_threshold()
    with frozen_while():
        assert gc.get_freeze_count() > 0
        assert gc.get_threshold() == (*before[:2], RARE)  # full collections rarely, of what is not frozen
        with quiet_start():  # the CLI's start-up ends after its loop began
            assert gc.get_threshold() == (*before[:2], NEVER)
        assert gc.get_threshold() == (*before[:2], RARE)
        del built
        gc.collect()
        assert kept() is not None  # frozen: no collection walks it, even once it is garbage
        during = _Cycle()
        freed = weakref.ref(during)
        del during
        gc.collect()
        assert freed() is None  # what the loop allocates and drops is collected as usual
    assert gc.get_freeze_count() == 0
    assert gc.get_threshold() == (*before[:2], RARE)  # the run's end is not held up by a full collection
    gc.collect()
    assert kept() is None  # thawed: start-up's garbage is freed after the run


def _collected(objects: list[object]) -> bool:
    """Whether the collector walks these objects (frozen ones are in no generation). Asked by
    identity, as the freeze count is not: other threads free frozen objects meanwhile."""
    walked = {id(o) for o in gc.get_objects()}
    states = {id(o) in walked for o in objects}
    assert len(states) == 1, "some of them frozen, some not"
    return states.pop()


def test_what_came_after_the_loop_began_is_frozen_too_but_only_while_a_loop_runs():
    early = [_Cycle() for _ in range(100)]
    freeze_more()
    assert _collected(early)  # no loop: nothing would thaw it
    with frozen_while():
        later = [_Cycle() for _ in range(100)]
        assert _collected(later)
        freeze_more()
        assert not _collected(later)
        with frozen_while():  # a second loop (a fleet, tests) ending does not thaw the first's
            pass
        assert not _collected(later)
    assert _collected(later) and _collected(early)


def _resident_mib() -> float:
    status = Path("/proc/self/status").read_text()
    return int(next(line for line in status.splitlines() if line.startswith("VmRSS")).split()[1]) / 1024


@pytest.mark.skipif(_malloc_trim() is None, reason="a C library without malloc_trim")
def test_the_loop_gives_the_c_heaps_free_pages_back():
    """Start-up's big buffers, freed among smaller ones still in use, leave the C heap free but
    resident; the loop's start gives it back."""
    chunks = [bytes(60_000) for _ in range(2000)]  # 114 MiB from the C heap (below its mmap threshold)
    kept = chunks[::20]  # the rest is freed, but the heap's top is still in use
    del chunks
    freed = _resident_mib()
    with frozen_while():
        assert _resident_mib() < freed - 60
    assert len(kept) == 100
