"""kubesim up runs no full collection (kubesim.heap): young reference cycles are still freed."""

from __future__ import annotations

import gc
import weakref

import pytest

from kubesim.heap import NEVER, no_full_collections


@pytest.fixture
def restored_thresholds():
    before = gc.get_threshold()
    yield
    gc.set_threshold(*before)


class _Cycle:
    def __init__(self) -> None:
        self.me = self


def test_after_it_only_the_young_generations_are_collected(restored_thresholds):
    young, middle, _ = gc.get_threshold()
    no_full_collections()
    assert gc.get_threshold() == (young, middle, NEVER)


def test_a_young_reference_cycle_is_still_freed(restored_thresholds):
    no_full_collections()
    cycle = _Cycle()
    alive = weakref.ref(cycle)
    del cycle
    gc.collect(0)
    assert alive() is None
