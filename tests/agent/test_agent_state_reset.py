"""The state reset: kubelet checkpoint files deleted between a stop and a start, when the
orchestrator asks for it (annotation ``state-reset``) on a cordoned node.

The rules are decide's (pure, as a table of situations); the last tests pin what the loop does on
the host: the stop before any delete, only allow-listed files, the start as its own step.
"""

from __future__ import annotations

import json
from dataclasses import replace
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from rollout import names as shared_names
from rollout.kubeletconfig.disruption import load_disruption_catalogue
from rollout.model import ConfigRef

from agent_fakes import T0, FakeHost, FakeNodeApi
from kubelet_rollout_agent import names
from kubelet_rollout_agent.agent import Agent
from kubelet_rollout_agent.decide import (
    RemoveDropin,
    ResetKubeletState,
    RestartKubelet,
    Settings,
    Wait,
    decide,
)
from kubelet_rollout_agent.install import Layout
from kubelet_rollout_agent.state import (
    AgentState,
    Observation,
    Phase,
    ResetStep,
    StateResetRequest,
    UnitStatus,
    load_state,
    dump_state,
    parse_state_reset,
)

A = ConfigRef("kube-system", "kc-a", "kubelet", "uid-a", "10")
B = ConfigRef("kube-system", "kc-b", "kubelet", "uid-b", "20")
SETTINGS = Settings()
CPU = "/var/lib/kubelet/cpu_manager_state"
MEMORY = "/var/lib/kubelet/memory_manager_state"
LONG_AGO = T0 - timedelta(hours=1)
# B written to our slot, the restart that applies it owed
TRIAL_B_OWED = AgentState(phase=Phase.TRIAL, assigned=B, active=A, last_known_good=A, dropin_sha="sha-b",
                          lkg_sha="sha-a", since=T0 - timedelta(seconds=5))
REMOVING = AgentState(phase=Phase.REMOVING, since=T0 - timedelta(seconds=5))


def ask(desired: ConfigRef | None = B, files: tuple[str, ...] = (CPU,), rollout: str = "cpu-static") -> StateResetRequest:
    return StateResetRequest(rollout, files, desired)


def seen(request: StateResetRequest | None, *, cordoned: bool = True, desired: ConfigRef | None = B,
         **kwargs: Any) -> Observation:
    defaults: dict[str, Any] = dict(dropin_sha="sha-b" if desired else None, lkg_sha="sha-a" if desired else None,
                                    unit=UnitStatus("active", 0, started_at=LONG_AGO))
    return Observation(desired=desired, unschedulable=cordoned, state_reset=request, **{**defaults, **kwargs})


def step(state: AgentState, obs: Observation) -> Any:
    return decide(state, obs, settings=SETTINGS, now=T0)


# -- the annotation -----------------------------------------------------------------------------


def desired_json(ref: ConfigRef) -> dict[str, str]:
    """The desired-config annotation's own JSON (the orchestrator's rollout.gateway spelling)."""
    return {"namespace": ref.namespace, "name": ref.name, "uid": ref.uid or "",
            "resourceVersion": ref.resource_version or "", "key": ref.kubelet_config_key}


def test_the_annotation_names_its_assignment_by_the_desired_config_json() -> None:
    text = json.dumps({"rollout": "cpu-static", "files": [CPU, MEMORY, CPU], "desired": desired_json(B)})
    assert parse_state_reset(text) == (StateResetRequest("cpu-static", (CPU, MEMORY), B), "")
    back = json.dumps({"rollout": "cpu-static", "files": [CPU], "desired": None})
    assert parse_state_reset(back) == (StateResetRequest("cpu-static", (CPU,), None), "")
    assert parse_state_reset(None) == (None, "")


@pytest.mark.parametrize("text", [
    "not json",
    json.dumps({"rollout": "r", "files": [CPU]}),  # desired must be said, null for the base
    json.dumps({"rollout": "", "files": [CPU], "desired": None}),
    json.dumps({"rollout": "r", "files": [CPU], "desired": "kubelet"}),  # the data key alone names no assignment
], ids=["not JSON", "no desired", "no rollout", "desired as a bare key"])
def test_an_unreadable_annotation_is_a_problem_not_a_request(text: str) -> None:
    request, problem = parse_state_reset(text)
    assert request is None and names.ANN_STATE_RESET in problem


