"""Rollout policy: how fast, how carefully, and what to do when a node says no.

The policy is validated once, at the boundary (``load_policy``), and after that the planner and the
decision function trust it. Validation is strict on purpose: unknown keys are refused with the
closest valid name, every error names the file and the field path, and rules that span fields
(steps increasing, the canary no larger than the next batch, a progress deadline long enough for a
last-known-good promotion) live in one ``model_validator`` so a bad policy never reaches a cluster.

YAML uses camelCase keys (``maxUnavailable``), Python uses snake_case; both are accepted.
Durations are strings such as ``45s``, ``10m``, ``1h30m`` or ``2d``; amounts are a node count
(``3``) or a percentage of the pool (``"10%"``).

Nothing here reads a clock: ``in_window(now)`` / ``next_window(now)`` take ``now``.
"""

from __future__ import annotations

import difflib
import enum
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import date, datetime, time, timedelta, timezone
from math import ceil, floor
from pathlib import Path
from typing import Annotated, Any, Literal
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

import yaml
from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    PlainSerializer,
    StrictInt,
    ValidationError,
    field_validator,
    model_validator,
)
from pydantic.alias_generators import to_camel

from rollout.errors import PolicyError

DEFAULT_POLICY = "canary"
DEFAULT_POLICY_DIR = Path(__file__).resolve().parent.parent / "policies"
CONTROL_PLANE_LABELS = ("node-role.kubernetes.io/control-plane", "node-role.kubernetes.io/master")
# DKC promotes lastKnownGood 10 min after the kubelet's last restart, reported up to ~22 s later
# (reference 12.4); a deadline shorter than this plus a restart can never be met.
LKG_TRIAL = timedelta(minutes=10, seconds=22)
MIN_LKG_DEADLINE = timedelta(minutes=11)

# --------------------------------------------------------------------------- durations / amounts

_DURATION_RE = re.compile(r"^(?:(\d+)d)?(?:(\d+)h)?(?:(\d+)m)?(?:(\d+)s)?$")


def parse_duration(value: object) -> timedelta:
    """``"1h30m"`` -> timedelta. Bare numbers are refused: is ``10`` seconds or minutes?"""
    if isinstance(value, timedelta):
        return value
    if not isinstance(value, str):
        raise ValueError(f"a duration like '45s', '10m' or '1h30m', got {value!r}")
    text = value.strip()
    match = _DURATION_RE.match(text)
    if text in ("0", "0s"):
        return timedelta(0)
    if not text or match is None or not any(match.groups()):
        raise ValueError(f"a duration like '45s', '10m' or '1h30m', got {value!r}")
    d, h, m, s = (int(g) if g else 0 for g in match.groups())
    return timedelta(days=d, hours=h, minutes=m, seconds=s)


def format_duration(value: timedelta) -> str:
    """The canonical string form, e.g. ``1h30m``; ``0s`` for zero. Sub-seconds are dropped."""
    total = int(value.total_seconds())
    if total <= 0:
        return "0s"
    parts = []
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60), ("s", 1)):
        amount, total = divmod(total, size)
        if amount:
            parts.append(f"{amount}{unit}")
    return "".join(parts)


Duration = Annotated[
    timedelta,
    BeforeValidator(parse_duration),
    PlainSerializer(format_duration, return_type=str),
]

_PERCENT_RE = re.compile(r"^(\d+(?:\.\d+)?)%$")


def _check_amount(value: int | str) -> int | str:
    if isinstance(value, int):
        if value < 1:
            raise ValueError(f"a node count must be at least 1, got {value}")
        return value
    match = _PERCENT_RE.match(value.strip())
    if match is None:
        raise ValueError(f"a node count (3) or a percentage ('10%'), got {value!r}")
    pct = float(match.group(1))
    if not 0 < pct <= 100:
        raise ValueError(f"a percentage must be in (0%, 100%], got {value!r}")
    return value.strip()


CountOrPercent = Annotated[StrictInt | str, AfterValidator(_check_amount)]


def is_percent(amount: int | str) -> bool:
    return isinstance(amount, str)


def percent_of(amount: str) -> float:
    match = _PERCENT_RE.match(amount)
    assert match is not None  # validated on load
    return float(match.group(1))


def resolve_amount(amount: int | str, total: int, *, round_up: bool) -> int:
    """A count stays a count (capped at ``total``); a percentage of ``total`` is rounded.

    Batch steps round up (``10%`` of 3 nodes is 1 node, never 0); ``maxUnavailable`` and the
    failure budget round down, like Kubernetes' own ``maxUnavailable``.
    """
    if isinstance(amount, int):
        return min(amount, total)
    exact = percent_of(amount) * total / 100
    # guard against 29.999999 for 30%: round to 9 places before ceil/floor
    exact = round(exact, 9)
    return min(total, ceil(exact) if round_up else floor(exact))


