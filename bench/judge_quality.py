#!/usr/bin/env python
"""How often the canary judge is wrong: false halts on harmless changes, detection of each harm of
kubesim's catalogue, the time from the canary's write to its verdict, and the blast radius.

Each simulated rollout is a fleet of ``--nodes`` kubesim nodes with fleet noise (hosts that
differ, pods that come and go, image cache misses, wandering memory; ``noise: {preset: fleet}``,
docs/kubesim.md), reproducible from its seed. Every node runs the base config for a warm-up,
then the rollout writes the new config batch by batch as the policy plans them (the real planner),
and each batch is judged as a rollout judges it: the policy's analysis checks, rendered for the
batch and for the control cohort (the nodes not yet assigned), measured every ``interval`` over a
window that opens when the batch's kubelets have restarted, each measurement's verdict by
``rollout.analysis`` itself (the rules the orchestrator runs), the batch ending on the first
failed check or once every check passed and the soak is over. No API server and no Prometheus:
the nodes are kubesim's own workload and metrics registry stepped directly
(``kubesim.standalone``), scraped every ``SCRAPE_S`` simulated seconds, and each query is
evaluated over those scrapes by ``promql_subset`` (Prometheus' own arithmetic for ``increase``
and ``histogram_quantile``). A sample of the same canaries through a real kubesim
cluster, a real Prometheus and ``rollout start`` and checks the verdicts agree: that is
``bench/judge_e2e.py``.

Scenarios: ``A/A`` (the base config written again: any halt is false), ``A/A + shift`` (the same,
with a fleet-wide shift mid-soak: pod starts x2, memory x1.1, churn x3 on every node, changed or
not), ``A/A pulls`` (1.27+: a fleet that pulls in parallel given a cap of 10 it never reaches:
the puller's fields change, harmlessly, so the checks that run only for them run), and each harm
of ``kubesim.harms`` at its documented strength and at its mild one.
Policies: the shipped ``canary`` and ``cautious``, and ``fixed-threshold`` (the shipped canary's
checks before the judge compared cohorts: no eviction, p95 pod start within 1.5x the control's,
no container restart) beside them.

Usage: ``python bench/judge_quality.py [--rollouts 1000] [--harm-rollouts 200] [--nodes 20]
[--seed 1] [--workers 2] [--version 1.31] [-o json]``; the table goes to bench/README.md by hand.
"""

from __future__ import annotations

import argparse
import functools
import json
import math
import multiprocessing
import re
import statistics
import sys
import time
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import yaml

sys.path.insert(0, str(Path(__file__).resolve().parent))
from promql_subset import Evaluator, Scrape, series_key  # noqa: E402 - a sibling module of the benchmark

from kubesim.harms import HARMS, Harm  # noqa: E402
from kubesim.standalone import StandaloneNode  # noqa: E402
from rollout.analysis.evidence import BatchEvidence, CheckEvidence  # noqa: E402
from rollout.analysis.rules import CheckVerdict, Sample, batch_analysis, judge  # noqa: E402
from rollout.journal import AnalysisVerdict  # noqa: E402
from rollout.model import ConfigRef, NodeObservation  # noqa: E402
from rollout.planner import plan_batches  # noqa: E402
from rollout.policy import DEFAULT_POLICY_DIR, RolloutPolicy, load_policy_text  # noqa: E402
from rollout.policy.analysis import check_before_queries, check_queries  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
STEP_S = 10.0  # kubesim's default --workload-period
SCRAPE_S = 10.0  # a scrape after every step (the shipped checks' windows hold six at 1m)
WARM_UP_S = 20 * 60.0  # long enough for churn, caches and memory to settle under the base config
RESTART_S = 10.0  # the write -> kubelet restarted onto the config -> Ready (the window opens after it)
EPOCH = datetime(2026, 1, 1, tzinfo=timezone.utc)
NOISE = {"preset": "fleet"}
SHIFT = {"pod_start": 2.0, "memory": 1.1, "churn": 3.0}
# a runtime this much slower for want of CPU is starved; a canary node so starved a whole interval
# of the checks (a minute) carried the harm in the canary's window
STARVED = 2.0
SHOWED_S = 60.0
STARVED_HARM = "runtime-cpu-starved"  # the harm that truth tells (its mild strength too)
# a cap far above the pulls a node runs at once: the puller's fields change, its pace does not
PARALLEL_PULLS_RAISED = {"serializeImagePulls": False, "maxParallelImagePulls": 10}
# policies/canary.yaml's checks before the judge compared cohorts (010d66b); its evictions with a 0
# for a node without the counter (kubesim served one at 0 then; a kubelet creates it at its first)
FIXED_THRESHOLD_CHECKS = [
    {"name": "evictions", "condition": "< 1",
     "query": 'sum by (node) (kubelet_evictions{node=~"{{nodes}}"} or 0 * kubelet_running_pods{node=~"{{nodes}}"})',
     "noData": "inconclusive", "interval": "1m", "count": 3},
    {"name": "pod-start-p95-vs-control",
     "query": 'histogram_quantile(0.95, sum by (le) (rate(kubelet_pod_start_duration_seconds_bucket'
              '{node=~"{{nodes}}"}[{{window}}])))',
     "condition": "<= 1.5 * control", "noData": "pass", "interval": "1m", "count": 3},
    {"name": "container-restarts",
     "query": 'sum by (node) (increase(kube_pod_container_status_restarts_total{node=~"{{nodes}}"}[{{window}}]))',
     "condition": "< 1", "noData": "pass", "interval": "1m", "count": 3},
]


