"""kill -9 of `rollout start` in the middle of a drain and in the middle of a state reset, each
followed by a re-run of the same command (issue 39).

The fleet of test_drains (kubesim 1.31, real agent code on each node, a ReplicaSet under a
PodDisruptionBudget) rolls ``cpuManagerPolicy: static`` under ``disruption: {drain: auto}``. The
run is killed from outside (its whole process group) at a moment read off the cluster, then run
again. Whatever the moment, the last run completes with every node on the new policy (configz
and the host's checkpoint), no pod evicted twice (the audit log), no node left cordoned or
carrying the drain's annotations, and each node written once: its cordon, its assignment and its
uncordon, one PATCH each (a rollback: as many again). The pods take 60 s (3 s at the x20 clock)
to go and an agent waits 3 s before it reports a config active, so each moment lasts long enough
to be caught without slowing the orchestrator down.
"""

from __future__ import annotations

import copy
import json
import os
import signal
from collections import Counter
from pathlib import Path
from typing import Any, Callable

import pytest
import scenario as sc
from kubernetes import client
from test_drains import GENERAL, NAMESPACE, PINNING, drained_fleet, evictions, running
from test_kill_moments import Runner
from test_modern import LAYOUT, _agent_process

from kubelet_rollout_agent import names as agent_names
from kubelet_rollout_agent.api import USER_AGENT as AGENT_USER_AGENT
from rollout.names import ANN_CONFIG_ACTIVE, ANN_CORDONED_BY, ANN_DESIRED_CONFIG, ANN_STATE_RESET, EVENT_STATE_RESET
from tests.conftest import api_client, wait_for

pytestmark = [pytest.mark.usefixtures("prefect_api"), pytest.mark.slow]

CPU_STATE = "var/lib/kubelet/cpu_manager_state"
GRACE = 60  # each pod's terminationGracePeriodSeconds: 3 s real at x20, a drain lasts that long


def _policy() -> str:
    return sc.policy(nodes=GENERAL, steps=[1, "100%"], disruption={"drain": "auto", "timeout": "2m"},
                     done={"soak": "1s"})


def _name(ref: str | None) -> str | None:
    """The ConfigMap a desired/active annotation names (None: the base config)."""
    return json.loads(ref).get("name") if ref else None


def evicted(c: Any) -> Counter[str]:
    """Each pod's successful (201) evictions, from the audit log."""
    return Counter(e["objectRef"]["name"] for e in evictions(c) if e["responseStatus"]["code"] == 201)


def orchestrator_node_patches(c: Any) -> Counter[str]:
    """Successful PATCHes of each node by the orchestrator: not a kubelet's, not an agent's."""
    counts: Counter[str] = Counter()
    for event in c.audit_log.events(verb="patch"):
        ref = event.get("objectRef") or {}
        if ref.get("resource") != "nodes" or ref.get("subresource"):
            continue
        if str((event.get("user") or {}).get("username", "")).startswith("system:") \
                or str(event.get("userAgent", "")).startswith(AGENT_USER_AGENT.split("/")[0]):
            continue
        if 200 <= (event.get("responseStatus") or {}).get("code", 0) < 300:
            counts[ref.get("name", "")] += 1
    return counts


def assert_rolled_and_given_back(c: Any, general: list[str], *, policy: str = "static", writes: int = 1) -> None:
    """Every node on ``policy`` (configz and the host's checkpoint), given back, none written or
    drained more than ``writes`` times, no pod evicted twice."""
    gw = sc.gateway(c)
    for node, obs in sc.nodes(gw).items():
        if node not in general:
            continue
        assert gw.configz(node)["kubeletconfig"].get("cpuManagerPolicy", "none") == policy, node
        state = json.loads((Path(c.host(node).root) / CPU_STATE).read_text())
        assert state["policyName"] == policy, node
        assert not obs.unschedulable and ANN_CORDONED_BY not in obs.annotations, node
        assert ANN_STATE_RESET not in obs.annotations, node
    counts = evicted(c)
    assert counts and set(counts.values()) == {1}, counts  # no pod evicted twice
    # per node and write: the cordon, the write, the uncordon - one PATCH each, whatever the kills
    patches = orchestrator_node_patches(c)
    assert patches == {n: 3 * writes for n in general}, patches


