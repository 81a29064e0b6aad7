"""Policy loading: every shipped policy loads; every invalid fixture fails with one clear message
that names the file and the field; amounts, durations, selectors and windows mean what they say."""

from __future__ import annotations

import json
import re
from datetime import datetime, timedelta, timezone
from pathlib import Path
from zoneinfo import ZoneInfo

import pytest
import yaml
from pydantic import ValidationError

from rollout.errors import PolicyError, RolloutError
from rollout.policy import (
    DEFAULT_POLICY_DIR,
    DoneUntil,
    FailureAction,
    LabelSelector,
    RolloutPolicy,
    Window,
    available_policies,
    format_duration,
    load_policy,
    load_policy_text,
    parse_duration,
    resolve_amount,
    resolve_policy,
)
from rollout.policy.analysis import render_query

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "policies"
UTC = timezone.utc


@pytest.mark.parametrize("path", sorted(DEFAULT_POLICY_DIR.glob("*.yaml")), ids=lambda p: p.name)
def test_every_shipped_policy_loads_and_is_documented(path: Path) -> None:
    text = path.read_text()
    policy = load_policy(path)
    assert policy.name == path.stem
    assert text.lstrip().startswith("#"), "each shipped policy opens with a comment saying what it is for"
    assert policy.description


# A kubelet refused its first download retries on its config sync loop's next tick (10-12 s:
# JitterUntil(10 s, 0.2)) and its restart onto the config (5-40 s, reference 12.7) clears the error:
# a grace shorter than both halts a good rollout (tests/cli/test_first_download_refused.py).
KUBELET_RETRY_AND_RESTART = timedelta(seconds=12 + 40)


@pytest.mark.parametrize("path", sorted(DEFAULT_POLICY_DIR.glob("*.yaml")), ids=lambda p: p.name)
def test_every_shipped_policy_outlasts_a_refused_first_download(path: Path) -> None:
    assert load_policy(path).sync_error_grace >= KUBELET_RETRY_AND_RESTART


SHIPPED_CHECKS = sorted({(name, check.name) for name in available_policies()
                         for check in resolve_policy(name).analysis.checks})


@pytest.mark.parametrize(("policy", "check"), SHIPPED_CHECKS, ids=lambda v: v)
def test_every_shipped_check_says_its_harm_and_metric_there_and_in_the_readme(policy: str, check: str) -> None:
    """Issue 37: each shipped check catches a named harm by a named metric; the policy's comment
    and the README's table of shipped checks say which, and how it is judged."""
    shipped = next(c for c in resolve_policy(policy).analysis.checks if c.name == check)
    rendered = render_query(shipped.query, nodes="n-1", control="n-2", interval=timedelta(minutes=1),
                            window=timedelta(minutes=1))  # a placeholder may write the selector
    metric = re.search(r"([a-z_:]+)[{[]", rendered)  # the first metric selected or ranged
    assert metric is not None, shipped.query
    lines = (DEFAULT_POLICY_DIR / f"{policy}.yaml").read_text().splitlines()
    at = lines.index(f"    - name: {check}")
    above = []
    while lines[at - 1 - len(above)].strip().startswith("#"):
        above.append(lines[at - 1 - len(above)])
    comment = " ".join(reversed(above))
    assert "Harm:" in comment and "Metric:" in comment, comment
    family = re.sub(r"_(bucket|sum|count)$", "", metric.group(1))  # a histogram's series name its family
    assert family in comment, comment
    readme = (Path(__file__).resolve().parents[2] / "README.md").read_text()
    row = re.search(rf"^\| `{check}` \|(.*)\|$", readme, re.M)
    assert row is not None, f"README's table of shipped checks has no row for {check}"
    harm, metric_cell, judged, rate = (cell.strip() for cell in row.group(1).split(" | "))
    assert harm and rate  # "to be measured" until the benchmark says
    assert family in metric_cell
    assert shipped.condition in judged
    if shipped.compare is not None:
        assert f"effect {shipped.compare.effect} at {shipped.compare.confidence:g}" in judged