def test_the_names_are_the_orchestrators() -> None:
    assert names.ANN_STATE_RESET == shared_names.ANN_STATE_RESET == "kubelet-rollout.io/state-reset"
    assert names.ANN_CORDONED_BY == shared_names.ANN_CORDONED_BY == "kubelet-rollout.io/cordoned-by"


def test_every_checkpoint_the_catalogue_names_is_one_the_agent_may_delete() -> None:
    catalogue = load_disruption_catalogue()
    assert {catalogue.state_path(name) for name in catalogue.state_files} <= set(names.RESETTABLE_STATE_FILES)


# -- decide -------------------------------------------------------------------------------------


CASES = [
    pytest.param(TRIAL_B_OWED, seen(ask()), ResetKubeletState, ResetStep.STOPPING,
                 id="cordoned, asked for this assignment: stop, delete, then start (not a restart)"),
    pytest.param(TRIAL_B_OWED, seen(None), RestartKubelet, None,
                 id="no annotation: a plain restart, as before"),
    pytest.param(TRIAL_B_OWED, seen(ask(A)), RestartKubelet, None,
                 id="asked for another assignment: a plain restart"),
    pytest.param(TRIAL_B_OWED, seen(ask(None)), RestartKubelet, None,
                 id="asked for the way back to the base, while applying an assignment: a plain restart"),
    pytest.param(TRIAL_B_OWED, seen(ask(), cordoned=False), Wait, ResetStep.REFUSED,
                 id="not cordoned: refused and recorded (then a plain restart)"),
    pytest.param(TRIAL_B_OWED, seen(ask(files=(CPU, "/etc/kubernetes/kubelet.conf"))), Wait, ResetStep.REFUSED,
                 id="a file outside the allow-list: the whole reset is refused"),
    pytest.param(TRIAL_B_OWED, seen(ask(files=("/var/lib/kubelet/../kubelet/cpu_manager_state",))), Wait,
                 ResetStep.REFUSED, id="another spelling of an allowed path is refused"),
    pytest.param(TRIAL_B_OWED, seen(ask(files=())), Wait, ResetStep.REFUSED,
                 id="a reset naming no file is refused"),
    pytest.param(TRIAL_B_OWED, seen(None, state_reset_problem="unreadable"), Wait, ResetStep.REFUSED,
                 id="an unreadable annotation: refused, said once"),
    pytest.param(REMOVING, seen(ask(None), desired=None), ResetKubeletState, ResetStep.STOPPING,
                 id="withdrawal asked with desired null: reset on the way back to the base"),
    pytest.param(REMOVING, seen(ask(B), desired=None), RestartKubelet, None,
                 id="withdrawal while the annotation is for the assignment: a plain restart"),
    pytest.param(TRIAL_B_OWED.with_reverting("boom", T0), seen(ask(), dropin_sha="sha-a"), RestartKubelet, None,
                 id="the agent's own rollback never resets (the orchestrator asked nothing for it)"),
]


@pytest.mark.parametrize(("state", "obs", "action", "step_after"), CASES)
def test_rules(state: AgentState, obs: Observation, action: type, step_after: ResetStep | None) -> None:
    decision = step(state, obs)
    assert isinstance(decision.action, action), decision
    assert (decision.state.reset.step if decision.state.reset else None) is step_after, decision


def test_a_reset_names_the_files_in_its_action_and_event() -> None:
    decision = step(TRIAL_B_OWED, seen(ask(files=(CPU, MEMORY))))
    assert decision.action == ResetKubeletState((CPU, MEMORY))
    assert decision.state.reset is not None and decision.state.reset.at == T0  # written before the stop
    assert decision.state.restarted_at is None and decision.state.restart_requested_at is None
    assert decision.event is not None and decision.event.reason == names.EVENT_STATE_RESET
    assert CPU in decision.event.message and MEMORY in decision.event.message and "cpu-static" in decision.event.message


def test_not_cordoned_says_why_and_then_applies_with_a_plain_restart() -> None:
    refused = step(TRIAL_B_OWED, seen(ask(), cordoned=False))
    assert refused.event is not None and refused.event.reason == names.EVENT_STATE_RESET_REFUSED
    assert refused.event.type == "Warning" and "not cordoned" in refused.event.message
    assert "not cordoned" in refused.state.error  # the config-error annotation says it too
    then = step(refused.state, seen(ask(), cordoned=False))
    assert then.action == RestartKubelet("restart") and then.event is None
    # cordoned a moment later: still once per (rollout, desired), no delete now
    assert step(refused.state, seen(ask())).action == RestartKubelet("restart")


