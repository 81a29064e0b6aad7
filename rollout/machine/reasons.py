"""How a reason names nodes: the first few by name, the rest counted, so a reason about 5,000
nodes stays one line in the log and fits the journal's decision record."""

from __future__ import annotations

import heapq
from collections.abc import Mapping, Sequence
from typing import Any

MAX_NAMES_IN_REASON = 5


def listed(nodes: Mapping[str, Any] | Sequence[str]) -> str:
    # the first few in name order, without sorting them all (a decision names 10,000 waiting nodes)
    shown = ", ".join(heapq.nsmallest(MAX_NAMES_IN_REASON, nodes))
    more = len(nodes) - MAX_NAMES_IN_REASON
    return f"{shown} and {more} more" if more > 0 else shown


def gone_note(gone: Sequence[str]) -> str:
    return f"; {len(gone)} gone ({listed(gone)}: deleted or no longer selected)" if gone else ""
