"""Today's clusters (1.24+, no DKC): the same rollouts through the node agent and drop-ins.

kubesim runs in modern mode (1.31: no ``spec.configSource``, kubelets from ``--config`` plus
``--config-dir``); every simulated host runs real ``kubelet-rollout-agent`` code (one thread per
node, as ``kubelet-rollout-agent run --kubesim-fleet`` does) talking HTTPS to kubesim. The rollout
is the ordinary flow: the gateway sees each node's backend and writes the desired-config
annotation instead of ``spec.configSource``; the core decides on the same observations.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
import scenario as sc
import yaml

from agent_fleet import AgentFleet
from kubelet_rollout_agent import failpoint
from kubelet_rollout_agent import names as agent_names
from kubelet_rollout_agent.agent import Timing
from kubelet_rollout_agent.decide import Settings, agent_annotation
from kubelet_rollout_agent.install import Layout

pytestmark = [pytest.mark.usefixtures("prefect_api"), pytest.mark.slow]

# health_wait: longer than kubesim's crash window (15 s / 20) plus a tick, so a kubelet that dies on
# a host it cannot run on is never reported active
SETTINGS = Settings(trial=timedelta(seconds=4), health_deadline=timedelta(seconds=40), health_wait=timedelta(seconds=3),
                    crash_threshold=3,
                    agent_annotation=agent_annotation(version="test", config_dir=agent_names.DEFAULT_CONFIG_DIR))
TIMING = Timing(tick=timedelta(seconds=0.5), resync=timedelta(seconds=2), retry=timedelta(seconds=1))
LAYOUT = Layout(python=sys.executable)
ROOT = Path(__file__).resolve().parents[2]


def modern_cluster_file(general: int, legacy: int = 0, flagged: int = 0) -> dict[str, Any]:
    """general hosts use systemd; legacy hosts cgroupfs (a drop-in setting systemd crash-loops
    them); flagged hosts run their kubelet with --max-pods 90 (a flag beats any drop-in)."""
    def pool(name: str, count: int, driver: str, **kubelet: Any) -> dict[str, Any]:
        return {"name": name, "count": count, "host": {"cgroupDriver": driver, "swap": False},
                "kubelet": {"config": {"cgroupDriver": driver}, "unit": {"restart": "always", "restartSec": "10s"},
                            **kubelet}}

    pools = [{"name": "cp", "count": 1, "controlPlane": True}, pool("general", general, "systemd")]
    if legacy:
        pools.append(pool("legacy", legacy, "cgroupfs"))
    if flagged:
        pools.append(pool("flagged", flagged, "systemd", flags={"--max-pods": "90"}))
    return {"apiVersion": "kubesim.kubelet-rollout.io/v1", "kind": "Cluster", "kubernetesVersion": "1.31",
            "pools": pools}


class Agents(AgentFleet):
    """Real agent code for the workers of the simulated fleet."""

    def __init__(self, cluster: Any) -> None:
        super().__init__(cluster, settings=SETTINGS, timing=TIMING, layout=LAYOUT)

    def start_pool(self, pool: str) -> list[str]:
        """Start the agents of a pool and wait until each advertises itself; returns the nodes."""
        nodes = [n for n in workers(self.cluster) if n.startswith(f"{pool}-")]
        for node in nodes:
            self.start(node)
        gw = sc.gateway(self.cluster)
        _wait("agents advertised", lambda: all(o.backend == "agent" for n, o in sc.nodes(gw).items() if n in nodes))
        return nodes


def workers(cluster: Any) -> list[str]:
    return sorted(n for n in cluster.node_names if not n.startswith("cp"))


@contextmanager
def agent_cluster(tmp_path: Path, cluster_file: dict[str, Any], version: str = "1.31") -> Iterator[tuple[Any, Agents]]:
    """A kubesim cluster of ``cluster_file`` at x20 with an agent on every node (stopped after)."""
    from kubesim.cluster import Cluster

    path = tmp_path / "cluster.yaml"
    path.write_text(yaml.safe_dump(cluster_file))
    with Cluster(cluster_file=path, state_dir=tmp_path / "kubesim", time_scale=20, kubernetes_version=version,
                 allow_failed_nodes=False) as c:
        agents = Agents(c)
        try:
            yield c, agents
        finally:
            agents.stop_all()


@pytest.fixture
def modern(tmp_path: Path) -> Iterator[tuple[Any, Agents]]:
    with agent_cluster(tmp_path, modern_cluster_file(general=4, legacy=2, flagged=2)) as running:
        yield running


def _wait(what: str, check: Any, timeout: float = 60.0) -> None:
    import time

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if check():
            return
        time.sleep(0.3)
    raise AssertionError(f"timed out waiting for {what}")


def dropin(**fields: Any) -> str:
    return yaml.safe_dump({"apiVersion": "kubelet.config.k8s.io/v1beta1", "kind": "KubeletConfiguration", **fields})


def test_a_cluster_without_agents_is_refused_before_any_write(modern: tuple[Any, Agents]) -> None:
    c, agents = modern
    gw = sc.gateway(c)
    outcome = sc.run(name="no-agents", config=dropin(maxPods=77), policy=sc.policy(), kubeconfig=str(c.kubeconfig))
    assert outcome.outcome == "cluster-error", outcome
    assert "run no kubelet-rollout agent" in outcome.message and workers(c)[0] in outcome.message
    assert not any(n for n, o in sc.nodes(gw).items() if "kubelet-rollout.io/desired-config" in o.annotations)
    # `validate` says the same, with 1.31's advice (before: "enable the DynamicKubeletConfig gate",
    # which 1.31 does not have), and a drop-in draws no warnings about the fields it leaves out
    import json

    from typer.testing import CliRunner

    from rollout.kubeletconfig.runtime import WHOLE_CONFIG_RULES
    from rollout_cli.main import app

    path = c.state_dir / "dropin.yaml"
    path.write_text(dropin(maxPods=150))
    said = CliRunner().invoke(app, ["validate", "--config", str(path), "--kubeconfig", str(c.kubeconfig)],
                              env={"COLUMNS": "200"})
    assert said.exit_code == 3 and "run no kubelet-rollout agent" in said.output, said.output
    assert "enable the DynamicKubeletConfig gate" not in said.output, said.output
    agents.start_pool("general")
    general = c.state_dir / "general.yaml"
    general.write_text(sc.policy(nodes={"selector": "kubesim.kubelet-rollout.io/pool=general"}))
    judged = CliRunner().invoke(app, ["validate", "--config", str(path), "--kubeconfig", str(c.kubeconfig),
                                      "-p", str(general), "-o", "json"])
    assert judged.exit_code == 0, judged.output
    warnings = json.loads(judged.stdout).get("warnings", [])
    assert not any(rule in str(w) for w in warnings for rule in WHOLE_CONFIG_RULES), warnings
    # a 1.31 kubelet's own gates: SidecarContainers is one (before: "unrecognized" on every
    # cluster); DKC's, which a config of the DKC days may still set off, is gone since 1.26
    path.write_text(dropin(featureGates={"SidecarContainers": True}))
    gated = CliRunner().invoke(app, ["validate", "--config", str(path), "--kubeconfig", str(c.kubeconfig),
                                     "-p", str(general)], env={"COLUMNS": "200"})
    assert gated.exit_code == 0, gated.output
    path.write_text(dropin(featureGates={"SidecarContainers": True, "DynamicKubeletConfig": False}))
    gone = CliRunner().invoke(app, ["validate", "--config", str(path), "--kubeconfig", str(c.kubeconfig),
                                    "-p", str(general)], env={"COLUMNS": "200"})
    assert gone.exit_code == 2, gone.output
    assert "featureGates.DynamicKubeletConfig: a gate of kubelets 1.23 to 1.25; unknown to the kubelets of" \
        in gone.output and "(v1.31." in gone.output and "SidecarContainers" not in gone.output, gone.output


def shipped_policy_for_a_fast_clock(name: str) -> str:
    """A shipped policy as it is, except the waits no test can sit through: soak, maintenance
    windows and the recheck period shrink (kubesim's clock runs 20x; the agents' trial is 4 s)."""
    from rollout.policy.loading import DEFAULT_POLICY_DIR

    doc = yaml.safe_load((DEFAULT_POLICY_DIR / f"{name}.yaml").read_text())
    doc["done"] = {**doc.get("done", {}), "soak": "1s"}
    doc["maintenanceWindows"] = {"timezone": "UTC", "windows": []}
    doc["recheckEvery"] = "1s"
    doc["nodes"] = {**doc.get("nodes", {}), "selector": "kubesim.kubelet-rollout.io/pool=general"}
    if "analysis" in doc:  # the shipped checks as they are, measured every second, twice
        doc["analysis"]["checks"] = [{**check, "interval": "1s", "count": 2} for check in doc["analysis"]["checks"]]
    return yaml.safe_dump(doc, sort_keys=False)


def _approve_every_gate(name: str, approved: list[int]) -> bool:
    from flows.approval import answer_gate, pending_gates

    for gate in pending_gates(name):
        answer_gate(gate.flow_run_id, approved=True, approver="alice", comment="batch looks fine")
        approved.append(1)
    return False  # keep answering until the rollout ends


@pytest.mark.timeout(900)  # three rollouts of every batch: 300 s ran out twice on a loaded 2-CPU machine
def test_a_good_drop_in_rolls_through_every_batch_with_each_shipped_policy(modern: tuple[Any, Agents]) -> None:
    """Each shipped policy in turn on the same fleet (each rollout a new drop-in): canary first,
    then its batches, its gates answered; every node ends active == assigned (lastKnownGood too
    where the policy waits for it); ``rollout status`` and the report show it."""
    from rollout.policy import available_policies

    c, agents = modern
    gw = sc.gateway(c)
    general = agents.start_pool("general")
    # the shipped checks' 1 s windows on this clock hold two scrapes at this pace (start asks first);
    # 0.25 s starved the in-process API server on a loaded machine (every scrape crosses its node
    # proxy): the checks inconclusive, the run on its gates until the timeout (ci-30)
    with sc.prometheus(c, scrape_interval_s=0.5) as prom:
        verdicts = {name: _roll_a_shipped_policy(c, gw, general, prom, name, max_pods)
                    for max_pods, name in enumerate(available_policies(), start=71)}
    # the checks measured something: a batch passed by analysis (ci-35's loaded machine missed the
    # scrapes of every window of one policy's four batches: inconclusive, asked and answered)
    assert any("passed" in v for v in verdicts.values()), verdicts


def _roll_a_shipped_policy(c: Any, gw: Any, general: list[str], prom: Any, name: str, max_pods: int) -> list[str]:
    """One shipped policy's rollout, checked; its analysis verdicts, one per batch (none without analysis)."""
    from rollout.policy import load_policy_text
    from rollout.usecases.prepare import prepare
    from rollout.usecases.status import rollout_status

    policy_text = shipped_policy_for_a_fast_clock(name)
    policy = load_policy_text(policy_text)
    rollout = f"dropin-{name}"
    # a drop-in keeps the fields it omits: no warning that they fall back to v1beta1 defaults
    prepared = prepare(gw, name=rollout, policy=policy, observations=sc.nodes(gw),
                       config=dropin(maxPods=max_pods), configmap=None, validate=True)
    assert not [w for w in prepared.warnings if "omitted" in w], prepared.warnings
    approved: list[int] = []
    with sc.Background(lambda: _approve_every_gate(rollout, approved), every=0.5, timeout=300):
        outcome = sc.run_measured(c, prom, name=rollout, config=dropin(maxPods=max_pods), policy=policy_text,
                                  approval_poll_seconds=1)
    assert outcome.outcome == "completed", (name, outcome.message)
    j = sc.journal(gw, rollout)
    assert set(j.plan.nodes) == set(general) and len(j.plan.batches) >= 2, name
    assert len(j.plan.batches[0].nodes) == 1, "a canary of one node first"
    # one answer per gate: an inconclusive last batch once took the answer of the gate before it
    gates = sum(1 for b in j.batches if b.approval is not None and b.approval.by == "alice")
    assert gates == len(approved), (name, gates, len(approved))
    # the policy's own gates, each asked and answered (a loaded machine may miss a scrape of the 1 s
    # windows: a gate asked about an inconclusive analysis, analysis.onInconclusive: ask, is answered
    # alike, and may be the policy's own gate too: cautious on four nodes has one, after its canary)
    own = [i for i in range(len(j.plan.batches)) if j.plan.approval_after(i)]
    assert bool(own) == (policy.approval.after not in ("none", ())), name
    assert all((a := j.batches[i].approval) is not None and a.by == "alice" for i in own), (name, own)
    observed = sc.nodes(gw)
    for node in general:
        assert observed[node].backend == "agent"
        assert j.target.same_reference(observed[node].active) and observed[node].active == observed[node].assigned
        if policy.done.until.value == "lastKnownGood":
            assert j.target.same_reference(observed[node].last_known_good), (name, node)
        assert sc.configz_field(gw, node, "maxPods") == max_pods
    status = rollout_status(gw, rollout)
    assert {n["backend"] for n in status["nodes"]} == {"agent"}
    assert all(n in outcome.report for n in general), name
    if not policy.analysis.enabled:
        return []
    # a maxPods change cannot make the pods wait for the image puller: its check is left out, and said
    watched = {ch.name for ch in policy.analysis.checks if ch.when is not None}
    assert watched and not watched & {ch.name for ch in j.plan.policy.analysis.checks}, (name, watched)
    assert all(any(f"check {w} left out" in caveat for caveat in j.plan.caveats) for w in watched), j.plan.caveats
    # the shipped checks ran on every batch, and none failed; a loaded machine may miss the
    # scrapes of a batch's 1 s windows: inconclusive, and answered (the caller asks for a pass)
    verdicts = [a["verdict"] for a in status["analysis"]]
    assert len(verdicts) == len(j.plan.batches) and "failed" not in verdicts, (name, verdicts)
    return verdicts