# ---------------------------------------------------------------------------------- inputs
@dataclass(frozen=True)
class Scenario:
    name: str
    config: Mapping[str, Any]  # what the rollout writes, over ``base``
    base: Mapping[str, Any] = field(default_factory=dict)  # what every node runs before
    host: Mapping[str, Any] = field(default_factory=dict)
    shift: bool = False  # a fleet-wide shift mid-soak
    harmful: bool = False
    since: int = 23


def scenarios(version_minor: int) -> list[Scenario]:
    out = [Scenario("A/A", {}), Scenario("A/A + shift", {}, shift=True)]
    if version_minor >= 27:  # a harmless change of the puller's fields, on a fleet that pulls in parallel: the
        # checks that run only for such changes (`when: {changes: ...}`) are measured where they run
        out.append(Scenario("A/A pulls", PARALLEL_PULLS_RAISED, {"serializeImagePulls": False}))
    for harm in HARMS:
        if harm.since > version_minor:
            continue
        out.append(_harm(harm, harm.config, harm.name))
        out.append(_harm(harm, harm.mild, f"{harm.name} (mild)"))
    return out


def _harm(harm: Harm, config: Mapping[str, Any], name: str) -> Scenario:
    return Scenario(name, config, harm.base, harm.host, harmful=True, since=harm.since)


def policies(extra: Sequence[str] = ()) -> dict[str, RolloutPolicy]:
    """The shipped canary and cautious, the fixed-threshold one, and ``extra`` policy files (yours)."""
    shipped = {name: (DEFAULT_POLICY_DIR / f"{name}.yaml").read_text() for name in ("canary", "cautious")}
    fixed = yaml.safe_load(shipped["canary"])
    fixed["analysis"]["checks"] = FIXED_THRESHOLD_CHECKS
    texts = {**shipped, "fixed-threshold": yaml.safe_dump(fixed)}
    texts.update({Path(path).stem: Path(path).read_text() for path in extra})
    return {name: load_policy_text(text, source=name) for name, text in texts.items()}


# ---------------------------------------------------------------------------------- the fleet
def _scrape(at: float, nodes: Mapping[str, StandaloneNode], wanted: frozenset[str]) -> Scrape:
    """Every series the checks read of every node, labelled with its node, job and instance, as the
    shipped scrape config keeps them (a histogram as its ``_bucket`` series with ``le``, ``_sum`` and ``_count``)."""
    series: dict[Any, float] = {}
    for name, node in nodes.items():
        for (metric, labels), value in node.snapshot().items():
            if metric not in wanted:
                continue
            if not isinstance(value, (int, float)):  # a histogram: cumulative buckets, sum, count
                for bound, count in value.buckets:
                    series[_key(f"{metric}_bucket", name, labels, bound)] = float(count)
                series[_key(f"{metric}_sum", name, labels)] = value.sum
                series[_key(f"{metric}_count", name, labels)] = float(value.count)
            else:
                series[_key(metric, name, labels)] = float(value)
    return Scrape(at, series)