def test_the_readme_excerpt_of_the_canary_checks_is_the_shipped_file() -> None:
    """README says its excerpt is "as `canary.yaml` writes them": it went stale once (evictions with
    the 0 outside the sum, pod starts at 0.98) while the file moved on."""
    readme = (Path(__file__).resolve().parents[2] / "README.md").read_text()
    block = re.search(r"```yaml\n(.*?)```", readme[readme.index("Two of them, as `canary.yaml` writes them"):], re.S)
    assert block, "the excerpt's yaml block is gone"
    excerpt = yaml.safe_load(block.group(1))["analysis"]
    shipped = yaml.safe_load((DEFAULT_POLICY_DIR / "canary.yaml").read_text())["analysis"]
    checks = {c["name"]: c for c in shipped["checks"]}
    assert excerpt["checks"], "the excerpt shows no check"
    for check in excerpt["checks"]:
        assert check == checks[check["name"]], f"README's {check['name']} is not canary.yaml's"
    assert excerpt["onInconclusive"] == shipped["onInconclusive"]
    for key, value in excerpt["prometheus"].items():
        assert shipped["prometheus"][key] == value, f"README's prometheus.{key} is not canary.yaml's"


def test_the_three_required_policies_ship() -> None:
    assert {"canary", "cautious", "fast"} <= set(available_policies())


def test_default_policy_is_canary_with_a_two_node_canary() -> None:
    policy = resolve_policy(None)
    assert policy.name == "canary"
    assert policy.steps[0] == 2 and policy.steps[-1] == "100%"
    assert policy.done.until is DoneUntil.ACTIVE and policy.done.require_ready
    assert policy.failure_action is FailureAction.REVERT_BATCH


def test_cautious_waits_for_last_known_good_and_gates_every_batch() -> None:
    policy = resolve_policy("cautious")
    assert policy.done.until is DoneUntil.LAST_KNOWN_GOOD
    assert all(policy.approval_after_step(s) for s in range(len(policy.steps) - 1))


INVALID = [
    ("unknown-field-typo.yaml", "stpes: unknown field; did you mean 'steps'?"),
    ("last-step-not-100-percent.yaml", "steps: the last step must be '100%'"),
    ("steps-not-increasing.yaml", "steps.2: steps are cumulative and must increase"),
    ("canary-larger-than-next-batch.yaml", "steps: the canary (5) is larger than the next batch"),
    ("canary-is-100-percent.yaml", "the first step is the canary and cannot be '100%'"),
    ("single-step.yaml", "steps: need a canary step"),
    ("percent-over-100.yaml", "steps.1"),
    ("max-unavailable-zero.yaml", "maxUnavailable: a node count must be at least 1"),
    ("duration-without-unit.yaml", "progressDeadline: a duration like"),
    ("lkg-deadline-too-short.yaml", "progressDeadline: done.until is lastKnownGood"),
    ("unknown-failure-action.yaml", "failureAction:"),
    ("approval-after-last-step.yaml", "approval.after: step 1 is the last step"),
    ("unknown-timezone.yaml", "maintenanceWindows.timezone: unknown IANA time zone"),
    ("window-unquoted-time.yaml", "quote times in YAML"),
    ("window-empty.yaml", "maintenanceWindows.windows.0: start and end are equal"),
    ("bad-label-selector.yaml", "nodes.selector: not a label selector clause"),
    ("not-a-mapping.yaml", "a policy is a YAML mapping"),
    ("invalid-yaml.yaml", "not valid YAML"),
    ("negative-failure-budget.yaml", "failureBudget"),
    ("allow-fields-not-a-field-name.yaml", "allowFields.0: a KubeletConfiguration field name"),
    ("window-cron-four-fields.yaml", "a cron expression has 5 fields"),
    ("window-cron-without-duration.yaml", "cron needs a duration"),
    ("window-both-forms.yaml", "give either start and end (with days) or cron and duration"),
    ("window-cron-hour-out-of-range.yaml", "cron hour: '24' is not valid (allowed: 0-23"),
]


@pytest.mark.parametrize(
    ("fixture", "expected"), [pytest.param(f, e, id=f"{f} is refused") for f, e in INVALID]
)
def test_invalid_policy_fixture_is_refused_naming_file_and_field(fixture: str, expected: str) -> None:
    path = FIXTURES / fixture
    with pytest.raises(PolicyError) as info:
        load_policy(path)
    message = str(info.value)
    assert str(path) in message.splitlines()[0], "the first line names the file"
    assert expected in message