def test_an_evicting_drop_in_fails_its_canary_by_analysis_while_every_node_stays_ready(
        modern: tuple[Any, Agents]) -> None:
    """Modern mode works the same: the agent's drop-in evicts pods on the canary, Prometheus sees
    it through the node proxy, the analysis fails the canary and the agent brings it back."""
    from rollout.journal import AnalysisVerdict

    c, agents = modern
    gw = sc.gateway(c)
    agents.start_pool("general")
    # a range bridges the scrapes a loaded machine misses around the kubelet's restart; an
    # inconclusive analysis fails the batch rather than ask a gate nobody here answers
    evictions = {"name": "evictions", "query": 'sum by (node) (max_over_time(kubelet_evictions{node=~"{{nodes}}"}[30s]))',
                 "condition": "< 1", "noData": "inconclusive", "interval": "2s", "count": 3}
    policy = sc.policy(steps=[1, "100%"], maxUnavailable=4, nodes={"selector": "kubesim.kubelet-rollout.io/pool=general"},
                       analysis={"checks": [evictions], "onInconclusive": "fail"})
    with sc.prometheus(c) as prom:
        outcome = sc.run_measured(c, prom, name="dropin-evicts", config=dropin(evictionHard={"memory.available": "12Gi"}),
                                  policy=policy)
    assert outcome.outcome == "reverted", outcome.message
    j = sc.journal(gw, "dropin-evicts")
    canary = j.plan.batches[0].nodes[0]
    assert j.assigned_nodes() == [canary] and "evictions" in outcome.message and canary in outcome.message
    assert j.batches[0].analysis is not None and j.batches[0].analysis.nodes == (canary,)
    assert j.batches[0].analysis.verdict is AnalysisVerdict.FAILED, j.batches[0].analysis
    assert all(o.is_ready for o in sc.nodes(gw).values())


