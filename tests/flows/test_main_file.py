"""Kubelets without a drop-in directory (1.24-1.29): the agent's main-file backend.

kubesim at 1.26 (no ``--config-dir`` at all) and at 1.29 (the directory only where the unit's
environment has ``KUBELET_CONFIG_DROPIN_DIR_ALPHA``: on in one pool, off in the others). The
agents find it from each kubelet's unit and version and write a drop-in, or the whole merged
``--config`` file. Through the shipped ``canary`` policy (on kubesim's fast clock): a good config
completes on every node with configz proof, drop-in and main-file nodes in one rollout; a
crash-looping config is caught on the canary, and with the canary's agent SIGKILLed right after
its restart and kept down, the host guard alone puts the previous main file back.
"""

from __future__ import annotations

import os
import signal
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
import scenario as sc
import yaml
from test_modern import Agents, _agent_process, agent_cluster, _approve_every_gate, _node_event_messages, _wait, dropin
from test_modern import shipped_policy_for_a_fast_clock as _fast_clock

from kubelet_rollout_agent import names as agent_names

pytestmark = [pytest.mark.usefixtures("prefect_api"), pytest.mark.slow]

ALPHA = {"KUBELET_CONFIG_DROPIN_DIR_ALPHA": "on"}
FLEET = "kubelet-rollout.io/test-fleet"


def cluster_file(version: str, *, alpha: int = 0, plain: int = 0, legacy: int = 0) -> dict[str, Any]:
    """``alpha``: systemd hosts whose unit sets the alpha variable (a drop-in directory on
    1.28-1.29); ``plain``: systemd hosts without it; ``legacy``: cgroupfs hosts without it (a
    config setting systemd crash-loops them). alpha and plain carry the label FLEET=good."""
    def pool(name: str, count: int, driver: str, environment: dict[str, str], fleet: str) -> dict[str, Any]:
        return {"name": name, "count": count, "labels": {FLEET: fleet},
                "host": {"cgroupDriver": driver, "swap": False},
                "kubelet": {"config": {"cgroupDriver": driver},
                            "unit": {"restart": "always", "restartSec": "10s", "environment": environment}}}

    pools = [{"name": "cp", "count": 1, "controlPlane": True}]
    for name, count, driver, env, fleet in (("alpha", alpha, "systemd", ALPHA, "good"),
                                            ("plain", plain, "systemd", {}, "good"),
                                            ("legacy", legacy, "cgroupfs", {}, "crash")):
        if count:
            pools.append(pool(name, count, driver, env, fleet))
    return {"apiVersion": "kubesim.kubelet-rollout.io/v1", "kind": "Cluster", "kubernetesVersion": version,
            "pools": pools}


@contextmanager
def _cluster(tmp_path: Path, version: str, **pools: int) -> Iterator[tuple[Any, Agents]]:
    with agent_cluster(tmp_path, cluster_file(version, **pools), version) as running:
        yield running


def _pool(c: Any, pool: str) -> list[str]:
    return sorted(n for n in c.node_names if n.startswith(f"{pool}-"))


def _main_file(c: Any, node: str) -> Path:
    return Path(c.host(node).root) / agent_names.DEFAULT_BASE_CONFIG.lstrip("/")


def _original(c: Any, node: str) -> Path:
    return Path(c.host(node).root) / agent_names.DEFAULT_STATE_DIR.lstrip("/") / agent_names.ORIGINAL_FILE


def _shipped_canary(selector: str, *, analysis: bool = True, **changes: Any) -> str:
    doc = yaml.safe_load(_fast_clock("canary"))
    doc["nodes"] = {**doc["nodes"], "selector": selector}
    if not analysis:  # a crash loop shows long before any measurement: no Prometheus needed
        doc.pop("analysis")
    doc.update(changes)
    return yaml.safe_dump(doc, sort_keys=False)


