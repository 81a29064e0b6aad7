"""The agent's core: one pure function from (state, observation, now) to the next step.

Why pure (the project's ``rollout.machine.decide`` and kopf's ``causes`` are the model): every
rule of the on-node rollout - when to write, restart, prove, promote, roll back or give up - is
testable as a table without a cluster, a host or a clock. The loop around it (``agent.py``)
only gathers the :class:`Observation`, persists ``Decision.state`` *before* carrying out
``Decision.action`` (so a crash in between repeats an idempotent step), emits the event and
loops.

Rules, first match wins (each a small function below):

1. the guard restored last-known-good while the agent was away -> adopt its record;
2. the desired annotation is unreadable -> report it, touch nothing;
3. the annotation is gone -> back to the base config (remove ours, restart);
4. a new assignment (uid/resourceVersion differ) -> stage it (download + validate);
5. per phase: finish a write or restart that is owed (a state reset in place of the restart when
   the orchestrator asked for one and the node is cordoned); in a trial, roll back on a crash
   loop, a missed health deadline or a failed read-back; once proven, mark active only when the
   kubelet stayed up through the health wait; promote after the trial;
6. otherwise, bring the node's status annotations up to date, or wait.

No I/O, no logging, no clock reads.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import datetime, timedelta
from typing import Literal

from rollout.agent_clock import AgentClock
from rollout.kubeletconfig.dropin import ADVERTISED_AFTER, DropinFile, advertise_after
from rollout.model import ConfigRef

from kubelet_rollout_agent import names
from kubelet_rollout_agent.readback import not_in_effect, proven_fields
from kubelet_rollout_agent.stage import Refused, Staged
from kubelet_rollout_agent.state import AgentState, Observation, Phase, ResetStep, ref_json


@dataclass(frozen=True)
class Settings:
    """The agent's knobs (CLI flags), as a value."""

    trial: timedelta = timedelta(minutes=10)  # DKC's soak before last-known-good
    health_deadline: timedelta = timedelta(minutes=2)  # restart -> healthy + proven
    health_wait: timedelta = timedelta(seconds=30)  # proven -> up this long, no restart -> active
    crash_threshold: int = 3  # automatic kubelet restarts within a trial that mean a crash loop
    agent_annotation: str = ""  # the value of kubelet-rollout.io/agent ("" = not advertised)

    def on_clock(self, time_scale: float) -> Settings:
        """These durations given on a clock ``time_scale`` times faster than the wall clock (a
        simulated host's), as the wall-clock durations the agent waits."""
        return replace(self, trial=self.trial / time_scale, health_deadline=self.health_deadline / time_scale,
                       health_wait=self.health_wait / time_scale)


# -- actions: what the loop should do next --------------------------------------------------


@dataclass(frozen=True)
class Wait:
    """Nothing to do until ``until`` (None: until the node changes)."""

    until: datetime | None = None


@dataclass(frozen=True)
class Stage:
    """Download the assigned ConfigMap, validate it for this node, keep it in the state dir."""

    ref: ConfigRef


@dataclass(frozen=True)
class WriteDropin:
    """Put ``source``'s bytes into our slot in --config-dir (atomically); expect ``sha``. First
    move the files ``set_aside`` names out of --config-dir into the state dir, and those
    ``restore`` names back (each step idempotent: a file already moved is left alone)."""

    source: Literal["staged", "last-known-good"]
    sha: str
    set_aside: tuple[str, ...] = ()
    restore: tuple[str, ...] = ()


@dataclass(frozen=True)
class RemoveDropin:
    """Take our slot out of --config-dir (and put back the files ``restore`` names)."""

    restore: tuple[str, ...] = ()


@dataclass(frozen=True)
class RestartKubelet:
    """``systemctl restart kubelet``; then record it with the unit's restart counter just after.

    The counter is read *after* the restart because systemd flushes ``NRestarts`` on a manual
    start (``flush_n_restarts``): counting from the value before would miss a crash loop.
    ``verb`` is ``start`` after a state reset stopped the kubelet.
    """

    verb: Literal["restart", "start"] = "restart"


