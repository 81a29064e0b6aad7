"""Loading a policy: text or file in, a validated ``RolloutPolicy`` or one ``PolicyError`` out.

Why a module: this is the only door a policy comes in by (files, names in ``policies/``, inline
text from a deployment), so every error is shaped here once: it names the file, the field path
and, for unknown keys, the closest valid name.
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, ValidationError

from rollout.errors import PolicyError
from rollout.policy.base import PROBLEM_SEP
from rollout.policy.model import DEFAULT_POLICY, DEFAULT_POLICY_DIR, RolloutPolicy

def _all_field_names(model: type[BaseModel], seen: set[str] | None = None) -> set[str]:
    names = seen if seen is not None else set()
    for name, info in model.model_fields.items():
        names.add(info.alias or name)
        for arg in _nested_models(info.annotation):
            _all_field_names(arg, names)
    return names


def _nested_models(annotation: Any) -> Iterable[type[BaseModel]]:
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        yield annotation
    for arg in getattr(annotation, "__args__", ()):
        yield from _nested_models(arg)




def _format_errors(err: Mapping[str, Any]) -> list[str]:
    """One line per problem; cross-field rules arrive as several lines in one error."""
    if err["loc"] or err["type"] != "value_error":
        return [_format_error(err)]
    return [line for line in _format_error(err).split(PROBLEM_SEP) if line]


def _format_error(err: Mapping[str, Any]) -> str:
    path = ".".join(str(p) for p in err["loc"])
    msg = str(err["msg"]).removeprefix("Value error, ")
    if err["type"] == "extra_forbidden":
        key = str(err["loc"][-1])
        close = difflib.get_close_matches(key, sorted(_all_field_names(RolloutPolicy)), n=1)
        hint = f"; did you mean {close[0]!r}?" if close else ""
        return f"{path}: unknown field{hint}"
    if not path:
        return msg
    got = err.get("input")
    shown = "" if isinstance(got, (dict, list)) or "got " in msg else f" (got {got!r})"
    return f"{path}: {msg}{shown}"


def load_policy_text(text: str, *, source: str = "<policy>") -> RolloutPolicy:
    """Parse and validate a policy document; the name defaults to the file's stem."""
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise PolicyError(f"not valid YAML: {exc}", source=source) from exc
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise PolicyError("a policy is a YAML mapping of fields", source=source)
    if not data.get("name"):
        data = {**data, "name": Path(source).stem if source != "<policy>" else ""}
    try:
        return RolloutPolicy.model_validate(data)
    except ValidationError as exc:
        problems = [line for e in exc.errors() for line in _format_errors(e)]
        raise PolicyError(
            f"invalid rollout policy ({len(problems)} problem(s))", source=source, problems=problems
        ) from None


def load_policy(path: str | Path) -> RolloutPolicy:
    """Read and validate one policy file."""
    p = Path(path)
    try:
        text = p.read_text(encoding="utf-8")
    except OSError as exc:
        raise PolicyError(f"cannot read policy file: {exc.strerror}", source=str(p)) from exc
    return load_policy_text(text, source=str(p))


def available_policies(policies_dir: Path = DEFAULT_POLICY_DIR) -> list[str]:
    return sorted(p.stem for p in policies_dir.glob("*.yaml"))


def resolve_policy(
    name_or_path: str | Path | None = None, *, policies_dir: Path = DEFAULT_POLICY_DIR
) -> RolloutPolicy:
    """A policy by name (``canary`` -> ``policies/canary.yaml``) or by path; None -> the default."""
    ref = str(name_or_path) if name_or_path else DEFAULT_POLICY
    if ref.endswith((".yaml", ".yml")) or "/" in ref or Path(ref).is_file():
        return load_policy(ref)
    candidate = policies_dir / f"{ref}.yaml"
    if not candidate.is_file():
        known = ", ".join(available_policies(policies_dir)) or "none"
        raise PolicyError(f"no policy named {ref!r} in {policies_dir} (available: {known})")
    return load_policy(candidate)
