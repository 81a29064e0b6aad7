"""Amounts of nodes: a count (``3``) or a percentage of the pool (``"10%"``).

Why a module: steps, ``maxUnavailable`` and the failure budget all use the same two forms, and
the rounding rule differs by use (a batch rounds up, a budget rounds down), so it lives in one
place with its reasons.
"""

from __future__ import annotations

import re
from math import ceil, floor
from typing import Annotated

from pydantic import AfterValidator, StrictInt

_PERCENT_RE = re.compile(r"^(\d+(?:\.\d+)?)%$")


def _check_amount(value: int | str) -> int | str:
    if isinstance(value, int):
        if value < 1:
            raise ValueError(f"a node count must be at least 1, got {value}")
        return value
    match = _PERCENT_RE.match(value.strip())
    if match is None:
        raise ValueError(f"a node count (3) or a percentage ('10%'), got {value!r}")
    pct = float(match.group(1))
    if not 0 < pct <= 100:
        raise ValueError(f"a percentage must be in (0%, 100%], got {value!r}")
    return value.strip()


CountOrPercent = Annotated[StrictInt | str, AfterValidator(_check_amount)]


def is_percent(amount: int | str) -> bool:
    return isinstance(amount, str)


def percent_of(amount: str) -> float:
    match = _PERCENT_RE.match(amount)
    assert match is not None  # validated on load
    return float(match.group(1))


def resolve_amount(amount: int | str, total: int, *, round_up: bool) -> int:
    """A count stays a count (capped at ``total``); a percentage of ``total`` is rounded.

    Batch steps round up (``10%`` of 3 nodes is 1 node, never 0); ``maxUnavailable`` and the
    failure budget round down, like Kubernetes' own ``maxUnavailable``.
    """
    if isinstance(amount, int):
        return min(amount, total)
    exact = percent_of(amount) * total / 100
    # guard against 29.999999 for 30%: round to 9 places before ceil/floor
    exact = round(exact, 9)
    return min(total, ceil(exact) if round_up else floor(exact))
