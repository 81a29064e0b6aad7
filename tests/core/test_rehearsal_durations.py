"""Every duration of a policy is either divided by a rehearsal or kept on the wall clock on
purpose (``RolloutPolicy.rehearsal``; issue 36, "one clock for a rehearsal"). A duration added to
the policy later fails here until it is put in one of the two."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import timedelta
from typing import Any

from pydantic import BaseModel

from rollout.policy import RolloutPolicy

# kept on the wall clock, and why (README, "Rehearsals"; the docstring of RolloutPolicy.rehearsal)
WALL_CLOCK = {
    "api_outage_tolerance": "kubesim's API server is a real process: its outages last real time",
    "analysis.prometheus.outage_tolerance": "Prometheus is a real process too",
    "maintenance_windows.windows.duration": "a window is a time of the wall clock",
}

EVERY_DURATION = {
    "done": {"until": "active", "soak": "2m"},
    "progressDeadline": "10m", "syncErrorGrace": "1m", "leaseStaleAfter": "40s", "notReadyFor": "20s",
    "apiOutageTolerance": "5m", "recheckEvery": "30s",
    "approval": {"after": [0], "timeout": "1h"},
    "disruption": {"drain": "auto", "timeout": "10m", "gracePeriod": "30s"},
    "maintenanceWindows": {"timezone": "UTC", "windows": [{"cron": "0 1 * * *", "duration": "4h"}]},
    "analysis": {"checks": [{"name": "evictions", "query": 'sum(kubelet_evictions{node=~"{{nodes}}"})',
                             "condition": "< 1", "noData": "pass", "interval": "1m"}],
                 "prometheus": {"address": "http://127.0.0.1:9090", "outageTolerance": "2m"}},
}


def durations(value: Any, path: str = "") -> Iterator[tuple[str, timedelta]]:
    """Every timedelta in a policy model, by its dotted path (items of a list share one)."""
    if isinstance(value, timedelta):
        yield path, value
    elif isinstance(value, BaseModel):
        for name in type(value).model_fields:
            yield from durations(getattr(value, name), f"{path}.{name}" if path else name)
    elif isinstance(value, (list, tuple)):
        for item in value:
            yield from durations(item, path)


def test_every_duration_is_divided_or_kept_on_the_wall_clock_on_purpose() -> None:
    policy = RolloutPolicy.model_validate(EVERY_DURATION)
    before = dict(durations(policy))
    after = dict(durations(policy.rehearsal(20)))
    assert before.keys() == after.keys()
    assert set(WALL_CLOCK) <= set(before), "a wall-clock duration this test names is gone from the policy"
    assert all(value > timedelta(0) for value in before.values()), before  # each one seen changing or not
    kept = {path for path in before if after[path] == before[path]}
    divided = {path for path in before if after[path] == before[path] / 20}
    assert kept == set(WALL_CLOCK), f"kept on the wall clock without a reason here: {sorted(kept - set(WALL_CLOCK))}"
    assert divided == set(before) - kept, f"neither divided nor kept: {sorted(set(before) - kept - divided)}"
