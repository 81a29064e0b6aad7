"""The agent's pure core, rule by rule: (state, observation, now) -> one decision.

Each row is named for the rule it pins (argo's canary_test.go style). Inputs are built from a
few named states and observations so a row reads as the situation it describes.
"""

from __future__ import annotations

from dataclasses import replace
from datetime import timedelta
from typing import Any

import pytest
from rollout.model import ConfigRef

from agent_fakes import T0
from kubelet_rollout_agent import names
from kubelet_rollout_agent.decide import (
    ClearGuardRecord,
    Promote,
    RemoveDropin,
    Report,
    RestartKubelet,
    Settings,
    Stage,
    Wait,
    WriteDropin,
    after_stage,
    decide,
    guard_trial,
    status_annotations,
)
from kubelet_rollout_agent.stage import Refused, Staged
from kubelet_rollout_agent.state import AgentState, GuardRecord, Observation, Phase, UnitStatus

A = ConfigRef("kube-system", "kc-a", "kubelet", "uid-a", "10")
B = ConfigRef("kube-system", "kc-b", "kubelet", "uid-b", "20")
SETTINGS = Settings(trial=timedelta(minutes=10), health_deadline=timedelta(minutes=2), crash_threshold=3)
RESTARTED = T0 - timedelta(seconds=30)

STABLE_A = AgentState(phase=Phase.STABLE, assigned=A, active=A, last_known_good=A, dropin_sha="sha-a",
                      lkg_sha="sha-a", since=T0 - timedelta(hours=1), restarted_at=T0 - timedelta(hours=1))
TRIAL_B_OWED = AgentState(phase=Phase.TRIAL, assigned=B, active=A, last_known_good=A, dropin_sha="sha-b",
                          lkg_sha="sha-a", since=T0 - timedelta(seconds=40))
TRIAL_B = replace(TRIAL_B_OWED, restarted_at=RESTARTED, restart_baseline=2)
PROVEN = RESTARTED + timedelta(seconds=10)
TRIAL_B_PROVEN = replace(TRIAL_B, proven_at=PROVEN, up_since=PROVEN)  # in its health wait, not active yet
TRIAL_B_ACTIVE = replace(TRIAL_B_PROVEN, active=B, active_at=PROVEN + SETTINGS.health_wait)
REVERTING_B = TRIAL_B.with_reverting("boom", T0)
B_DOC = {"apiVersion": "kubelet.config.k8s.io/v1beta1", "kind": "KubeletConfiguration", "maxPods": 50}


def seen(desired: ConfigRef | None = None, **kwargs: Any) -> Observation:
    """An observation; the node's annotations already match ``kwargs['state']`` when given."""
    state = kwargs.pop("state", None)
    annotations = {k: v for k, v in status_annotations(state, SETTINGS).items() if v} if state else {}
    return Observation(desired=desired, annotations=annotations, **kwargs)


def healthy_b(**kwargs: Any) -> Observation:
    """B on disk, kubelet up and showing B's fields."""
    defaults: dict[str, Any] = dict(dropin_sha="sha-b", dropin=B_DOC, lkg_sha="sha-a",
                                    unit=UnitStatus("active", 2), healthy=True,
                                    configz={"kubeletconfig": {"maxPods": 50}})
    return seen(B, **{**defaults, **kwargs})