@dataclass(frozen=True)
class ResetKubeletState:
    """``systemctl stop kubelet``, then delete ``files`` (host paths, all in
    ``names.RESETTABLE_STATE_FILES``; one already gone is fine). The start is the next step, once
    the deletion is recorded, so the files are never deleted after the kubelet started again."""

    files: tuple[str, ...]


@dataclass(frozen=True)
class Promote:
    """Copy the drop-in in trial to the last-known-good file in the state dir."""

    sha: str


@dataclass(frozen=True)
class ClearGuardRecord:
    """The guard's record was adopted: delete it so it is reported once."""


@dataclass(frozen=True)
class Report:
    """Merge-patch these node annotations (None deletes one)."""

    annotations: Mapping[str, str | None]


Action = (Wait | Stage | WriteDropin | RemoveDropin | RestartKubelet | ResetKubeletState | Promote | ClearGuardRecord
          | Report)


@dataclass(frozen=True)
class Event:
    reason: str
    message: str
    type: Literal["Normal", "Warning"] = "Normal"


@dataclass(frozen=True)
class Decision:
    """Persist ``state``, then do ``action``, then emit ``event``; ``reason`` is for the log."""

    action: Action
    state: AgentState
    reason: str
    event: Event | None = None


Rule = Callable[[AgentState, Observation, Settings, datetime], Decision | None]


# -- the status the node should show -----------------------------------------------------------


def status_annotations(state: AgentState, settings: Settings,
                       dropins_after: Sequence[DropinFile] = ()) -> dict[str, str | None]:
    """The annotations mirroring ``Node.status.config`` (None = the annotation must be absent),
    and the agent's advertisement with the files the kubelet reads after our drop-in."""
    wanted: dict[str, str | None] = {
        names.ANN_ASSIGNED: ref_json(state.assigned) if state.assigned else None,
        names.ANN_ACTIVE: ref_json(state.active) if state.active else None,
        names.ANN_LAST_KNOWN_GOOD: ref_json(state.last_known_good) if state.last_known_good else None,
        names.ANN_ERROR: state.error or None,
    }
    if settings.agent_annotation:
        wanted[names.ANN_AGENT] = advertisement(settings.agent_annotation, dropins_after)
    return wanted


def annotation_patch(state: AgentState, obs: Observation, settings: Settings) -> dict[str, str | None]:
    """Only the annotations that differ from what the node shows."""
    wanted = status_annotations(state, settings, obs.dropins_after)
    return {k: v for k, v in wanted.items() if obs.annotations.get(k) != v}


def agent_annotation(*, version: str, config_dir: str, clock: AgentClock | None = None) -> str:
    """The agent's advertisement: the orchestrator reads it to know the node can take drop-ins,
    and with ``clock`` how long the agent takes to report a config active or promoted
    (``rollout.agent_clock``: a policy whose deadline is shorter is refused before it starts)."""
    doc = {"version": version, "backend": names.BACKEND, "configDir": config_dir,
           **(clock.advertised() if clock else {})}
    return json.dumps(doc, sort_keys=True, separators=(",", ":"))


def with_backend(agent: str, *, backend: str, path: str) -> str:
    """The advertisement for the backend chosen on this node (``backend.py``): ``configDir``
    for a drop-in, ``configFile`` (the kubelet's --config) for a main file."""
    doc = {k: v for k, v in json.loads(agent).items() if k not in ("configDir", "configFile")}
    doc["backend"] = backend
    doc["configFile" if backend == names.BACKEND_MAIN_FILE else "configDir"] = path
    return json.dumps(doc, sort_keys=True, separators=(",", ":"))