def test_the_refusal_error_is_cleared_by_the_proof() -> None:
    refused = step(TRIAL_B_OWED, seen(ask(), cordoned=False)).state
    running = replace(refused, restarted_at=T0 - timedelta(seconds=10))
    proven = step(running, seen(ask(), cordoned=False, healthy=True, dropin={"maxPods": 50},
                                configz={"kubeletconfig": {"maxPods": 50}}))
    assert proven.state.proven_at == T0 and proven.state.error == ""


def test_after_the_delete_only_the_start_is_owed_and_then_the_reset_is_done() -> None:
    asked = step(TRIAL_B_OWED, seen(ask())).state
    deleted = asked.with_reset_deleted()
    # the kubelet is stopped: start it (never delete again), write-ahead as a restart is
    stopped = seen(ask(), unit=UnitStatus("inactive", 0, started_at=LONG_AGO))
    start = step(deleted, stopped)
    assert start.action == RestartKubelet("start") and start.state.restart_requested_at == T0
    done = start.state.with_restarted(T0, 0)
    assert done.reset is not None and done.reset.step is ResetStep.DONE
    # the same request seen again (a rewrite of our drop-in owes a restart): a plain restart
    again = step(replace(done, restarted_at=None), seen(ask()))
    assert again.action == RestartKubelet("restart")


def test_killed_after_the_start_the_agent_records_it_and_deletes_nothing() -> None:
    deleted = step(TRIAL_B_OWED, seen(ask())).state.with_reset_deleted()
    start = step(deleted, seen(ask(), unit=UnitStatus("inactive", 0, started_at=LONG_AGO)))
    # the agent died after systemctl start: the unit started after the request
    up = seen(ask(), unit=UnitStatus("active", 0, started_at=T0.replace(microsecond=0)))
    after = decide(start.state, up, settings=SETTINGS, now=T0 + timedelta(seconds=3))
    assert isinstance(after.action, Wait) and after.state.restarted_at == T0
    assert after.state.reset is not None and after.state.reset.step is ResetStep.DONE


def test_killed_between_the_stop_and_the_record_of_the_delete() -> None:
    """The record says STOPPING: the files may or may not be gone, the kubelet has not started since
    (its last start is before the reset began): stopping and deleting again is harmless."""
    asked = step(TRIAL_B_OWED, seen(ask())).state
    stopped = seen(ask(), unit=UnitStatus("inactive", 0, started_at=LONG_AGO))
    again = decide(asked, stopped, settings=SETTINGS, now=T0 + timedelta(seconds=3))
    assert again.action == ResetKubeletState((CPU,)) and again.state == asked
    assert again.event is not None and again.event.reason == names.EVENT_STATE_RESET


def test_a_kubelet_started_by_someone_else_during_the_reset_is_never_deleted_under() -> None:
    asked = step(TRIAL_B_OWED, seen(ask())).state
    started = seen(ask(), unit=UnitStatus("active", 0, started_at=(T0 + timedelta(seconds=2)).replace(microsecond=0)))
    skipped = decide(asked, started, settings=SETTINGS, now=T0 + timedelta(seconds=3))
    assert isinstance(skipped.action, Wait) and skipped.state.reset is not None
    assert skipped.state.reset.step is ResetStep.REFUSED and "started by someone else" in skipped.state.reset.why
    assert skipped.event is not None and skipped.event.type == "Warning"
    assert step(skipped.state, started).action == RestartKubelet("restart")


@pytest.mark.parametrize(("obs", "why"), [
    (seen(ask(), cordoned=False, unit=UnitStatus("inactive", 0, started_at=LONG_AGO)), "not cordoned"),
    (seen(None, unit=UnitStatus("inactive", 0, started_at=LONG_AGO)), "withdrawn"),
], ids=["uncordoned meanwhile", "annotation removed meanwhile"])
def test_a_reset_cut_short_is_not_carried_on_once_its_conditions_are_gone(obs: Observation, why: str) -> None:
    asked = step(TRIAL_B_OWED, seen(ask())).state
    skipped = decide(asked, obs, settings=SETTINGS, now=T0 + timedelta(seconds=3))
    assert isinstance(skipped.action, Wait) and skipped.state.reset is not None
    assert skipped.state.reset.step is ResetStep.REFUSED and why in skipped.state.reset.why
    # the kubelet may be stopped: the plain restart starts it
    assert isinstance(step(skipped.state, obs).action, RestartKubelet)


