"""The agent's loop: observe the node and its host, decide, persist, act, report.

Why so thin: every rule lives in the pure :func:`~kubelet_rollout_agent.decide.decide`. This
module only gathers the :class:`~kubelet_rollout_agent.state.Observation`, writes
``Decision.state`` to the state dir *before* carrying out the action (a killed agent repeats an
idempotent step when it comes back), emits the decision's event and waits on a watch of its own
Node, so an assignment is picked up at once without polling the API server.

Logging: ``logging.getLogger("kubelet_rollout_agent")``; every line starts with ``node NAME:``.
"""

from __future__ import annotations

import json
import logging
import stat
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

from rollout.errors import GatewayError, NotFoundError
from rollout.kubeletconfig import export_from_configz
from rollout.kubeletconfig.dropin import DropinFile
from rollout.model import ConfigRef

from kubelet_rollout_agent import failpoint, names
from kubelet_rollout_agent.api import NodeApi
from kubelet_rollout_agent.backend import KubeletFiles, choose, read_unit
from kubelet_rollout_agent.atomic import atomic_remove, atomic_write, read_bytes
from kubelet_rollout_agent.configdir import read_dropins, read_dropins_after
from kubelet_rollout_agent.decide import (
    ClearGuardRecord,
    Decision,
    Event,
    Promote,
    RemoveDropin,
    Report,
    ResetKubeletState,
    RestartKubelet,
    Settings,
    Stage,
    Wait,
    WriteDropin,
    after_stage,
    decide,
    guard_trial,
    with_backend,
)
from kubelet_rollout_agent.host import Host, last_error_line, unit_status
from kubelet_rollout_agent.install import Layout, install_guard
from kubelet_rollout_agent.merge import changed_fields, load_document
from kubelet_rollout_agent.stage import Refused, Staged, as_main_file, content_sha, stage
from kubelet_rollout_agent.state import (
    AgentState,
    GuardRecord,
    Observation,
    Phase,
    UnitStatus,
    dump_state,
    load_state,
    parse_desired,
    parse_state_reset,
)

logger = logging.getLogger("kubelet_rollout_agent")

_ACTIVE_PHASES = (Phase.TRIAL, Phase.REVERTING, Phase.REMOVING)


def _mode_of(path: Path) -> int:
    """A file's permission bits, kept when the agent moves it (0644 when it is gone meanwhile)."""
    try:
        return stat.S_IMODE(path.stat().st_mode)
    except OSError:
        return 0o644


def _utcnow() -> datetime:
    return datetime.now(timezone.utc)


@dataclass(frozen=True)
class Timing:
    """How often the loop looks: ``tick`` while a restart is being watched, ``resync`` otherwise."""

    tick: timedelta = timedelta(seconds=5)
    resync: timedelta = timedelta(minutes=5)
    retry: timedelta = timedelta(seconds=10)

    def on_clock(self, time_scale: float) -> Timing:
        """``tick`` and ``resync`` given on the host's clock (``Settings.on_clock``), as wall-clock
        waits. ``retry`` stays wall-clock: it waits out an API server or a host that failed a
        request, real processes whatever the clock of the kubelets."""
        return replace(self, tick=self.tick / time_scale, resync=self.resync / time_scale)


