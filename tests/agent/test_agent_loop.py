"""The agent's loop on a fake API and a fake host: files, restarts, reports and events.

What is pinned here is what the orchestrator and the node see: the drop-in bytes in
``--config-dir``, the last-known-good copy outside it, the status annotations, the events, and
that a killed agent (a new process reading only its state dir) converges to the same end.
"""

from __future__ import annotations

import json
import threading
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import pytest

from agent_fakes import Clock, FakeHost, FakeNodeApi, dropin_text
from kubelet_rollout_agent import names
from kubelet_rollout_agent.agent import Agent
from kubelet_rollout_agent.decide import Settings, Wait, agent_annotation
from kubelet_rollout_agent.install import Layout, install_guard
from kubelet_rollout_agent.state import Phase

SETTINGS = Settings(trial=timedelta(minutes=10), health_deadline=timedelta(minutes=2), crash_threshold=3,
                    agent_annotation=agent_annotation(version="test", config_dir=names.DEFAULT_CONFIG_DIR))
GOOD = dropin_text(maxPods=50)
BAD = dropin_text(maxPods=999)  # valid for the validator, but this host cannot run it


class Node:
    """One node: API, host, clock, and a fresh agent process on demand."""

    def __init__(self, root: Path, **host_options: Any) -> None:
        self.api = FakeNodeApi()
        self.host = FakeHost(root, **host_options)
        # Real time, not a fixed date: the guard is a separate program that reads the wall clock
        # to know whether a trial is still on.
        self.clock = Clock(datetime.now(timezone.utc))
        self.agent = self.new_agent()

    def new_agent(self) -> Agent:
        """A new agent process: it knows only what its state dir says."""
        agent = Agent(api=self.api, host=self.host, layout=Layout(), settings=SETTINGS,  # type: ignore[arg-type]
                      now=self.clock)
        agent.load()
        return agent

    def settle(self, *, restart_agent_each_step: bool = False, limit: int = 60) -> None:
        for _ in range(limit):
            if restart_agent_each_step:
                self.agent = self.new_agent()
            before = self.agent.state
            decision = self.agent.step()
            if isinstance(decision.action, Wait) and self.agent.state == before:
                return
        raise AssertionError(f"did not settle: {self.agent.state}")

    def dropin(self) -> str | None:
        path = self.host.path(Layout().dropin)
        return path.read_text() if path.exists() else None

    def state_file(self, name: str) -> Path:
        return self.host.path(Layout().state(name))


@pytest.fixture
def node(tmp_path: Path) -> Node:
    return Node(tmp_path)


def _promoted(node: Node, text: str, name: str = "kc-a") -> dict[str, str]:
    desired = node.api.publish(name, text)
    node.api.assign(desired)
    node.settle()
    node.clock.advance(minutes=10)
    node.settle()
    return desired


def test_assignment_is_written_restarted_proven_and_promoted(node: Node) -> None:
    desired = node.api.publish("kc-a", GOOD)
    node.api.assign(desired)
    node.settle()
    assert node.dropin() == GOOD and ("restart", "kubelet") in node.host.commands
    assert node.api.status(names.ANN_ASSIGNED) == desired
    assert node.api.status(names.ANN_ACTIVE) is None  # proven, but not up through the health wait yet
    node.clock.advance(seconds=SETTINGS.health_wait.total_seconds())
    node.settle()
    assert node.api.status(names.ANN_ACTIVE) == desired
    assert node.api.status(names.ANN_LAST_KNOWN_GOOD) is None and node.api.status(names.ANN_ERROR) is None
    assert json.loads(node.api.annotations[names.ANN_AGENT]) == {
        "version": "test", "backend": "drop-in", "configDir": names.DEFAULT_CONFIG_DIR}
    node.clock.advance(minutes=10)
    node.settle()
    assert node.api.status(names.ANN_LAST_KNOWN_GOOD) == desired
    assert node.state_file(names.LKG_FILE).read_text() == GOOD
    assert node.api.reasons() == [names.EVENT_ASSIGNED, names.EVENT_ACTIVE, names.EVENT_PROMOTED]


def test_a_crash_looping_config_is_rolled_back_to_last_known_good(node: Node) -> None:
    good = _promoted(node, GOOD)
    bad = node.api.publish("kc-b", BAD)
    node.api.assign(bad)
    node.settle()  # written, restarted: the kubelet does not come up
    node.host.crash_loop(3)  # systemd restarts it three times
    node.settle()
    assert node.dropin() == GOOD and node.host.running is not None
    assert node.api.status(names.ANN_ASSIGNED) == bad
    assert node.api.status(names.ANN_ACTIVE) == good == node.api.status(names.ANN_LAST_KNOWN_GOOD)
    assert "crash-looping" in node.api.status(names.ANN_ERROR)
    assert "too many pods" in node.api.status(names.ANN_ERROR)  # the kubelet's own log line
    assert node.api.reasons()[-1] == names.EVENT_FAILED