CASES = [
    pytest.param(AgentState(), seen(), Wait, Phase.BASE,
                 id="nothing assigned and nothing of ours: steady"),
    pytest.param(AgentState(), seen(A), Stage, Phase.BASE,
                 id="a new assignment is staged (downloaded, validated) before anything is written"),
    pytest.param(STABLE_A, seen(replace(A, resource_version="11"), dropin_sha="sha-a", lkg_sha="sha-a", state=STABLE_A),
                 Stage, Phase.STABLE, id="same name, new resourceVersion is a new assignment"),
    pytest.param(STABLE_A, seen(A, dropin_sha="sha-a", lkg_sha="sha-a", state=STABLE_A), Wait, Phase.STABLE,
                 id="promoted config, nothing changed: steady"),
    pytest.param(STABLE_A.with_refused(B, "bad", T0), seen(B, dropin_sha="sha-a", lkg_sha="sha-a",
                 state=STABLE_A.with_refused(B, "bad", T0)), Wait, Phase.FAILED,
                 id="a refused assignment is not retried until it changes"),
    pytest.param(STABLE_A, seen(desired_problem="unreadable", dropin_sha="sha-a", lkg_sha="sha-a"), Wait, Phase.STABLE,
                 id="an unreadable annotation is reported and nothing on disk is touched"),
    pytest.param(STABLE_A, seen(None, dropin_sha="sha-a", lkg_sha="sha-a"), RemoveDropin, Phase.REMOVING,
                 id="annotation removed: our drop-in goes first"),
    pytest.param(AgentState(phase=Phase.REMOVING), seen(None), RestartKubelet, Phase.REMOVING,
                 id="removing: restart once the drop-in is gone"),
    pytest.param(AgentState(phase=Phase.REMOVING, restarted_at=RESTARTED), seen(None, healthy=True), Wait, Phase.BASE,
                 id="removing: a healthy kubelet is back on its base config"),
    pytest.param(AgentState().with_refused(A, "bad", T0), seen(None), Wait, Phase.BASE,
                 id="withdrawing a refused first config needs no restart (the base already runs)"),
    pytest.param(AgentState(), seen(None, dropin_sha="stray"), RemoveDropin, Phase.REMOVING,
                 id="a drop-in of ours with nothing assigned (lost state) is removed"),
    pytest.param(TRIAL_B_OWED, seen(B, dropin_sha="sha-a"), WriteDropin, Phase.TRIAL,
                 id="trial: the staged drop-in is written before the restart"),
    pytest.param(TRIAL_B_OWED, seen(B, dropin_sha="sha-b", unit=UnitStatus("active", 2)), RestartKubelet, Phase.TRIAL,
                 id="trial: a written drop-in (even by a killed agent) is followed by a restart, not a rewrite"),
    pytest.param(replace(TRIAL_B, restarted_at=RESTARTED), seen(B, dropin_sha="sha-a"), WriteDropin, Phase.TRIAL,
                 id="trial: a drop-in changed under us is written again (and the restart owed again)"),
    pytest.param(TRIAL_B, healthy_b(), Wait, Phase.TRIAL,
                 id="trial: healthy and configz shows every field -> proven, the health wait starts"),
    pytest.param(TRIAL_B, healthy_b(configz={"kubeletconfig": {"maxPods": 90}}), Wait, Phase.REVERTING,
                 id="trial: a field overridden by a flag is an error and rolls back, never promoted"),
    pytest.param(TRIAL_B, healthy_b(unit=UnitStatus("activating", 5), healthy=False, configz=None), Wait, Phase.REVERTING,
                 id="trial: restarts reaching the threshold are a crash loop -> roll back"),
    pytest.param(TRIAL_B, healthy_b(unit=UnitStatus("failed", 2), healthy=False, configz=None), Wait, Phase.REVERTING,
                 id="trial: a failed unit (no Restart=) rolls back"),
    pytest.param(replace(TRIAL_B, restarted_at=T0 - timedelta(minutes=3)),
                 healthy_b(unit=UnitStatus("active", 2), healthy=False, configz=None), Wait, Phase.REVERTING,
                 id="trial: not healthy by the health deadline -> roll back"),
    pytest.param(TRIAL_B, healthy_b(unit=UnitStatus("active", 3), healthy=False, configz=None, state=TRIAL_B),
                 Wait, Phase.TRIAL, id="trial: unhealthy before the deadline and under the threshold -> wait"),
    pytest.param(TRIAL_B_ACTIVE, healthy_b(configz=None, state=TRIAL_B_ACTIVE), Wait, Phase.TRIAL,
                 id="trial: active, trial not over -> wait for its end"),
    pytest.param(replace(TRIAL_B_ACTIVE, restarted_at=T0 - timedelta(minutes=10)), healthy_b(configz=None),
                 Promote, Phase.STABLE, id="trial: active and the trial is over -> promote to last-known-good"),
    pytest.param(replace(TRIAL_B_PROVEN, restarted_at=T0 - timedelta(minutes=10), up_since=T0 - timedelta(seconds=5)),
                 healthy_b(configz=None, state=TRIAL_B_PROVEN), Wait, Phase.TRIAL,
                 id="trial: never promote before the health wait is over, even past the trial"),
    pytest.param(replace(TRIAL_B_ACTIVE, restarted_at=T0 - timedelta(minutes=10)),
                 healthy_b(configz=None, healthy=False, unit=UnitStatus("active", 3), state=TRIAL_B_ACTIVE),
                 Wait, Phase.TRIAL, id="trial: never promote while the kubelet is unhealthy"),
    pytest.param(REVERTING_B, seen(B, dropin_sha="sha-b"), WriteDropin, Phase.REVERTING,
                 id="reverting: the last-known-good copy is written back first"),
    pytest.param(replace(REVERTING_B, dropin_sha=None, lkg_sha=None, last_known_good=None),
                 seen(B, dropin_sha="sha-b"), RemoveDropin, Phase.REVERTING,
                 id="reverting without a last-known-good removes ours (base config)"),
    pytest.param(REVERTING_B, seen(B, dropin_sha="sha-a", lkg_sha="sha-a"), RestartKubelet, Phase.REVERTING,
                 id="reverting: restart once last-known-good is back"),
    pytest.param(replace(REVERTING_B, restarted_at=T0), seen(B, dropin_sha="sha-a", lkg_sha="sha-a"), Wait, Phase.FAILED,
                 id="reverting: restarted -> failed, last-known-good active"),
    pytest.param(TRIAL_B, healthy_b(guard_record=GuardRecord(T0, "sha-b", 4, "last-known-good", "E... bad")),
                 ClearGuardRecord, Phase.FAILED, id="a guard record is adopted before any other rule"),
    pytest.param(replace(STABLE_A, lkg_sha="sha-a"), seen(A, dropin_sha="sha-a", lkg_sha=None),
                 Promote, Phase.STABLE, id="a promotion whose copy did not land is finished"),
    pytest.param(STABLE_A, seen(A, dropin_sha="sha-a", lkg_sha="sha-a"), Report, Phase.STABLE,
                 id="state settled but the node's annotations are stale -> report"),
]