@pytest.mark.parametrize("version, writes", [
    ("1.26", {"alpha": "main-file", "plain": "main-file"}),
    ("1.29", {"alpha": "drop-in", "plain": "main-file"}),
], ids=["1.26-no-drop-in-directory", "1.29-alpha-switch-on-some-nodes"])
def test_a_good_config_completes_on_every_node_with_configz_proof_whatever_file_the_kubelet_reads(
        tmp_path: Path, version: str, writes: dict[str, str]) -> None:
    with _cluster(tmp_path, version, alpha=2, plain=2) as (c, agents):
        gw = sc.gateway(c)
        good = agents.start_pool("alpha") + agents.start_pool("plain")
        observed = sc.nodes(gw)
        assert {n: observed[n].writes for n in good} == {n: writes[n.split("-")[0]] for n in good}
        before = {n: _main_file(c, n).read_bytes() for n in good}
        from rollout.usecases import preview_plan

        policy_file = tmp_path / "canary.yaml"
        policy_file.write_text(_shipped_canary(f"{FLEET}=good"))
        plan = preview_plan(gw, config_text=dropin(maxPods=71), policy_ref=str(policy_file), selector=None,
                            rollout="mainfile-good")
        shown = {n: w for b in plan["batches"] for n, w in zip(b["nodes"], b["writes"])}
        assert shown == {n: writes[n.split("-")[0]] for n in good}, shown  # `rollout plan` per node
        approved: list[int] = []
        with sc.prometheus(c, scrape_interval_s=0.25) as prom, \
                sc.Background(lambda: _approve_every_gate("mainfile-good", approved), every=0.5, timeout=300):
            outcome = sc.run_measured(c, prom, name="mainfile-good", config=dropin(maxPods=71),
                                      policy=_shipped_canary(f"{FLEET}=good"), approval_poll_seconds=1)
        assert outcome.outcome == "completed", outcome.message
        j = sc.journal(gw, "mainfile-good")
        assert set(j.plan.nodes) == set(good) and len(j.plan.batches) >= 2
        observed = sc.nodes(gw)
        for node in good:
            assert j.target.same_reference(observed[node].active), node
            assert sc.configz_field(gw, node, "maxPods") == 71, node
            main = yaml.safe_load(_main_file(c, node).read_text())
            if observed[node].writes == "main-file":  # the whole file, merged; the base kept aside
                assert main["maxPods"] == 71 and main["cgroupDriver"] == "systemd", node
                assert _original(c, node).read_bytes() == before[node], node
            else:  # the drop-in backend leaves the main file alone
                assert _main_file(c, node).read_bytes() == before[node], node
        from rollout.usecases.status import rollout_status

        rows = {n["name"]: n for n in rollout_status(gw, "mainfile-good")["nodes"]}
        assert {n: rows[n]["writes"] for n in good} == {n: observed[n].writes for n in good}


@pytest.mark.parametrize("version", ["1.26", "1.29"])
def test_a_crash_looping_main_file_is_caught_on_the_canary_and_the_guard_alone_restores_it(
        tmp_path: Path, version: str) -> None:
    """The agents as their own processes, each SIGKILLed right after it restarted its kubelet
    onto the config, and kept down: the host guard restores the previous main file within its
    threshold; the agent, back, reports the guard's rollback and the canary is reverted."""
    with _cluster(tmp_path, version, legacy=2) as (c, _):
        gw = sc.gateway(c)
        legacy = _pool(c, "legacy")
        before = {n: _main_file(c, n).read_bytes() for n in legacy}
        procs = {node: _agent_process(c, node, "restart") for node in legacy}
        try:
            _wait("agents advertised the main-file backend",
                  lambda: all(sc.nodes(gw)[n].writes == "main-file" for n in legacy))
            policy = _shipped_canary(f"{FLEET}=crash", analysis=False, allowFields=["cgroupDriver"])
            result: dict[str, Any] = {}
            runner = threading.Thread(target=lambda: result.update(outcome=sc.run(
                name="mainfile-crash", config=dropin(cgroupDriver="systemd"), policy=policy,
                kubeconfig=str(c.kubeconfig))), daemon=True)
            runner.start()
            _wait("an agent killed right after restarting its kubelet",
                  lambda: any(p.poll() is not None for p in procs.values()), timeout=90)
            canary = next(n for n, p in procs.items() if p.poll() is not None)
            assert procs[canary].returncode == -signal.SIGKILL
            _wait("the guard alone put the previous main file back", lambda: sc.nodes(gw)[canary].is_ready
                  and sc.configz_field(gw, canary, "cgroupDriver") == "cgroupfs", timeout=120)
            assert _main_file(c, canary).read_bytes() == before[canary]
            state_dir = Path(c.host(canary).root) / agent_names.DEFAULT_STATE_DIR.lstrip("/")
            record = yaml.safe_load((state_dir / agent_names.GUARD_RECORD_FILE).read_text())
            assert record["restored"] == "base", record
            procs[canary] = _agent_process(c, canary, None)  # the agent comes back
            runner.join(timeout=240)
            outcome = result["outcome"]
            assert outcome.outcome == "reverted", outcome.message
            j = sc.journal(gw, "mainfile-crash")
            assert j.assigned_nodes() == [canary], "nothing beyond the canary was assigned"
            _wait("the agent reported the guard's rollback", lambda: any(
                "host guard restored" in m for m in _node_event_messages(gw, canary, agent_names.EVENT_FAILED)))
            other = next(n for n in legacy if n != canary)
            assert _main_file(c, other).read_bytes() == before[other]
        finally:
            for proc in procs.values():
                if proc.poll() is None:
                    os.killpg(proc.pid, signal.SIGKILL)
                    proc.wait(timeout=10)