def advertisement(agent: str, dropins_after: Sequence[DropinFile]) -> str:
    """``agent_annotation`` plus the drop-ins read after ours, when there are any: the
    orchestrator's review merges them the kubelet's way (``rollout.kubeletconfig.dropin``)."""
    if not dropins_after:
        return agent
    doc = {**json.loads(agent), ADVERTISED_AFTER: advertise_after(dropins_after)}
    return json.dumps(doc, sort_keys=True, separators=(",", ":"))


# -- rules -------------------------------------------------------------------------------------


def rule_guard_restored(state: AgentState, obs: Observation, settings: Settings,
                        now: datetime) -> Decision | None:
    record = obs.guard_record
    if record is None:
        return None
    restored = "the last-known-good drop-in" if record.restored == "last-known-good" else "the base config"
    line = record.journal_line or obs.last_error_line
    message = (f"kubelet failed to start {record.starts - 1} times in the trial of "
               f"{state.assigned or 'our drop-in'}; the host guard restored {restored}"
               + (f"; last kubelet error: {line}" if line else ""))
    return Decision(ClearGuardRecord(), state.with_guard_restore(message, now),
                    "adopt the guard's rollback", Event(names.EVENT_FAILED, message, "Warning"))


def rule_desired_unreadable(state: AgentState, obs: Observation, settings: Settings,
                            now: datetime) -> Decision | None:
    if not obs.desired_problem:
        return None
    if state.error != obs.desired_problem:
        return Decision(Wait(), state.with_error(obs.desired_problem), "report the unreadable annotation",
                        Event(names.EVENT_REFUSED, obs.desired_problem, "Warning"))
    return _report_or_wait(state, obs, settings, Wait(), "desired-config unreadable; waiting for a fix")


def rule_withdrawn(state: AgentState, obs: Observation, settings: Settings,
                   now: datetime) -> Decision | None:
    if obs.desired is not None or obs.desired_problem:
        return None
    if state.phase is Phase.BASE and obs.dropin_sha is None:
        return None
    if state.phase is Phase.FAILED and state.active is None and obs.dropin_sha is None:
        # refused or rolled back to the base: the kubelet already runs it, no restart needed
        return Decision(Wait(), state.with_base(now), "assignment withdrawn; the base config already runs")
    if state.phase is not Phase.REMOVING:
        return Decision(RemoveDropin(), state.with_removing(now), "assignment withdrawn: back to base")
    if obs.dropin_sha is not None:
        return Decision(RemoveDropin(), state, "remove our drop-in")
    if state.restarted_at is None:
        return _restart_or_reset(state, obs, now, "restart onto the base config", target=None)
    if obs.healthy:
        return Decision(Wait(), state.with_base(now), "back on the base config",
                        Event(names.EVENT_REMOVED, "kubelet runs its base config (drop-in removed)"))
    deadline = state.restarted_at + settings.health_deadline
    if now >= deadline and not state.error:
        message = f"kubelet not healthy on its base config {settings.health_deadline} after restart"
        return Decision(Wait(), state.with_error(message), "base config unhealthy",
                        Event(names.EVENT_FAILED, message, "Warning"))
    return _report_or_wait(state, obs, settings, Wait(deadline if now < deadline else None),
                           "waiting for the kubelet on its base config")


def rule_new_assignment(state: AgentState, obs: Observation, settings: Settings,
                        now: datetime) -> Decision | None:
    if obs.desired is None or obs.desired == state.assigned:
        return None
    return Decision(Stage(obs.desired), state, f"new assignment {obs.desired}")