@pytest.mark.parametrize(("state", "obs", "action", "phase"), CASES)
def test_rules(state: AgentState, obs: Observation, action: type, phase: Phase) -> None:
    decision = decide(state, obs, settings=SETTINGS, now=T0)
    assert isinstance(decision.action, action), decision
    assert decision.state.phase is phase, decision


def test_proof_alone_is_not_active() -> None:
    decision = decide(TRIAL_B, healthy_b(), settings=SETTINGS, now=T0)
    assert decision.state.proven_at == T0 and decision.state.up_since == T0
    assert decision.state.active == A and decision.event is None  # still what ran before


def test_active_once_the_kubelet_stayed_up_through_the_health_wait() -> None:
    waiting = decide(TRIAL_B_PROVEN, healthy_b(configz=None, state=TRIAL_B_PROVEN), settings=SETTINGS,
                     now=PROVEN + SETTINGS.health_wait - timedelta(seconds=1))
    assert waiting.state.active == A and waiting.action == Wait(PROVEN + SETTINGS.health_wait)
    decision = decide(TRIAL_B_PROVEN, healthy_b(configz=None), settings=SETTINGS, now=PROVEN + SETTINGS.health_wait)
    assert decision.state.active == B and decision.state.last_known_good == A
    assert decision.event is not None and decision.event.reason == names.EVENT_ACTIVE


