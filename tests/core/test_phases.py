"""Node phase rules (reference sections 7, 8, 12): one row per rule, named after the rule."""

from __future__ import annotations

from dataclasses import replace
from datetime import datetime, timedelta

import pytest
from test_machine_support import (
    LOAD_ERR,
    OLD,
    SYNC_ERR,
    T0,
    TARGET,
    VALIDATE_ERR,
    active,
    crash_looping,
    node,
    policy,
    promoted,
    rejected,
    restarting,
    spec_target,
    sync_error,
)

from rollout.model import ConfigRef, NodeObservation, NodePhase
from rollout.machine.phases import ErrorKind, Revert, classify_error, node_down, node_phase, not_ready_settles_at
from rollout.policy import RolloutPolicy

AT = T0  # assigned at
SOON = T0 + timedelta(seconds=30)
LATE = T0 + timedelta(minutes=6)  # past the 5m progressDeadline of the test policy
P = policy()
LKG = policy(done={"until": "lastKnownGood"}, progressDeadline="15m")
RECREATED = replace(TARGET, uid="uid-recreated")  # same name, new ConfigMap
STALE_RV = replace(TARGET, resource_version="150")
N = node("n1")

CASES = [
    # (id, observation, policy, now, written_at (the assignment's acknowledgment), expected phase)
    ("a node still on its old config is pending", N, P, SOON, None, NodePhase.PENDING),
    ("spec written, kubelet not resolved yet is assigned", spec_target(N), P, SOON, AT, NodePhase.ASSIGNED),
    (
        "kubelet resolved an older resourceVersion is still assigned (cache lag)",
        replace(spec_target(N), assigned=STALE_RV),
        P,
        SOON,
        AT,
        NodePhase.ASSIGNED,
    ),
    (
        "same name but another uid is not the target",
        replace(spec_target(N), assigned=RECREATED, active=RECREATED),
        P,
        SOON,
        AT,
        NodePhase.ASSIGNED,
    ),
    ("assigned resolved, active still old is restarting", restarting(N), P, SOON, AT, NodePhase.RESTARTING),
    ("active matches uid and resourceVersion, Ready, is active", active(N), P, SOON, AT, NodePhase.ACTIVE),
    (
        "active but not Ready yet (no condition) is still restarting",
        replace(active(N), ready=""),
        P,
        SOON,
        AT,
        NodePhase.RESTARTING,
    ),
    (
        "active without readiness required is active",
        replace(active(N), ready=""),
        policy(done={"requireReady": False}),
        SOON,
        AT,
        NodePhase.ACTIVE,
    ),
    ("lastKnownGood equal to the target is promoted", promoted(N), P, SOON, AT, NodePhase.PROMOTED),
    (
        "failed to validate with the target resolved is failed-to-validate",
        rejected(N, VALIDATE_ERR),
        P,
        SOON,
        AT,
        NodePhase.FAILED_TO_VALIDATE,
    ),
    (
        "failed to load with the target resolved is failed-to-load",
        rejected(N, LOAD_ERR),
        P,
        SOON,
        AT,
        NodePhase.FAILED_TO_LOAD,
    ),
    (
        "a base internal failure (transform) is failed-to-load",
        rejected(N, "internal failure, see Kubelet log for details"),
        P,
        SOON,
        AT,
        NodePhase.FAILED_TO_LOAD,
    ),
    (
        "first-ever assignment rejected (active absent) is failed-to-validate",
        replace(rejected(N), active=None, last_known_good=None),
        P,
        SOON,
        AT,
        NodePhase.FAILED_TO_VALIDATE,
    ),
    (
        "a stale validate error from an older config is not ours",
        replace(spec_target(N), error=VALIDATE_ERR),
        P,
        SOON,
        AT,
        NodePhase.ASSIGNED,
    ),
    ("failed to sync is sync-error", sync_error(N), P, SOON, AT, NodePhase.SYNC_ERROR),
    (
        "an unknown error before resolution counts as a sync problem",
        replace(spec_target(N), error="something new"),
        P,
        SOON,
        AT,
        NodePhase.SYNC_ERROR,
    ),
    (
        "an unknown error after a fallback is failed-to-load",
        replace(rejected(N), error="something new"),
        P,
        SOON,
        AT,
        NodePhase.FAILED_TO_LOAD,
    ),
    (
        "NotReady after assignment is crash-looping, not restarting",
        replace(restarting(N), ready="False", ready_transition=AT + timedelta(seconds=1)),
        P,
        SOON,
        AT,
        NodePhase.CRASH_LOOPING,
    ),
    (
        "Ready Unknown after assignment is crash-looping",
        crash_looping(N, ready="Unknown"),
        P,
        SOON,
        AT,
        NodePhase.CRASH_LOOPING,
    ),
    (
        "Ready Unknown after assignment, before the kubelet took the target, is unreachable",
        replace(crash_looping(N, ready="Unknown"), assigned=None, active=None),
        P,
        SOON,
        AT,
        NodePhase.UNREACHABLE,
    ),
    (
        "a stale Lease after assignment is crash-looping even while Ready",
        replace(active(N), lease_renewed=AT + timedelta(seconds=5)),
        P,
        AT + timedelta(minutes=2),
        AT,
        NodePhase.CRASH_LOOPING,
    ),
    (
        "a node's own longer lease duration is honoured",
        replace(active(N), lease_renewed=SOON - timedelta(seconds=50), lease_duration_s=60.0),
        P,
        SOON,
        AT,
        NodePhase.ACTIVE,
    ),
    (
        "a lease older than the node's own duration is stale",
        replace(active(N), lease_renewed=AT + timedelta(seconds=5), lease_duration_s=60.0),
        P,
        AT + timedelta(seconds=70),
        AT,
        NodePhase.CRASH_LOOPING,
    ),
    (
        "a fresh Lease is healthy",
        replace(active(N), lease_renewed=SOON - timedelta(seconds=5)),
        P,
        SOON,
        AT,
        NodePhase.ACTIVE,
    ),
    (
        "a config rejection wins over NotReady",
        replace(rejected(N), ready="False"),
        P,
        SOON,
        AT,
        NodePhase.FAILED_TO_VALIDATE,
    ),
    (
        "crash-looping wins over a sync error",
        replace(sync_error(N), ready="False", ready_transition=AT),
        P,
        SOON,
        AT,
        NodePhase.CRASH_LOOPING,
    ),
    ("no pickup within progressDeadline is timed-out", spec_target(N), P, LATE, AT, NodePhase.TIMED_OUT),
    (
        "one Unknown sample shorter than notReadyFor is not an outage",
        replace(active(N), ready="Unknown", ready_transition=SOON - timedelta(seconds=5)),
        P,
        SOON,
        AT,
        NodePhase.RESTARTING,
    ),
    (
        "a node down since before its assignment is unavailable, not crash-looping",
        replace(spec_target(N), ready="Unknown", ready_transition=AT - timedelta(minutes=1)),
        P,
        SOON,
        AT,
        NodePhase.UNAVAILABLE,
    ),
    (
        "a lease already stale before the assignment is unavailable, not the config's doing",
        replace(spec_target(N), lease_renewed=AT - timedelta(minutes=2)),
        P,
        SOON,
        AT,
        NodePhase.UNAVAILABLE,
    ),
    ("stuck restarting past progressDeadline is timed-out", restarting(N), P, LATE, AT, NodePhase.TIMED_OUT),
    (
        "no status.config at all ends timed-out",
        replace(spec_target(N), has_config_status=False),
        P,
        LATE,
        AT,
        NodePhase.TIMED_OUT,
    ),
    (
        "active is enough past the deadline when done.until is active",
        active(N),
        P,
        LATE,
        AT,
        NodePhase.ACTIVE,
    ),
    (
        "active but never promoted past the deadline is timed-out under lastKnownGood",
        active(N),
        LKG,
        T0 + timedelta(minutes=16),
        AT,
        NodePhase.TIMED_OUT,
    ),
    (
        "active inside the deadline under lastKnownGood is active",
        active(N),
        LKG,
        T0 + timedelta(minutes=5),
        AT,
        NodePhase.ACTIVE,
    ),
    ("a node deleted after its assignment is gone, not timed out", None, P, LATE, AT, NodePhase.GONE),
    (
        "a node re-created under its name after its write is gone (no assignment, none of our annotations)",
        N, P, SOON, AT, NodePhase.GONE,
    ),
    ("a write not acknowledged yet has no deadline", spec_target(N), P, LATE, None, NodePhase.ASSIGNED),
    (
        "a kubelet that stopped renewing 30 s before its write is unavailable, though NotReady came after",
        replace(spec_target(N), ready="Unknown", ready_transition=AT + timedelta(seconds=10),
                lease_renewed=AT - timedelta(seconds=30), lease_duration_s=40.0),
        P,
        AT + timedelta(seconds=31) + P.not_ready_for,
        AT,
        NodePhase.UNAVAILABLE,
    ),
    (
        "a kubelet that renewed after its write and then went silent is blamed (unreachable: it never took the target)",
        replace(spec_target(N), ready="Unknown", ready_transition=AT + timedelta(seconds=41),
                lease_renewed=AT + timedelta(seconds=1), lease_duration_s=40.0),
        P,
        AT + timedelta(seconds=42) + P.not_ready_for,
        AT,
        NodePhase.UNREACHABLE,
    ),
    (
        "a kubelet that took the target, renewed after its write and then went silent is crash-looping",
        replace(restarting(N), ready="Unknown", ready_transition=AT + timedelta(seconds=41),
                lease_renewed=AT + timedelta(seconds=1), lease_duration_s=40.0),
        P,
        AT + timedelta(seconds=42) + P.not_ready_for,
        AT,
        NodePhase.CRASH_LOOPING,
    ),
]


