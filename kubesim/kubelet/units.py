"""Go value formats the kubelet parses: ``time.Duration`` strings and resource quantities.

Why this exists: the simulated kubelet must accept and reject exactly what the Go kubelet does
(``time.ParseDuration`` for ``metav1.Duration`` fields, ``resource.ParseQuantity`` for reserved
resources and eviction thresholds) and print durations the way ``configz`` does (``1m0s``), so a
config round-tripped through ``configz`` -> ConfigMap decodes to the same values.
"""

from __future__ import annotations

import re
from decimal import Decimal, InvalidOperation

NANOS = {
    "ns": 1,
    "us": 1_000,
    "µs": 1_000,
    "μs": 1_000,
    "ms": 1_000_000,
    "s": 10**9,
    "m": 60 * 10**9,
    "h": 3600 * 10**9,
}
_DUR_PART = re.compile(r"([0-9]*(?:\.[0-9]*)?)(ns|us|µs|μs|ms|s|m|h)")
_QUANTITY = re.compile(r"^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$")
_SUFFIX = {
    "": Decimal(1),
    "n": Decimal("1e-9"),
    "u": Decimal("1e-6"),
    "m": Decimal("1e-3"),
    "k": Decimal(10**3),
    "M": Decimal(10**6),
    "G": Decimal(10**9),
    "T": Decimal(10**12),
    "P": Decimal(10**15),
    "E": Decimal(10**18),
    "Ki": Decimal(2**10),
    "Mi": Decimal(2**20),
    "Gi": Decimal(2**30),
    "Ti": Decimal(2**40),
    "Pi": Decimal(2**50),
    "Ei": Decimal(2**60),
}


class UnitError(ValueError):
    """A value Go would refuse to parse; the message mimics Go's."""


def parse_go_duration(text: str) -> int:
    """``time.ParseDuration`` -> nanoseconds (``"1m30s"`` -> 90e9). Raises :class:`UnitError`."""
    orig, s, sign = text, text, 1
    if s[:1] in "+-":
        sign, s = (-1 if s[0] == "-" else 1), s[1:]
    if s == "0":
        return 0
    if not s:
        raise UnitError(f'time: invalid duration "{orig}"')
    total, pos = Decimal(0), 0
    while pos < len(s):
        match = _DUR_PART.match(s, pos)
        if not match or match.group(1) in ("", "."):
            unit_missing = match is None and re.match(r"[0-9.]+$", s[pos:])
            kind = "missing unit in duration" if unit_missing else "invalid duration"
            raise UnitError(f'time: {kind} "{orig}"')
        total += Decimal(match.group(1)) * NANOS[match.group(2)]
        pos = match.end()
    return sign * int(total)


def format_go_duration(nanos: int) -> str:
    """``time.Duration.String()``: 90e9 -> ``1m30s``, 1e8 -> ``100ms``, 0 -> ``0s``."""
    if nanos == 0:
        return "0s"
    sign, n = ("-" if nanos < 0 else ""), abs(nanos)
    if n < 10**9:
        for unit, size in (("ms", 10**6), ("µs", 10**3), ("ns", 1)):
            if n >= size:
                return sign + _trim(Decimal(n) / size) + unit
    hours, rest = divmod(n, 3600 * 10**9)
    minutes, rest = divmod(rest, 60 * 10**9)
    secs = _trim(Decimal(rest) / 10**9)
    if hours:
        return f"{sign}{hours}h{minutes}m{secs}s"
    if minutes:
        return f"{sign}{minutes}m{secs}s"
    return f"{sign}{secs}s"


def _trim(value: Decimal) -> str:
    text = format(value.normalize(), "f")
    return text.rstrip("0").rstrip(".") if "." in text else text


def normalize_duration(text: str) -> str:
    return format_go_duration(parse_go_duration(text))


def parse_quantity(text: str) -> Decimal:
    """``resource.ParseQuantity`` (value only). Raises :class:`UnitError` with Go's message."""
    match = _QUANTITY.match(text.strip()) if isinstance(text, str) else None
    bad = UnitError("quantities must match the regular expression '^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$'")
    if not match or text != text.strip():
        raise bad
    number, suffix = match.groups()
    try:
        value = Decimal(number)
    except InvalidOperation as exc:
        raise bad from exc
    if suffix in _SUFFIX:
        return value * _SUFFIX[suffix]
    exp = re.fullmatch(r"[eE]([-+]?[0-9]+)", suffix)
    if exp:
        return value * (Decimal(10) ** int(exp.group(1)))
    raise bad


def parse_cpuset(text: str) -> set[int]:
    """``cpuset.Parse``: ``"0-1,5"`` -> {0, 1, 5}; raises :class:`UnitError`."""
    cpus: set[int] = set()
    if text == "":
        return cpus
    for part in text.split(","):
        bounds = part.split("-")
        try:
            if len(bounds) == 1:
                cpus.add(int(bounds[0]))
                continue
            if len(bounds) != 2:
                raise ValueError
            low, high = int(bounds[0]), int(bounds[1])
        except ValueError as exc:
            raise UnitError(f'strconv.Atoi: parsing "{part}": invalid syntax') from exc
        if low > high:
            raise UnitError(f'invalid range "{part}" (%d >= %d)'.replace("%d", str(low), 1).replace("%d", str(high), 1))
        cpus.update(range(low, high + 1))
    return cpus