def test_the_record_survives_the_return_to_the_base_and_the_state_file() -> None:
    done = replace(step(TRIAL_B_OWED, seen(ask())).state.with_reset_deleted().with_restarted(T0, 0))
    removing = step(done, seen(None, desired=None, dropin_sha="sha-b"))
    assert isinstance(removing.action, RemoveDropin) and removing.state.reset == done.reset
    assert load_state(dump_state(removing.state)) == removing.state


def test_the_way_back_to_the_base_is_its_own_reset() -> None:
    done = step(TRIAL_B_OWED, seen(ask())).state.with_reset_deleted().with_restarted(T0, 0)
    removing = replace(done.with_removing(T0), restarted_at=None)
    back = step(removing, seen(ask(None), desired=None))
    assert back.action == ResetKubeletState((CPU,)) and back.state.reset is not None
    assert back.state.reset.desired is None and back.state.reset.step is ResetStep.STOPPING


# -- the loop on the host -----------------------------------------------------------------------


class StoppableHost(FakeHost):
    """FakeHost with ``stop``/``start``; whether the kubelet ran when each file went."""

    def __init__(self, root: Path, *, stop_fails: bool = False) -> None:
        super().__init__(root)
        self.stop_fails = stop_fails
        self.deleted_while_running: list[bool] = []

    def systemctl(self, *args: str) -> Any:
        from kubelet_rollout_agent.host import CommandResult

        if args[:1] == ("stop",):
            self.commands.append(args)
            if self.stop_fails:
                return CommandResult(1, "", "Job for kubelet.service canceled.")
            self.running = None
            return CommandResult(0)
        if args[:1] == ("start",):
            self.commands.append(args)
            self.start()
            return CommandResult(0)
        return super().systemctl(*args)


def _agent(host: FakeHost) -> Agent:
    return Agent(api=FakeNodeApi(), host=host, layout=Layout(), settings=SETTINGS)  # type: ignore[arg-type]


def _checkpoint(host: FakeHost, path: str) -> Path:
    file = host.path(path)
    file.parent.mkdir(parents=True, exist_ok=True)
    file.write_text('{"policyName":"none","checksum":0}')
    return file


def test_the_agent_stops_the_kubelet_then_deletes_through_the_host_root(tmp_path: Path) -> None:
    host = StoppableHost(tmp_path)
    cpu = _checkpoint(host, CPU)
    keep = _checkpoint(host, "/var/lib/kubelet/config.yaml.bak")
    agent = _agent(host)
    state = step(TRIAL_B_OWED, seen(ask(files=(CPU, MEMORY)))).state
    after, event = agent.act(step(TRIAL_B_OWED, seen(ask(files=(CPU, MEMORY)))))
    assert host.commands[-1] == ("stop", "kubelet") and host.running is None
    assert not cpu.exists() and keep.exists()
    assert after == state.with_reset_deleted()
    assert event is not None and f"already absent: {MEMORY}" in event.message


def test_a_failed_stop_deletes_nothing(tmp_path: Path) -> None:
    host = StoppableHost(tmp_path, stop_fails=True)
    cpu = _checkpoint(host, CPU)
    with pytest.raises(RuntimeError, match="nothing deleted"):
        _agent(host).act(step(TRIAL_B_OWED, seen(ask())))
    assert cpu.exists()


def test_the_agent_itself_refuses_a_path_outside_the_allow_list(tmp_path: Path) -> None:
    """decide refuses it first; the loop checks again, the last step before a delete."""
    host = StoppableHost(tmp_path)
    other = _checkpoint(host, "/etc/kubernetes/kubelet.conf")
    decision = replace(step(TRIAL_B_OWED, seen(ask())), action=ResetKubeletState(("/etc/kubernetes/kubelet.conf",)))
    with pytest.raises(RuntimeError, match="refusing to delete"):
        _agent(host).act(decision)
    assert other.exists() and ("stop", "kubelet") not in host.commands


def test_the_start_after_a_reset_is_systemctl_start(tmp_path: Path) -> None:
    host = StoppableHost(tmp_path)
    agent = _agent(host)
    deleted = step(TRIAL_B_OWED, seen(ask())).state.with_reset_deleted()
    decision = step(deleted, seen(ask(), unit=UnitStatus("inactive", 0, started_at=LONG_AGO)))
    state, _ = agent.act(decision)
    assert host.commands[0] == ("start", "kubelet") and host.running is not None
    assert state.reset is not None and state.reset.step is ResetStep.DONE