def test_a_kubelet_that_never_gets_healthy_is_rolled_back_at_the_deadline(node: Node) -> None:
    _promoted(node, GOOD)
    node.api.assign(node.api.publish("kc-b", BAD))
    node.settle()
    assert node.agent.state.phase is Phase.TRIAL
    node.clock.advance(minutes=2)
    node.settle()
    assert node.dropin() == GOOD and "not healthy" in node.api.status(names.ANN_ERROR)


def test_a_first_config_that_fails_returns_the_node_to_its_base(node: Node) -> None:
    node.api.assign(node.api.publish("kc-b", BAD))
    node.settle()
    node.clock.advance(minutes=3)
    node.settle()
    assert node.dropin() is None and node.host.running is not None
    assert node.api.status(names.ANN_ACTIVE) is None and "returned to the base config" in node.api.status(names.ANN_ERROR)


def test_a_field_overridden_by_a_flag_is_an_error_naming_it_and_never_promoted(tmp_path: Path) -> None:
    node = Node(tmp_path, flags={"maxPods": 90})
    node.api.assign(node.api.publish("kc-a", dropin_text(maxPods=50, podPidsLimit=4096)))
    node.settle()
    error = node.api.status(names.ANN_ERROR)
    assert "maxPods" in error and "podPidsLimit" not in error
    node.clock.advance(minutes=20)
    node.settle()
    assert node.api.status(names.ANN_LAST_KNOWN_GOOD) is None and node.dropin() is None


def test_a_mismatched_configmap_is_refused_without_touching_the_node(node: Node) -> None:
    desired = node.api.publish("kc-a", GOOD)
    node.api.assign({**desired, "uid": "someone-else"})
    node.settle()
    assert node.dropin() is None and not [c for c in node.host.commands if c[0] == "restart"]
    assert "not the one assigned" in node.api.status(names.ANN_ERROR)
    assert node.api.reasons() == [names.EVENT_REFUSED]


def test_an_unreadable_annotation_is_reported(node: Node) -> None:
    node.api.annotations[names.ANN_DESIRED] = "{not json"
    node.settle()
    assert "unreadable" in node.api.status(names.ANN_ERROR) and node.dropin() is None


def test_removing_the_annotation_returns_the_node_to_its_base_config(node: Node) -> None:
    _promoted(node, GOOD)
    restarts = node.host.commands.count(("restart", "kubelet"))
    node.api.assign(None)
    node.settle()
    assert node.dropin() is None and node.host.running is not None and node.host.running["maxPods"] == 110
    assert node.host.commands.count(("restart", "kubelet")) == restarts + 1
    assert all(node.api.status(k) is None for k in names.STATUS_ANNOTATIONS)
    assert node.agent.state.phase is Phase.BASE and node.api.reasons()[-1] == names.EVENT_REMOVED


@pytest.mark.parametrize("scenario", ["promote", "rollback"])
def test_an_agent_killed_between_any_two_steps_converges_to_the_same_end(tmp_path: Path, scenario: str) -> None:
    """Every step is taken by a new agent process that only has the state dir to go on."""
    ends = []
    for fresh in (False, True):
        node = Node(tmp_path / str(fresh))
        node.api.assign(node.api.publish("kc-a", GOOD))
        node.settle(restart_agent_each_step=fresh)
        node.clock.advance(minutes=10)
        node.settle(restart_agent_each_step=fresh)
        if scenario == "rollback":
            node.api.assign(node.api.publish("kc-b", BAD))
            node.settle(restart_agent_each_step=fresh)
            node.host.crash_loop(3)
            node.settle(restart_agent_each_step=fresh)
        strays = [p.name for p in node.host.path(names.DEFAULT_CONFIG_DIR).iterdir() if p.name != names.DROPIN_NAME]
        ends.append((node.dropin(), {k: node.api.annotations.get(k) for k in names.STATUS_ANNOTATIONS},
                     node.api.reasons(), strays))
    assert ends[0] == ends[1]


