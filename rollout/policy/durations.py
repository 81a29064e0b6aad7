"""Policy durations (``45s``, ``10m``, ``1h30m``, ``2d``): parse, write back, describe.

Why our own parser: the policy format is deliberately smaller than Go's ``time.ParseDuration``
(whole units only, days allowed, bare numbers refused because ``10`` could mean seconds or
minutes; milliseconds only at the end, for a policy divided for a rehearsal: ``1s500ms``) and no library reads exactly that; the kubelet's own Go durations are parsed by
``rollout.kubeletconfig.values``. ``format_duration`` writes the canonical form the parser reads
back (a policy saved in a journal must load again). Text for people (``11 minutes and 22
seconds``) comes from ``humanize``, which is not meant to be parsed back.
"""

from __future__ import annotations

import re
from datetime import timedelta
from typing import Annotated

import humanize
from pydantic import BeforeValidator, PlainSerializer

_DURATION_RE = re.compile(r"^(?:(\d+)d)?(?:(\d+)h)?(?:(\d+)m)?(?:(\d+)s)?(?:(\d+)ms)?$")
# timedelta holds at most 999,999,999 days; a longer (fuzzed) value must be a clean error
_MAX_DIGITS = 9


def _refuse(value: object) -> ValueError:
    return ValueError(f"a duration like '45s', '10m' or '1h30m', got {value!r}")


def parse_duration(value: object) -> timedelta:
    """``"1h30m"`` -> timedelta. Bare numbers are refused: is ``10`` seconds or minutes?"""
    if isinstance(value, timedelta):
        return value
    if not isinstance(value, str):
        raise _refuse(value)
    text = value.strip()
    if text in ("0", "0s"):
        return timedelta(0)
    match = _DURATION_RE.match(text)
    if not text or match is None or not any(match.groups()):
        raise _refuse(value)
    if any(g and len(g) > _MAX_DIGITS for g in match.groups()):
        raise ValueError(f"duration {value!r} is too long (at most {_MAX_DIGITS} digits per unit)")
    d, h, m, s, ms = (int(g) if g else 0 for g in match.groups())
    try:
        return timedelta(days=d, hours=h, minutes=m, seconds=s, milliseconds=ms)
    except OverflowError as exc:
        raise ValueError(f"duration {value!r} is too long") from exc


def format_duration(value: timedelta) -> str:
    """The canonical string form, e.g. ``1h30m`` (``1s500ms``); ``0s`` for zero. Below a
    millisecond is dropped."""
    total = int(value / timedelta(milliseconds=1))
    if total <= 0:
        return "0s"
    parts = []
    for unit, size in (("d", 86_400_000), ("h", 3_600_000), ("m", 60_000), ("s", 1000), ("ms", 1)):
        amount, total = divmod(total, size)
        if amount:
            parts.append(f"{amount}{unit}")
    return "".join(parts)


def format_whole_seconds(value: timedelta) -> str:
    """``format_duration`` rounded to the second: how long something took or has waited, for a
    person (``10m6s``, not ``10m5s873ms``)."""
    return format_duration(timedelta(seconds=round(value.total_seconds())))


def describe_duration(value: timedelta) -> str:
    """For people, not for files: ``11 minutes and 22 seconds``."""
    return humanize.precisedelta(value, minimum_unit="seconds")


Duration = Annotated[
    timedelta,
    BeforeValidator(parse_duration),
    PlainSerializer(format_duration, return_type=str),
]