def test_every_invalid_fixture_is_covered_by_the_table() -> None:
    covered = {f for f, _ in INVALID}
    assert {p.name for p in FIXTURES.glob("*.yaml")} == covered


def test_all_problems_of_one_file_come_in_one_message() -> None:
    with pytest.raises(PolicyError) as info:
        load_policy_text("stepz: [1]\nmaxUnavailable: 0\nprogressDeadline: 10\n", source="p.yaml")
    assert len(info.value.problems) == 3
    assert str(info.value).count("\n") == 3


def test_policy_error_is_a_rollout_error_that_says_nothing_was_written() -> None:
    with pytest.raises(RolloutError) as info:
        load_policy_text("failureAction: explode", source="x.yaml")
    assert "nothing was written" in info.value.advice


def test_unknown_policy_name_lists_the_available_ones() -> None:
    with pytest.raises(PolicyError, match="available: canary, cautious, fast"):
        resolve_policy("turbo")


def test_missing_policy_file_is_a_policy_error() -> None:
    with pytest.raises(PolicyError, match="no such file"):
        load_policy("/nonexistent/policy.yaml")


def test_policy_is_frozen() -> None:
    policy = resolve_policy("canary")
    with pytest.raises(ValidationError, match="frozen"):
        policy.steps = (1, "100%")


def test_dump_round_trips_through_model_validate() -> None:
    for name in available_policies():
        policy = resolve_policy(name)
        assert RolloutPolicy.model_validate(policy.dump()) == policy


def test_snake_case_names_are_accepted_too() -> None:
    policy = RolloutPolicy.model_validate({"max_unavailable": 3, "failure_action": "halt"})
    assert policy.max_unavailable == 3 and policy.failure_action is FailureAction.HALT


@pytest.mark.parametrize(
    ("amount", "total", "round_up", "expected"),
    [
        pytest.param(1, 100, True, 1, id="a count stays a count"),
        pytest.param(5, 3, True, 3, id="a count is capped at the pool"),
        pytest.param("10%", 3, True, 1, id="a step percentage rounds up: 10% of 3 is 1 node, never 0"),
        pytest.param("10%", 3, False, 0, id="maxUnavailable and budget percentages round down"),
        pytest.param("30%", 10, True, 3, id="30% of 10 is exactly 3 despite float error"),
        pytest.param("100%", 7, True, 7, id="100% is everyone"),
        pytest.param("50%", 5000, False, 2500, id="50% of 5000 is 2500"),
    ],
)
def test_resolve_amount(amount: int | str, total: int, round_up: bool, expected: int) -> None:
    assert resolve_amount(amount, total, round_up=round_up) == expected


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        pytest.param("45s", timedelta(seconds=45), id="seconds"),
        pytest.param("10m", timedelta(minutes=10), id="minutes"),
        pytest.param("1h30m", timedelta(hours=1, minutes=30), id="hours and minutes"),
        pytest.param("2d", timedelta(days=2), id="days"),
        pytest.param("0s", timedelta(0), id="zero"),
    ],
)
def test_durations_parse_and_format_back(text: str, expected: timedelta) -> None:
    assert parse_duration(text) == expected
    assert format_duration(expected) == text


@pytest.mark.parametrize("bad", ["10", "m", "1.5h", "10 minutes", ""], ids=lambda b: f"refuses {b!r}")
def test_bad_durations_are_refused(bad: str) -> None:
    with pytest.raises(ValueError):
        parse_duration(bad)


@pytest.mark.parametrize(
    ("selector", "labels", "matches"),
    [
        pytest.param("", {}, True, id="empty selector matches every node"),
        pytest.param("role=worker", {"role": "worker"}, True, id="equality matches"),
        pytest.param("role==worker", {"role": "db"}, False, id="double equals compares too"),
        pytest.param("role!=db", {}, True, id="!= matches a node without the label"),
        pytest.param("pool in (a, b)", {"pool": "b"}, True, id="in matches a listed value"),
        pytest.param("pool notin (a,b)", {"pool": "a"}, False, id="notin refuses a listed value"),
        pytest.param("gpu", {"gpu": ""}, True, id="a bare key means the label exists"),
        pytest.param("!gpu", {"gpu": "x"}, False, id="!key means the label is absent"),
        pytest.param(
            "role=worker,pool in (a,b)", {"role": "worker", "pool": "c"}, False, id="clauses are ANDed"
        ),
    ],
)
def test_label_selector(selector: str, labels: dict[str, str], matches: bool) -> None:
    assert LabelSelector.parse(selector).matches(labels) is matches