def test_the_guard_rescues_the_kubelet_while_the_agent_is_gone(tmp_path: Path) -> None:
    node = Node(tmp_path, run_guard=True)
    install_guard(node.host, Layout())  # type: ignore[arg-type]
    good = _promoted(node, GOOD)
    node.api.assign(node.api.publish("kc-b", BAD))
    node.settle()  # written and restarted; then the agent pod dies with the kubelet down
    node.host.crash_loop(5)  # systemd keeps restarting; the guard acts before the 4th start
    assert node.host.running is not None and node.dropin() == GOOD
    assert node.host.n_restarts == 3
    node.agent = node.new_agent()  # the agent comes back
    node.settle()
    assert node.api.status(names.ANN_ACTIVE) == good and "host guard restored" in node.api.status(names.ANN_ERROR)
    assert not node.state_file(names.GUARD_RECORD_FILE).exists()
    assert node.api.reasons()[-1] == names.EVENT_FAILED


def test_a_promoted_config_is_not_restarted_again_by_a_new_agent(node: Node) -> None:
    _promoted(node, GOOD)
    restarts = node.host.commands.count(("restart", "kubelet"))
    node.agent = node.new_agent()
    node.settle()
    assert node.host.commands.count(("restart", "kubelet")) == restarts




def test_the_guard_still_watches_while_a_rollback_is_under_way(tmp_path: Path) -> None:
    """The agent dies after deciding to roll back but before writing last-known-good."""
    node = Node(tmp_path, run_guard=True)
    install_guard(node.host, Layout())  # type: ignore[arg-type]
    _promoted(node, GOOD)
    node.api.assign(node.api.publish("kc-b", BAD))
    node.settle()
    node.host.crash_loop(1)
    node.clock.advance(minutes=2)  # the health deadline passes: the agent decides to roll back
    original_act = node.agent.act

    def die_before_acting(decision: Any) -> Any:
        if decision.state.phase is Phase.REVERTING:
            raise SystemExit("killed")
        return original_act(decision)

    node.agent.act = die_before_acting  # type: ignore[method-assign]
    with pytest.raises(SystemExit):
        node.settle()
    assert node.agent.state.phase is Phase.REVERTING and node.dropin() == BAD
    node.host.crash_loop(5)  # nobody but systemd and the guard now
    assert node.host.running is not None and node.dropin() == GOOD


def _scenario_with_a_kill(root: Path, kill_at: int | None, when: str) -> tuple[Any, ...]:
    """Promote GOOD, then roll back BAD; the agent process dies at its ``kill_at``-th action."""
    node = Node(root)
    calls = {"n": 0}

    def arm(agent: Agent) -> Agent:
        original = agent.act

        def act(decision: Any) -> Any:
            calls["n"] += 1
            if calls["n"] == kill_at and when == "before":
                raise SystemExit("killed before the effect")
            result = original(decision)
            if calls["n"] == kill_at and when == "after":
                raise SystemExit("killed after the effect, before recording its outcome")
            return result

        agent.act = act  # type: ignore[method-assign]
        return agent

    def settle() -> None:
        for _ in range(3):
            try:
                node.settle()
                return
            except SystemExit:
                node.agent = arm(node.new_agent())  # a new process, from the state dir only
        raise AssertionError("did not converge")

    node.agent = arm(node.agent)
    node.api.assign(node.api.publish("kc-a", GOOD))
    settle()
    node.clock.advance(minutes=10)
    settle()
    node.api.assign(node.api.publish("kc-b", BAD))
    settle()
    node.host.crash_loop(3)
    settle()
    strays = sorted(p.name for p in node.host.path(names.DEFAULT_CONFIG_DIR).iterdir())
    return (node.dropin(), strays, {k: node.api.annotations.get(k) for k in names.STATUS_ANNOTATIONS},
            node.host.running is not None, node.state_file(names.LKG_FILE).read_text())


@pytest.mark.parametrize("when", ["before", "after"])
def test_a_kill_at_any_action_converges_to_the_same_end(tmp_path: Path, when: str) -> None:
    reference = _scenario_with_a_kill(tmp_path / "ref", None, when)
    assert reference[0] == GOOD and reference[1] == [names.DROPIN_NAME]
    for kill_at in range(1, 24):  # the scenario takes 20 actions
        assert _scenario_with_a_kill(tmp_path / f"{when}-{kill_at}", kill_at, when) == reference, kill_at


def test_without_a_base_file_the_running_config_is_the_base(tmp_path: Path) -> None:
    node = Node(tmp_path)
    node.host.path(names.DEFAULT_BASE_CONFIG).write_text("")  # what a FileOrCreate mount leaves
    assert node.host.running is not None
    node.host.running["imageGCHighThresholdPercent"] = 85  # known only to the running kubelet
    node.api.assign(node.api.publish("kc-a", dropin_text(imageGCLowThresholdPercent=90)))
    node.settle()  # configz has imageGCHighThresholdPercent 85: the merged config is invalid
    assert "imageGC" in node.api.status(names.ANN_ERROR) and node.dropin() is None