def test_a_drop_in_that_leaves_pods_no_room_fails_its_canary_by_the_shipped_capacity_checks(
        modern: tuple[Any, Agents]) -> None:
    """Issue 37 on 1.31: the agent's drop-in reserves 11Gi + 3.5Gi of a 16Gi host; every node stays
    Ready, the shipped canary's capacity check (kube-state-metrics' allocatable against what the
    control's median node requests) fails the canary, and the agent brings it back."""
    from rollout.policy.loading import DEFAULT_POLICY_DIR

    c, agents = modern
    gw = sc.gateway(c)
    agents.start_pool("general")
    shipped = {ch["name"]: ch for ch in yaml.safe_load((DEFAULT_POLICY_DIR / "canary.yaml").read_text())
               ["analysis"]["checks"]}
    # One measurement without data is let pass: kubesim serves kube-state-metrics' series from each
    # node's own endpoint, so a scrape that falls in the canary kubelet's restart marks them stale,
    # and at a 2 s interval the first measurement can come before the next scrape (ci-42).
    checks = [{**shipped[n], "interval": "2s", "inconclusiveLimit": 1}
              for n in ("allocatable-pods-vs-control", "allocatable-memory-vs-control")]
    policy = sc.policy(steps=[1, "100%"], maxUnavailable=4, nodes={"selector": "kubesim.kubelet-rollout.io/pool=general"},
                       analysis={"checks": checks, "onInconclusive": "fail"})
    with sc.prometheus(c) as prom:
        outcome = sc.run_measured(c, prom, name="dropin-reserves", policy=policy,
                                  config=dropin(kubeReserved={"memory": "11Gi"}, systemReserved={"memory": "3.5Gi"}))
    assert outcome.outcome == "reverted", outcome.message
    j = sc.journal(gw, "dropin-reserves")
    canary = j.plan.batches[0].nodes[0]
    assert j.assigned_nodes() == [canary] and "allocatable-memory-vs-control" in outcome.message
    assert j.batches[0].analysis is not None and j.batches[0].analysis.nodes == (canary,)
    assert all(o.is_ready for o in sc.nodes(gw).values())


