"""Maintenance windows: when a rollout may start new batches.

Why a module of its own: windows are the one part of the policy that reasons about wall-clock
time, time zones and calendars. Nothing here reads a clock: ``in_window(now)`` and
``next_window(now)`` take ``now``. A window is either weekdays with a start and end time (an end
before the start crosses midnight) or a cron expression for the opening plus a duration.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import date, datetime, time, timedelta, timezone
from typing import Annotated, Literal
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from pydantic import AfterValidator, BeforeValidator, PlainSerializer, field_validator, model_validator

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


_CRON_FIELDS = (
    ("minute", 0, 59),
    ("hour", 0, 23),
    ("day of month", 1, 31),
    ("month", 1, 12),
    ("day of week", 0, 7),
)


def _cron_field(text: str, name: str, low: int, high: int) -> frozenset[int]:
    """One cron field: ``*``, ``5``, ``1-5``, ``*/15``, ``1-30/2`` and lists of those."""
    values: set[int] = set()
    for part in text.split(","):
        rng, _, step_text = part.partition("/")
        step = int(step_text) if step_text.isdigit() and int(step_text) > 0 else None
        if step_text and step is None:
            raise ValueError(f"cron {name}: bad step in {part!r}")
        if rng == "*":
            first, last = low, high
        elif re.fullmatch(r"\d+-\d+", rng):
            first, last = (int(x) for x in rng.split("-"))
        elif rng.isdigit():
            first = last = int(rng)
        else:
            raise ValueError(f"cron {name}: cannot read {part!r}")
        if not low <= first <= last <= high:
            raise ValueError(f"cron {name}: {part!r} is outside {low}-{high}")
        values.update(range(first, last + 1, step or 1))
    return frozenset(values)


@dataclass(frozen=True)
class CronSpec:
    """A parsed 5-field cron expression (minute hour day-of-month month day-of-week)."""

    minutes: frozenset[int]
    hours: frozenset[int]
    days: frozenset[int]
    months: frozenset[int]
    weekdays: frozenset[int]  # 0 = Sunday (7 is folded into 0)
    any_day: bool
    any_weekday: bool

    @classmethod
    def parse(cls, text: str) -> CronSpec:
        fields = text.split()
        if len(fields) != 5:
            raise ValueError(f"a cron expression has 5 fields (minute hour day month weekday), got {text!r}")
        minutes, hours, days, months, weekdays = (
            _cron_field(f, *spec) for f, spec in zip(fields, _CRON_FIELDS, strict=True)
        )
        return cls(
            minutes=minutes,
            hours=hours,
            days=days,
            months=months,
            weekdays=frozenset(d % 7 for d in weekdays),
            any_day=fields[2].startswith("*"),  # as Vixie cron: "*/2" counts as unrestricted
            any_weekday=fields[4].startswith("*"),
        )

    def day_matches(self, day: date) -> bool:
        if day.month not in self.months:
            return False
        dom = day.day in self.days
        dow = (day.weekday() + 1) % 7 in self.weekdays
        if self.any_day or self.any_weekday:  # cron: both restricted means either may match
            return dom and dow
        return dom or dow

    def starts_on(self, day: date, zone: ZoneInfo) -> list[datetime]:
        if not self.day_matches(day):
            return []
        return [
            datetime.combine(day, time(h, m), tzinfo=zone)
            for h in sorted(self.hours)
            for m in sorted(self.minutes)
        ]


def _check_cron(text: str) -> str:
    CronSpec.parse(text)
    return text


CronText = Annotated[str, AfterValidator(_check_cron)]
_CRON_HORIZON_DAYS = 366


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
        if cronned and "days" in self.model_fields_set:
            raise ValueError("days applies to start/end windows; put the weekdays in the cron expression")
        return self

    def _starts(self, day: date, zone: ZoneInfo) -> list[datetime]:
        if self.cron is not None:
            return CronSpec.parse(self.cron).starts_on(day, zone)
        assert self.start is not None
        if _DAYS[day.weekday()] not in self.days:
            return []
        return [datetime.combine(day, self.start, tzinfo=zone)]

    def _length(self, opening: datetime) -> timedelta:
        if self.duration is not None:
            return self.duration
        assert self.start is not None and self.end is not None
        close = datetime.combine(opening.date(), self.end, tzinfo=opening.tzinfo)
        return (close if self.end > self.start else close + timedelta(days=1)) - opening

    def contains(self, local: datetime) -> bool:
        """Is the local (wall-clock) time inside an opening of this window?"""
        zone = _zone_of(local)
        back = 1 + (self.duration.days if self.duration is not None else 0)
        for k in range(back + 1):
            for opening in self._starts(local.date() - timedelta(days=k), zone):
                if opening <= local < opening + self._length(opening):
                    return True
        return False

    def next_start(self, local: datetime) -> datetime | None:
        """The first opening strictly after ``local`` (within a year), in ``local``'s zone."""
        zone = _zone_of(local)
        horizon = _CRON_HORIZON_DAYS if self.cron is not None else 8
        for k in range(horizon + 1):
            later = [s for s in self._starts(local.date() + timedelta(days=k), zone) if s > local]
            if later:
                return min(later)
        return None


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


