"""One entry point: text in, every problem out (decode, 1.23 validation, runtime, defaulting).

Why one function: the CLI, the flow and the tests all need the same answer to "may this config
be published?", with every error named by its field path, before anything touches a cluster.
``validate_config`` never raises on a bad config; ``load_config`` raises
``ConfigValidationError`` carrying all problems when there is at least one error.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from pydantic import BaseModel

from rollout.inputs import Document
from rollout.kubeletconfig.decode import check_schema, check_type_meta, format_path, parse_input
from rollout.kubeletconfig.defaults import effective_config
from rollout.kubeletconfig.gates import merge_gates
from rollout.kubeletconfig.problems import ConfigValidationError, Problem, Severity
from rollout.kubeletconfig.runtime import runtime_problems
from rollout.kubeletconfig.validate import validate_effective


@dataclass(frozen=True)
class ValidatedConfig:
    """A config that passed: the text, the document as written, its defaulted form, the gates.

    ``document`` and ``effective`` are plain dicts for serialisation; treat them as read-only.
    """

    text: str
    document: dict[str, Any]
    effective: dict[str, Any]
    feature_gates: Mapping[str, bool]
    model: BaseModel
    warnings: tuple[Problem, ...] = ()


@dataclass(frozen=True)
class ValidationResult:
    """Every problem found; ``config`` is set only when there is no error."""

    problems: tuple[Problem, ...]
    config: ValidatedConfig | None = None
    document: dict[str, Any] | None = field(default=None, repr=False)

    @property
    def errors(self) -> tuple[Problem, ...]:
        return tuple(p for p in self.problems if p.severity is Severity.ERROR)

    @property
    def warnings(self) -> tuple[Problem, ...]:
        return tuple(p for p in self.problems if p.severity is Severity.WARNING)

    @property
    def ok(self) -> bool:
        return not self.errors


def _semantic_problems(
    doc: dict[str, Any], *, flag_gates: Mapping[str, bool] | None
) -> tuple[dict[str, Any], dict[str, bool], tuple[Problem, ...]]:
    cfg = effective_config(doc)
    file_gates = doc.get("featureGates") if isinstance(doc.get("featureGates"), Mapping) else None
    gates, gate_problems = merge_gates(file_gates, flag_gates=flag_gates)
    found = (*gate_problems, *validate_effective(cfg, gates), *runtime_problems(doc, cfg))
    return cfg, gates, found


def _without(doc: dict[str, Any], paths: list[str]) -> dict[str, Any]:
    """A copy of ``doc`` without the top-level fields named (first segment) by ``paths``."""
    bad = {path.split(".")[0].split("[")[0] for path in paths}
    return {k: v for k, v in doc.items() if k not in bad}


def validate_config(text: str | bytes, *, flag_gates: Mapping[str, bool] | None = None) -> ValidationResult:
    """Check a KubeletConfiguration text; ``flag_gates`` are gates a node sets by flag (they win).

    Never raises on bad input, whatever the bytes: every finding is a problem, with its line
    when the text has one for the field.
    """
    parsed, problems = parse_input(text)
    if parsed is None:
        return ValidationResult(problems)
    doc: dict[str, Any] = parsed.data
    model, schema_problems = check_schema(doc)
    found = (*check_type_meta(doc), *schema_problems)
    # Semantic rules need well-typed values: run them on the document without the bad parts
    # (which then take their defaults) so one pass still reports every other error too.
    cleaned = doc if model is not None else _without(doc, [p.path for p in schema_problems])
    cfg, gates, semantic = _semantic_problems(cleaned, flag_gates=flag_gates)
    found = _with_lines((*found, *semantic), parsed)
    result = ValidationResult(found, document=doc)
    if not result.ok or model is None:
        return result
    config = ValidatedConfig(_text(text), doc, cfg, gates, model, warnings=result.warnings)
    return ValidationResult(found, config=config, document=doc)


def _text(text: str | bytes) -> str:
    return text if isinstance(text, str) else text.decode("utf-8").removeprefix("\ufeff")


def _with_lines(found: tuple[Problem, ...], parsed: Document) -> tuple[Problem, ...]:
    """Each problem with the line of its field (or of the closest enclosing one)."""
    by_path = {format_path(loc): line for loc, line in parsed.lines.items()}
    return tuple(p.at_line(_line_of(p.path, by_path)) for p in found)


def _line_of(path: str, by_path: Mapping[str, int]) -> int | None:
    while path:
        if path in by_path:
            return by_path[path]
        cut = max(path.rfind("."), path.rfind("["))
        path = path[:cut] if cut > 0 else ""
    return None


def load_config(
    text: str | bytes, *, origin: str = "", flag_gates: Mapping[str, bool] | None = None
) -> ValidatedConfig:
    """The validated config, or ``ConfigValidationError`` listing every problem (``origin`` names the file)."""
    result = validate_config(text, flag_gates=flag_gates)
    if result.config is None:
        raise ConfigValidationError(result.problems, origin=origin)
    return result.config