@pytest.mark.parametrize(
    ("obs", "pol", "now", "written_at", "expected"), [pytest.param(*c[1:], id=c[0]) for c in CASES]
)
def test_node_phase(
    obs: NodeObservation | None,
    pol: RolloutPolicy,
    now: datetime,
    written_at: datetime | None,
    expected: NodePhase,
) -> None:
    verdict = node_phase(obs, target=TARGET, written_at=written_at, now=now, policy=pol)
    assert verdict.phase is expected, verdict.reason
    assert verdict.reason


def back_on_old(o: NodeObservation) -> NodeObservation:
    return replace(o, spec_source=OLD.unresolved(), assigned=OLD, active=OLD, error="", ready="True")


def back_on_local(o: NodeObservation) -> NodeObservation:
    return replace(
        o, spec_source=None, assigned=None, active=None, last_known_good=None, error="", ready="True"
    )


REVERT_CASES = [
    (
        "converged on the previous source and Ready is reverted",
        back_on_old(rejected(N)),
        OLD,
        SOON,
        NodePhase.REVERTED,
    ),
    (
        "spec back but kubelet still on the target is reverting",
        replace(active(N), spec_source=OLD.unresolved()),
        OLD,
        SOON,
        NodePhase.REVERTING,
    ),
    ("revert not written yet is reverting", active(N), OLD, SOON, NodePhase.REVERTING),
    ("a revert not written has no deadline, however old its intent", active(N), OLD, LATE, NodePhase.REVERTING),
    ("a node deleted before its revert is gone: nothing to put back", None, OLD, SOON, NodePhase.GONE),
    (
        "back on previous but NotReady is not reverted yet",
        replace(back_on_old(N), ready="False"),
        OLD,
        SOON,
        NodePhase.REVERTING,
    ),
    (
        "reset to local config (status {}) is reverted",
        back_on_local(active(N)),
        None,
        SOON,
        NodePhase.REVERTED,
    ),
    (
        "a stale sync error after reset to local is still reverted (E14)",
        replace(back_on_local(N), error=SYNC_ERR),
        None,
        SOON,
        NodePhase.REVERTED,
    ),
    (
        "a crash loop that never converges back times out",
        replace(crash_looping(N), spec_source=OLD.unresolved()),
        OLD,
        LATE,
        NodePhase.TIMED_OUT,
    ),
]