def test_kill_during_a_drain_then_rerun(tmp_path: Path, prefect_api: str) -> None:
    """Killed while the canary is cordoned and its first pod, evicted, is still terminating (the
    node not written yet), then again at the same moment of the second batch's drain (the canary
    given back): each re-run waits for the terminating pod, evicts the others, and goes on. The
    rollback, which drains each node again, is killed the same way on its first node."""
    with drained_fleet(tmp_path, general=2, replicas=4, budget={"maxUnavailable": 1}, grace=GRACE) as (c, _, general):
        gw = sc.gateway(c)
        core = client.CoreV1Api(api_client(c.kubeconfig))
        run = Runner(c, tmp_path, prefect_api, name="drain-kill", config=PINNING, policy=_policy())
        caught: dict[str, str] = {}  # pod evicted and terminating at a kill: its node

        def mid_drain(nodes: set[str], written: Callable[[dict[str, str]], bool]) -> Callable[[], bool]:
            """A node of ``nodes`` cordoned, not ``written``, with a pod evicted and still terminating."""
            def now() -> bool:
                observed = sc.nodes(gw)
                held = {n for n in nodes if observed[n].unschedulable and ANN_CORDONED_BY in observed[n].annotations
                        and not written(observed[n].annotations)}
                if not held:
                    return False
                gone = evicted(c)
                for pod in core.list_namespaced_pod(NAMESPACE).items:
                    if pod.spec.node_name in held and pod.metadata.deletion_timestamp and gone[pod.metadata.name]:
                        caught[pod.metadata.name] = pod.spec.node_name
                        return True
                return False
            return now

        for _ in general:  # the canary's drain, then the second batch's
            run.start()
            run.kill_when("mid-drain: cordoned, a pod evicted and terminating, nothing written",
                          mid_drain(set(general) - set(caught.values()), lambda said: ANN_DESIRED_CONFIG in said))
            node = list(caught.values())[-1]
            observed = sc.nodes(gw)[node]
            assert observed.unschedulable and ANN_DESIRED_CONFIG not in observed.annotations  # so after the kill
        assert set(caught.values()) == set(general)
        run.start()
        assert run.finish() == 0
        assert sc.journal(gw, "drain-kill").shown_status == "complete"
        assert_rolled_and_given_back(c, general)
        assert all(evicted(c)[pod] == 1 for pod in caught)

        # the rollback drains each node again (its pods came back); killed in its first drain
        wait_for(lambda: len(running(core)) == 4, timeout=60, what="the pods back before the rollback")
        back = copy.copy(run)
        back.args = [*run.args[:3], "rollback", "drain-kill", "--kubeconfig", str(c.kubeconfig)]
        caught.clear()
        back.start()
        back.kill_when("mid-drain of the rollback", mid_drain(set(general), lambda said: ANN_STATE_RESET in said))
        back.start()
        assert back.finish() == 0
        assert sc.journal(gw, "drain-kill").shown_status == "rolled-back"
        assert_rolled_and_given_back(c, general, policy="none", writes=2)
        assert all(evicted(c)[pod] == 1 for pod in caught)


def test_kill_during_a_state_reset_then_rerun(tmp_path: Path, prefect_api: str) -> None:
    """Killed once the canary's write (its desired config and the state reset) has landed, before
    its agent said the config is active; then, on the second node, killed while its kubelet is
    stopped with the checkpoint deleted, its agent SIGKILLed at that step too (its failpoint) and
    started again only after the run died. Each re-run neither writes a node again nor has a
    checkpoint deleted twice over a started kubelet, and the last one completes."""
    budget = {"maxUnavailable": 1}
    with drained_fleet(tmp_path, general=2, replicas=4, budget=budget, grace=GRACE) as (c, agents, general):
        gw = sc.gateway(c)
        run = Runner(c, tmp_path, prefect_api, name="reset-kill", config=PINNING, policy=_policy())
        caught: list[str] = []

        def mid_reset() -> bool:
            for node, obs in sc.nodes(gw).items():
                said = obs.annotations
                if node in general and ANN_STATE_RESET in said and ANN_DESIRED_CONFIG in said \
                        and _name(said.get(ANN_CONFIG_ACTIVE)) != _name(said[ANN_DESIRED_CONFIG]):
                    caught.append(node)
                    return True
            return False

        run.start()
        run.kill_when("mid-reset: written with the state reset, not active yet", mid_reset)
        [canary] = caught
        [second] = [n for n in general if n != canary]
        agents.stop(second)  # its agent as a process of its own, to die between its delete and the start
        agent = _agent_process(c, second, "state-reset")
        try:
            run.start()
            run.kill_when("mid-reset: the kubelet stopped, its checkpoint deleted, its agent dead",
                          lambda: agent.poll() is not None)
            assert agent.wait() == -signal.SIGKILL
        finally:
            if agent.poll() is None:
                os.killpg(agent.pid, signal.SIGKILL)
                agent.wait(timeout=10)
        assert not (agents.root(second) / CPU_STATE).exists()  # nobody started the kubelet since
        agents.start(second)
        run.start()
        assert run.finish() == 0
        assert sc.journal(gw, "reset-kill").shown_status == "complete"
        assert_rolled_and_given_back(c, general)
        # one reset per node: the agent killed after its delete never reported it, and once back
        # finished that same reset (the kubelet had not started since); each recorded done
        resets = sc.node_events(c, EVENT_STATE_RESET)
        assert resets == {n: 1 for n in general}, resets
        for n in general:
            state = json.loads((agents.root(n) / LAYOUT.state(agent_names.STATE_FILE).lstrip("/")).read_text())
            assert state["reset"]["step"] == "done" and state["reset"]["rollout"] == "reset-kill", (n, state["reset"])
