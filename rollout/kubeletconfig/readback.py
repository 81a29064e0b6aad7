"""Read-back: is every field a config sets really what the running kubelet runs (configz)?

Why here, in the core: the node agent proves a drop-in took effect this way before it reports it
active, and the drift watch (``rollout.drift``) asks the same question of every node long after
a rollout proved it. One comparison, so a node the agent proved is in sync for the drift watch
the moment it was proven, and a value the kubelet merely prints differently is never drift.

Why configz: a running, healthy kubelet proves only that *some* config works. Command-line
flags win over drop-ins (so a drop-in can be silently overridden), and kubelets before 1.32
ignore a drop-in field whose Go name differs from its JSON name (kubernetes#126630). The only
ground truth is ``configz`` (the merged result, flags included). Only the fields the config sets
are compared: a field it leaves out is the node's own business.

Values are compared as the kubelet prints them back: durations re-formatted (``1m`` -> ``1m0s``)
and quantities canonicalised (``1024Mi`` -> ``1Gi``) compare equal to what was written; maps are
walked key by key (they merge that way), lists compared whole; ``true`` is never ``1``; a zero
value configz leaves out (Go's ``omitempty``: ``readOnlyPort: 0``) is the value it runs.

Pure.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from rollout.kubeletconfig.values import parse_go_duration, parse_quantity

_TYPE_META = frozenset({"kind", "apiVersion"})
_MISSING = object()


@dataclass(frozen=True)
class FieldDifference:
    """One field a config sets that the running kubelet does not run with that value."""

    path: str  # dotted from the top: ``evictionHard.memory.available``
    expected: Any  # the config's value
    running: Any  # configz's value; None when configz does not show the field at all
    missing: bool = False  # configz has no such field


def _zero(value: Any) -> bool:
    """Go's ``omitempty`` leaves a zero value out of configz (``readOnlyPort: 0``, ``false``,
    ``""``, an empty list or map): absent there, the kubelet runs exactly that."""
    return value is False or value == 0 and not isinstance(value, bool) or value in ("", [], {})


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


def _differences(written: Mapping[str, Any], running: Mapping[str, Any], prefix: str) -> Iterator[FieldDifference]:
    for key, value in written.items():
        if (not prefix and key in _TYPE_META) or value is None:
            continue  # null deletes a key: defaulting re-fills it, nothing to prove
        path = f"{prefix}.{key}" if prefix else str(key)
        actual = _lookup(running, str(key))
        if isinstance(value, Mapping) and isinstance(actual, Mapping):
            yield from _differences(value, actual, path)  # maps merge key by key
        elif actual is _MISSING:
            if not _zero(value):
                yield FieldDifference(path, value, None, missing=True)
        elif not same_value(value, actual):
            yield FieldDifference(path, value, actual)


def _running(configz: Mapping[str, Any]) -> Any:
    """The kubelet's config inside a configz answer (``{"kubeletconfig": {...}}``), or the object itself."""
    return configz.get("kubeletconfig", configz)


def differences(written: Mapping[str, Any], configz: Mapping[str, Any]) -> list[FieldDifference]:
    """Every field ``written`` sets that configz does not show with that value, sorted by path.

    ``configz`` is the endpoint's answer (``{"kubeletconfig": {...}}``) or its inner object.
    """
    running = _running(configz)
    if not isinstance(running, Mapping):
        return [FieldDifference(k, v, None, missing=True) for k, v in sorted(written.items())
                if k not in _TYPE_META and v is not None]
    return sorted(_differences(written, running, ""), key=lambda d: d.path)


def proven_fields(dropin: Mapping[str, Any]) -> list[str]:
    """The top-level fields a read-back can prove (type meta and deletions excluded)."""
    return sorted(k for k, v in dropin.items() if k not in _TYPE_META and v is not None)


def not_in_effect(dropin: Mapping[str, Any], configz: Mapping[str, Any]) -> list[str]:
    """Dotted paths of drop-in fields configz does not show with the drop-in's value."""
    running = _running(configz)
    if not isinstance(running, Mapping):
        return sorted(k for k in dropin if k not in _TYPE_META)
    return [d.path for d in differences(dropin, configz)]
