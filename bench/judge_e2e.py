#!/usr/bin/env python
"""A sample of the judge benchmark's canaries end to end: kubesim, a real Prometheus, `rollout start`.

``bench/judge_quality.py`` judges thousands of canaries on kubesim's workload model stepped
directly, its PromQL evaluated by ``bench/promql_subset.py``. Here a sample of the same canaries
runs as a person's rehearsal runs (README, "Analysis"): a kubesim cluster (Kubernetes 1.23, Dynamic
Kubelet Config) whose nodes carry the same names, base config, host facts, fleet noise and seed as
the direct run's, ``rollout prometheus`` scraping every kubelet through the API server's node proxy,
and ``rollout start`` with the shipped policy at ``--time-scale``, its config written after the
same warm-up. ``--version 1.31``: Kubernetes 1.31 hosts (no DKC) whose node agents
(``kubelet-rollout-agent run --kubesim-fleet``, on kubesim's clock) write the rollout's drop-in,
the scenario's fields alone (A/A: ``eventRecordQPS``, which no workload reads), and restart the
kubelet onto it. Its verdict (the batch whose analysis failed and the checks that failed it, or
completed) is set beside the direct one for the same scenario, seed, nodes and batches (the real
rollout's plan, handed to the direct run).

The two runs share every draw up to the first write; after it the cluster's kubelets restart on
their own clock (startup delays, a status period, Prometheus' 15 s scrapes against the direct
run's 10 s), so a borderline measurement may fall either way: agreement is what is measured.
A check that is inconclusive passes here (``analysis.onInconclusive: pass``, where the shipped
policy asks a person; the direct run goes on as if one approved).

Usage: ``python bench/judge_e2e.py [--samples 2] [--first 0] [--scenarios "A/A,eviction-hard,..."] [--seed 21]
[--nodes 20] [--time-scale 20] [--policy canary] [--version 1.23|1.31]``; prints a table (bench/README.md, by hand).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

sys.path.insert(0, str(Path(__file__).resolve().parent))
import judge_quality as jq  # noqa: E402 - a sibling module of the benchmark

from rollout.policy import DEFAULT_POLICY_DIR, load_policy_text  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
VERSIONS = ("1.23", "1.31")
# a 1.31 host as the modern rollouts run it (bench/rollout_scale.py): systemd keeps its kubelet up
MODERN_HOST = {"cgroupDriver": "systemd", "swap": False}
MODERN_KUBELET = {"config": {"cgroupDriver": "systemd"}, "unit": {"restart": "always", "restartSec": "10s"}}
AA_DROPIN = {"eventRecordQPS": 51}  # a change no workload reads: the config written again, as a drop-in
DEFAULT_SCENARIOS = ("A/A", "eviction-hard", "reserved-memory", "max-pods", "log-rotation", "pull-qps")


@dataclass(frozen=True)
class Verdict:
    halted_batch: int | None  # 0: the canary; None: completed
    checks: tuple[str, ...]
    refused: str = ""  # `rollout start` refused the config: nothing ran

    def __str__(self) -> str:
        if self.refused:
            return self.refused
        if self.halted_batch is None:
            return "completed"
        return f"halted in batch {self.halted_batch}: {', '.join(self.checks) or '?'}"


def cluster_file(scenario: jq.Scenario, nodes: int, seed: int, *, write_s: float = 0.0, horizon_s: float = 0.0,
                 version: str = "1.23") -> str:
    """The direct run's fleet as a cluster file: the same base config, host facts, noise and seed
    (the direct run takes this file's node names, ``node-1`` ...). A scenario with a fleet-wide
    shift gets it as the direct run does: mid-way through the canary's analysis (``write_s``: the
    first write on the cluster's clock, ``horizon_s``: the analysis' length), on every node."""
    modern = version != "1.23"
    pool: dict[str, Any] = {"name": "node", "count": nodes}
    if scenario.host or modern:
        pool["host"] = {**(MODERN_HOST if modern else {}), **scenario.host}
    if scenario.base or modern:
        kubelet = MODERN_KUBELET if modern else {"config": {}}
        pool["kubelet"] = {**kubelet, "config": {**kubelet["config"], **scenario.base}}
    noise: dict[str, Any] = {**jq.NOISE, "seed": seed}
    if scenario.shift:
        at = write_s + jq.RESTART_S + horizon_s / 2
        noise["shifts"] = [{"at": f"{at:.0f}s", "for": "1h", "podStart": jq.SHIFT["pod_start"],
                            "memory": jq.SHIFT["memory"], "churn": jq.SHIFT["churn"]}]
    doc = {"apiVersion": "kubesim.kubelet-rollout.io/v1", "kind": "Cluster", "kubernetesVersion": version,
           "noise": noise, "pools": [{"name": "control-plane", "count": 1, "controlPlane": True}, pool]}
    return yaml.safe_dump(doc, sort_keys=False)


def policy_text(name: str) -> str:
    doc = yaml.safe_load((DEFAULT_POLICY_DIR / f"{name}.yaml").read_text())
    doc["analysis"]["onInconclusive"] = "pass"  # nobody answers a gate here (see the module doc)
    return yaml.safe_dump(doc, sort_keys=False)


def _wait_line(path: Path, text: str, proc: subprocess.Popen[bytes], timeout: float) -> str:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for line in path.read_text(errors="replace").splitlines():
            if text in line:
                return line
        if proc.poll() is not None:
            raise RuntimeError(f"{proc.args!r} exited {proc.returncode}: {path.read_text()[-2000:]}")
        time.sleep(0.5)
    raise RuntimeError(f"no {text!r} in {path} within {timeout:.0f} s")


def run_end_to_end(scenario: jq.Scenario, seed: int, args: argparse.Namespace,
                   work: Path) -> tuple[Verdict, list[tuple[str, ...]], list[str]]:
    """The real rollout: its verdict, its batches, the worker nodes' names."""
    work.mkdir(parents=True)
    # the direct run writes after its warm-up (its last part the checks' history): so does this one
    policy = load_policy_text(policy_text(args.policy))
    checks = policy.analysis.checks
    horizon = max([c.interval.total_seconds() * c.count for c in checks] + [policy.done.soak.total_seconds()])
    write_s = max(jq.WARM_UP_S, jq.history_s(checks, horizon)) + jq.RESTART_S
    (work / "cluster.yaml").write_text(cluster_file(scenario, args.nodes, seed, write_s=write_s, horizon_s=horizon,
                                                    version=args.version))
    (work / "policy.yaml").write_text(policy_text(args.policy))
    env = {**os.environ, "PREFECT_SERVER_ANALYTICS_ENABLED": "false"}
    bin_dir = Path(sys.executable).parent
    procs: list[subprocess.Popen[bytes]] = []
    try:
        sim = subprocess.Popen([str(bin_dir / "kubesim"), "up", "--cluster", str(work / "cluster.yaml"),
                                "--kubeconfig", str(work / "kc"), "--state-dir", str(work / "st"), "--time-scale",
                                f"{args.time_scale:g}"], stdout=open(work / "kubesim.ready", "wb"),
                               stderr=subprocess.STDOUT, cwd=work, env=env)
        procs.append(sim)
        _wait_line(work / "kubesim.ready", "kubesim ready", sim, 300)
        ready_at = time.monotonic()
        prom = subprocess.Popen([str(bin_dir / "rollout"), "prometheus", "--kubeconfig", str(work / "kc"),
                                 "--time-scale", f"{args.time_scale:g}", "--port", "0"],
                                stdout=open(work / "prometheus.ready", "wb"), stderr=subprocess.STDOUT, cwd=work,
                                env=env)
        procs.append(prom)
        line = _wait_line(work / "prometheus.ready", "prometheus ready", prom, 300)
        url = next(part.split("=", 1)[1] for part in line.split() if part.startswith("url="))
        if args.version == "1.23":
            exported = subprocess.run([str(bin_dir / "rollout"), "export", "node-1", "--kubeconfig",
                                       str(work / "kc"), "-o", "yaml"], capture_output=True, text=True, check=True,
                                      env=env)
            doc = yaml.safe_load(exported.stdout)
            doc.update(scenario.config)  # A/A: the base config written again
        else:  # the node agents: a drop-in of the scenario's fields
            agents = subprocess.Popen([sys.executable, "-m", "kubelet_rollout_agent", "run", "--kubeconfig",
                                       str(work / "kc"), "--kubesim-fleet", str(work / "st"), "--tick", "1s",
                                       "--time-scale", f"{args.time_scale:g}"],
                                      stdout=open(work / "agents.log", "wb"), stderr=subprocess.STDOUT, cwd=work,
                                      env=env)
            procs.append(agents)
            doc = {"apiVersion": "kubelet.config.k8s.io/v1beta1", "kind": "KubeletConfiguration",
                   **(dict(scenario.config) or AA_DROPIN)}
        (work / "kubelet.yaml").write_text(yaml.safe_dump(doc, sort_keys=False))
        write_at = ready_at + write_s / args.time_scale
        time.sleep(max(0.0, write_at - time.monotonic()))
        started = subprocess.run([str(bin_dir / "rollout"), "start", "-c", str(work / "kubelet.yaml"), "--policy",
                                  str(work / "policy.yaml"), "--name", "e2e", "--kubeconfig", str(work / "kc"),
                                  "--time-scale", f"{args.time_scale:g}", "-o", "json"],
                                 capture_output=True, text=True, cwd=work, timeout=1800,
                                 env={**env, "KUBELET_ROLLOUT_PROMETHEUS_URL": url})
        status = subprocess.run([str(bin_dir / "rollout"), "status", "e2e", "--kubeconfig", str(work / "kc"),
                                 "-o", "json"], capture_output=True, text=True, cwd=work, env=env, timeout=300)
        (work / "start.json").write_text(started.stdout + started.stderr)
        if not status.stdout.strip().startswith("{"):  # no rollout to show: start refused it (its words)
            try:
                said = str(json.loads(started.stdout)["message"])
            except (ValueError, KeyError):
                said = started.stderr or started.stdout or f"exit {started.returncode}"
            return Verdict(None, (), f"refused: {said.strip()[:300]}"), [], []
        data = json.loads(status.stdout)
        (work / "status.json").write_text(status.stdout)
        limits = {c.name: c.failure_limit for c in policy.analysis.checks}
        return _verdict(data, limits), _batches(data), [f"node-{i}" for i in range(1, args.nodes + 1)]
    finally:
        for proc in reversed(procs):
            proc.terminate()
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                proc.kill()