@pytest.mark.parametrize(
    ("obs", "to", "now", "expected"), [pytest.param(*c[1:], id=c[0]) for c in REVERT_CASES]
)
def test_revert_phase(obs: NodeObservation | None, to: ConfigRef | None, now: datetime, expected: NodePhase) -> None:
    # a revert acknowledged at AT is one the node carries; one it does not carry never landed
    written = AT if obs is not None and obs.points_at(to) else None
    verdict = node_phase(
        obs, target=TARGET, written_at=AT, now=now, policy=P,
        revert=Revert(to=to, requested_at=AT, written_at=written),
    )
    assert verdict.phase is expected, verdict.reason


def test_a_node_re_pointed_after_its_revert_landed_is_not_written_over() -> None:
    """Acknowledged, then someone else changed the spec: named, not fought over."""
    verdict = node_phase(
        active(N), target=TARGET, written_at=AT, now=SOON, policy=P,
        revert=Revert(to=OLD, requested_at=AT, written_at=AT),
    )
    assert verdict.phase is NodePhase.TIMED_OUT and "by someone else after the revert" in verdict.reason


def test_every_phase_is_covered_by_a_rule() -> None:
    seen = {c[-1] for c in CASES} | {c[-1] for c in REVERT_CASES}
    assert seen == set(NodePhase) - {NodePhase.SKIPPED}  # SKIPPED is the machine's, not an observation's


def test_lease_age_counts_only_time_we_were_watching() -> None:
    """An orchestrator that was not looking (restart, API outage) never makes a node look dead."""
    obs = replace(active(N), lease_renewed=AT + timedelta(seconds=1))
    late = AT + timedelta(minutes=3)
    blind = node_phase(obs, target=TARGET, written_at=AT, now=late, policy=P)
    watching = node_phase(
        obs, target=TARGET, written_at=AT, now=late, policy=P, watched_since=late - timedelta(seconds=10)
    )
    assert blind.phase is NodePhase.CRASH_LOOPING
    assert watching.phase is NodePhase.ACTIVE, watching.reason