def test_a_kubelet_that_crashes_after_its_proof_is_never_active() -> None:
    """The issue's crash loop: configz proves the fields in the kubelet's first seconds, then it
    dies (a host it cannot run on). Down: the wait starts over; back up after a restart: starts
    over again; crash-looping: rolled back, never having been reported active."""
    now = PROVEN + timedelta(seconds=1)
    down = decide(TRIAL_B_PROVEN, healthy_b(configz=None, healthy=False, unit=UnitStatus("activating", 2)),
                  settings=SETTINGS, now=now)
    assert down.state.up_since is None and down.state.active == A
    back = decide(down.state, healthy_b(configz=None, unit=UnitStatus("active", 3)), settings=SETTINGS,
                  now=now + SETTINGS.health_wait)
    assert back.state.up_since == now + SETTINGS.health_wait and back.state.up_restarts == 1
    assert back.state.active == A  # up again, but only just
    # a restart between two looks, healthy at both: the wait starts over too
    again = decide(back.state, healthy_b(configz=None, unit=UnitStatus("active", 4)), settings=SETTINGS,
                   now=now + 2 * SETTINGS.health_wait)
    assert again.state.active == A and again.state.up_restarts == 2
    looping = decide(again.state, healthy_b(configz=None, healthy=False, unit=UnitStatus("activating", 5)),
                     settings=SETTINGS, now=now + 2 * SETTINGS.health_wait + timedelta(seconds=5))
    assert looping.state.phase is Phase.REVERTING and "crash-looping" in looping.state.error


def test_a_kubelet_down_past_the_deadline_of_its_health_wait_is_rolled_back() -> None:
    down = replace(TRIAL_B_PROVEN, up_since=None)
    deadline = RESTARTED + SETTINGS.health_deadline + SETTINGS.health_wait
    obs = healthy_b(configz=None, healthy=False, unit=UnitStatus("active", 2), state=down)
    assert decide(down, obs, settings=SETTINGS, now=deadline - timedelta(seconds=1)).state.phase is Phase.TRIAL
    late = decide(down, obs, settings=SETTINGS, now=deadline)
    assert late.state.phase is Phase.REVERTING and "did not stay up" in late.state.error


def test_flag_override_error_names_the_keys() -> None:
    decision = decide(TRIAL_B, healthy_b(configz={"kubeletconfig": {"maxPods": 90}}), settings=SETTINGS, now=T0)
    assert "maxPods" in decision.state.error and "flag" in decision.state.error
    assert decision.state.active == A and decision.state.dropin_sha == "sha-a"
    assert decision.event is not None and decision.event.reason == names.EVENT_FAILED


def test_a_dropin_the_kubelet_does_not_read_at_all_points_at_config_dir() -> None:
    obs = healthy_b(dropin={**B_DOC, "podPidsLimit": 10}, configz={"kubeletconfig": {"maxPods": 90}})
    error = decide(TRIAL_B, obs, settings=SETTINGS, now=T0).state.error
    assert "maxPods, podPidsLimit" in error and "--config-dir" in error


def test_crash_loop_error_carries_the_kubelet_log_line() -> None:
    obs = healthy_b(unit=UnitStatus("activating", 5), healthy=False, configz=None,
                    last_error_line='err="failed to validate kubelet configuration"')
    decision = decide(TRIAL_B, obs, settings=SETTINGS, now=T0)
    assert "crash-looping" in decision.state.error and "failed to validate" in decision.state.error


def test_a_flushed_restart_counter_still_counts_a_crash_loop() -> None:
    # someone restarted the kubelet by hand (systemd flushed NRestarts to 0), then it crashed 3 times
    obs = healthy_b(unit=UnitStatus("activating", 3), healthy=False, configz=None)
    decision = decide(replace(TRIAL_B, restart_baseline=5), obs, settings=SETTINGS, now=T0)
    assert decision.state.phase is Phase.REVERTING


