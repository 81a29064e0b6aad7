"""Parsers for the scalar formats a KubeletConfiguration uses: Go durations, resource quantities,
eviction thresholds and cpusets.

Why our own: the kubelet parses these with Go's ``time.ParseDuration``, apimachinery's
``resource.ParseQuantity`` and the kubelet's cpuset parser. A value those reject is a decode or
start-up failure on the node, so we must reject exactly the same strings before publishing. The
functions are pure and raise ``ValueError`` with a message fit for an operator.

Not ``kubernetes.utils.parse_quantity``: it is Python's ``Decimal`` plus a suffix table, so it
accepts what ParseQuantity refuses (``1K``, ``NaN``, ``Infinity``, ``1_000``, `` 5``,
``1.5e3Mi``, exponents beyond 32 bits); a config we call valid must load on the node. The core
also may not import ``kubernetes`` (only the gateway does). tests/core/test_kubeletconfig_values.py
checks that both agree on every valid quantity and lists where they differ. No Python library
parses Go durations or cpusets.
"""

from __future__ import annotations

import re
from decimal import MAX_EMAX, MIN_EMIN, Context, Decimal

_NS_PER_UNIT: dict[str, int] = {
    "ns": 1,
    "us": 1_000,
    "µs": 1_000,  # U+00B5 micro sign, accepted by Go
    "μs": 1_000,  # U+03BC Greek mu, accepted by Go
    "ms": 1_000_000,
    "s": 1_000_000_000,
    "m": 60 * 1_000_000_000,
    "h": 3600 * 1_000_000_000,
}
_DURATION_PART = re.compile(r"(\d*)(?:\.(\d*))?(ns|us|µs|μs|ms|s|m|h)")
_SECOND = 1_000_000_000
_MAX_NS = 2**63  # 2**63 - 1, and 2**63 itself when negative (Go's math.MinInt64)


def parse_go_duration(text: str) -> int:
    """Nanoseconds of a Go duration string (``"1m30s"``, ``"100ms"``, ``"0"``), as Go parses it."""
    if not isinstance(text, str):
        raise ValueError(f"duration must be a string like '1m0s', got {type(text).__name__}")
    body, sign = text, 1
    if body[:1] in "+-" and body:
        sign, body = (-1 if body[0] == "-" else 1), body[1:]
    if body == "0":
        return 0
    if not body:
        raise ValueError(f"invalid duration {text!r}")
    total, pos = Decimal(0), 0
    while pos < len(body):
        match = _DURATION_PART.match(body, pos)
        # Go requires digits on at least one side of the dot and a unit after every number.
        if not match or not (match.group(1) or match.group(2)):
            raise ValueError(f"invalid duration {text!r} (Go duration such as '1m30s' or '500ms')")
        number = Decimal(f"{match.group(1) or 0}.{match.group(2) or 0}")
        total += number * _NS_PER_UNIT[match.group(3)]
        pos = match.end()
        # Go keeps nanoseconds in an int64 and refuses a longer duration as invalid
        if total > (_MAX_NS if sign < 0 else _MAX_NS - 1):
            raise ValueError(f"invalid duration {text[:40]!r} (longer than about 292 years)")
    return sign * int(total)


def _frac(value: int, scale: int) -> str:
    """``value/scale`` in decimal with trailing zeros trimmed, as Go's fmtFrac does."""
    whole, rest = divmod(value, scale)
    if not rest:
        return str(whole)
    digits = str(rest).rjust(len(str(scale)) - 1, "0").rstrip("0")
    return f"{whole}.{digits}"


def format_go_duration(ns: int) -> str:
    """Go's ``Duration.String()``: ``"1m0s"``, ``"100ms"``, ``"4h0m0s"``, ``"0s"``."""
    if ns == 0:
        return "0s"
    sign, u = ("-" if ns < 0 else ""), abs(ns)
    if u < _SECOND:
        for unit, scale in (("ms", 1_000_000), ("µs", 1_000), ("ns", 1)):
            if u >= scale:
                return f"{sign}{_frac(u, scale)}{unit}"
    hours, rest = divmod(u, 3600 * _SECOND)
    minutes, rest = divmod(rest, 60 * _SECOND)
    seconds = _frac(rest, _SECOND) + "s"
    if hours:
        return f"{sign}{hours}h{minutes}m{seconds}"
    if minutes:
        return f"{sign}{minutes}m{seconds}"
    return f"{sign}{seconds}"