@functools.lru_cache(maxsize=100_000)
def _key(metric: str, node: str, labels: tuple[tuple[str, str], ...], bound: float | None = None) -> Any:
    """A series as Prometheus keeps it: its target's ``job`` and ``instance`` too, which an ``or``
    or ``and`` matches on unless the query says ``on (node)``."""
    extra = () if bound is None else (("le", "+Inf" if math.isinf(bound) else repr(float(bound)).removesuffix(".0")),)
    return series_key(metric, (("instance", node), ("job", "kubelet"), ("node", node), *labels, *extra))


def wanted_metrics(all_policies: Iterable[RolloutPolicy]) -> frozenset[str]:
    """The metric families the checks' queries name once rendered (a placeholder may name one:
    ``{{restartedSinceWrite}}``), a histogram by its family's name."""
    names: set[str] = set()
    for policy in all_policies:
        for check in policy.analysis.checks:
            rendered, _ = check_queries(check, nodes=("n",), control=(), window=timedelta(minutes=1))
            for word in re.findall(r"[a-zA-Z_:][a-zA-Z0-9_:]*", rendered):
                names.add(re.sub(r"_(bucket|sum|count)$", "", word))
    return frozenset(names)


def _plan(policy: RolloutPolicy, names: Sequence[str], seed: int) -> list[tuple[str, ...]]:
    observed = [NodeObservation(name=n, uid=f"uid-{n}", has_config_status=True, ready="True", backend="agent",
                                labels={"kubernetes.io/hostname": n}) for n in names]
    plan = plan_batches(observed, policy, rollout=f"bench-{seed}", target=ConfigRef("kube-system", "bench"))
    return [tuple(b.nodes) for b in plan.batches]


@dataclass
class Outcome:
    scenario: str
    policy: str
    seed: int
    halted_batch: int | None  # the batch whose analysis failed (0: the canary), None: completed
    changed: int  # nodes running the new config when the rollout ended (the blast radius when halted)
    verdict_s: float | None  # the canary's write to its batch's verdict (simulated seconds)
    checks: tuple[str, ...] = ()  # the checks that failed
    inconclusive: int = 0  # batches whose analysis was inconclusive (a person would be asked)
    unsure: tuple[str, ...] = ()  # the checks that were inconclusive there
    # how long the most starved canary node's runtime ran STARVED or slower between the canary's
    # restart and its verdict: kubesim's truth of whether a starved runtime's harm was there
    canary_starved_s: float = 0.0