def rule_write_owed(state: AgentState, obs: Observation, settings: Settings,
                    now: datetime) -> Decision | None:
    """TRIAL/REVERTING: our slot must hold ``state.dropin_sha`` before the restart, the files a
    trial sets aside must be out of --config-dir and those a revert puts back in it (also when our
    file already holds those bytes: `rollout drift --fix` writes the config a node already has)."""
    if state.phase not in (Phase.TRIAL, Phase.REVERTING):
        return None
    in_the_way = state.phase is Phase.TRIAL and any(f.path in state.set_aside for f in obs.dropins_after)
    to_put_back = state.phase is Phase.REVERTING and bool(obs.set_aside_kept)
    if obs.dropin_sha == state.dropin_sha and not in_the_way and not to_put_back:
        return None
    owed = state.with_rewrite_owed()
    if state.dropin_sha is None:
        return Decision(RemoveDropin(state.restore), owed, "restore the base config (no last-known-good)")
    if state.phase is Phase.TRIAL:
        return Decision(WriteDropin("staged", state.dropin_sha, set_aside=state.set_aside), owed,
                        "write the staged drop-in")
    return Decision(WriteDropin("last-known-good", state.dropin_sha, restore=state.restore), owed,
                    "write the last-known-good drop-in")


def rule_restart_owed(state: AgentState, obs: Observation, settings: Settings,
                      now: datetime) -> Decision | None:
    if state.phase not in (Phase.TRIAL, Phase.REVERTING) or state.restarted_at is not None:
        return None
    reason = f"restart the kubelet ({state.phase.value})"
    if state.phase is Phase.REVERTING:  # our own rollback: the orchestrator asked nothing for it
        return _restart(state, obs, now, reason, verb=_verb(state))
    return _restart_or_reset(state, obs, now, reason, target=state.assigned)


def _verb(state: AgentState) -> Literal["restart", "start"]:
    """``start`` while a state reset left the kubelet stopped with its files deleted."""
    return "start" if state.reset is not None and state.reset.step is ResetStep.DELETED else "restart"


def _applying(target: ConfigRef | None) -> str:
    return str(target) if target is not None else "the base config"


def reset_problem(files: tuple[str, ...], obs: Observation) -> str:
    """Why a state reset must not be done on this node now ("" when it may)."""
    if not obs.unschedulable:
        return "state reset refused: the node is not cordoned (spec.unschedulable), so pods may still run on it"
    if not files:
        return "state reset refused: it names no file"
    others = [f for f in files if f not in names.RESETTABLE_STATE_FILES]
    if others:
        return (f"state reset refused: {', '.join(others)} is not a kubelet checkpoint the agent deletes "
                f"(only {', '.join(names.RESETTABLE_STATE_FILES)})")
    return ""


def _restart_or_reset(state: AgentState, obs: Observation, now: datetime, reason: str, *,
                      target: ConfigRef | None) -> Decision:
    """The restart that applies ``target`` (None: the base config), or in its place a state reset:
    stop the kubelet, delete the checkpoint files the orchestrator names, start it. Only when its
    ``state-reset`` annotation is for ``target`` and the node is cordoned; once per (rollout,
    target). A refused reset leaves the plain restart, as without the annotation: a kubelet that
    then refuses to start is rolled back like any crash loop."""
    record = state.reset
    if state.restart_requested_at is not None or (record is not None and record.step is ResetStep.DELETED):
        return _restart(state, obs, now, "start the kubelet after its state reset" if _verb(state) == "start"
                        else reason, verb=_verb(state))
    request = obs.state_reset
    if record is not None and record.step is ResetStep.STOPPING:
        # the agent stopped before it recorded the deletion: delete again only while the kubelet has
        # not started since the reset began (after a start it may hold files under the new policy)
        started = obs.unit.started_at
        if record.at is not None and started is not None and started >= record.at.replace(microsecond=0):
            why = "the kubelet was started by someone else during the state reset; its files are not deleted again"
        elif request is None or not record.handles(request.rollout, request.desired):
            why = "the state reset under way was withdrawn (annotation removed or changed); not deleting"
        else:
            why = reset_problem(record.files, obs)
        if why:
            return Decision(Wait(), state.with_reset_skipped(why), "state reset not carried on",
                            Event(names.EVENT_STATE_RESET_REFUSED, why, "Warning"))
        return Decision(ResetKubeletState(record.files), state,
                        "state reset: stop the kubelet and delete its files (it has not started since)",
                        _reset_event(record.rollout, record.files, record.desired))
    if obs.state_reset_problem:
        if record is not None and record.step is ResetStep.REFUSED and record.handles("", target):
            return _restart(state, obs, now, reason)
        why = f"state reset refused: {obs.state_reset_problem}"
        return Decision(Wait(), state.with_reset_refused("", target, (), why, now), "state reset refused",
                        Event(names.EVENT_STATE_RESET_REFUSED, f"{why}; applying {_applying(target)} with a "
                              "plain restart", "Warning"))
    if request is None or request.desired != target or (record is not None
                                                        and record.handles(request.rollout, target)):
        return _restart(state, obs, now, reason)
    why = reset_problem(request.files, obs)
    if why:
        return Decision(Wait(), state.with_reset_refused(request.rollout, target, request.files, why, now),
                        "state reset refused",
                        Event(names.EVENT_STATE_RESET_REFUSED, f"{why}; applying {_applying(target)} with a plain "
                              "restart (a kubelet that refuses its checkpoint crash-loops and is rolled back)",
                              "Warning"))
    return Decision(ResetKubeletState(request.files), state.with_reset_requested(request, now),
                    f"state reset of rollout {request.rollout}: stop the kubelet, delete "
                    f"{', '.join(request.files)}, start it onto {_applying(target)}",
                    _reset_event(request.rollout, request.files, target))


