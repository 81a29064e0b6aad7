"""Kubernetes wire formats for time: ``metav1.Time`` (seconds, ``Z``) and ``MicroTime``.

Clients send any RFC 3339 form (the Python client writes ``+00:00`` and microseconds); the server
re-emits canonically, which also keeps no-op detection honest (a PUT of the same lease must not
bump its resourceVersion just because the offset was spelled differently).
"""

from __future__ import annotations

from datetime import datetime, timezone
from typing import Any


def now() -> datetime:
    return datetime.now(timezone.utc)


def fmt_time(moment: datetime) -> str:
    return moment.astimezone(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def fmt_micro(moment: datetime) -> str:
    return moment.astimezone(timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def parse(text: str) -> datetime | None:
    try:
        moment = datetime.fromisoformat(text.replace("z", "Z"))
    except ValueError:
        return None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=timezone.utc)
    return moment


def _canonical(value: Any, micro: bool) -> Any:
    if not isinstance(value, str) or not value:
        return value
    moment = parse(value)
    if moment is None:
        return value
    return fmt_micro(moment) if micro else fmt_time(moment)


# kind -> list of (path, micro?) ; "[]" walks a list
_TIME_FIELDS: dict[str, list[tuple[tuple[str, ...], bool]]] = {
    "Node": [
        (("status", "conditions", "[]", "lastHeartbeatTime"), False),
        (("status", "conditions", "[]", "lastTransitionTime"), False),
    ],
    "Namespace": [(("status", "conditions", "[]", "lastTransitionTime"), False)],
    "Lease": [(("spec", "acquireTime"), True), (("spec", "renewTime"), True)],
    "Pod": [
        (("status", "startTime"), False),
        (("status", "conditions", "[]", "lastProbeTime"), False),
        (("status", "conditions", "[]", "lastTransitionTime"), False),
    ],
    "PodDisruptionBudget": [(("status", "conditions", "[]", "lastTransitionTime"), False)],
    "Event": [
        (("firstTimestamp",), False),
        (("lastTimestamp",), False),
        (("eventTime",), True),
        (("series", "lastObservedTime"), True),
    ],
}


def normalize(kind: str, obj: dict[str, Any]) -> None:
    """Rewrite the kind's known time fields in place to their canonical spelling."""
    meta = obj.get("metadata")
    if isinstance(meta, dict):
        for key in ("creationTimestamp", "deletionTimestamp"):
            if key in meta:
                meta[key] = _canonical(meta[key], False)
    for path, micro in _TIME_FIELDS.get(kind, ()):
        _walk(obj, path, micro)


def _walk(node: Any, path: tuple[str, ...], micro: bool) -> None:
    if not path:
        return
    head, rest = path[0], path[1:]
    if head == "[]":
        if isinstance(node, list):
            for item in node:
                _walk(item, rest, micro)
        return
    if not isinstance(node, dict) or head not in node:
        return
    if rest:
        _walk(node[head], rest, micro)
    else:
        node[head] = _canonical(node[head], micro)


def human_duration(seconds: float) -> str:
    """``k8s.io/apimachinery/pkg/util/duration.HumanDuration`` (the AGE column)."""
    s = int(seconds)
    if s < 0:
        s = 0
    if s < 120:
        return f"{s}s"
    minutes = s // 60
    if minutes < 10:
        rem = s % 60
        return f"{minutes}m" if rem == 0 else f"{minutes}m{rem}s"
    if minutes < 180:
        return f"{minutes}m"
    hours = minutes // 60
    if hours < 8:
        rem = minutes % 60
        return f"{hours}h" if rem == 0 else f"{hours}h{rem}m"
    if hours < 48:
        return f"{hours}h"
    days = hours // 24
    if hours < 192:
        rem = hours % 24
        return f"{days}d" if rem == 0 else f"{days}d{rem}h"
    if days < 365 * 2:
        return f"{days}d"
    years = days // 365
    if years < 8:
        rem = days % 365
        return f"{years}y" if rem == 0 else f"{years}y{rem}d"
    return f"{years}y"