def test_guard_adoption_reports_error_and_last_known_good_as_active() -> None:
    record = GuardRecord(T0, "sha-b", 4, "last-known-good", 'err="failed to load kubelet dropin file"')
    state = decide(TRIAL_B, healthy_b(guard_record=record), settings=SETTINGS, now=T0).state
    assert state.active == A and state.last_known_good == A and state.assigned == B
    assert "3 times" in state.error and "failed to load kubelet dropin file" in state.error
    assert state.dropin_sha == "sha-a"


def test_withdrawal_resets_last_known_good_like_dkc() -> None:
    state = decide(STABLE_A, seen(None, dropin_sha="sha-a"), settings=SETTINGS, now=T0).state
    assert state.assigned is None and state.active is None and state.last_known_good is None


def test_decide_is_pure() -> None:
    obs = healthy_b()
    assert decide(TRIAL_B, obs, settings=SETTINGS, now=T0) == decide(TRIAL_B, obs, settings=SETTINGS, now=T0)


def test_after_stage_refusal_keeps_what_runs() -> None:
    followup = after_stage(STABLE_A, Refused(B, "refused: x"), now=T0)
    assert followup.state.phase is Phase.FAILED and followup.state.assigned == B
    assert followup.state.active == A and followup.state.dropin_sha == "sha-a"
    assert followup.event is not None and followup.event.reason == names.EVENT_REFUSED


def test_after_stage_success_opens_a_trial_with_restart_owed() -> None:
    followup = after_stage(STABLE_A, Staged(B, "text", {}, "sha-b"), now=T0)
    assert followup.state.phase is Phase.TRIAL and followup.state.restarted_at is None
    assert followup.action == WriteDropin("staged", "sha-b")


def test_guard_trial_only_during_a_trial_and_names_last_known_good() -> None:
    assert guard_trial(STABLE_A, SETTINGS) is None
    trial = guard_trial(TRIAL_B, SETTINGS)
    assert trial is not None and trial["dropinSha"] == "sha-b" and trial["lastKnownGood"] == names.LKG_FILE
    first = guard_trial(replace(TRIAL_B, lkg_sha=None), SETTINGS)
    assert first is not None and first["lastKnownGood"] is None


def test_status_annotations_mirror_status_config() -> None:
    wanted = status_annotations(TRIAL_B, replace(SETTINGS, agent_annotation='{"version":"x"}'))
    assert wanted[names.ANN_ASSIGNED] is not None and '"uid":"uid-b"' in wanted[names.ANN_ASSIGNED]
    assert '"resourceVersion":"10"' in (wanted[names.ANN_ACTIVE] or "")
    assert wanted[names.ANN_ERROR] is None and wanted[names.ANN_AGENT] == '{"version":"x"}'


def test_a_restart_is_asked_for_once_even_when_the_agent_dies_after_asking() -> None:
    """Write-ahead: the request is saved first; its unit start time shows it was carried out."""
    obs = healthy_b(unit=UnitStatus("active", 0, started_at=None), healthy=False, configz=None)
    asking = decide(TRIAL_B_OWED, obs, settings=SETTINGS, now=T0)
    assert isinstance(asking.action, RestartKubelet) and asking.state.restart_requested_at == T0
    # the agent died after systemctl restart; the kubelet started in the same second
    started = replace(obs, unit=UnitStatus("active", 0, started_at=T0.replace(microsecond=0)))
    after = decide(asking.state, started, settings=SETTINGS, now=T0 + timedelta(seconds=5))
    assert isinstance(after.action, Wait) and after.state.restarted_at == T0
    assert after.state.restart_requested_at is None
    # the agent died before systemctl ran: the unit started long ago, so ask again
    old_start = replace(obs, unit=UnitStatus("active", 0, started_at=T0 - timedelta(hours=1)))
    again = decide(asking.state, old_start, settings=SETTINGS, now=T0 + timedelta(seconds=5))
    assert isinstance(again.action, RestartKubelet)
