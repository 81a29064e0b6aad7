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
import json
from collections.abc import Iterable, Sequence
from typing import Any

import yaml
from pydantic import BaseModel, ValidationError

from rollout.kubeletconfig.catalog import API_VERSION, KIND, Catalog, load_catalog
from rollout.kubeletconfig.model import kubelet_configuration_model
from rollout.kubeletconfig.problems import Problem, error


class _DuplicateKey(ValueError):
    def __init__(self, key: str, line: int) -> None:
        super().__init__(f"duplicate field {key!r} (line {line})")
        self.key = key


class _StrictLoader(yaml.SafeLoader):
    """SafeLoader that refuses duplicate mapping keys instead of keeping the last one."""


def _construct_mapping(loader: _StrictLoader, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
    seen: set[Any] = set()
    for key_node, _ in node.value:
        key = loader.construct_object(key_node, deep=deep)
        if key in seen:
            raise _DuplicateKey(str(key), key_node.start_mark.line + 1)
        seen.add(key)
    return loader.construct_mapping(node, deep=deep)


_StrictLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _construct_mapping)


def _json_no_duplicates(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    keys = [k for k, _ in pairs]
    if dupes := sorted({k for k in keys if keys.count(k) > 1}):
        raise _DuplicateKey(dupes[0], 0)
    return dict(pairs)


def parse_text(text: str) -> tuple[dict[str, Any] | None, tuple[Problem, ...]]:
    """Parse JSON or YAML text into a mapping; a problem instead when it is not one."""
    if not text.strip():
        return None, (
            error(
                "",
                "empty payload (the kubelet reports the config file was empty)",
                source="decode",
                rule="empty",
            ),
        )
    try:
        if text.lstrip().startswith("{"):
            doc = json.loads(text, object_pairs_hook=_json_no_duplicates)
        else:
            doc = yaml.load(text, Loader=_StrictLoader)  # noqa: S506 - a SafeLoader subclass
    except _DuplicateKey as exc:
        return None, (error(exc.key, str(exc), source="decode", rule="duplicate-field"),)
    except (yaml.YAMLError, json.JSONDecodeError) as exc:
        return None, (error("", f"not valid YAML/JSON: {exc}", source="decode", rule="syntax"),)
    if not isinstance(doc, dict):
        return None, (
            error(
                "",
                f"expected a mapping at the top level, got {type(doc).__name__}",
                source="decode",
                rule="not-a-mapping",
            ),
        )
    return doc, ()


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


def _problem_from_pydantic(err: dict[str, Any], catalog: Catalog) -> Problem:
    loc = [p for p in err["loc"] if not (isinstance(p, str) and p.startswith(("function-", "constrained-")))]
    path = format_path(loc)
    if err["type"] == "extra_forbidden":
        hint = suggest(str(loc[-1]), _siblings(catalog, loc))
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
        return None, tuple(_problem_from_pydantic(e, catalog) for e in errs)
