"""Read-back proof: is every field our drop-in sets really in effect on the running kubelet?

Why: a running, healthy kubelet proves only that *some* config works. Command-line flags win
over drop-ins (so a drop-in can be silently overridden), and kubelets before 1.32 ignore a
drop-in field whose Go name differs from its JSON name (kubernetes#126630). The only ground
truth is ``configz`` (the merged result, flags included). A drop-in is *active* only when configz
holds each field it sets with the drop-in's value; any other field is named as an error.

Values are compared as the kubelet prints them back: durations re-formatted (``1m`` -> ``1m0s``)
and quantities canonicalised (``1024Mi`` -> ``1Gi``) compare equal to what was written.

Pure.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

from rollout.kubeletconfig.values import parse_go_duration, parse_quantity

_TYPE_META = frozenset({"kind", "apiVersion"})
_MISSING = object()


def _lookup(body: Mapping[str, Any], key: str) -> Any:
    """``body[key]``, falling back to a case-insensitive match (Go-cased configz keys)."""
    if key in body:
        return body[key]
    lowered = {str(k).lower(): v for k, v in body.items()}
    return lowered.get(key.lower(), _MISSING)


def _as_duration(value: Any) -> int | None:
    try:
        return parse_go_duration(value) if isinstance(value, str) else None
    except ValueError:
        return None


def _as_quantity(value: Any) -> Any:
    try:
        return parse_quantity(value) if isinstance(value, (str, int, float)) else None
    except (ValueError, ArithmeticError):
        return None


def same_value(written: Any, running: Any) -> bool:
    """True when the running value is the written one, modulo the kubelet's formatting."""
    if isinstance(written, bool) or isinstance(running, bool):
        return written is running  # True == 1 in Python; never in a kubelet config
    if written == running:
        return True
    for parse in (_as_duration, _as_quantity):
        a, b = parse(written), parse(running)
        if a is not None and b is not None:
            return bool(a == b)
    if isinstance(written, list) and isinstance(running, list) and len(written) == len(running):
        return all(same_value(w, r) for w, r in zip(written, running))
    return False


def _differences(written: Mapping[str, Any], running: Mapping[str, Any], prefix: str) -> Iterator[str]:
    for key, value in written.items():
        if (not prefix and key in _TYPE_META) or value is None:
            continue  # null deletes a key: defaulting re-fills it, nothing to prove
        path = f"{prefix}.{key}" if prefix else key
        actual = _lookup(running, key)
        if isinstance(value, Mapping) and isinstance(actual, Mapping):
            yield from _differences(value, actual, path)  # maps merge key by key
        elif actual is _MISSING or not same_value(value, actual):
            yield path


def proven_fields(dropin: Mapping[str, Any]) -> list[str]:
    """The top-level fields a read-back can prove (type meta and deletions excluded)."""
    return sorted(k for k, v in dropin.items() if k not in _TYPE_META and v is not None)


def not_in_effect(dropin: Mapping[str, Any], configz: Mapping[str, Any]) -> list[str]:
    """Dotted paths of drop-in fields configz does not show with the drop-in's value.

    ``configz`` is the endpoint's answer (``{"kubeletconfig": {...}}``) or its inner object.
    """
    running = configz.get("kubeletconfig", configz)
    if not isinstance(running, Mapping):
        return sorted(k for k in dropin if k not in _TYPE_META)
    return sorted(_differences(dropin, running, ""))