def test_a_crash_looping_drop_in_is_caught_and_the_agent_brings_the_canary_back(modern: tuple[Any, Agents]) -> None:
    c, agents = modern
    gw = sc.gateway(c)
    agents.start_pool("legacy")
    policy = sc.policy(steps=[1, "100%"], maxUnavailable=2, nodes={"selector": "kubesim.kubelet-rollout.io/pool=legacy"},
                       allowFields=["cgroupDriver"])
    outcome = sc.run(name="dropin-crash", config=dropin(cgroupDriver="systemd"), policy=policy,
                     kubeconfig=str(c.kubeconfig))
    assert outcome.outcome in ("reverted", "halted"), outcome.message
    j = sc.journal(gw, "dropin-crash")
    canary = j.plan.batches[0].nodes[0]
    assert j.assigned_nodes() == [canary], "nothing beyond the canary was assigned"
    _wait("canary Ready on its previous config", lambda: sc.nodes(gw)[canary].is_ready
          and sc.configz_field(gw, canary, "cgroupDriver") == "cgroupfs", timeout=120)


def test_a_crash_looping_drop_in_is_caught_on_the_canary_under_the_shipped_fast_policy(modern: tuple[Any, Agents]) -> None:
    """The shipped ``fast`` policy waits for nothing after ``active`` (soak 0s). On the legacy hosts
    the drop-in's kubelet lives its first moments (configz proves every field) and then dies. The
    agent reports the drop-in active only once the kubelet stayed up through its health wait, so
    the canary fails and the rollout halts with nothing assigned beyond it. (Before the fix the
    canary was reported active at its proof, counted done, and batch 2 was assigned.)"""
    from rollout.policy.loading import DEFAULT_POLICY_DIR

    c, agents = modern
    gw = sc.gateway(c)
    agents.start_pool("legacy")
    doc = yaml.safe_load((DEFAULT_POLICY_DIR / "fast.yaml").read_text())
    assert doc["done"]["soak"] == "0s" and doc["failureAction"] == "halt"
    doc["nodes"] = {**doc["nodes"], "selector": "kubesim.kubelet-rollout.io/pool=legacy"}
    doc["allowFields"] = ["cgroupDriver"]  # the change that cannot run on these hosts is reboot-class
    doc["recheckEvery"] = "1s"  # kubesim's clock runs 20x
    outcome = sc.run(name="fast-crash", config=dropin(cgroupDriver="systemd"), policy=yaml.safe_dump(doc),
                     kubeconfig=str(c.kubeconfig))
    assert outcome.outcome == "halted", outcome.message
    j = sc.journal(gw, "fast-crash")
    canary = j.plan.batches[0].nodes[0]
    assert len(j.plan.batches) >= 2
    assert j.assigned_nodes() == [canary], "batch 2 was assigned"
    assert not _node_event_messages(gw, canary, agent_names.EVENT_ACTIVE), "reported active"


