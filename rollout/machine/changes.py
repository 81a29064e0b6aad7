"""Which names changed between two decisions: the one comparison every per-decision memo uses.

The journal's records and the observations are frozen values, and a change is always a new object
(``Journal.with_*`` builds a new mapping with the old one's order; the informer's snapshot keeps its
nodes' order). So what changed is where the two mappings hold different objects: found in C
(``map(is_not, ...)``), about a millisecond at 20,000 names, where a Python loop over them took
most of a decision while a batch landed (bench/README.md).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from itertools import compress
from operator import is_not
from typing import TypeVar

V = TypeVar("V")


def changed_names(before: Mapping[str, V], after: Mapping[str, V]) -> list[str] | None:
    """The names whose value in ``after`` is not the same object as in ``before``; None when the
    names themselves differ (one added, removed or moved): then everything is to be looked at."""
    if before is after:
        return []
    names = list(after)
    if len(names) != len(before) or names != list(before):
        return None
    return list(compress(names, map(is_not, before.values(), after.values())))


def changed_positions(before: Sequence[V], after: Sequence[V]) -> list[int]:
    """The positions whose value in ``after`` (as long as ``before``) is not the same object."""
    return list(compress(range(len(after)), map(is_not, before, after)))
