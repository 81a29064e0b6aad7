"""The exception a rollout/rollback run ends with when it did not complete.

Its message starts with the outcome (``halted:`` / ``reverted:`` / ``rejected:``) and names the
nodes and the reason, so the Failed state's message alone tells an operator what happened (and
`rollout start --deployment` can classify a run whose result it cannot read).
"""

from __future__ import annotations

from typing import Sequence


class RolloutFailed(Exception):
    def __init__(self, outcome: str, reason: str, *, nodes: Sequence[str] = (), report: str = "") -> None:
        self.outcome = outcome
        self.reason = reason
        self.nodes = tuple(nodes)
        self.report = report
        named = f" [nodes: {', '.join(self.nodes)}]" if self.nodes else ""
        self.message = f"{outcome}: {reason}{named}"
        super().__init__(self.message)

    def __reduce__(self):  # picklable with its fields (results may be persisted)
        return (_rebuild, (self.outcome, self.reason, self.nodes, self.report))


def _rebuild(outcome: str, reason: str, nodes: Sequence[str], report: str) -> "RolloutFailed":
    return RolloutFailed(outcome, reason, nodes=nodes, report=report)