WINDOWS = """
maintenanceWindows:
  timezone: Europe/Berlin
  windows:
    - days: [mon, tue]
      start: "09:00"
      end: "17:00"
    - days: [fri]
      start: "22:00"
      end: "02:00"
"""


@pytest.mark.parametrize(
    ("now", "inside", "next_start"),
    [
        pytest.param(
            datetime(2026, 11, 23, 9, 0, tzinfo=UTC), True, None, id="Monday 10:00 Berlin is inside"
        ),
        pytest.param(
            datetime(2026, 11, 23, 16, 0, tzinfo=UTC),
            False,
            datetime(2026, 11, 24, 8, 0, tzinfo=UTC),
            id="Monday 17:00 Berlin waits for Tuesday 09:00",
        ),
        pytest.param(
            datetime(2026, 11, 24, 18, 0, tzinfo=UTC),
            False,
            datetime(2026, 11, 27, 21, 0, tzinfo=UTC),
            id="Tuesday evening waits for Friday 22:00",
        ),
        pytest.param(
            datetime(2026, 11, 28, 0, 30, tzinfo=UTC),
            True,
            None,
            id="a window crossing midnight is open early Saturday",
        ),
        pytest.param(
            datetime(2026, 11, 28, 1, 30, tzinfo=UTC),
            False,
            datetime(2026, 11, 30, 8, 0, tzinfo=UTC),
            id="Saturday 02:30 Berlin waits for Monday",
        ),
        pytest.param(
            datetime(2026, 7, 6, 7, 0, tzinfo=UTC),
            True,
            None,
            id="summer time: Monday 09:00 CEST is 07:00 UTC",
        ),
    ],
)
def test_maintenance_windows(now: datetime, inside: bool, next_start: datetime | None) -> None:
    policy = load_policy_text(WINDOWS)
    assert policy.in_window(now) is inside
    assert policy.next_window(now) == (now if inside else next_start)


CRON = """
maintenanceWindows:
  timezone: UTC
  windows:
    - cron: "0 22 * * 1-5"
      duration: 4h
    - cron: "0 3 1 * *"
      duration: 2h
"""


@pytest.mark.parametrize(
    ("now", "inside", "next_start"),
    [
        pytest.param(
            datetime(2026, 11, 23, 23, 0, tzinfo=UTC),
            True,
            None,
            id="cron: Monday 23:00 is in the 22:00+4h opening",
        ),
        pytest.param(
            datetime(2026, 11, 28, 1, 0, tzinfo=UTC),
            True,
            None,
            id="cron: Friday's opening runs past midnight into Saturday",
        ),
        pytest.param(
            datetime(2026, 11, 28, 3, 0, tzinfo=UTC),
            False,
            datetime(2026, 11, 30, 22, 0, tzinfo=UTC),
            id="cron: Saturday 03:00 waits for Monday 22:00",
        ),
        pytest.param(
            datetime(2026, 12, 1, 4, 30, tzinfo=UTC),
            True,
            None,
            id="cron: the monthly opening on the 1st at 03:00 lasts two hours",
        ),
        pytest.param(
            datetime(2026, 12, 5, 12, 0, tzinfo=UTC),
            False,
            datetime(2026, 12, 7, 22, 0, tzinfo=UTC),
            id="cron: the earliest of several windows opens next",
        ),
    ],
)
def test_cron_maintenance_windows(now: datetime, inside: bool, next_start: datetime | None) -> None:
    policy = load_policy_text(CRON)
    assert policy.in_window(now) is inside
    assert policy.next_window(now) == (now if inside else next_start)


def _opens(cron: str, local: datetime) -> bool:
    return Window(cron=cron, duration="1m").contains(local)


