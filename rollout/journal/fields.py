"""How the journal's values are spelled in its ConfigMaps: compact JSON, epoch milliseconds,
config sources, and the bytes a ConfigMap's data costs as the API server counts them.

Shared by the current format (``configmap``, ``parts``) and the reader of the previous one
(``v1``). Pure: encoding only.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from datetime import datetime, timedelta, timezone
from typing import Any

from rollout.model import ConfigRef

EPOCH = datetime(1970, 1, 1, tzinfo=timezone.utc)
_ONE_MS = timedelta(milliseconds=1)


def dumps(value: Any) -> str:
    """Compact, stable JSON; text stays UTF-8 (an escaped character costs up to 12 bytes)."""
    return json.dumps(value, separators=(",", ":"), sort_keys=True, ensure_ascii=False)


def data_bytes(data: Mapping[str, str]) -> int:
    """The size of a ConfigMap's ``data`` as the API server limits it: keys and values, in bytes."""
    return sum(len(k.encode()) + len(v.encode()) for k, v in data.items())


def ms(at: datetime) -> int:
    """Whole milliseconds since the epoch (floored, exactly: a timedelta divides in whole
    microseconds, no float on the way)."""
    return (at - EPOCH) // _ONE_MS


def ms_opt(at: datetime | None) -> int | None:
    return None if at is None else ms(at)


def at_ms(value: int) -> datetime:
    return EPOCH + timedelta(milliseconds=value)


def at_ms_opt(value: int | None) -> datetime | None:
    return None if value is None else at_ms(value)


def ms_after(at: datetime | None, base: datetime | None) -> int | None:
    """``at`` as milliseconds after ``base``: a few digits, not thirteen."""
    return None if at is None or base is None else ms(at) - ms(base)


def at_after(offset: int | None, base: datetime | None) -> datetime | None:
    return None if offset is None or base is None else base + timedelta(milliseconds=offset)


def source_from_json(body: Mapping[str, Any] | None) -> ConfigRef | None:
    return None if body is None else ConfigRef.from_api({"configMap": body})


class Interner:
    """Values that repeat across many nodes (config sources, zones, reasons) stored once each;
    a record holds the index (-1: none)."""

    def __init__(self) -> None:
        self.items: list[Any] = []
        self._index: dict[Any, int] = {}

    def index(self, value: str | None) -> int:
        if value is None:
            return -1
        return self._add(value, value)

    def source(self, ref: ConfigRef | None) -> int:
        return -1 if ref is None else self._add(ref, ref.to_api())

    def _add(self, key: Any, value: Any) -> int:
        found = self._index.get(key)
        if found is None:
            found = self._index[key] = len(self.items)
            self.items.append(value)
        return found
