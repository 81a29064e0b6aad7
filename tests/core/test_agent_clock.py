"""The node agent's advertised timers against the policy's deadline (rollout.agent_clock).

Issue 36, item 3: a rehearsal at x20 (`rollout start -p fast --time-scale 20`, progressDeadline
3m / 20 = 9s) on agents that waited 30 s of wall-clock time before reporting a node active timed
out its canary ("kubelet resolved the target but did not restart onto it within
progressDeadline"). What cannot work is refused before anything is written, naming both values.
"""

from __future__ import annotations

import json
from datetime import timedelta

import pytest

from rollout.agent_clock import AgentClock, advertised_clock, check_agent_clocks
from rollout.errors import PolicyError
from rollout.model import NodeObservation
from rollout.names import ANN_AGENT
from rollout.policy import DoneUntil, load_policy_ref

WALL_CLOCK = AgentClock(health_wait=timedelta(seconds=30), trial=timedelta(minutes=10), tick=timedelta(seconds=5))
ON_KUBESIM_X20 = AgentClock(health_wait=timedelta(seconds=1.5), trial=timedelta(seconds=30),
                            tick=timedelta(seconds=0.25), time_scale=20)


def agent_node(name: str, clock: AgentClock | None) -> NodeObservation:
    doc = {"version": "test", "backend": "drop-in", "configDir": "/etc/kubernetes/kubelet.conf.d",
           **(clock.advertised() if clock else {})}
    return NodeObservation(name, backend="agent", annotations={ANN_AGENT: json.dumps(doc)})


def test_the_advertisement_reads_back() -> None:
    for clock in (WALL_CLOCK, ON_KUBESIM_X20):
        assert advertised_clock(agent_node("n", clock).annotations[ANN_AGENT]) == clock


@pytest.mark.parametrize("annotation", [None, "", "{", '{"version": "old"}', '{"seconds": {"healthWait": "soon"}}',
                                        '{"seconds": {"healthWait": -1, "trial": 1, "tick": 1}}',
                                        '{"seconds": {"healthWait": 1, "trial": 1, "tick": 1}, "timeScale": 0}'])
def test_an_agent_that_advertises_no_readable_clock_is_not_judged(annotation: str | None) -> None:
    assert advertised_clock(annotation) is None


def test_the_time_to_active_is_the_health_wait_and_to_last_known_good_the_trial() -> None:
    assert WALL_CLOCK.time_to(DoneUntil.ACTIVE) == timedelta(seconds=35)
    assert WALL_CLOCK.time_to(DoneUntil.LAST_KNOWN_GOOD) == timedelta(minutes=10, seconds=5)
    short_trial = AgentClock(timedelta(seconds=30), timedelta(seconds=10), timedelta(seconds=5))
    assert short_trial.time_to(DoneUntil.LAST_KNOWN_GOOD) == timedelta(seconds=35)  # promoted only once active


def test_a_rehearsal_on_wall_clock_agents_is_refused_naming_both_values() -> None:
    fast = load_policy_ref("fast").rehearsal(20)
    nodes = [agent_node(f"node-{i}", WALL_CLOCK) for i in (1, 2, 3)]
    with pytest.raises(PolicyError) as refused:
        check_agent_clocks(fast, nodes)
    message = str(refused.value)
    assert "progressDeadline: 9s (3m / --time-scale 20)" in message, message
    assert "node-1, node-2, node-3" in message and "--health-wait 30s" in message and "35s" in message
    assert "nothing was written" in message
    assert "without --time-scale" in refused.value.advice and "11m40s" in refused.value.advice


def test_agents_on_the_rehearsals_clock_pass() -> None:
    check_agent_clocks(load_policy_ref("fast").rehearsal(20), [agent_node("node-1", ON_KUBESIM_X20)])
    check_agent_clocks(load_policy_ref("fast"), [agent_node("node-1", WALL_CLOCK)])  # real time: 3m > 35s


def test_last_known_good_waits_for_the_agents_trial() -> None:
    policy = load_policy_ref("cautious")
    assert policy.done.until is DoneUntil.LAST_KNOWN_GOOD
    long_trial = AgentClock(timedelta(seconds=30), timedelta(hours=1), timedelta(seconds=5))
    with pytest.raises(PolicyError) as refused:
        check_agent_clocks(policy, [agent_node("node-1", long_trial)])
    assert "--trial 1h" in str(refused.value) and "lastKnownGood" in str(refused.value)


def test_nodes_without_an_advertised_clock_and_dkc_nodes_are_left_out() -> None:
    fast = load_policy_ref("fast").rehearsal(20)
    dkc = NodeObservation("dkc-1", backend="dkc",
                          annotations={ANN_AGENT: json.dumps(WALL_CLOCK.advertised())})  # not its backend
    check_agent_clocks(fast, [agent_node("old-agent", None), dkc])


def test_the_slowest_agent_is_named_and_a_long_list_is_cut() -> None:
    fast = load_policy_ref("fast").rehearsal(20)
    slower = AgentClock(timedelta(minutes=1), timedelta(minutes=10), timedelta(seconds=5))
    nodes = [agent_node(f"node-{i:02}", WALL_CLOCK) for i in range(8)] + [agent_node("slow-1", slower)]
    with pytest.raises(PolicyError) as refused:
        check_agent_clocks(fast, nodes)
    assert "slow-1" in str(refused.value) and "--health-wait 1m" in str(refused.value)
    nodes = [agent_node(f"node-{i:02}", WALL_CLOCK) for i in range(8)]
    with pytest.raises(PolicyError) as refused:
        check_agent_clocks(fast, nodes)
    assert "node-00, node-01, node-02, node-03, node-04 and 3 more" in str(refused.value)
