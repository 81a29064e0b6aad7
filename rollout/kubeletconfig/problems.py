"""Problems found in a KubeletConfiguration, as values.

Why a value and not an exception per check: an operator fixing a config wants every mistake in
one pass, each with the field path, so validation collects ``Problem`` items and only the caller
decides whether to raise (``ConfigValidationError`` carries them all).

``source`` says who would have caught the problem on the node, which decides how bad it is:

- ``decode``: the kubelet cannot load the payload (``failed to load config``, DKC falls back),
  or (unknown/duplicate fields) silently ignores part of it - we refuse both.
- ``validation``: ``ValidateKubeletConfiguration`` (1.23) rejects it (``failed to validate
  config``, DKC falls back to lastKnownGood).
- ``runtime``: only the running kubelet checks it; it exits and crash-loops with NO fallback.
  Certain failures are errors; node-dependent ones are warnings.
- ``legacy-defaults`` / ``defaulting``: valid, but the effective value is not what the text
  suggests (an omitted or zero field silently takes a default).
"""

from __future__ import annotations

import enum
from collections.abc import Iterable
from dataclasses import dataclass, replace

from rollout.errors import ConfigError


class Severity(str, enum.Enum):
    ERROR = "error"
    WARNING = "warning"


@dataclass(frozen=True)
class Problem:
    """One finding: where (dotted field path, ``""`` for the whole document; the 1-based line
    of the text when known), what, how bad."""

    path: str
    message: str
    severity: Severity = Severity.ERROR
    source: str = "validation"
    rule: str = ""
    line: int | None = None

    def __str__(self) -> str:
        where = self.path or "<document>"
        at = f"line {self.line}: " if self.line else ""
        return f"{at}{where}: {self.message}"

    def at_line(self, line: int | None) -> Problem:
        return self if line is None or self.line is not None else replace(self, line=line)


def error(
    path: str, message: str, *, source: str = "validation", rule: str = "", line: int | None = None
) -> Problem:
    return Problem(path, message, Severity.ERROR, source, rule, line)


def warning(path: str, message: str, *, source: str = "runtime", rule: str = "") -> Problem:
    return Problem(path, message, Severity.WARNING, source, rule)


class ConfigValidationError(ConfigError, ValueError):
    """A KubeletConfiguration was refused; ``problems`` holds every error (and the warnings).

    A ``ConfigError`` (so an ``InputError``: the CLI exits 2) and still a ``ValueError`` for
    callers written before it was one.
    """

    def __init__(self, problems: Iterable[Problem], *, origin: str = "") -> None:
        found: tuple[Problem, ...] = tuple(problems)
        errors = [p for p in found if p.severity is Severity.ERROR]
        super().__init__(
            f"invalid KubeletConfiguration ({len(errors)} error(s))",
            source=origin,
            problems=[str(p) for p in errors],
        )
        self.problems: tuple[Problem, ...] = found  # type: ignore[assignment]
        self.origin = origin

    @property
    def errors(self) -> tuple[Problem, ...]:
        return tuple(p for p in self.problems if p.severity is Severity.ERROR)