_QUANTITY = re.compile(r"^([+-]?)(\d+(?:\.\d*)?|\.\d+)(Ki|Mi|Gi|Ti|Pi|Ei|n|u|m|k|M|G|T|P|E|[eE][+-]?\d+)?$")
_BINARY = {"Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "Pi": 2**50, "Ei": 2**60}
_DECIMAL = {"n": -9, "u": -6, "m": -3, "": 0, "k": 3, "M": 6, "G": 9, "T": 12, "P": 15, "E": 18}


def parse_quantity(value: str | int | float) -> Decimal:
    """The numeric value of a Kubernetes resource quantity (``"10Mi"``, ``"500m"``, ``"1e3"``)."""
    if isinstance(value, bool):
        raise ValueError("quantity must be a string like '10Mi' or a number, not a boolean")
    if isinstance(value, (int, float)):
        return Decimal(str(value))
    match = _QUANTITY.match(value) if isinstance(value, str) else None
    if not match:
        raise ValueError(f"invalid quantity {value!r} (expected e.g. '100Mi', '1Gi', '500m', '2')")
    sign, number, suffix = match.group(1), match.group(2), match.group(3) or ""
    base = Decimal(number) * (-1 if sign == "-" else 1)
    if suffix in _BINARY:
        return base * _BINARY[suffix]
    if suffix[:1] in ("e", "E") and len(suffix) > 1:
        return _scaled(base, suffix, value)
    return base.scaleb(_DECIMAL[suffix])


# apimachinery reads an exponent as an int32 (a larger one is a bad suffix) and keeps the value
# exact however large; the default decimal context would trap at 10**999999 instead.
_INT32 = 2**31
_WIDE = Context(prec=28, Emax=MAX_EMAX, Emin=MIN_EMIN)


def _scaled(base: Decimal, suffix: str, value: str) -> Decimal:
    digits = suffix[1:].lstrip("+-")
    if len(digits) > 10 or not -_INT32 <= int(suffix[1:]) < _INT32:
        raise ValueError(f"invalid quantity {value[:40]!r}: the exponent does not fit in 32 bits")
    return base.scaleb(int(suffix[1:]), context=_WIDE)


def check_eviction_threshold(value: str, *, allow_zero: bool = False) -> None:
    """Raise unless ``value`` is an eviction threshold the 1.23 kubelet accepts (quantity or %).

    Thresholds must be positive; a minimum-reclaim amount (``allow_zero``) only non-negative.
    """
    if not isinstance(value, str):
        raise ValueError("eviction threshold must be a string such as '100Mi' or '10%'")
    if value.endswith("%"):
        if value in ("0%", "100%"):  # the kubelet treats these as "threshold disabled"
            return
        try:
            percent = float(value[:-1])
        except ValueError as exc:
            raise ValueError(f"invalid eviction percentage {value!r}") from exc
        if not 0 <= percent <= 100:
            raise ValueError(f"eviction percentage {value!r} must be between 0% and 100%")
        return
    amount = parse_quantity(value)
    if amount < 0 or (amount == 0 and not allow_zero):
        raise ValueError(f"eviction threshold {value!r} must be positive")


# Linux caps CPU ids at NR_CPUS (8192 at most in mainline configs); the kubelet's parser has no
# cap and would build a set of a billion ids for "0-999999999" (it hangs). Larger ids are refused:
# no node has them, so the config could never start anyway.
MAX_CPU_ID = 65535


def parse_cpuset(text: str) -> frozenset[int]:
    """CPU ids of a Linux cpuset list (``"0-3,6"``), as the kubelet's cpuset.Parse reads it."""
    cpus: set[int] = set()
    if text == "":
        return frozenset()
    for part in text.split(","):
        first, last = _cpu_range(part, text)
        cpus.update(range(first, last + 1))
    return frozenset(cpus)


def _cpu_range(part: str, text: str) -> tuple[int, int]:
    bounds = part.split("-")
    if not 1 <= len(bounds) <= 2 or not all(b.isascii() and b.isdigit() for b in bounds):
        raise ValueError(f"invalid cpuset element {part[:40]!r} in {text[:80]!r} (expected e.g. '0-1,5')")
    if any(len(b) > 5 or int(b) > MAX_CPU_ID for b in bounds):
        raise ValueError(f"CPU id in {part[:40]!r} is above {MAX_CPU_ID}; no node has that many CPUs")
    first, last = int(bounds[0]), int(bounds[-1])
    if first > last:
        raise ValueError(f"invalid cpuset element {part!r} in {text[:80]!r} (expected e.g. '0-1,5')")
    return first, last