# --------------------------------------------------------------------------- label selectors

_KEY = r"[A-Za-z0-9][-A-Za-z0-9_./]*"
_VALUE = r"[A-Za-z0-9_.-]*"
_REQ_RES = (
    ("in", re.compile(rf"^({_KEY})\s+in\s+\(([^)]*)\)$")),
    ("notin", re.compile(rf"^({_KEY})\s+notin\s+\(([^)]*)\)$")),
    ("!=", re.compile(rf"^({_KEY})\s*!=\s*({_VALUE})$")),
    ("=", re.compile(rf"^({_KEY})\s*==?\s*({_VALUE})$")),
    ("!", re.compile(rf"^!\s*({_KEY})$")),
    ("exists", re.compile(rf"^({_KEY})$")),
)


@dataclass(frozen=True)
class Requirement:
    """One clause of a label selector: ``key op values``."""

    key: str
    op: str
    values: tuple[str, ...] = ()

    def matches(self, labels: Mapping[str, str]) -> bool:
        present = self.key in labels
        value = labels.get(self.key)
        if self.op == "exists":
            return present
        if self.op == "!":
            return not present
        if self.op in ("=", "in"):
            return present and value in self.values
        return not present or value not in self.values  # "!=" and "notin"


def _split_clauses(text: str) -> list[str]:
    """Split on commas that are not inside parentheses."""
    clauses, depth, current = [], 0, ""
    for char in text:
        depth += {"(": 1, ")": -1}.get(char, 0)
        if char == "," and depth == 0:
            clauses.append(current.strip())
            current = ""
        else:
            current += char
    if current.strip():
        clauses.append(current.strip())
    return clauses


def _parse_clause(clause: str) -> Requirement:
    for op, regex in _REQ_RES:
        match = regex.match(clause)
        if match is None:
            continue
        key = match.group(1)
        if op in ("in", "notin"):
            values = tuple(v.strip() for v in match.group(2).split(",") if v.strip())
            return Requirement(key, op, values)
        if op in ("=", "!="):
            return Requirement(key, op, (match.group(2),))
        return Requirement(key, op)
    raise ValueError(f"not a label selector clause: {clause!r}")


@dataclass(frozen=True)
class LabelSelector:
    """A parsed Kubernetes label selector (``a=b,c!=d,e in (f,g),!h``) plus matchLabels."""

    requirements: tuple[Requirement, ...] = ()

    @classmethod
    def parse(cls, text: str, *, match_labels: Mapping[str, str] | None = None) -> LabelSelector:
        reqs = [_parse_clause(c) for c in _split_clauses(text)] if text.strip() else []
        reqs += [Requirement(k, "=", (v,)) for k, v in sorted((match_labels or {}).items())]
        return cls(tuple(reqs))

    def matches(self, labels: Mapping[str, str]) -> bool:
        return all(r.matches(labels) for r in self.requirements)

    @property
    def empty(self) -> bool:
        return not self.requirements


# --------------------------------------------------------------------------- policy model


class _Model(BaseModel):
    model_config = ConfigDict(
        extra="forbid",
        frozen=True,
        alias_generator=to_camel,
        populate_by_name=True,
    )


class FailureAction(str, enum.Enum):
    HALT = "halt"  # stop; leave every node as it is for a human
    REVERT_BATCH = "revert-batch"  # put the failing batch back, keep earlier batches, stop
    REVERT_ALL = "revert-all"  # put every node this rollout touched back, stop


class RevertTarget(str, enum.Enum):
    PREVIOUS = "previous"  # the node's configSource before this rollout (or local if it had none)
    LOCAL = "local"  # remove configSource: every reverted node goes to its local config


class DoneUntil(str, enum.Enum):
    ACTIVE = "active"  # status.config.active == target (uid + resourceVersion), no error
    LAST_KNOWN_GOOD = "lastKnownGood"  # ... and promoted to lastKnownGood (>= 10 min trial)


class UnhealthyNodeAction(str, enum.Enum):
    """What happens to a node of the next batch that is already down when the batch starts."""

    SKIP = "skip"  # not assigned; recorded and reported as skipped
    WAIT = "wait"  # the batch waits until the node is healthy again
    HALT = "halt"  # the rollout halts before the batch


class ApprovalTimeoutAction(str, enum.Enum):
    HALT = "halt"  # nobody approved in time: stop (nodes stay as they are)
    PROCEED = "proceed"  # nobody objected in time: go on
    FAIL = "fail"  # treat as a failure: apply failureAction


class ApprovalRejectAction(str, enum.Enum):
    HALT = "halt"  # a person said no: stop (nodes stay as they are; `rollout rollback` undoes them)
    FAIL = "fail"  # treat as a failure: apply failureAction (e.g. revert the batch)