def _reset_event(rollout: str, files: tuple[str, ...], target: ConfigRef | None) -> Event:
    """Emitted once the files are gone, before the start (the agent adds which were already absent)."""
    return Event(names.EVENT_STATE_RESET, f"state reset of rollout {rollout}, applying {_applying(target)}: "
                 f"kubelet stopped, deleted {', '.join(files)}; starting the kubelet")


def _restart(state: AgentState, obs: Observation, now: datetime, reason: str,
             verb: Literal["restart", "start"] = "restart") -> Decision:
    """Restart once: a restart asked for before the agent died shows in the unit's start time.

    systemd's ExecMainStartTimestamp has whole seconds, so a start in the same second as the
    request counts as ours; a kubelet started then by someone else already read the written
    drop-in, which is all the restart was for.
    """
    asked = state.restart_requested_at
    started = obs.unit.started_at
    if asked is not None and started is not None and started >= asked.replace(microsecond=0):
        return Decision(Wait(), state.with_restarted(asked, obs.unit.n_restarts),
                        "the kubelet was restarted before the agent last stopped; not again")
    return Decision(RestartKubelet(verb), state.with_restart_requested(now), reason)


def rule_lkg_copy_owed(state: AgentState, obs: Observation, settings: Settings,
                      now: datetime) -> Decision | None:
    """A promotion was recorded but its copy did not land (the agent died in between)."""
    if state.lkg_sha is None or obs.lkg_sha == state.lkg_sha or obs.dropin_sha != state.lkg_sha:
        return None
    return Decision(Promote(state.lkg_sha), state, "finish copying the last-known-good drop-in")


def rule_reverted(state: AgentState, obs: Observation, settings: Settings,
                  now: datetime) -> Decision | None:
    if state.phase is not Phase.REVERTING:
        return None
    return Decision(Wait(), state.with_reverted(now), "last-known-good restored")


def restarts_since(state: AgentState, obs: Observation) -> int:
    """Automatic kubelet restarts since our restart; a counter below the baseline was flushed
    (a manual start by someone else), so it counts from zero."""
    n = obs.unit.n_restarts
    return n - state.restart_baseline if n >= state.restart_baseline else n