def _batches(status: dict[str, Any]) -> list[tuple[str, ...]]:
    """The rollout's plan: its nodes grouped by batch (``batch`` counts from 1), in order."""
    by_batch: dict[int, list[str]] = {}
    for node in status["nodes"]:
        by_batch.setdefault(int(node["batch"]), []).append(node["name"])
    return [tuple(by_batch[index]) for index in sorted(by_batch)]


def _verdict(status: dict[str, Any], limits: dict[str, int]) -> Verdict:
    """The first batch whose analysis failed, and its checks that failed more often than their
    ``failureLimit``."""
    for analysis in status["analysis"]:
        if analysis.get("verdict") == "failed":
            failed = tuple(c["name"] for c in analysis["checks"] if c["failed"] > limits.get(c["name"], 0))
            return Verdict(int(analysis["batch"]) - 1, failed)
    return Verdict(None, ())


def run_direct(scenario: jq.Scenario, seed: int, args: argparse.Namespace, names: list[str],
               batches: list[tuple[str, ...]]) -> Verdict:
    """The same canary stepped directly (bench/judge_quality.py), on the real rollout's plan."""
    policy = load_policy_text(policy_text(args.policy))
    jq._POLICIES.clear()
    jq._POLICIES[args.policy] = policy
    jq._WANTED = jq.wanted_metrics([policy])
    outcome = jq.simulate(scenario, args.policy, policy, seed, args.nodes, args.version, names=names, batches=batches)
    return Verdict(outcome.halted_batch, tuple(outcome.checks))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--samples", type=int, default=2, help="canaries per scenario")
    parser.add_argument("--scenarios", default=",".join(DEFAULT_SCENARIOS))
    parser.add_argument("--seed", type=int, default=21)
    parser.add_argument("--first", type=int, default=0,
                        help="the first sample's index: seeds SEED*1,000,000+FIRST on (a canary of judge_quality's)")
    parser.add_argument("--nodes", type=int, default=20)
    parser.add_argument("--time-scale", type=float, default=20.0)
    parser.add_argument("--policy", default="canary", help="a shipped policy")
    parser.add_argument("--workdir", type=Path)
    parser.add_argument("--version", choices=VERSIONS, default="1.23",
                        help="1.23: Dynamic Kubelet Config; 1.31: node agents writing a drop-in")
    args = parser.parse_args()
    kinds = {s.name: s for s in jq.scenarios(int(args.version.split(".")[1]))}
    unknown = [name for name in args.scenarios.split(",") if name not in kinds]
    if unknown:
        parser.error(f"unknown scenario(s) {', '.join(unknown)} (known at {args.version}: {', '.join(kinds)})")
    root = args.workdir or Path(tempfile.mkdtemp(prefix="judge-e2e-"))
    rows = []
    began = time.monotonic()
    for name in args.scenarios.split(","):
        for i in range(args.samples):
            seed = args.seed * 1_000_000 + args.first + i
            e2e, batches, names = run_end_to_end(kinds[name], seed, args, root / f"{name.replace('/', '')}-{i}")
            direct = run_direct(kinds[name], seed, args, names, batches) if not e2e.refused else Verdict(None, ())
            rows.append((name, seed, e2e, direct))
            print(f"{name} seed {seed}: end to end {e2e}; direct {direct}", flush=True)
    agree = sum(e2e == direct for _, _, e2e, direct in rows)
    print(f"\n{len(rows)} canaries ({args.policy}, kubelet {args.version}, {args.nodes} nodes, kubesim x{args.time_scale:g}, "
          f"{time.monotonic() - began:.0f} s): the same verdict {agree} of {len(rows)}\n")
    print("| scenario | seed | end to end (kubesim, Prometheus, `rollout start`) | direct (judge_quality) | same |")
    print("|---|---|---|---|---|")
    for name, seed, e2e, direct in rows:
        print(f"| {name} | {seed} | {e2e} | {direct} | {'yes' if e2e == direct else 'no'} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
