"""Maintenance windows: when a rollout may start new batches.

Why a module of its own: windows are the one part of the policy that reasons about wall-clock
time, time zones and calendars. Nothing here reads a clock: ``in_window(now)`` and
``next_window(now)`` take ``now``. A window is either weekdays with a start and end time (an end
before the start crosses midnight) or a cron expression for the opening plus a duration.

Cron expressions are read by ``cronsim`` (Debian cron semantics: names such as ``mon-fri`` and
``jan``, ``L``, day-of-month OR day-of-week when both are restricted, DST gaps and repeats);
only the ``@daily``-style nicknames are expanded here, since cronsim does not read them. A
window is saved in the same form it is loaded from (``model_dump`` writes only its own form).
"""

from __future__ import annotations

import re
from datetime import date, datetime, time, timedelta, timezone
from typing import Annotated, Any, Literal
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from cronsim import CronSim, CronSimError
from pydantic import (
    AfterValidator,
    BeforeValidator,
    PlainSerializer,
    SerializerFunctionWrapHandler,
    field_validator,
    model_serializer,
    model_validator,
)

from rollout.policy.base import PolicyModel
from rollout.policy.durations import Duration

Weekday = Literal["mon", "tue", "wed", "thu", "fri", "sat", "sun"]
_DAYS: tuple[Weekday, ...] = ("mon", "tue", "wed", "thu", "fri", "sat", "sun")
_HHMM = re.compile(r"^([01]\d|2[0-3]):([0-5]\d)$")


def _parse_hhmm(value: object) -> time:
    if isinstance(value, time):
        return value
    if isinstance(value, int):  # YAML 1.1 reads 09:00 unquoted as a sexagesimal int
        raise ValueError('quote times in YAML: start: "09:00"')
    match = _HHMM.match(str(value))
    if match is None:
        raise ValueError(f"a time of day like '09:00', got {value!r}")
    return time(int(match.group(1)), int(match.group(2)))


HHMM = Annotated[
    time, BeforeValidator(_parse_hhmm), PlainSerializer(lambda t: t.strftime("%H:%M"), return_type=str)
]


# cron's nicknames, which cronsim does not read; @reboot has no time and is refused
_NICKNAMES = {
    "@yearly": "0 0 1 1 *",
    "@annually": "0 0 1 1 *",
    "@monthly": "0 0 1 * *",
    "@weekly": "0 0 * * 0",
    "@daily": "0 0 * * *",
    "@midnight": "0 0 * * *",
    "@hourly": "0 * * * *",
}
_CRON_FIELDS = (
    ("minute", "0-59"),
    ("hour", "0-23"),
    ("day of month", "1-31, L or LW"),
    ("month", "1-12 or jan-dec"),
    ("day of week", "0-7 or sun-sat"),
)
_CRONSIM_FIELDS = ("minute", "hour", "day-of-month", "month", "day-of-week")
_ANY_TIME = datetime(2026, 1, 1, tzinfo=timezone.utc)


def cron_fields(text: str) -> str:
    """The five fields of a cron expression; a nickname (``@daily``) is expanded."""
    expr = " ".join(text.split())
    return _NICKNAMES.get(expr.lower(), expr)


def _check_cron(text: str) -> str:
    """Refuse what cronsim cannot read, naming the field; the text is kept as written."""
    expr = cron_fields(text)
    fields = expr.split()
    if len(fields) != 5:
        raise ValueError(
            f"a cron expression has 5 fields (minute hour day month weekday) or is one of "
            f"{', '.join(sorted(_NICKNAMES))}; got {text[:60]!r}"
        )
    for (label, allowed), field in zip(_CRON_FIELDS, fields, strict=True):
        if re.search(r"\d{5}", field):  # cronsim would call int() on a 5,000-digit step
            raise ValueError(f"cron {label}: {field[:40]!r} is not valid (allowed: {allowed})")
    try:
        CronSim(expr, _ANY_TIME)
    except (CronSimError, ValueError) as exc:
        raise ValueError(_cron_problem(str(exc), fields)) from None
    return text


def _cron_problem(message: str, fields: list[str]) -> str:
    for i, name in enumerate(_CRONSIM_FIELDS):
        if message == f"Bad {name}":
            label, allowed = _CRON_FIELDS[i]
            return f"cron {label}: {fields[i][:40]!r} is not valid (allowed: {allowed}, *, ranges, lists, /steps)"
    return f"not a cron expression: {message[:80]}"


CronText = Annotated[str, AfterValidator(_check_cron)]


def _latest_opening(expr: str, local: datetime) -> datetime | None:
    """The last opening at or before ``local`` (cronsim iterates backwards from just after it)."""
    after = local.replace(microsecond=0) + timedelta(seconds=1)
    return next(CronSim(expr, after, reverse=True), None)