def _revert(state: AgentState, problem: str, now: datetime, *, log_line: str = "") -> Decision:
    """Roll back; the message says what was wrong, what the node returns to, and the kubelet's
    own last error line (it tells a bad config, to halt on, from a sick node)."""
    back_to = (f"restored the last-known-good config {state.last_known_good}" if state.last_known_good
               else "returned to the base config")
    message = f"{problem}; {back_to}" + (f"; last kubelet error: {log_line}" if log_line else "")
    return Decision(Wait(), state.with_reverting(message, now), "roll back",
                    Event(names.EVENT_FAILED, message, "Warning"))


def _not_in_effect_message(dropin: Mapping[str, object], missing: list[str]) -> str:
    fields = proven_fields(dropin)
    # one field missing is most likely a flag; several and none in effect, a kubelet that does
    # not read our directory at all
    nothing = len(fields) > 1 and {m.split(".")[0] for m in missing} >= set(fields)
    hint = "; none of them is: does the kubelet run with --config-dir set to our directory?" if nothing else ""
    return (f"drop-in fields not in effect on the running kubelet: {', '.join(missing)} (overridden "
            f"by a command-line flag, or ignored by this kubelet version{hint})")


def rule_trial_failed(state: AgentState, obs: Observation, settings: Settings,
                      now: datetime) -> Decision | None:
    if state.phase is not Phase.TRIAL or state.restarted_at is None:
        return None
    restarts = restarts_since(state, obs)
    if restarts >= settings.crash_threshold or obs.unit.active_state == "failed":
        how = "failed" if obs.unit.active_state == "failed" else "crash-looping"
        return _revert(state, f"kubelet {how} on {state.assigned} ({restarts} restarts in the trial)",
                       now, log_line=obs.last_error_line)
    if state.proven_at is not None:
        return None
    if obs.healthy and obs.configz is not None:
        missing = not_in_effect(obs.dropin or {}, obs.configz)
        if missing:
            return _revert(state, _not_in_effect_message(obs.dropin or {}, missing), now)
        return None
    if now >= state.restarted_at + settings.health_deadline:
        return _revert(state, f"kubelet not healthy {settings.health_deadline} after restarting onto "
                       f"{state.assigned} (unit {obs.unit.active_state or 'unknown'})",
                       now, log_line=obs.last_error_line)
    return None


def rule_stay_up(state: AgentState, obs: Observation, settings: Settings, now: datetime) -> Decision | None:
    """Proven is not active: a kubelet may live its first seconds on a config and then crash (a
    host it cannot run on). Active once it has been up ``health_wait`` with no restart, whatever
    soak the orchestrator's policy asks for; a restart or a failed healthz starts the wait again."""
    if (state.phase is not Phase.TRIAL or state.restarted_at is None or state.proven_at is None
            or state.active_at is not None):
        return None
    restarts = restarts_since(state, obs)
    if obs.healthy and (state.up_since is None or restarts != state.up_restarts):
        return Decision(Wait(), state.with_up_since(now, restarts), "kubelet up again: its health wait starts over")
    if not obs.healthy and state.up_since is not None:
        return Decision(Wait(), state.with_up_since(None, restarts), "kubelet went down during its health wait")
    if obs.healthy and state.up_since is not None:
        ends = state.up_since + settings.health_wait
        if now >= ends:
            return Decision(Wait(), state.with_active(now), "stayed up through the health wait",
                            Event(names.EVENT_ACTIVE, f"kubelet runs {state.assigned} (read back from configz, "
                                  f"up for {settings.health_wait} without a restart)"))
        return _report_or_wait(state, obs, settings, Wait(ends), "health wait: the kubelet must stay up")
    deadline = state.restarted_at + settings.health_deadline + settings.health_wait
    if now >= deadline:
        return _revert(state, f"kubelet did not stay up for {settings.health_wait} on {state.assigned} within "
                       f"{settings.health_deadline + settings.health_wait} of the restart "
                       f"(unit {obs.unit.active_state or 'unknown'})", now, log_line=obs.last_error_line)
    return _report_or_wait(state, obs, settings, Wait(deadline), "health wait: the kubelet is down")