def test_a_field_a_flag_overrides_halts_the_rollout_and_is_never_promoted(modern: tuple[Any, Agents]) -> None:
    c, agents = modern
    gw = sc.gateway(c)
    flagged = agents.start_pool("flagged")
    policy = sc.policy(steps=[1, "100%"], maxUnavailable=2, failureAction="halt",
                       nodes={"selector": "kubesim.kubelet-rollout.io/pool=flagged"})
    outcome = sc.run(name="dropin-flag", config=dropin(maxPods=50), policy=policy, kubeconfig=str(c.kubeconfig))
    assert outcome.outcome == "halted", outcome.message
    assert "maxPods" in outcome.message
    j = sc.journal(gw, "dropin-flag")
    observed = sc.nodes(gw)
    assert not any(j.target.same_reference(observed[n].last_known_good) for n in flagged), "promoted"


def test_the_guard_alone_rescues_a_crash_loop_while_the_agent_is_down(modern: tuple[Any, Agents]) -> None:
    """The agent process SIGKILLed right after it restarted the kubelet onto a crash-looping
    drop-in, and kept down: the host-side guard brings the node back on its previous config within
    its threshold plus one start; the agent, once back, reports the error and the orchestrator
    reverts per policy."""
    c, _ = modern
    gw = sc.gateway(c)
    legacy = [n for n in workers(c) if n.startswith("legacy-")]
    procs = {node: _agent_process(c, node, "restart") for node in legacy}
    try:
        _wait("agents advertised", lambda: all(sc.nodes(gw)[n].backend == "agent" for n in legacy))
        policy = sc.policy(steps=[1, "100%"], maxUnavailable=2, allowFields=["cgroupDriver"],
                           nodes={"selector": "kubesim.kubelet-rollout.io/pool=legacy"}, progressDeadline="3m")
        result: dict[str, Any] = {}
        runner = threading.Thread(target=lambda: result.update(outcome=sc.run(
            name="guarded", config=dropin(cgroupDriver="systemd"), policy=policy, kubeconfig=str(c.kubeconfig))),
            daemon=True)
        runner.start()
        _wait("an agent killed right after restarting its kubelet",
              lambda: any(p.poll() is not None for p in procs.values()), timeout=90)
        canary = next(n for n, p in procs.items() if p.poll() is not None)
        assert procs[canary].returncode == -signal.SIGKILL
        _wait("the guard alone put the node back on its previous config", lambda: sc.nodes(gw)[canary].is_ready
              and sc.configz_field(gw, canary, "cgroupDriver") == "cgroupfs", timeout=120)
        state_dir = Path(c.host(canary).root) / agent_names.DEFAULT_STATE_DIR.lstrip("/")
        record = yaml.safe_load((state_dir / agent_names.GUARD_RECORD_FILE).read_text())
        assert record["starts"] <= SETTINGS.crash_threshold + 1, record
        procs[canary] = _agent_process(c, canary, None)  # the agent comes back
        runner.join(timeout=240)
        outcome = result["outcome"]
        assert outcome.outcome == "reverted", outcome.message
        assert canary in outcome.message
        # back, the agent adopted the guard's record: it reported the error (whatever the
        # orchestrator's revert asked of it afterwards)
        _wait("the agent reported the guard's rollback", lambda: any(
            "host guard restored" in m for m in _node_event_messages(gw, canary, agent_names.EVENT_FAILED)))
    finally:
        for proc in procs.values():
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait(timeout=10)