def simulate(scenario: Scenario, policy_name: str, policy: RolloutPolicy, seed: int, nodes: int,
             version: str, *, names: Sequence[str] = (), batches: Sequence[tuple[str, ...]] = (),
             canary_only: bool = False) -> Outcome:
    """One rollout; ``names`` and ``batches`` (a real rollout's, bench/judge_e2e.py) instead of
    ``node-01`` ... and the planner's batches; ``canary_only``: to the canary's verdict only."""
    names = list(names) or [f"node-{i:02d}" for i in range(1, nodes + 1)]
    pool = {"host": dict(scenario.host)} if scenario.host else None
    fleet = {n: StandaloneNode.build(n, pool=pool, noise=NOISE, seed=seed, kubelet_version=version,
                                     config=scenario.base) for n in names}
    clock = 0.0
    scrapes: list[Scrape] = []

    watched: dict[str, float] = {}  # a canary node: how long its runtime has been starved in the window
    starved_s = 0.0

    def advance(seconds: float) -> None:
        nonlocal clock, starved_s
        for _ in range(round(seconds / STEP_S)):
            for node in fleet.values():
                node.step(STEP_S)
            clock += STEP_S
            scrapes.append(_scrape(clock, fleet, _WANTED))
            for name in watched:
                watched[name] += STEP_S if fleet[name].runtime_slowdown >= STARVED else 0.0
                starved_s = max(starved_s, watched[name])

    # as `rollout start` plans it: a check that watches fields the config leaves alone is left out
    policy, _ = policy.for_changes(changed_fields(scenario))
    checks = policy.analysis.checks
    soak = policy.done.soak.total_seconds()
    horizon = max([c.interval.total_seconds() * c.count for c in checks] + [soak])
    history = history_s(checks, horizon)
    for node in fleet.values():
        node.run(max(WARM_UP_S - history, 0.0), period=STEP_S)
    new_config = {**scenario.base, **scenario.config}
    batches = (list(batches) or _plan(policy, names, seed))[:1 if canary_only else None]
    # Prometheus' history before the first write: a check may read a node's own rate before its
    # write (`offset {{window}}`, or a longer range of its own), so those scrapes are kept
    advance(history + RESTART_S)
    changed: set[str] = set()
    shifted = False
    first_verdict: float | None = None
    inconclusive = 0
    unsure: tuple[str, ...] = ()
    for index, batch in enumerate(batches):
        written = clock
        for name in batch:
            fleet[name].configure(new_config)
            changed.add(name)
        # a window opens after this batch's write and reads at most a window's length before it
        del scrapes[:next((i for i, sc in enumerate(scrapes) if sc.at >= clock - history - RESTART_S), len(scrapes))]
        advance(RESTART_S)
        opened = clock
        watched = dict.fromkeys(batch, 0.0) if index == 0 else {}
        control = tuple(n for n in names if n not in changed)
        evidence = BatchEvidence(f"bench-{seed}", index, f"batch {index}", EPOCH, tuple(sorted(batch)), control,
                                 {c.name: CheckEvidence.of(c) for c in checks})
        verdict = None
        while verdict is None:
            if scenario.shift and not shifted and clock - opened >= horizon / 2:
                for node in fleet.values():  # mid-soak, every node alike
                    node.shift(**SHIFT, for_="1h")
                shifted = True
            advance(STEP_S)
            for check in checks:
                taken = evidence.checks[check.name].taken
                due = opened + check.interval.total_seconds() * (taken + 1)
                if clock < due or evidence.checks[check.name].status(check).verdict is not CheckVerdict.RUNNING:
                    continue
                evidence = evidence.with_measurement(_measure(check, evidence, scrapes, clock - opened, clock))
            analysis = batch_analysis(checks, {c.name: evidence.checks[c.name].status(c) for c in checks})
            if analysis.verdict is AnalysisVerdict.FAILED:
                verdict = analysis
            elif analysis.verdict is not None and clock - written >= soak + RESTART_S:
                verdict = analysis
        if index == 0:
            first_verdict = clock - written
            watched = {}
        if verdict.verdict is AnalysisVerdict.FAILED:
            failed = tuple(c.name for c in checks  # the gating ones: a dry run never halts
                           if not c.dry_run and evidence.checks[c.name].status(c).verdict is CheckVerdict.FAILED)
            return Outcome(scenario.name, policy_name, seed, index, len(changed), first_verdict, failed, inconclusive,
                           unsure, starved_s)
        if verdict.verdict is AnalysisVerdict.INCONCLUSIVE:  # a person is asked; counted, then go on
            inconclusive += 1
            unsure += tuple(c.name for c in checks
                            if evidence.checks[c.name].status(c).verdict is CheckVerdict.INCONCLUSIVE)
    return Outcome(scenario.name, policy_name, seed, None, len(changed), first_verdict, (), inconclusive, unsure,
                   starved_s)


def changed_fields(scenario: Scenario) -> tuple[str, ...]:
    """The fields the scenario's write changes over what every node ran before (A/A: none). Its own
    key by key comparison, not ``diff_configs``: that reads the 1.23 catalogue, which has no
    ``maxParallelImagePulls`` (1.27+)."""
    return tuple(k for k, v in scenario.config.items() if scenario.base.get(k) != v)


def history_s(checks: Sequence[Any], horizon: float) -> float:
    """How long before a batch's write its checks read: the analysis horizon (a ``baseline: before``
    window), or a check's own range (``[15m] offset {{window}}``) plus its window, if longer."""
    longest = horizon
    for check in checks:
        ranges = [int(n) * {"s": 1, "m": 60, "h": 3600}[unit] for n, unit in re.findall(r"\[(\d+)([smh])\]", check.query)]
        if ranges:
            longest = max(longest, max(ranges) + check.interval.total_seconds() * check.count)
    return longest