@pytest.mark.parametrize(
    ("expr", "day", "matches"),
    [
        pytest.param("0 0 * * 0", datetime(2026, 11, 22), True, id="weekday 0 is Sunday"),
        pytest.param("0 0 * * 7", datetime(2026, 11, 22), True, id="weekday 7 is Sunday too"),
        pytest.param(
            "0 0 13 * 5", datetime(2026, 11, 20), True, id="day and weekday both set: either matches"
        ),
        pytest.param("0 0 13 * *", datetime(2026, 11, 20), False, id="only day of month set: it must match"),
        pytest.param("0 0 * 2 *", datetime(2026, 11, 20), False, id="the month must match"),
        pytest.param("0 0 * * mon-fri", datetime(2026, 11, 20), True, id="day names: Friday is in mon-fri"),
        pytest.param("0 0 * * MON-FRI", datetime(2026, 11, 21), False, id="day names: Saturday is not"),
        pytest.param("0 0 * nov *", datetime(2026, 11, 21), True, id="month names"),
        pytest.param("@daily", datetime(2026, 11, 21), True, id="@daily opens at midnight"),
        pytest.param("@monthly", datetime(2026, 11, 21), False, id="@monthly only on the 1st"),
        pytest.param("0 0 L * *", datetime(2026, 11, 30), True, id="L is the last day of the month"),
    ],
)
def test_cron_day_rules(expr: str, day: datetime, matches: bool) -> None:
    assert _opens(expr, day.replace(tzinfo=UTC)) is matches


def test_cron_steps_and_ranges() -> None:
    window = Window(cron="*/15 9-11 * * 1-5", duration="1m")
    start = datetime(2026, 11, 23, 8, 0, tzinfo=UTC)  # a Monday
    opens = []
    while len(opens) < 13:
        start = window.next_start(start)
        opens.append(start.strftime("%a %H:%M"))
    assert opens[:4] == ["Mon 09:00", "Mon 09:15", "Mon 09:30", "Mon 09:45"]
    assert opens[-1] == "Tue 09:00", "12 openings a day: 9-11 every 15 minutes"


BERLIN = ZoneInfo("Europe/Berlin")


@pytest.mark.parametrize(
    ("expr", "after", "expected"),
    [
        pytest.param(
            "30 2 * * *", datetime(2026, 3, 28, 12, 0, tzinfo=BERLIN), datetime(2026, 3, 29, 3, 0, tzinfo=BERLIN),
            id="spring forward: 02:30 does not exist, the window opens at 03:00",
        ),
        pytest.param(
            "30 2 * * *", datetime(2026, 10, 25, 2, 40, tzinfo=BERLIN), datetime(2026, 10, 26, 2, 30, tzinfo=BERLIN),
            id="fall back: 02:30 happens twice, the window opens once",
        ),
    ],
)
def test_cron_windows_across_dst(expr: str, after: datetime, expected: datetime) -> None:
    assert Window(cron=expr, duration="1h").next_start(after) == expected


def test_a_cron_window_lasts_real_time_across_a_dst_change() -> None:
    window = Window(cron="0 1 * * *", duration="2h")  # 01:00 + 2h on the spring-forward night
    assert window.contains(datetime(2026, 3, 29, 3, 30, tzinfo=BERLIN)), "02:00 was skipped: 3:30 is 1.5 h in"
    assert not window.contains(datetime(2026, 3, 29, 4, 0, tzinfo=BERLIN))


@pytest.mark.parametrize(
    ("cron", "expected"),
    [
        pytest.param("@reboot", "a cron expression has 5 fields", id="@reboot has no time"),
        pytest.param("0 0 * * 1 0", "a cron expression has 5 fields", id="no seconds field"),
        pytest.param("0 0 30 2 *", "cron day of month: '30' is not valid", id="February 30th never comes"),
        pytest.param("*/0 * * * *", "cron minute", id="a zero step"),
        pytest.param("0 0 * * mon-funday", "cron day of week", id="an unknown day name"),
        pytest.param(f"*/{'9' * 5000} * * * *", "cron minute", id="a 5,000-digit step"),
    ],
)
def test_bad_cron_windows_are_refused(cron: str, expected: str) -> None:
    with pytest.raises(PolicyError, match=expected):
        load_policy_text(f"maintenanceWindows: {{windows: [{{cron: '{cron}', duration: 1h}}]}}\n")


