"""Kubernetes label selectors (``a=b,c!=d,e in (f,g),!h``) plus ``matchLabels``.

Why our own: the official client only passes selector strings to the API server, which does the
matching; the planner matches nodes it already listed, offline and in tests, so it needs the
semantics (``!=`` and ``notin`` match a node without the label) as a pure function.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Annotated

from pydantic import AfterValidator

_KEY = r"[A-Za-z0-9][-A-Za-z0-9_./]*"
_VALUE = r"[A-Za-z0-9_.-]*"
_REQ_RES = (
    ("in", re.compile(rf"^({_KEY})\s+in\s+\(([^)]*)\)$")),
    ("notin", re.compile(rf"^({_KEY})\s+notin\s+\(([^)]*)\)$")),
    ("!=", re.compile(rf"^({_KEY})\s*!=\s*({_VALUE})$")),
    ("=", re.compile(rf"^({_KEY})\s*==?\s*({_VALUE})$")),
    ("!", re.compile(rf"^!\s*({_KEY})$")),
    ("exists", re.compile(rf"^({_KEY})$")),
)


@dataclass(frozen=True)
class Requirement:
    """One clause of a label selector: ``key op values``."""

    key: str
    op: str
    values: tuple[str, ...] = ()

    def matches(self, labels: Mapping[str, str]) -> bool:
        present = self.key in labels
        value = labels.get(self.key)
        if self.op == "exists":
            return present
        if self.op == "!":
            return not present
        if self.op in ("=", "in"):
            return present and value in self.values
        return not present or value not in self.values  # "!=" and "notin"


def _split_clauses(text: str) -> list[str]:
    """Split on commas that are not inside parentheses."""
    clauses, depth, current = [], 0, ""
    for char in text:
        depth += {"(": 1, ")": -1}.get(char, 0)
        if char == "," and depth == 0:
            clauses.append(current.strip())
            current = ""
        else:
            current += char
    if current.strip():
        clauses.append(current.strip())
    return clauses


def _parse_clause(clause: str) -> Requirement:
    for op, regex in _REQ_RES:
        match = regex.match(clause)
        if match is None:
            continue
        key = match.group(1)
        if op in ("in", "notin"):
            values = tuple(v.strip() for v in match.group(2).split(",") if v.strip())
            return Requirement(key, op, values)
        if op in ("=", "!="):
            return Requirement(key, op, (match.group(2),))
        return Requirement(key, op)
    raise ValueError(f"not a label selector clause: {clause!r}")


@dataclass(frozen=True)
class LabelSelector:
    """A parsed Kubernetes label selector (``a=b,c!=d,e in (f,g),!h``) plus matchLabels."""

    requirements: tuple[Requirement, ...] = ()

    @classmethod
    def parse(cls, text: str, *, match_labels: Mapping[str, str] | None = None) -> LabelSelector:
        reqs = [_parse_clause(c) for c in _split_clauses(text)] if text.strip() else []
        reqs += [Requirement(k, "=", (v,)) for k, v in sorted((match_labels or {}).items())]
        return cls(tuple(reqs))

    def matches(self, labels: Mapping[str, str]) -> bool:
        return all(r.matches(labels) for r in self.requirements)

    @property
    def empty(self) -> bool:
        return not self.requirements


def _check_selector(text: str) -> str:
    LabelSelector.parse(text)
    return text


Selector = Annotated[str, AfterValidator(_check_selector)]
