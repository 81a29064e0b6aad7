"""A plan's schedule (rollout.planner.estimate_schedule): the estimate includes waiting for the
maintenance windows, batch by batch, as the engine starts batches only in an open window and
never cuts off a running one. Pure: ``now`` is given."""

from __future__ import annotations

from dataclasses import replace
from datetime import datetime, timedelta, timezone

from hypothesis import given, settings
from hypothesis import strategies as st
from test_machine_support import T0, TARGET, nodes, policy

from rollout.planner import PlanEstimate, estimate_schedule, plan_batches

SATURDAY_EVENING = datetime(2026, 11, 28, 21, 0, tzinfo=timezone.utc)
MONDAY_8 = datetime(2026, 11, 30, 8, 0, tzinfo=timezone.utc)
BUSINESS_HOURS = {"timezone": "UTC", "windows": [{"days": ["mon", "tue", "wed", "thu"], "start": "08:00",
                                                   "end": "16:00"}]}


def planned(windows: dict[str, object] | None = None, *, per_batch_min: float = 1, count: int = 8):
    pol = policy(**({"maintenanceWindows": windows} if windows else {}))
    plan = plan_batches(nodes(count), pol, rollout="r1", target=TARGET)
    minutes = tuple(timedelta(minutes=per_batch_min) for _ in plan.batches)
    return replace(plan, estimate=PlanEstimate(per_batch=minutes)), pol


def test_a_rollout_whose_window_opens_on_monday_ends_on_monday() -> None:
    """Before: `plan` said 4m49s for a rollout whose first batch could not start for 31 hours."""
    plan, pol = planned(BUSINESS_HOURS)
    said = estimate_schedule(plan, pol, SATURDAY_EVENING)
    assert said.starts_at == MONDAY_8
    assert said.work == timedelta(minutes=len(plan.batches))
    assert said.ends_at == MONDAY_8 + said.work
    assert said.total == timedelta(hours=35) + said.work and said.waiting == timedelta(hours=35)


def test_in_an_open_window_or_without_windows_it_is_the_batches_time() -> None:
    for windows, now in ((BUSINESS_HOURS, T0), (None, SATURDAY_EVENING)):  # T0: a Monday, 10:00
        plan, pol = planned(windows)
        said = estimate_schedule(plan, pol, now)
        assert said.starts_at == now and said.waiting == timedelta(0)
        assert said.total == plan.estimated_duration


def test_a_batch_started_in_a_window_runs_past_its_close_and_the_next_waits_a_day() -> None:
    one_hour = {"timezone": "UTC", "windows": [{"days": ["mon", "tue", "wed", "thu", "fri", "sat", "sun"],
                                                 "start": "08:00", "end": "09:00"}]}
    plan, pol = planned(one_hour, per_batch_min=40)
    at_8 = datetime(2026, 11, 23, 8, 0, tzinfo=timezone.utc)
    said = estimate_schedule(plan, pol, at_8)
    assert said.starts[:3] == (at_8, at_8 + timedelta(minutes=40), at_8 + timedelta(days=1))
    resumed = estimate_schedule(plan, pol, at_8 + timedelta(minutes=80), from_batch=2)  # a run's rest
    assert resumed.starts[0] == at_8 + timedelta(days=1)


@settings(max_examples=60, deadline=None)
@given(hours=st.integers(min_value=0, max_value=24 * 7 - 1), count=st.integers(min_value=1, max_value=20))
def test_every_batch_starts_in_a_window_and_the_waits_add_up(hours: int, count: int) -> None:
    plan, pol = planned(BUSINESS_HOURS, per_batch_min=95, count=count)
    now = T0 + timedelta(hours=hours)
    said = estimate_schedule(plan, pol, now)
    assert len(said.starts) == len(plan.batches)
    assert all(pol.in_window(start) for start in said.starts)
    assert all(later >= earlier + timedelta(minutes=95) for earlier, later in zip(said.starts, said.starts[1:]))
    assert said.total == said.work + said.waiting and said.waiting >= timedelta(0)