def test_stuck_revert_names_the_evidence() -> None:
    """'Fix it on the node' only for a live kubelet whose status still shows the rollout's config."""
    stuck = node_phase(
        replace(crash_looping(N, ready="True"), spec_source=OLD.unresolved()),
        target=TARGET, written_at=AT, now=LATE, policy=P,
        revert=Revert(to=OLD, requested_at=AT, written_at=AT),
    )
    assert stuck.phase is NodePhase.TIMED_OUT
    assert "still says assigned" in stuck.reason and "fix it on the node" in stuck.reason
    down = node_phase(
        replace(crash_looping(N, ready="Unknown"), spec_source=OLD.unresolved(), ready_transition=AT),
        target=TARGET, written_at=AT, now=LATE, policy=P, revert=Revert(to=OLD, requested_at=AT, written_at=AT),
    )
    assert down.phase is NodePhase.TIMED_OUT and "fix it on the node" not in down.reason


@pytest.mark.parametrize(
    ("error", "kind"),
    [
        pytest.param("", ErrorKind.NONE, id="empty is no error"),
        pytest.param(LOAD_ERR, ErrorKind.LOAD, id="load"),
        pytest.param(VALIDATE_ERR, ErrorKind.VALIDATE, id="validate"),
        pytest.param("internal failure, see Kubelet log for details", ErrorKind.INTERNAL, id="internal"),
        pytest.param(SYNC_ERR, ErrorKind.SYNC, id="failed to sync wraps download errors"),
        pytest.param(
            "failed to sync: invalid NodeConfigSource, exactly one subfield must be non-nil, "
            "but all were nil",
            ErrorKind.SYNC,
            id="failed to sync wraps the all-nil error",
        ),
        pytest.param(
            "failed to sync: internal failure, see Kubelet log for details",
            ErrorKind.SYNC,
            id="a sync-wrapped internal failure is a sync error",
        ),
        pytest.param("kubelet on fire", ErrorKind.OTHER, id="unknown text is other"),
    ],
)
def test_classify_error(error: str, kind: ErrorKind) -> None:
    assert classify_error(error) is kind


@pytest.mark.parametrize(
    ("phase_obs", "bad", "budget"),
    [
        pytest.param(rejected(N), True, False, id="a rejection is bad config, not a budget failure"),
        pytest.param(sync_error(N), False, True, id="a sync error counts against the budget"),
        pytest.param(crash_looping(N), False, True, id="a crash loop counts against the budget"),
        pytest.param(active(N), False, False, id="an active node is no failure"),
    ],
)
def test_error_triage(phase_obs: NodeObservation, bad: bool, budget: bool) -> None:
    v = node_phase(phase_obs, target=TARGET, written_at=AT, now=SOON, policy=P)
    assert (v.bad_config, v.counts_against_budget) == (bad, budget)


def test_a_not_ready_counts_only_time_we_were_watching() -> None:
    """A view that just reconnected may not hold the write that ended the NotReady yet (a storm
    of 429s kept the watch away while the node came back): judge only after notReadyFor watched."""
    since = AT + timedelta(seconds=5)
    obs = replace(active(N), ready="Unknown", ready_transition=since)
    later = since + P.not_ready_for + timedelta(seconds=1)
    assert node_down(obs, now=later, policy=P) is not None
    reconnected = later - timedelta(seconds=1)
    assert node_down(obs, now=later, policy=P, watched_since=reconnected) is None
    assert not_ready_settles_at(obs, policy=P, watched_since=reconnected, now=later) == reconnected + P.not_ready_for
    assert node_down(obs, now=reconnected + P.not_ready_for, policy=P, watched_since=reconnected) is not None


def test_a_whole_second_transition_in_the_second_of_the_write_is_not_read_as_before_it() -> None:
    """lastTransitionTime is serialised to the second: NotReady stamped 10:00:00 for a write
    acknowledged at 10:00:00.5 may well have come after it (a kubesim run showed a crash-looping
    node excused this way); a whole earlier second is before it."""
    written = AT + timedelta(milliseconds=500)
    now = AT + timedelta(seconds=5) + P.not_ready_for
    same_second = replace(restarting(N), ready="Unknown", ready_transition=AT)
    earlier = replace(restarting(N), ready="Unknown", ready_transition=AT - timedelta(seconds=1))
    assert node_phase(same_second, target=TARGET, written_at=written, now=now, policy=P).phase \
        is NodePhase.CRASH_LOOPING
    assert node_phase(earlier, target=TARGET, written_at=written, now=now, policy=P).phase \
        is NodePhase.UNAVAILABLE