def rule_trial_progress(state: AgentState, obs: Observation, settings: Settings,
                        now: datetime) -> Decision | None:
    if state.phase is not Phase.TRIAL or state.restarted_at is None:
        return None
    if state.proven_at is None:
        if obs.healthy and obs.configz is not None:  # rule_trial_failed found nothing missing
            return Decision(Wait(), state.with_proven(now, restarts_since(state, obs)),
                            "read-back proof passed; the health wait starts")
        return _report_or_wait(state, obs, settings, Wait(state.restarted_at + settings.health_deadline),
                               "waiting for the kubelet to become healthy")
    ends = state.restarted_at + settings.trial
    if now >= ends and obs.healthy and state.dropin_sha is not None:
        return Decision(Promote(state.dropin_sha), state.with_promoted(now), "trial passed",
                        Event(names.EVENT_PROMOTED, f"{state.assigned} is the last-known-good config"))
    return _report_or_wait(state, obs, settings, Wait(ends if now < ends else None), "in trial")


def _report_or_wait(state: AgentState, obs: Observation, settings: Settings, wait: Wait,
                    reason: str) -> Decision:
    patch = annotation_patch(state, obs, settings)
    if patch:
        return Decision(Report(patch), state, "update the node's status annotations")
    return Decision(wait, state, reason)


RULES: tuple[Rule, ...] = (
    rule_guard_restored,
    rule_desired_unreadable,
    rule_withdrawn,
    rule_new_assignment,
    rule_write_owed,
    rule_restart_owed,
    rule_lkg_copy_owed,
    rule_reverted,
    rule_trial_failed,
    rule_stay_up,
    rule_trial_progress,
)


def decide(state: AgentState, obs: Observation, *, settings: Settings, now: datetime) -> Decision:
    """The next step for this node. Pure: same inputs, same decision."""
    for rule in RULES:
        decision = rule(state, obs, settings, now)
        if decision is not None:
            return decision
    return _report_or_wait(state, obs, settings, Wait(), f"steady ({state.phase.value})")


def after_stage(state: AgentState, outcome: Staged | Refused, *, now: datetime) -> Decision:
    """The state (and event) once a Stage action produced its outcome."""
    if isinstance(outcome, Refused):
        return Decision(Wait(), state.with_refused(outcome.ref, outcome.message, now), "refused",
                        Event(names.EVENT_REFUSED, outcome.message, "Warning"))
    aside = (f"; setting aside {', '.join(outcome.set_aside)} (read after ours, overriding it) into "
             f"{names.SET_ASIDE_DIR}/ of the agent's state dir" if outcome.set_aside else "")
    return Decision(WriteDropin("staged", outcome.sha, set_aside=outcome.set_aside),
                    state.with_staged(outcome.ref, outcome.sha, now, outcome.set_aside), "staged",
                    Event(names.EVENT_ASSIGNED, f"writing {outcome.ref} as drop-in {names.DROPIN_NAME}{aside}"))


def guard_trial(state: AgentState, settings: Settings) -> dict[str, object] | None:
    """The trial the host guard must watch (its ``guard-trial.json``), or None outside a trial.

    The file exists from staging on, so the guard counts the very first start onto the new
    drop-in whether or not the agent lived to ask for it. Its window is a length, not an end:
    the guard opens it at that first start, however late (a reboot hours after an agent died
    between the write and the restart), and keeps it as long as the agent's own trial can last.
    """
    if state.phase is not Phase.TRIAL or state.dropin_sha is None or state.since is None:
        return None
    window = settings.health_deadline + settings.health_wait + settings.trial
    return {
        "trial": f"{state.dropin_sha[:16]}@{state.since.isoformat()}",
        "dropinSha": state.dropin_sha,
        "lastKnownGood": names.LKG_FILE if state.lkg_sha else None,
        "lastKnownGoodSha": state.lkg_sha,
        "windowSeconds": window.total_seconds(),
        "threshold": settings.crash_threshold,
    }