def test_a_quiet_watch_spares_the_next_node_read(node: Node) -> None:
    reads = []
    get_node = node.api.get_node
    node.api.get_node = lambda: reads.append(1) or get_node()  # type: ignore[method-assign]
    node.settle()
    before = len(reads)
    node.agent._wait(0.01, threading.Event())  # the fake watch reports no change
    node.agent.step()
    assert len(reads) == before
    node.agent.step()  # without a watch in between the node is read again
    assert len(reads) == before + 1


def test_the_agent_advertises_the_drop_ins_the_kubelet_reads_after_its_own(node: Node) -> None:
    """The orchestrator's review needs them (their precedence is not in configz); a file that
    sorts before ours is not advertised, one added later is, at the agent's next look."""
    conf_d = node.host.path(names.DEFAULT_CONFIG_DIR)
    (conf_d / "40-nodeadm.conf").write_text(dropin_text(maxPods=58))
    node.settle()
    assert "dropinsAfter" not in json.loads(node.api.annotations[names.ANN_AGENT])
    (conf_d / "99-other.conf").write_text(dropin_text(imageGCLowThresholdPercent=70))
    node.settle()
    advertised = json.loads(node.api.annotations[names.ANN_AGENT])["dropinsAfter"]
    assert advertised == [{"file": "99-other.conf", "config": {
        "apiVersion": "kubelet.config.k8s.io/v1beta1", "kind": "KubeletConfiguration", "imageGCLowThresholdPercent": 70}}]


PRECEDENCE = {"kubelet-rollout.io/set-aside-overrides": "true"}


def test_a_config_that_takes_precedence_sets_aside_the_drop_in_that_overrode_it(node: Node) -> None:
    """`rollout drift --fix` on a node where another tool's 99-other.conf overrides our maxPods:
    the fix's config has the bytes our slot already holds, yet the file moves to the state dir's
    set-aside/ (bytes and mode kept), the kubelet restarts onto our value, the Event names the
    file; 99-x.conf, which overrides nothing, stays."""
    _promoted(node, GOOD)
    conf_d = node.host.path(names.DEFAULT_CONFIG_DIR)
    other = conf_d / "99-other.conf"
    other.write_text(dropin_text(maxPods=70, podPidsLimit=100))
    other.chmod(0o640)
    (conf_d / "99-x.conf").write_text(dropin_text(podPidsLimit=200))
    node.host.systemctl("restart", "kubelet")  # drift: the kubelet now runs 99-other.conf's maxPods
    assert node.host.running is not None and node.host.running["maxPods"] == 70
    desired = node.api.publish("kc-fix", GOOD, annotations=PRECEDENCE)
    node.api.assign(desired)
    node.settle()
    node.clock.advance(seconds=SETTINGS.health_wait.total_seconds())
    node.settle()
    aside = node.state_file(names.SET_ASIDE_DIR) / "99-other.conf"
    assert not other.exists() and aside.read_text() == dropin_text(maxPods=70, podPidsLimit=100)
    assert aside.stat().st_mode & 0o777 == 0o640 and (conf_d / "99-x.conf").exists()
    assert node.host.running is not None and node.host.running["maxPods"] == 50
    assert node.api.status(names.ANN_ACTIVE) == desired and node.api.status(names.ANN_ERROR) is None
    assigned = [e for e in node.api.events if e[0] == names.EVENT_ASSIGNED]
    assert "setting aside 99-other.conf" in assigned[-1][2], assigned


def test_a_trial_that_set_a_file_aside_and_fails_puts_it_back(node: Node) -> None:
    good = _promoted(node, GOOD)
    other = node.host.path(names.DEFAULT_CONFIG_DIR) / "99-other.conf"
    other.write_text(dropin_text(maxPods=70))
    node.api.assign(node.api.publish("kc-bad", BAD, annotations=PRECEDENCE))
    node.settle()
    assert not other.exists()  # set aside for the trial
    node.host.crash_loop(3)
    node.settle()
    assert other.read_text() == dropin_text(maxPods=70) and node.dropin() == GOOD
    assert not (node.state_file(names.SET_ASIDE_DIR) / "99-other.conf").exists()
    assert node.api.status(names.ANN_ACTIVE) == good and "crash-looping" in node.api.status(names.ANN_ERROR)