def _next_opening(expr: str, local: datetime) -> datetime | None:
    """The first opening strictly after ``local``; None if none comes within cronsim's 50 years.

    cronsim follows Debian cron across DST changes: an opening that falls in the spring-forward
    gap happens at the first minute after it, one in the repeated autumn hour happens once.
    """
    return next(CronSim(expr, local), None)


class Window(PolicyModel):
    """When batches may start: weekdays with a start and end time (an end before the start
    crosses midnight), or a ``cron`` expression for the opening plus a ``duration``."""

    days: tuple[Weekday, ...] = _DAYS
    start: HHMM | None = None
    end: HHMM | None = None
    cron: CronText | None = None
    duration: Duration | None = None

    @model_validator(mode="after")
    def _one_form(self) -> Window:
        ranged = self.start is not None or self.end is not None
        cronned = self.cron is not None or self.duration is not None
        if ranged == cronned:
            raise ValueError("give either start and end (with days) or cron and duration")
        if ranged and (self.start is None or self.end is None):
            raise ValueError("start and end go together")
        if cronned and (self.cron is None or not self.duration):
            raise ValueError("cron needs a duration longer than 0s")
        if ranged and self.start == self.end:
            raise ValueError("start and end are equal: an empty window (omit windows for always)")
        if not self.days:
            raise ValueError("days is empty: the window would never open")
        # every day is the default, and what journals written before the round-trip fix hold
        if cronned and set(self.days) != set(_DAYS):
            raise ValueError("days applies to start/end windows; put the weekdays in the cron expression")
        return self

    def _starts(self, day: date, zone: ZoneInfo) -> list[datetime]:
        assert self.start is not None
        if _DAYS[day.weekday()] not in self.days:
            return []
        return [datetime.combine(day, self.start, tzinfo=zone)]

    def _length(self, opening: datetime) -> timedelta:
        assert self.start is not None and self.end is not None
        close = datetime.combine(opening.date(), self.end, tzinfo=opening.tzinfo)
        return (close if self.end > self.start else close + timedelta(days=1)) - opening

    def contains(self, local: datetime) -> bool:
        """Is the local (wall-clock) time inside an opening of this window?"""
        if self.cron is not None:
            assert self.duration is not None
            opening = _latest_opening(cron_fields(self.cron), local)
            # real elapsed time (UTC), so a 2h window over a DST change still lasts two hours
            return opening is not None and _elapsed(opening, local) < self.duration
        zone = _zone_of(local)
        for k in range(2):
            for opening in self._starts(local.date() - timedelta(days=k), zone):
                if opening <= local < opening + self._length(opening):
                    return True
        return False

    def next_start(self, local: datetime) -> datetime | None:
        """The first opening strictly after ``local``, in ``local``'s zone."""
        if self.cron is not None:
            return _next_opening(cron_fields(self.cron), local)
        zone = _zone_of(local)
        for k in range(9):
            later = [s for s in self._starts(local.date() + timedelta(days=k), zone) if s > local]
            if later:
                return min(later)
        return None

    @model_serializer(mode="wrap")
    def _only_its_form(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        """Write only the fields of this window's form, so the loader reads it back: a cron
        window saved with the default ``days`` and ``start: null`` would be refused."""
        data = handler(self)
        drop = {"days", "start", "end"} if self.cron is not None else {"cron", "duration"}
        return {k: v for k, v in data.items() if k not in drop}


def _elapsed(opening: datetime, local: datetime) -> timedelta:
    return local.astimezone(timezone.utc) - opening.astimezone(timezone.utc)


def _zone_of(local: datetime) -> ZoneInfo:
    assert isinstance(local.tzinfo, ZoneInfo)
    return local.tzinfo


class MaintenanceWindows(PolicyModel):
    """When new batches may start. No windows means always. A running batch is never cut off."""

    timezone: str = "UTC"
    windows: tuple[Window, ...] = ()

    @field_validator("timezone")
    @classmethod
    def _known_zone(cls, value: str) -> str:
        try:
            ZoneInfo(value)
        except (ZoneInfoNotFoundError, ValueError, OSError) as exc:  # OSError: a 10 kB "name"
            raise ValueError(f"unknown IANA time zone {value[:60]!r}") from exc
        return value

    def _zone(self) -> ZoneInfo:
        return ZoneInfo(self.timezone)

    def in_window(self, now: datetime) -> bool:
        if not self.windows:
            return True
        local = now.astimezone(self._zone())
        return any(w.contains(local) for w in self.windows)

    def next_window(self, now: datetime) -> datetime | None:
        """``now`` if inside a window, else the next window start (UTC); None if none ever opens."""
        if self.in_window(now):
            return now
        local_now = now.astimezone(self._zone())
        starts = [s for w in self.windows if (s := w.next_start(local_now)) is not None]
        return min(starts).astimezone(timezone.utc) if starts else None