def test_a_huge_window_duration_is_answered_at_once() -> None:
    window = Window(cron="0 0 1 1 *", duration="999999999d")
    assert window.contains(datetime(2026, 6, 1, tzinfo=UTC))


ROUND_TRIP = {
    "cron windows": CRON,
    "day-range windows": WINDOWS,
    "cron with names and a nickname": """
maintenanceWindows:
  timezone: America/New_York
  windows:
    - {cron: "30 22 * * mon-fri", duration: 3h}
    - {cron: "@daily", duration: 1h}
    - {days: [sat], start: "08:00", end: "12:00"}
approval: {after: [0]}
""",
}


def _round_trip_cases() -> list:
    shipped = [pytest.param(p.read_text(), id=f"shipped {p.name}") for p in sorted(DEFAULT_POLICY_DIR.glob("*.yaml"))]
    return shipped + [pytest.param(text, id=name) for name, text in ROUND_TRIP.items()]


@pytest.mark.parametrize("text", _round_trip_cases())
def test_a_saved_policy_loads_back_with_the_same_loader(text: str) -> None:
    policy = load_policy_text(text, source="p.yaml")
    saved = policy.dump()  # what the journal stores (model_dump by alias, JSON mode)
    assert load_policy_text(json.dumps(saved), source="journal") == policy
    assert load_policy_text(yaml.safe_dump(saved), source="p.yaml") == policy
    assert RolloutPolicy.model_validate(json.loads(json.dumps(saved))) == policy
    assert RolloutPolicy.model_validate(policy.model_dump(by_alias=True)) == policy


def test_no_windows_means_always() -> None:
    policy = load_policy_text("")
    now = datetime(2026, 11, 22, 3, 0, tzinfo=UTC)
    assert policy.in_window(now) and policy.next_window(now) == now


@pytest.mark.parametrize(
    ("after", "step", "required"),
    [
        pytest.param("none", 0, False, id="approval none gates nothing"),
        pytest.param("all", 2, True, id="approval all gates every step but the last"),
        pytest.param("all", 3, False, id="there is no gate after the last step"),
        pytest.param([0], 0, True, id="a listed step is gated"),
        pytest.param([0], 1, False, id="an unlisted step is not"),
    ],
)
def test_approval_after_step(after: object, step: int, required: bool) -> None:
    policy = RolloutPolicy.model_validate({"approval": {"after": after}})
    assert policy.approval_after_step(step) is required


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        pytest.param("name: x\nstpes: [1]\n", "line 2: stpes: unknown field", id="an unknown field"),
        pytest.param("steps: [1, '10%', '5%', '100%']\n", "line 1: steps.2: steps are cumulative",
                     id="a cross-field rule names its field, and so its line"),
        pytest.param("nodes:\n  selector: 'a in (b'\n", "line 2: nodes.selector: not a label selector",
                     id="a nested field"),
        pytest.param("maintenanceWindows:\n  windows:\n    - cron: '0 25 * * *'\n      duration: 1h\n",
                     "line 3: maintenanceWindows.windows.0.cron: cron hour", id="a window's cron"),
    ],
)
def test_policy_problems_name_their_line(text: str, expected: str) -> None:
    with pytest.raises(PolicyError) as info:
        load_policy_text(text, source="p.yaml")
    assert any(p.startswith(expected) for p in info.value.problems), info.value.problems


def test_a_cron_window_saved_in_the_old_form_still_loads() -> None:
    """Journals written before the fix hold every field of a cron window: `rollout status` of
    such a rollout must still read its policy."""
    old = {"maintenanceWindows": {"timezone": "UTC", "windows": [
        {"days": ["mon", "tue", "wed", "thu", "fri", "sat", "sun"], "start": None, "end": None,
         "cron": "0 22 * * 1-5", "duration": "4h"}]}}
    policy = RolloutPolicy.model_validate(old)
    assert policy.maintenance_windows.windows[0].cron == "0 22 * * 1-5"
    with pytest.raises(PolicyError, match="days applies to start/end windows"):
        load_policy_text("maintenanceWindows: {windows: [{days: [mon], cron: '0 22 * * *', duration: 1h}]}")