def _check_selector(text: str) -> str:
    LabelSelector.parse(text)
    return text


Selector = Annotated[str, AfterValidator(_check_selector)]


class NodeSelection(_Model):
    """Which nodes the rollout may touch. Control-plane nodes are out unless allowed."""

    selector: Selector = ""
    match_labels: dict[str, str] = Field(default_factory=dict)
    exclude_names: tuple[str, ...] = ()
    exclude_selector: Selector = ""
    allow_control_plane: bool = False

    def label_selector(self) -> LabelSelector:
        return LabelSelector.parse(self.selector, match_labels=self.match_labels)

    def exclusion_selector(self) -> LabelSelector:
        return LabelSelector.parse(self.exclude_selector)


class DoneCriteria(_Model):
    """When a node (and so a batch) counts as done."""

    until: DoneUntil = DoneUntil.ACTIVE
    require_ready: bool = True
    soak: Duration = timedelta(0)


class Approval(_Model):
    """Human gates between batches. ``after`` names policy steps (0 = the canary)."""

    after: Literal["none", "all"] | tuple[Annotated[int, Field(ge=0)], ...] = "none"
    timeout: Duration = timedelta(hours=24)
    on_timeout: ApprovalTimeoutAction = ApprovalTimeoutAction.HALT
    on_reject: ApprovalRejectAction = ApprovalRejectAction.HALT

    def required_after_step(self, step: int) -> bool:
        if self.after == "none":
            return False
        if self.after == "all":
            return True
        return step in self.after


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


class Window(_Model):
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


class MaintenanceWindows(_Model):
    """When new batches may start. No windows means always. A running batch is never cut off."""

    timezone: str = "UTC"
    windows: tuple[Window, ...] = ()

    @field_validator("timezone")
    @classmethod
    def _known_zone(cls, value: str) -> str:
        try:
            ZoneInfo(value)
        except (ZoneInfoNotFoundError, ValueError) as exc:
            raise ValueError(f"unknown IANA time zone {value!r}") from exc
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


_FIELD_PATH = re.compile(r"^[a-z][A-Za-z0-9]*(\.[A-Za-z0-9]+)*$")


def _check_field_path(value: str) -> str:
    if _FIELD_PATH.match(value) is None:
        raise ValueError(
            f"a KubeletConfiguration field name like 'cgroupDriver' or 'evictionHard', got {value!r}"
        )
    return value


FieldPath = Annotated[str, AfterValidator(_check_field_path)]


class RolloutPolicy(_Model):
    """The whole policy. See ``policies/canary.yaml`` for every field with a comment."""

    name: str = ""
    description: str = ""
    nodes: NodeSelection = NodeSelection()
    zone_label: str = "topology.kubernetes.io/zone"
    spread_across_zones: bool = True
    steps: tuple[CountOrPercent, ...] = (1, "10%", "50%", "100%")
    max_unavailable: CountOrPercent = 1
    done: DoneCriteria = DoneCriteria()
    progress_deadline: Duration = timedelta(minutes=10)
    sync_error_grace: Duration = timedelta(minutes=1)
    lease_stale_after: Duration = timedelta(seconds=40)
    not_ready_for: Duration = timedelta(seconds=20)
    on_unhealthy_node: UnhealthyNodeAction = UnhealthyNodeAction.SKIP
    api_outage_tolerance: Duration = timedelta(minutes=5)
    api_qps: Annotated[float, Field(gt=0, le=10_000)] = 50.0
    api_burst: Annotated[StrictInt, Field(ge=1, le=10_000)] = 100
    failure_budget: Annotated[StrictInt, Field(ge=0)] | CountOrPercent = 0
    failure_action: FailureAction = FailureAction.REVERT_BATCH
    revert_target: RevertTarget = RevertTarget.PREVIOUS
    approval: Approval = Approval()
    maintenance_windows: MaintenanceWindows = MaintenanceWindows()
    allow_fields: tuple[FieldPath, ...] = ()
    recheck_every: Duration = timedelta(seconds=30)

    @model_validator(mode="after")
    def _cross_field_rules(self) -> RolloutPolicy:
        problems = [*_step_problems(self.steps), *_timing_problems(self)]
        problems += _approval_problems(self.approval, len(self.steps))
        if problems:
            raise ValueError(_PROBLEM_SEP.join(problems))
        return self

    def in_window(self, now: datetime) -> bool:
        return self.maintenance_windows.in_window(now)

    def next_window(self, now: datetime) -> datetime | None:
        return self.maintenance_windows.next_window(now)

    def approval_after_step(self, step: int) -> bool:
        """Is a human gate due after ``step``? Never after the last step: nothing is left to gate."""
        return step < len(self.steps) - 1 and self.approval.required_after_step(step)

    def dump(self) -> dict[str, Any]:
        """JSON-ready dict in the YAML spelling; ``RolloutPolicy.model_validate`` reads it back."""
        return self.model_dump(mode="json", by_alias=True)