def test_a_drop_in_the_kubelet_rejects_is_refused_by_the_agent_and_reverted(modern: tuple[Any, Agents]) -> None:
    """Our own review skipped (a rehearsal): the agent's check of the merged config refuses it on the
    canary, reports the error, and the orchestrator applies the failure action at once."""
    c, agents = modern
    gw = sc.gateway(c)
    general = agents.start_pool("general")
    policy = sc.policy(steps=[1, "100%"], maxUnavailable=4, nodes={"selector": "kubesim.kubelet-rollout.io/pool=general"})
    outcome = sc.run(name="dropin-rejected", config=dropin(healthzPort=70000), policy=policy,
                     kubeconfig=str(c.kubeconfig), skip_validation=True)
    assert outcome.outcome == "reverted", outcome.message
    j = sc.journal(gw, "dropin-rejected")
    canary = j.plan.batches[0].nodes[0]
    assert j.assigned_nodes() == [canary]
    assert sc.configz_field(gw, canary, "healthzPort") != 70000


def test_a_drop_in_a_later_foreign_drop_in_overrides_is_refused_before_any_restart(tmp_path: Path) -> None:
    """Hosts with a real foreign ``99-other.conf`` (imageGC low 70) in ``--config-dir``: the kubelet
    applies it after our ``90-kubelet-rollout.conf``. A drop-in of high 65 / low 60 is invalid the
    kubelet's way (low 70 over high 65) and our low never runs. ``rollout plan`` shows the file
    that wins, the rollout is refused before any write naming the file and the field; with our
    review skipped, the agent's own check refuses it on the canary. No kubelet restarts.
    (Before the fix both merged ours last: plan showed 70 -> 60 and the canary crash-looped.)"""
    from kubesim.cluster import Cluster
    from rollout.usecases import preview_plan

    doc = modern_cluster_file(general=0)
    doc["pools"] = [doc["pools"][0], {**modern_cluster_file(general=2)["pools"][1], "name": "foreign"}]
    doc["pools"][1]["kubelet"] = {**doc["pools"][1]["kubelet"], "dropins": {"99-other.conf": {"imageGCLowThresholdPercent": 70}}}
    path = tmp_path / "cluster.yaml"
    path.write_text(yaml.safe_dump(doc))
    with Cluster(cluster_file=path, state_dir=tmp_path / "kubesim", time_scale=20, kubernetes_version="1.31",
                 allow_failed_nodes=False) as c:
        gw = sc.gateway(c)
        agents = Agents(c)
        try:
            foreign = agents.start_pool("foreign")
            restarts = {n: _kubelet_restarts(c, agents.admin, n) for n in foreign}
            config = dropin(imageGCHighThresholdPercent=65, imageGCLowThresholdPercent=60)
            policy_text = sc.policy(steps=[1, "100%"], maxUnavailable=2,
                                    nodes={"selector": "kubesim.kubelet-rollout.io/pool=foreign"})
            policy_file = tmp_path / "policy.yaml"
            policy_file.write_text(policy_text)

            plan = preview_plan(gw, config_text=config, policy_ref=str(policy_file), selector=None, rollout="foreign")
            for node in foreign:
                changes = {ch["field"]: ch for ch in plan["changes"][node]}
                assert changes["imageGCHighThresholdPercent"]["new"] == 65
                low = changes["imageGCLowThresholdPercent"]
                assert (low["old"], low["new"], low.get("dropin")) == (70, 70, 60), low
                assert low["overriddenBy"] == "99-other.conf" and low["refused"] is True

            outcome = sc.run(name="foreign", config=config, policy=policy_text, kubeconfig=str(c.kubeconfig))
            assert outcome.outcome == "invalid", outcome.message
            assert "99-other.conf" in outcome.message and "imageGCLowThresholdPercent" in outcome.message
            assert not any(agent_names.ANN_DESIRED in sc.nodes(gw)[n].annotations for n in foreign)

            outcome = sc.run(name="foreign-unreviewed", config=config, policy=policy_text,
                             kubeconfig=str(c.kubeconfig), skip_validation=True)
            assert outcome.outcome in ("reverted", "halted"), outcome.message
            canary = sc.journal(gw, "foreign-unreviewed").plan.batches[0].nodes[0]
            assert sc.journal(gw, "foreign-unreviewed").assigned_nodes() == [canary]
            [refusal] = _node_event_messages(gw, canary, agent_names.EVENT_REFUSED)
            assert "imageGCLowThresholdPercent is set to 70 by 99-other.conf" in refusal, refusal
            assert "99-other.conf" in outcome.message
            assert {n: _kubelet_restarts(c, agents.admin, n) for n in foreign} == restarts
            assert all(sc.configz_field(gw, n, "imageGCLowThresholdPercent") == 70 for n in foreign)
        finally:
            agents.stop_all()