def _measure(check: Any, evidence: BatchEvidence, scrapes: list[Scrape], window_s: float, at_s: float) -> Any:
    evaluator = Evaluator(scrapes)
    window = timedelta(seconds=window_s)
    query, control_query = check_queries(check, nodes=evidence.nodes, control=evidence.control, window=window,
                                         since_write=timedelta(seconds=RESTART_S))
    before_query, control_before_query = check_before_queries(check, nodes=evidence.nodes, control=evidence.control,
                                                              window=window, since_write=timedelta(seconds=RESTART_S))

    def asked(promql: str) -> list[Sample]:
        return [Sample(labels, value) for labels, value in evaluator.query(promql, at_s)]

    samples = asked(query)
    control = asked(control_query) if control_query and evidence.control else None
    before = asked(before_query) if before_query else None
    control_before = asked(control_before_query) if control_before_query and evidence.control else None
    return judge(check, at=EPOCH + timedelta(seconds=at_s), query=query, samples=samples,
                 control_query=control_query, control_samples=control, before_samples=before,
                 control_before_samples=control_before, control_nodes=len(evidence.control),
                 canary=evidence.batch == 0)  # the bench's plans have one canary batch: the first


# ---------------------------------------------------------------------------------- the table
@dataclass
class Row:
    policy: str
    scenario: str
    harmful: bool
    rollouts: int
    halted: int  # anywhere
    halted_in_canary: int
    inconclusive: int
    verdict_s_median: float | None
    verdict_s_max: float | None
    blast_median: float | None  # nodes changed when halted
    blast_max: int | None
    soak_end_s: float  # after the write: the restart, the lastKnownGood trial if the policy waits for it, the soak
    checks: dict[str, int]
    unsure: dict[str, int] = field(default_factory=dict)
    # a starved runtime: the canaries where it showed (STARVED for SHOWED_S on a canary node before
    # the verdict), and how many of those the canary caught; None for every other scenario
    showed: int | None = None
    caught_where_showed: int | None = None
    late: int = 0  # canaries halted after their soak ended (a failed last measurement confirmed)

    @property
    def rate(self) -> float:
        return (self.halted_in_canary if self.harmful else self.halted) / max(self.rollouts, 1)


def rows(outcomes: Iterable[Outcome], all_policies: Mapping[str, RolloutPolicy],
         kinds: Mapping[str, Scenario]) -> list[Row]:
    grouped: dict[tuple[str, str], list[Outcome]] = {}
    for o in outcomes:
        grouped.setdefault((o.policy, o.scenario), []).append(o)
    out = []
    for (policy, scenario), group in grouped.items():
        halted = [o for o in group if o.halted_batch is not None]
        verdicts = [o.verdict_s for o in halted if o.halted_batch == 0 and o.verdict_s is not None]
        blast = [o.changed for o in halted]
        showed = [o for o in group if o.canary_starved_s >= SHOWED_S] if scenario.startswith(STARVED_HARM) else None
        out.append(Row(policy, scenario, kinds[scenario].harmful, len(group), len(halted),
                       sum(1 for o in halted if o.halted_batch == 0), sum(o.inconclusive > 0 for o in group),
                       statistics.median(verdicts) if verdicts else None, max(verdicts) if verdicts else None,
                       statistics.median(blast) if blast else None, max(blast) if blast else None,
                       soak_end_s(all_policies[policy]),
                       dict(Counter(c for o in halted for c in o.checks)),
                       dict(Counter(c for o in group for c in set(o.unsure))),
                       None if showed is None else len(showed),
                       None if showed is None else sum(1 for o in showed if o.halted_batch == 0),
                       sum(1 for v in verdicts if v > soak_end_s(all_policies[policy]))))
    return out


def soak_end_s(policy: RolloutPolicy) -> float:
    """When a batch's soak ends, after its write: the verdict is in time if it comes before. A
    ``lastKnownGood`` batch soaks after the kubelet's trial; the trial is not simulated (the analysis
    opens at the restart either way, and nothing here waits for the trial)."""
    return RESTART_S + (policy.done.trial + policy.done.soak).total_seconds()