class Agent:
    """One node's agent. ``run()`` until ``stop`` is set; ``step()`` does one decision."""

    def __init__(self, *, api: NodeApi, host: Host, layout: Layout, settings: Settings,
                 timing: Timing = Timing(), now: Callable[[], datetime] = _utcnow) -> None:
        self.api = api
        self.host = host
        self.layout = layout
        self.settings = settings
        self.timing = timing
        self._now = now
        self.node = host.node
        self.state = AgentState()
        self._node_rv = ""
        self._node: dict[str, Any] | None = None
        self._node_unchanged = False  # the last watch saw no change since the node was read

    # -- files -----------------------------------------------------------------------------

    def _state_file(self, name: str) -> Path:
        return self.host.path(self.layout.state(name))

    @property
    def _dropin(self) -> Path:
        """Our slot: the drop-in, or (main-file backend) the kubelet's --config file."""
        return self.host.path(self.layout.slot)

    def _original(self) -> bytes | None:
        """Main-file backend: the base config as it was before the agent wrote it."""
        return read_bytes(self._state_file(names.ORIGINAL_FILE)) if self.layout.main_file else None

    # -- which backend ---------------------------------------------------------------------

    def kubelet_files(self) -> KubeletFiles | None:
        """What this node's kubelet reads, from its unit on the host and its version on the
        Node; None when the host has no kubelet unit to read (the layout stays as given)."""
        unit = read_unit(self.host.root)
        if unit is None:
            return None
        info = (self.api.get_node().get("status") or {}).get("nodeInfo") or {}
        return choose(unit, str(info.get("kubeletVersion", "")))

    def adopt_backend(self) -> None:
        """Write where this kubelet reads: its drop-in directory, or its --config file (the
        layout's ``backend`` "auto"; else as given). A host without a readable kubelet unit keeps
        the flags' drop-in directory."""
        if self.layout.backend != names.BACKEND_AUTO:
            files = None
        elif (files := self.kubelet_files()) is None:
            self.layout = replace(self.layout, backend=names.BACKEND_DROPIN)
        if files is not None:
            layout = replace(self.layout, backend=files.backend,
                             base_config=files.config or self.layout.base_config,
                             config_dir=files.config_dir or self.layout.config_dir)
            if layout != self.layout:
                logger.info("node %s: backend %s: %s", self.node, files.backend, files.why)
            self.layout = layout
        if self.settings.agent_annotation:
            where = self.layout.base_config if self.layout.main_file else self.layout.config_dir
            self.settings = replace(self.settings, agent_annotation=with_backend(
                self.settings.agent_annotation, backend=self.layout.backend, path=where))

    def load(self) -> AgentState:
        """The saved state; protect a trial the agent died in (unless the guard already acted)."""
        self.state = load_state(read_bytes(self._state_file(names.STATE_FILE)))
        if read_bytes(self._state_file(names.GUARD_RECORD_FILE)) is None:
            self._sync_guard_trial(self.state)
        return self.state

    def persist(self, state: AgentState) -> None:
        """Write-ahead: the state first, then the guard's view of it, only when it changed."""
        if state == self.state:
            return
        atomic_write(self._state_file(names.STATE_FILE), dump_state(state), mode=0o600)
        self._sync_guard_trial(state)
        self.state = state

    def _sync_guard_trial(self, state: AgentState) -> None:
        if state.phase is Phase.REVERTING:
            # keep the trial's guard until last-known-good is back: if the agent dies mid-revert,
            # the crash-looping kubelet must still be rescued (the guard leaves a drop-in that
            # is no longer the one in trial alone)
            return
        trial = guard_trial(state, self.settings)
        path = self._state_file(names.GUARD_TRIAL_FILE)
        if trial is None:
            atomic_remove(path)
            return
        trial["file"] = self.layout.slot  # what the guard restores, whatever its unit's flags say
        if self.layout.main_file:  # no last-known-good: the base config back, not "ours removed"
            trial["baseFile"] = names.ORIGINAL_FILE
        data = json.dumps(trial, sort_keys=True).encode()
        if read_bytes(path) != data:
            atomic_write(path, data, mode=0o644)

    # -- observe ---------------------------------------------------------------------------

    def _guard_record(self) -> GuardRecord | None:
        data = read_bytes(self._state_file(names.GUARD_RECORD_FILE))
        if data is None:
            return None
        try:
            raw = json.loads(data)
            at = datetime.fromisoformat(raw["at"]) if raw.get("at") else None
            return GuardRecord(at, str(raw.get("dropinSha", "")), int(raw.get("starts", 0)),
                               str(raw.get("restored", "")), str(raw.get("journalLine", "")))
        except (ValueError, KeyError, TypeError) as exc:
            logger.warning("node %s: unreadable guard record: %s", self.node, exc)
            return GuardRecord(None, "", 0, "last-known-good", "")

    def _ours(self) -> tuple[str | None, Mapping[str, Any] | None]:
        """Our file's hash and what it sets (None, None: ours is absent). Main-file backend: the
        --config file as the agent found it counts as absent, and what it sets is what it
        changes over that base config."""
        data = read_bytes(self._dropin)
        original = self._original()
        if data is None or (self.layout.main_file and (original is None or data == original)):
            return None, None
        try:
            doc = load_document(data.decode())
            if original is not None:
                doc = changed_fields(load_document(original.decode()), doc)
            return content_sha(data), doc
        except (ValueError, UnicodeDecodeError):
            return content_sha(data), None

    def _remove_ours(self) -> None:
        """Our slot back to the base config: the drop-in removed, or the original --config file."""
        original = self._original()
        if not self.layout.main_file:
            atomic_remove(self._dropin)
        elif original is not None and read_bytes(self._dropin) != original:
            atomic_write(self._dropin, original, mode=0o644)

    def _kubelet(self, state: AgentState) -> tuple[UnitStatus, bool, Mapping[str, Any] | None, str]:
        """Unit, health, configz and the last error line: only while a restart is watched."""
        if state.phase not in _ACTIVE_PHASES:
            return UnitStatus(), False, None, ""
        if state.phase is Phase.TRIAL and state.restarted_at is not None and state.proven_at is None:
            failpoint.reached("health-wait")
        unit = unit_status(self.host)
        healthy = self.host.kubelet_healthz()
        configz = self.host.kubelet_configz() if healthy and state.proven_at is None else None
        troubled = not healthy or unit.n_restarts != state.restart_baseline
        line = last_error_line(self.host) if troubled and state.restarted_at is not None else ""
        return unit, healthy, configz, line

    def _read_node(self) -> dict[str, Any]:
        """The Node; no GET when the watch just said it has not changed since the last read.

        A trial is checked every tick: at 5,000 nodes re-reading each Node per tick would be
        hundreds of GETs a second for nothing.
        """
        if not self._node_unchanged or self._node is None:
            self._node = self.api.get_node()
        self._node_unchanged = False
        return self._node

    def observe(self, state: AgentState) -> Observation:
        node = self._read_node()
        meta = node.get("metadata") or {}
        self._node_rv = str(meta.get("resourceVersion", ""))
        annotations = dict(meta.get("annotations") or {})
        desired, problem = parse_desired(annotations.get(names.ANN_DESIRED))
        reset, reset_problem = parse_state_reset(annotations.get(names.ANN_STATE_RESET))
        sha, doc = self._ours()
        lkg = read_bytes(self._state_file(names.LKG_FILE))
        unit, healthy, configz, line = self._kubelet(state)
        guard = self._guard_record()
        if guard is not None and not guard.journal_line and not line:
            # the guard may act before the agent saw its own restart (a loaded host), and off a
            # real host it reads no journal: the rollback's message still names the kubelet's error
            line = last_error_line(self.host)
        after = [] if self.layout.main_file else read_dropins_after(self.host.path(self.layout.config_dir),
                                                                    self._dropin)
        return Observation(desired=desired, desired_problem=problem, dropin_sha=sha, dropin=doc,
                           lkg_sha=content_sha(lkg) if lkg is not None else None, unit=unit,
                           healthy=healthy, configz=configz, last_error_line=line,
                           guard_record=guard, annotations=annotations,
                           dropins_after=tuple(after), set_aside_kept=self._kept_aside(state),
                           unschedulable=bool((node.get("spec") or {}).get("unschedulable")),
                           state_reset=reset, state_reset_problem=reset_problem)

    def _kept_aside(self, state: AgentState) -> tuple[str, ...]:
        """Which of the files a revert must put back are still in the state dir."""
        return tuple(path for path in state.restore if self._aside_file(path).exists())

    # -- act -------------------------------------------------------------------------------

    def _base_documents(self) -> tuple[dict[str, Any], list[DropinFile]]:
        """The node's base config and the other files of --config-dir (never ours); for the
        main-file backend the --config file as the agent found it, and no drop-ins."""
        if self.layout.main_file:
            original = self._original()
            if original is None:
                raise RuntimeError(f"no copy of the base config {self.layout.base_config} in the state dir")
            return load_document(original.decode()), []
        base_text = read_bytes(self.host.path(self.layout.base_config))
        if base_text and base_text.strip():
            base = load_document(base_text.decode())
        else:  # no --config file (or the empty one a FileOrCreate mount leaves): ask the kubelet
            configz = self.host.kubelet_configz()
            if configz is None:
                raise RuntimeError("no base config file and the kubelet's configz is unavailable")
            base = export_from_configz(configz)
        return base, read_dropins(self.host.path(self.layout.config_dir), skip=self._dropin)

    def _stage(self, ref: ConfigRef) -> Staged | Refused:
        failpoint.reached("download")
        try:
            configmap = self.api.get_configmap(ref.namespace, ref.name)
        except NotFoundError:
            return Refused(ref, f"ConfigMap {ref.namespace}/{ref.name} not found")
        try:
            base, others = self._base_documents()
        except (ValueError, OSError, RuntimeError) as exc:
            return Refused(ref, f"cannot read this node's current kubelet config: {exc}")
        outcome = stage(ref, configmap, base=base, other_dropins=others)
        if isinstance(outcome, Staged) and self.layout.main_file:
            outcome = as_main_file(outcome, base=base, original=self.layout.state(names.ORIGINAL_FILE))
        if isinstance(outcome, Staged):  # kept outside --config-dir until it is written there
            atomic_write(self._state_file(names.STAGED_FILE), outcome.text.encode(), mode=0o644)
        return outcome

    def _write(self, action: WriteDropin, state: AgentState) -> AgentState:
        name = names.STAGED_FILE if action.source == "staged" else names.LKG_FILE
        data = read_bytes(self._state_file(name))
        if data is None or content_sha(data) != action.sha:
            logger.warning("node %s: %s copy is missing or changed; staging again", self.node, action.source)
            if action.source == "staged":
                return replace(state, assigned=None)  # rule_new_assignment will stage again
            self._remove_ours()
            return replace(state, dropin_sha=None, lkg_sha=None, last_known_good=None,
                           error=state.error + "; last-known-good copy lost, base config restored")
        self._move_aside(action.set_aside)
        self._put_back(action.restore)
        atomic_write(self._dropin, data, mode=0o644, before_rename=lambda: failpoint.reached("write"))
        return state

    def _config_dir_file(self, path: str) -> Path:
        return self.host.path(self.layout.config_dir) / path

    def _aside_file(self, path: str) -> Path:
        return self._state_file(names.SET_ASIDE_DIR) / path

    def _move_aside(self, paths: tuple[str, ...]) -> None:
        """Each file out of --config-dir into the state dir (it overrode our drop-in)."""
        self._move(paths, self._config_dir_file, self._aside_file, "set aside")

    def _put_back(self, paths: tuple[str, ...]) -> None:
        """The files ``_move_aside`` moved, back where they were (a reverted trial)."""
        self._move(paths, self._aside_file, self._config_dir_file, "put back into --config-dir")

    def _move(self, paths: tuple[str, ...], source: Callable[[str], Path], target: Callable[[str], Path],
              said: str) -> None:
        """Bytes and mode kept; the copy lands before the original goes, so a crash in between
        leaves the file in both places and the next try copies it again and removes it."""
        for path in paths:
            data = read_bytes(source(path))
            if data is None:
                continue
            atomic_write(target(path), data, mode=_mode_of(source(path)))
            atomic_remove(source(path))
            logger.info("node %s: %s %s", self.node, said, path)

    def _restart(self, action: RestartKubelet, state: AgentState) -> AgentState:
        result = self.host.systemctl(action.verb, names.KUBELET_UNIT)
        if not result.ok:  # e.g. an ExecStartPre= failed: systemd's Restart= takes over
            logger.warning("node %s: systemctl %s kubelet: %s", self.node, action.verb,
                           (result.stderr or result.stdout).strip())
        failpoint.reached("restart")
        return state.with_restarted(self._now(), unit_status(self.host).n_restarts)

    def _reset(self, action: ResetKubeletState, state: AgentState, event: Event | None
               ) -> tuple[AgentState, Event | None]:
        """Stop the kubelet, then delete the checkpoint files. Never a file outside the allow-list
        (decide checked; checked again here, the last step before a delete), never while the
        kubelet may still run: a failed stop raises and the step is retried."""
        unsafe = [f for f in action.files if f not in names.RESETTABLE_STATE_FILES]
        if unsafe:
            raise RuntimeError(f"refusing to delete {', '.join(unsafe)}: not a kubelet checkpoint file")
        result = self.host.systemctl("stop", names.KUBELET_UNIT)
        if not result.ok:
            raise RuntimeError(f"systemctl stop kubelet failed, nothing deleted: "
                               f"{(result.stderr or result.stdout).strip()}")
        absent, failed = [], []
        for host_path in action.files:
            try:
                self.host.path(host_path).unlink()
                logger.info("node %s: state reset: deleted %s", self.node, host_path)
            except FileNotFoundError:
                absent.append(host_path)
            except OSError as exc:  # the start goes on: a kubelet that refuses the file is rolled back
                logger.warning("node %s: state reset: cannot delete %s: %s", self.node, host_path, exc)
                failed.append(f"{host_path} ({exc.strerror or exc})")
        failpoint.reached("state-reset")
        notes = ((f"; already absent: {', '.join(absent)}" if absent else "")
                 + (f"; could not delete: {', '.join(failed)}" if failed else ""))
        if event is not None and notes:
            event = replace(event, message=event.message + notes,
                            type="Warning" if failed else event.type)
        return state.with_reset_deleted(), event

    def _promote(self, action: Promote) -> None:
        for source in (self._dropin, self._state_file(names.STAGED_FILE)):
            data = read_bytes(source)
            if data is not None and content_sha(data) == action.sha:
                atomic_write(self._state_file(names.LKG_FILE), data, mode=0o644)
                failpoint.reached("promotion")
                return
        raise RuntimeError("the drop-in to promote is gone from both --config-dir and the state dir")

    def act(self, decision: Decision) -> tuple[AgentState, Event | None]:
        """Carry out the action; the state (and event) that follow from its outcome."""
        action, state = decision.action, decision.state
        match action:
            case Stage(ref=ref):
                followup = after_stage(state, self._stage(ref), now=self._now())
                return followup.state, followup.event
            case WriteDropin():
                return self._write(action, state), decision.event
            case RemoveDropin(restore=restore):
                self._put_back(restore)
                self._remove_ours()
            case RestartKubelet():
                return self._restart(action, state), decision.event
            case ResetKubeletState():
                return self._reset(action, state, decision.event)
            case Promote():
                self._promote(action)
            case ClearGuardRecord():
                atomic_remove(self._state_file(names.GUARD_RECORD_FILE))
                atomic_remove(self._state_file(names.GUARD_COUNT_FILE))
            case Report(annotations=patch):
                self.api.patch_annotations(patch)
            case Wait():
                pass
        return state, decision.event

    # -- loop ------------------------------------------------------------------------------

    def step(self) -> Decision:
        """One observe -> decide -> persist -> act -> persist -> event."""
        obs = self.observe(self.state)
        decision = decide(self.state, obs, settings=self.settings, now=self._now())
        if not isinstance(decision.action, (Wait, Report)) or decision.state != self.state:
            logger.info("node %s: %s (%s)", self.node, decision.reason, type(decision.action).__name__)
        self.persist(decision.state)
        state, event = self.act(decision)
        self.persist(state)
        if event is not None:
            logger.info("node %s: event %s: %s", self.node, event.reason, event.message)
            self.api.record_event(event.reason, event.message, event.type, now=self._now())
        return decision

    def _timeout(self, decision: Decision) -> float:
        cap = self.timing.tick if self.state.phase in _ACTIVE_PHASES else self.timing.resync
        until = decision.action.until if isinstance(decision.action, Wait) else None
        remaining = (until - self._now()) if until else cap
        return max(0.0, min(cap, remaining).total_seconds())

    def _install(self, stop: threading.Event) -> bool:
        """Choose the backend, install the guard, retrying: no trial may start on a host
        without its rescue."""
        while not stop.is_set():
            try:
                self.adopt_backend()
                install_guard(self.host, self.layout)
                return True
            except (GatewayError, OSError, RuntimeError) as exc:
                logger.warning("node %s: cannot install the guard yet, retrying in %s: %s",
                               self.node, self.timing.retry, exc)
                stop.wait(self.timing.retry.total_seconds())
        return False

    def run(self, stop: threading.Event) -> None:
        """Install the guard, then decide until ``stop`` is set."""
        if not self._install(stop):
            return
        self.load()
        logger.info("node %s: agent running (phase %s)", self.node, self.state.phase.value)
        while not stop.is_set():
            before = self.state
            try:
                decision = self.step()
            except (GatewayError, OSError, RuntimeError, ValueError) as exc:
                logger.warning("node %s: step failed, retrying in %s: %s", self.node, self.timing.retry, exc)
                stop.wait(self.timing.retry.total_seconds())
                continue
            except Exception:  # a bug in one step must not end the node's only agent
                logger.exception("node %s: unexpected error; retrying in %s", self.node, self.timing.retry)
                stop.wait(self.timing.retry.total_seconds())
                continue
            if isinstance(decision.action, Wait) and self.state == before:
                self._wait(self._timeout(decision), stop)

    def _wait(self, timeout_s: float, stop: threading.Event) -> None:
        """Until the Node changes, the timeout passes, or ``stop`` is set."""
        if stop.is_set() or timeout_s <= 0:
            return
        try:
            self._node_unchanged = not self.api.wait_for_change(self._node_rv, timeout_s)
        except GatewayError as exc:
            logger.info("node %s: watch failed (%s); sleeping instead", self.node, exc)
            stop.wait(min(timeout_s, self.timing.retry.total_seconds()))
