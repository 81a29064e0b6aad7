"""Decode a KubeletConfiguration document (YAML or JSON text) and check its shape.

Why stricter than the kubelet: the kubelet decodes strictly, and when that fails (unknown or
duplicate field) retries leniently and just logs ``using lenient decoding as strict decoding
failed``, dropping what it did not understand. A rollout built on a typo would then "succeed"
with a default value. We refuse those, name the field path and suggest the closest valid name.
Missing/wrong ``kind``/``apiVersion`` and wrong JSON types are load errors on the node
(``failed to load config``) and are refused too.
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable, Sequence
from typing import Any

from pydantic import BaseModel, ValidationError

from rollout.errors import ConfigError
from rollout.inputs import Document, parse_document
from rollout.kubeletconfig.catalog import API_VERSION, KIND, Catalog, load_catalog
from rollout.kubeletconfig.model import kubelet_configuration_model
from rollout.kubeletconfig.problems import Problem, error


def parse_input(text: str | bytes) -> tuple[Document | None, tuple[Problem, ...]]:
    """Parse JSON or YAML text through the input boundary; a problem instead when it is no mapping.

    Size, depth, alias, digit and encoding limits, duplicate and non-string keys are all checked
    by ``rollout.inputs``; its error becomes one decode problem carrying the line.
    """
    try:
        doc = parse_document(text, source="", error=ConfigError)
    except ConfigError as exc:
        rule, message = _input_rule(exc.reason)
        return None, (error(exc.path, message, source="decode", rule=rule, line=exc.line),)
    if not isinstance(doc.data, dict):
        return None, (
            error(
                "",
                f"expected a mapping at the top level, got {_json_type(doc.data)}",
                source="decode",
                rule="not-a-mapping",
            ),
        )
    return doc, ()


def parse_text(text: str | bytes) -> tuple[dict[str, Any] | None, tuple[Problem, ...]]:
    """Parse JSON or YAML text into a mapping; a problem instead when it is not one."""
    doc, problems = parse_input(text)
    return (doc.data if doc is not None else None), problems


def _input_rule(reason: str) -> tuple[str, str]:
    """The rule name of a boundary refusal, and the message in the kubelet's words if it has one."""
    if reason.startswith("is empty"):
        return "empty", "empty payload (the kubelet reports the config file was empty)"
    if reason.startswith("duplicate field"):
        return "duplicate-field", reason
    if reason.startswith("not valid"):
        return "syntax", reason
    return "input-limit", reason


def _json_type(value: Any) -> str:
    names = {type(None): "null", bool: "boolean", int: "number", float: "number", str: "string", list: "list"}
    return names.get(type(value), type(value).__name__)


def check_type_meta(doc: dict[str, Any]) -> tuple[Problem, ...]:
    """``kind`` and ``apiVersion`` must name KubeletConfiguration v1beta1 (else a load error)."""
    found: list[Problem] = []
    for key, want in (("kind", KIND), ("apiVersion", API_VERSION)):
        got = doc.get(key)
        if got is None:
            found.append(
                error(
                    key,
                    f"missing; must be {want!r} (the kubelet cannot decode the payload)",
                    source="decode",
                    rule=f"{key}-required",
                )
            )
        elif got != want:
            found.append(error(key, f"is {got!r}; must be {want!r}", source="decode", rule=f"{key}-wrong"))
    return tuple(found)


def format_path(loc: Sequence[str | int]) -> str:
    """``("registerWithTaints", 0, "effect")`` -> ``registerWithTaints[0].effect``."""
    out = ""
    for part in loc:
        if isinstance(part, int):
            out += f"[{part}]"
        else:
            out += f".{part}" if out else str(part)
    return out


def suggest(name: str, candidates: Iterable[str]) -> str | None:
    """The closest valid field name, case-insensitive matches first."""
    pool = list(candidates)
    lowered = {c.lower(): c for c in pool}
    if name.lower() in lowered:
        return lowered[name.lower()]
    close = difflib.get_close_matches(name, pool, n=1, cutoff=0.6)
    return close[0] if close else None


def _siblings(catalog: Catalog, loc: Sequence[str | int]) -> list[str]:
    """Valid field names at the level of ``loc``'s parent (list indices skipped)."""
    keys = tuple(p for p in loc[:-1] if isinstance(p, str))
    if not keys:
        return [f.name for f in catalog.fields] + ["kind", "apiVersion"]
    spec = catalog.lookup(keys)
    return [c.name for c in spec.children] if spec is not None else []


# "did you mean" costs a fuzzy match against every sibling name: a file of 10,000 unknown keys
# is not a typo, and the first few hints say what went wrong
MAX_HINTS = 20


def _problem_from_pydantic(err: dict[str, Any], catalog: Catalog, *, hint_allowed: bool = True) -> Problem:
    loc = [p for p in err["loc"] if not (isinstance(p, str) and p.startswith(("function-", "constrained-")))]
    path = format_path(loc)
    if err["type"] == "extra_forbidden":
        hint = suggest(str(loc[-1]), _siblings(catalog, loc)) if hint_allowed else None
        tail = f"; did you mean {hint}?" if hint else ""
        return error(path, f"unknown field{tail}", source="decode", rule="unknown-field")
    message = str(err["msg"]).removeprefix("Value error, ")
    if err["type"].endswith("_type") or err["type"] in ("dict_type", "list_type", "model_type"):
        message = f"wrong type: {message} (got {type(err.get('input')).__name__})"
    return error(path, message, source="decode", rule="wrong-type")


_UNION_TAGS = frozenset({"int", "float", "str"})


def _dedupe_union_errors(errors: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """A value failing ``int | float`` yields one error per branch; keep one per location."""
    seen: dict[tuple[Any, ...], dict[str, Any]] = {}
    for err in errors:
        key = tuple(p for p in err["loc"] if p not in _UNION_TAGS)
        if key in seen:  # the float branch failed as well: the value is no number at all
            seen[key] = {**seen[key], "msg": "Input should be a valid number"}
        else:
            seen[key] = {**err, "loc": key}
    return list(seen.values())


def check_schema(doc: dict[str, Any]) -> tuple[BaseModel | None, tuple[Problem, ...]]:
    """Validate names and JSON types against the generated model; every problem, with its path."""
    catalog = load_catalog()
    try:
        return kubelet_configuration_model().model_validate(doc), ()
    except ValidationError as exc:
        errs = _dedupe_union_errors([dict(e) for e in exc.errors(include_url=False)])
        return None, tuple(
            _problem_from_pydantic(e, catalog, hint_allowed=i < MAX_HINTS) for i, e in enumerate(errs)
        )