def markdown(table: list[Row], meta: Mapping[str, Any]) -> str:
    scope = ", each to its canary's verdict only" if meta.get("canary_only") else ""
    lines = [f"{meta['rollouts']} A/A rollouts and {meta['harm_rollouts']} per harm, {meta['nodes']} nodes each "
             f"(kubelet {meta['version']}, seed {meta['seed']}), {meta['seconds']:.0f} s on {meta['workers']} "
             f"worker(s){scope}.", "",
             "| policy | scenario | rollouts | false halts / detected in the canary | halted anywhere | "
             "inconclusive | canary verdict (median / max) | soak ends | blast radius (median / max) | checks that failed | "
             "caught where the harm showed |",
             "|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in sorted(table, key=lambda r: (r.policy, r.harmful, r.scenario)):
        rate = f"{100 * r.rate:.1f}%" + ("" if r.harmful else " false")
        verdict = "-" if r.verdict_s_median is None else f"{r.verdict_s_median:.0f} / {r.verdict_s_max:.0f} s" + (
            f" ({r.late} after the soak)" if r.late else "")
        blast = "-" if r.blast_median is None else f"{r.blast_median:g} / {r.blast_max}"
        fired = ", ".join(f"{k} {v}" for k, v in sorted(r.checks.items(), key=lambda kv: -kv[1])) or "-"
        unsure = "" if not r.unsure else " (" + ", ".join(f"{k} {v}" for k, v in sorted(r.unsure.items())) + ")"
        showed = "-" if r.showed is None else f"{r.caught_where_showed} of {r.showed}"
        lines.append(f"| {r.policy} | {r.scenario} | {r.rollouts} | {rate} | {r.halted} | {r.inconclusive}{unsure} | "
                     f"{verdict} | {r.soak_end_s:.0f} s | {blast} | {fired} | {showed} |")
    return "\n".join(lines)


# ---------------------------------------------------------------------------------- main
def _job(args: tuple[Scenario, bool, int, int, str]) -> list[Outcome]:
    scenario, canary_only, seed, nodes, version = args
    return [simulate(scenario, name, policy, seed, nodes, version, canary_only=canary_only)
            for name, policy in _POLICIES.items()]


_POLICIES: dict[str, RolloutPolicy] = {}


_WANTED: frozenset[str] = frozenset()


def _init(extra: Sequence[str] = (), only: Sequence[str] = ()) -> None:
    global _WANTED
    _POLICIES.update({k: v for k, v in policies(extra).items() if not only or k in only})
    _WANTED = wanted_metrics(_POLICIES.values())


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rollouts", type=int, default=1000, help="A/A rollouts (each scenario without harm)")
    parser.add_argument("--harm-rollouts", type=int, default=200, help="rollouts per harm and strength")
    parser.add_argument("--nodes", type=int, default=20)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--version", default="1.31")
    parser.add_argument("--only", default="", help="scenario names to run, comma-separated (default: all)")
    parser.add_argument("--policy", action="append", default=[], help="a policy file to measure beside them")
    parser.add_argument("--policies", default="", help="which policies to measure, comma-separated (default: all)")
    parser.add_argument("--canary-only", action="store_true",
                        help="each rollout to its canary's verdict only (for a rule of the canary's; faster)")
    parser.add_argument("-o", "--output", choices=["table", "json"], default="table")
    args = parser.parse_args(argv)
    minor = int(args.version.split(".")[1])
    kinds = {s.name: s for s in scenarios(minor)}
    chosen = [s for s in kinds.values() if not args.only or s.name in args.only.split(",")]
    jobs = [(s, args.canary_only, args.seed * 1_000_000 + i, args.nodes, args.version)
            for s in chosen for i in range(args.harm_rollouts if s.harmful else args.rollouts)]
    began = time.monotonic()
    only = [p for p in args.policies.split(",") if p]
    _init(args.policy, only)
    if args.workers > 1:
        with multiprocessing.get_context("fork").Pool(args.workers, initializer=_init,
                                                      initargs=(args.policy, only)) as pool:
            outcomes = [o for batch in pool.imap_unordered(_job, jobs, chunksize=4) for o in batch]
    else:
        outcomes = [o for job in jobs for o in _job(job)]
    meta = {"rollouts": args.rollouts, "harm_rollouts": args.harm_rollouts, "nodes": args.nodes,
            "version": args.version, "seed": args.seed, "workers": args.workers,
            "canary_only": args.canary_only, "seconds": time.monotonic() - began}
    table = rows(outcomes, _POLICIES, kinds)
    if args.output == "json":
        print(json.dumps({"meta": meta, "rows": [asdict(r) | {"rate": r.rate} for r in table]}, indent=2))
    else:
        print(markdown(table, meta))
    return 0


if __name__ == "__main__":
    sys.exit(main())