# -- kill -9 of a real agent process at each of its steps ----------------------------------------

def _seconds(span: timedelta) -> str:
    return f"{span.total_seconds():g}s"


# the same settings as the in-process agents, as `kubelet-rollout-agent run` flags (wall-clock
# values: --time-scale 1, where the agent would take them on kubesim's clock)
AGENT_FLAGS = ["--trial", _seconds(SETTINGS.trial), "--health-deadline", _seconds(SETTINGS.health_deadline),
               "--health-wait", _seconds(SETTINGS.health_wait),
               "--crash-threshold", str(SETTINGS.crash_threshold), "--tick", _seconds(TIMING.tick),
               "--resync", _seconds(TIMING.resync), "--guard-python", LAYOUT.python, "--time-scale", "1"]


def _agent_identity(c: Any, tmp_path: Path) -> Path:
    """The agent's shipped RBAC applied with the real ``kubectl apply -f`` (less the admission
    policy, a 1.30+ API kubesim does not serve); a kubeconfig of its ServiceAccount."""
    from tests.kubesim.kubectl_helpers import BINARIES, Kubectl

    if not BINARIES:
        pytest.skip("kubectl is not installed")
    deployments = ROOT / "deployments" / "kubernetes"
    docs = [d for d in yaml.safe_load_all((deployments / "agent-rbac.yaml").read_text())
            if d and not d["kind"].startswith("ValidatingAdmissionPolicy")]
    rbac = tmp_path / "agent-rbac.yaml"
    rbac.write_text(yaml.safe_dump_all(docs))
    (tmp_path / "kubectl-home").mkdir()
    kubectl = Kubectl(BINARIES[0], c.kubeconfig, tmp_path / "kubectl-home")
    kubectl.run("apply", "-f", str(deployments / "rbac.yaml"), "-f", str(rbac))
    return Path(c.service_account_kubeconfig("kubelet-rollout-agent", "kubelet-rollout"))


def _agent_process(c: Any, node: str, kill_at: str | None, kubeconfig: Path | None = None) -> subprocess.Popen[bytes]:
    """``kubelet-rollout-agent run`` for one simulated host, as its own process."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}
    env.pop(failpoint.ENV, None)
    if kill_at:
        env[failpoint.ENV] = kill_at
    root = Path(c.host(node).root)
    return subprocess.Popen([sys.executable, "-m", "kubelet_rollout_agent", "run", "--kubeconfig", str(kubeconfig or c.kubeconfig),
                             "--node", node, "--host-root", str(root), "--host-control", "kubesim", *AGENT_FLAGS],
                            env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)


def _config_dir_files(c: Any, node: str) -> dict[str, bytes]:
    """The files in the node's ``--config-dir`` as they are now. A file that goes between the
    listing and its read is the agent's temporary one, renamed into place or removed meanwhile:
    it is left out, as a reader one moment later would not see it."""
    config_dir = Path(c.host(node).root) / agent_names.DEFAULT_CONFIG_DIR.lstrip("/")
    files: dict[str, bytes] = {}
    for path in config_dir.iterdir() if config_dir.is_dir() else ():
        try:
            files[path.name] = path.read_bytes()
        except FileNotFoundError:
            continue
    return files


def _node_event_messages(gw: Any, node: str, reason: str) -> list[str]:
    events = gw.core.list_namespaced_event(agent_names.EVENT_NAMESPACE)
    return [e.message or "" for e in events.items if e.reason == reason and e.involved_object.name == node]


def _kubelet_restarts(c: Any, admin: Any, node: str) -> int:
    """``systemctl restart kubelet`` calls the host's journal shows (systemd logs each stop)."""
    from kubelet_rollout_agent.kubesim_host import KubesimHost

    host = KubesimHost(node, root=Path(c.host(node).root), raw=admin)
    return sum("Stopping kubelet.service" in line for line in host.journal(lines=1000))


