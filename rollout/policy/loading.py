"""Loading a policy: text or file in, a validated ``RolloutPolicy`` or one ``PolicyError`` out.

Why a module: this is the only door a policy comes in by (files, names in ``policies/``, inline
text from a deployment), so every error is shaped here once: it names the file, the field path
and, for unknown keys, the closest valid name.

The shipped policies are the YAML files of the top-level ``policies/`` folder. A source checkout
(and an editable install, which runs from it) reads them there; a built wheel carries them inside
the package, as ``rollout/policies/`` (``setup.py`` maps the folder onto that package).
"""

from __future__ import annotations

import difflib
import functools
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ValidationError

from rollout.errors import PolicyError
from rollout.inputs import Document, parse_document, read_input
from rollout.policy.base import PROBLEM_SEP
from rollout.policy.model import DEFAULT_POLICY, RolloutPolicy


def _shipped_policies_dir() -> Path:
    package = Path(__file__).resolve().parents[1]
    packaged = package / "policies"  # an installed wheel
    return packaged if packaged.is_dir() else package.parent / "policies"  # a checkout


DEFAULT_POLICY_DIR = _shipped_policies_dir()


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




def validation_problems(exc: ValidationError, doc: Document | None, model: type[BaseModel]) -> list[str]:
    """One line per problem of a document validated as ``model`` (a policy, a fleet file), each
    naming its field and, when the document knows it, its line; unknown fields get the closest
    valid name of ``model``."""
    errors = exc.errors()
    return [line for i, e in enumerate(errors) for line in _format_errors(e, doc, hint=i < MAX_HINTS, model=model)]


def _format_errors(err: Mapping[str, Any], doc: Document | None = None, *, hint: bool = True,
                   model: type[BaseModel] = RolloutPolicy) -> list[str]:
    """One line per problem; cross-field rules arrive as several lines in one error."""
    if err["loc"] or err["type"] != "value_error":
        return [_at_line(_format_error(err, hint=hint, model=model), tuple(err["loc"]), doc)]
    lines = [line for line in _format_error(err).split(PROBLEM_SEP) if line]
    return [_at_line(line, _leading_path(line), doc) for line in lines]


def _leading_path(problem: str) -> tuple[str | int, ...]:
    """``steps.2: ...`` -> ``("steps", 2)``: cross-field rules name their field in the text."""
    head = problem.split(":", 1)[0]
    return tuple(int(p) if p.isdigit() else p for p in head.split(".")) if " " not in head else ()


def _at_line(problem: str, loc: tuple[Any, ...], doc: Document | None) -> str:
    line = doc.line_of(loc) if doc is not None and loc else None
    return f"line {line}: {problem}" if line else problem


_SHOWN = 60  # characters of a bad value shown back: a 1 MiB string is not an error message


# "did you mean" is a fuzzy match per unknown key: worth it for a typo, not for 10,000 keys
MAX_HINTS = 20


@functools.cache
def _known_names(model: type[BaseModel]) -> list[str]:
    return sorted(_all_field_names(model))


def _format_error(err: Mapping[str, Any], *, hint: bool = True, model: type[BaseModel] = RolloutPolicy) -> str:
    path = ".".join(str(p) for p in err["loc"])
    # a cross-field rule reports several problems, one per line: each is clipped, not their sum
    msg = PROBLEM_SEP.join(_clip(line, 300) for line in str(err["msg"]).removeprefix("Value error, ").split(PROBLEM_SEP))
    if err["type"] == "extra_forbidden":
        key = _clip(str(err["loc"][-1]), _SHOWN)
        close = difflib.get_close_matches(key, _known_names(model), n=1) if hint else []
        suggestion = f"; did you mean {close[0]!r}?" if close else ""
        return f"{_clip(path, 200)}: unknown field{suggestion}"
    if not path:
        return msg
    got = err.get("input")
    shown = "" if isinstance(got, (dict, list)) or "got " in msg else f" (got {_clip(repr(got), _SHOWN)})"
    return f"{path}: {msg}{shown}"


def _clip(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 3] + "..."


def load_policy_text(text: str | bytes, *, source: str = "<policy>") -> RolloutPolicy:
    """Parse and validate a policy document; the name defaults to the file's stem.

    Every way the text can be wrong (bytes, YAML, limits, fields) is one ``PolicyError``.
    An empty document (or only comments) means every default. A text is parsed once per process:
    the flag that names it, the run's request and every step after share the one (frozen) policy.
    """
    return _parsed(text, source)


@functools.lru_cache(maxsize=32)
def _parsed(text: str | bytes, source: str) -> RolloutPolicy:
    doc = parse_document(text, source=source, error=PolicyError, allow_empty=True)
    data = {} if doc.data is None else doc.data
    if not isinstance(data, dict):
        raise PolicyError("a policy is a YAML mapping of fields", source=source)
    if not data.get("name"):
        data = {**data, "name": Path(source).stem if source != "<policy>" else ""}
    try:
        return RolloutPolicy.model_validate(data)
    except ValidationError as exc:
        problems = validation_problems(exc, doc, RolloutPolicy)
        raise PolicyError(
            f"invalid rollout policy ({len(problems)} problem(s))", source=source, problems=problems
        ) from None


def load_policy(path: str | Path) -> RolloutPolicy:
    """Read and validate one policy file (``PolicyError`` when missing, unreadable or invalid)."""
    return load_policy_text(read_input(path, error=PolicyError), source=str(path))


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


def load_policy_ref(ref: str | None) -> RolloutPolicy:
    """A policy by name (``canary``), by path, or inline YAML text (what deployments pass)."""
    if ref and ("\n" in ref or (":" in ref and not ref.endswith((".yaml", ".yml")))):
        return load_policy_text(ref, source="<inline policy>")
    return resolve_policy(ref or None)