def _step_problems(steps: tuple[int | str, ...]) -> list[str]:
    if len(steps) < 2:
        return ["steps: need a canary step and at least one more, e.g. [1, '100%']"]
    problems = []
    if steps[-1] != "100%" and not (is_percent(steps[-1]) and percent_of(str(steps[-1])) == 100):
        problems.append("steps: the last step must be '100%' so every selected node is covered")
    if is_percent(steps[0]) and percent_of(str(steps[0])) >= 100:
        problems.append("steps: the first step is the canary and cannot be '100%'")
    problems += _increasing_problems(steps)
    first, second = steps[0], steps[1]
    if is_percent(first) == is_percent(second):
        a = percent_of(str(first)) if is_percent(first) else float(first)
        b = percent_of(str(second)) if is_percent(second) else float(second)
        if a > b - a:
            problems.append(f"steps: the canary ({first}) is larger than the next batch ({second} - {first})")
    return problems


def _increasing_problems(steps: tuple[int | str, ...]) -> list[str]:
    problems = []
    last: dict[bool, float] = {}
    for i, step in enumerate(steps):
        pct = is_percent(step)
        value = percent_of(str(step)) if pct else float(step)
        if pct in last and value <= last[pct]:
            problems.append(f"steps.{i}: steps are cumulative and must increase ({step})")
        last[pct] = value
    return problems


def _timing_problems(policy: RolloutPolicy) -> list[str]:
    problems = []
    if policy.progress_deadline <= timedelta(0):
        problems.append("progressDeadline: must be longer than 0s")
    if policy.recheck_every <= timedelta(0):
        problems.append("recheckEvery: must be longer than 0s")
    if policy.done.until is DoneUntil.LAST_KNOWN_GOOD and policy.progress_deadline < MIN_LKG_DEADLINE:
        problems.append(
            "progressDeadline: done.until is lastKnownGood, which the kubelet promotes only after a "
            f"10-minute trial; use at least {format_duration(MIN_LKG_DEADLINE)}"
        )
    return problems


def _approval_problems(approval: Approval, n_steps: int) -> list[str]:
    if isinstance(approval.after, str):
        return []
    problems = []
    if len(set(approval.after)) != len(approval.after):
        problems.append("approval.after: lists a step twice")
    for step in approval.after:
        if step >= n_steps - 1:
            problems.append(
                f"approval.after: step {step} is the last step or beyond (steps are 0..{n_steps - 1});"
                " there is nothing left to approve after it"
            )
    return problems


# --------------------------------------------------------------------------- loading


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


_PROBLEM_SEP = "\n"


def _format_errors(err: Mapping[str, Any]) -> list[str]:
    """One line per problem; cross-field rules arrive as several lines in one error."""
    if err["loc"] or err["type"] != "value_error":
        return [_format_error(err)]
    return [line for line in _format_error(err).split(_PROBLEM_SEP) if line]


def _format_error(err: Mapping[str, Any]) -> str:
    path = ".".join(str(p) for p in err["loc"])
    msg = str(err["msg"]).removeprefix("Value error, ")
    if err["type"] == "extra_forbidden":
        key = str(err["loc"][-1])
        close = difflib.get_close_matches(key, sorted(_all_field_names(RolloutPolicy)), n=1)
        hint = f"; did you mean {close[0]!r}?" if close else ""
        return f"{path}: unknown field{hint}"
    if not path:
        return msg
    got = err.get("input")
    shown = "" if isinstance(got, (dict, list)) or "got " in msg else f" (got {got!r})"
    return f"{path}: {msg}{shown}"


def load_policy_text(text: str, *, source: str = "<policy>") -> RolloutPolicy:
    """Parse and validate a policy document; the name defaults to the file's stem."""
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise PolicyError(f"not valid YAML: {exc}", source=source) from exc
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise PolicyError("a policy is a YAML mapping of fields", source=source)
    if not data.get("name"):
        data = {**data, "name": Path(source).stem if source != "<policy>" else ""}
    try:
        return RolloutPolicy.model_validate(data)
    except ValidationError as exc:
        problems = [line for e in exc.errors() for line in _format_errors(e)]
        raise PolicyError(
            f"invalid rollout policy ({len(problems)} problem(s))", source=source, problems=problems
        ) from None


def load_policy(path: str | Path) -> RolloutPolicy:
    """Read and validate one policy file."""
    p = Path(path)
    try:
        text = p.read_text(encoding="utf-8")
    except OSError as exc:
        raise PolicyError(f"cannot read policy file: {exc.strerror}", source=str(p)) from exc
    return load_policy_text(text, source=str(p))


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