def test_an_agent_killed_at_each_step_leaves_no_half_written_file_and_converges(tmp_path: Path) -> None:
    """Five hosts; each agent process is SIGKILLed at another step (download, write, restart,
    health wait, promotion) and kept down for a while; the one killed mid-write is killed again
    mid-trial once it is back. Meanwhile no ``.conf`` but ours is in
    ``--config-dir`` and ours is always a whole file; each node runs a config that validates.
    Started again, each agent finishes the job: the rollout completes to lastKnownGood, and each
    kubelet was restarted once for it (a kill right after the restart does not restart it again).
    The agents run as the ServiceAccount of the shipped agent RBAC: it is enough."""
    from kubesim.cluster import Cluster

    path = tmp_path / "cluster.yaml"
    path.write_text(yaml.safe_dump(modern_cluster_file(general=len(failpoint.STEPS))))
    with Cluster(cluster_file=path, state_dir=tmp_path / "kubesim", time_scale=20, kubernetes_version="1.31",
                 allow_failed_nodes=False) as c:
        gw = sc.gateway(c)
        fleet = AgentFleet(c, settings=SETTINGS, timing=TIMING, layout=LAYOUT)
        # each node's agent dies at these steps in turn (kept down 3 s each time), then runs on;
        # the one killed mid-write is killed again mid-trial when it comes back
        plans = {node: [step] + (["health-wait"] if step == "write" else [])
                 for node, step in zip(workers(c), failpoint.STEPS)}
        kill_at = {node: plan[0] for node, plan in plans.items()}
        identity = _agent_identity(c, tmp_path)  # least privilege: the agents run as the shipped SA
        procs = {node: _agent_process(c, node, plan.pop(0), identity) for node, plan in plans.items()}
        try:
            _wait("agents advertised", lambda: all(sc.nodes(gw)[n].backend == "agent" for n in kill_at))
            before = {n: _config_dir_files(c, n) for n in kill_at}
            restarts = {n: _kubelet_restarts(c, fleet.admin, n) for n in kill_at}
            config = dropin(maxPods=77)
            policy = sc.policy(steps=[1, "100%"], maxUnavailable=len(kill_at), progressDeadline="3m",
                               nodes={"selector": "kubesim.kubelet-rollout.io/pool=general"})
            result: dict[str, Any] = {}
            runner = threading.Thread(target=lambda: result.update(outcome=sc.run(
                name="agent-kills", config=config, policy=policy, kubeconfig=str(c.kubeconfig))), daemon=True)
            runner.start()
            down_since: dict[str, float] = {}
            running_free: set[str] = set()  # agents started again with no kill left to take
            deadline = time.monotonic() + 180
            while running_free != set(kill_at):
                assert time.monotonic() < deadline, f"agents never reached their kill steps: {plans}"
                ended = result.get("outcome")
                assert ended is None or ended.outcome == "completed", ended.message
                for node, step in kill_at.items():
                    files = _config_dir_files(c, node)
                    ours = {k: v for k, v in files.items() if k.endswith(".conf")}
                    assert set(ours) <= {agent_names.DROPIN_NAME}, (step, sorted(files))
                    if agent_names.DROPIN_NAME in ours:  # whole: the old file, or a complete new one
                        assert yaml.safe_load(ours[agent_names.DROPIN_NAME]).get("maxPods") == 77 \
                            or ours == {k: v for k, v in before[node].items() if k.endswith(".conf")}, step
                    if node not in down_since and procs[node].poll() is not None:
                        assert procs[node].returncode == -signal.SIGKILL, (step, procs[node].returncode)
                        down_since[node] = time.monotonic()
                    elif node in down_since and time.monotonic() - down_since[node] > 3.0:
                        del down_since[node]
                        assert sc.nodes(gw)[node].is_ready, f"{node} not Ready while its agent is down ({step})"
                        next_kill = plans[node].pop(0) if plans[node] else None
                        procs[node] = _agent_process(c, node, next_kill, identity)  # back (no fault at last)
                        if next_kill is None:
                            running_free.add(node)
                time.sleep(0.05)
            runner.join(timeout=240)
            outcome = result["outcome"]
            assert outcome.outcome == "completed", outcome.message
            j = sc.journal(gw, "agent-kills")
            _wait("every node promoted the drop-in", lambda: all(
                j.target.same_reference(o.last_known_good) for n, o in sc.nodes(gw).items() if n in kill_at), timeout=60)
            for node, step in kill_at.items():
                assert sc.configz_field(gw, node, "maxPods") == 77, step
                assert sorted(_config_dir_files(c, node)) == [agent_names.DROPIN_NAME], step
                assert _kubelet_restarts(c, fleet.admin, node) - restarts[node] == 1, step
        finally:
            for proc in procs.values():
                if proc.poll() is None:
                    os.killpg(proc.pid, signal.SIGKILL)
                    proc.wait(timeout=10)
