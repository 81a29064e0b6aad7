#!/usr/bin/env python
"""A fleet rollout across N clusters (10 by default, 50 in the last run) of 200 nodes on this
machine, against its ideal.

One ``kubesim up`` process per cluster (each its own port, state dir, kubeconfig and audit log), a real
Prefect server, a work pool and a process worker per cluster holding only that cluster's
kubeconfig (``rollout_cli.local.fleet_stack``, as the tests and the demo run it), and ``rollout fleet
start`` as a user runs it (a child process): a canary cluster, then the stages ``--stages``
names (ten clusters: three, then six), every cluster of a stage at once, a soak after each
stage but the last.

- **wall**: the fleet flow run's start to its end (as Prefect records them; the CLI's imports
  before it are not counted);
- **ideal**: the sum over the stages of the slowest cluster run of the stage (its start to its
  end, as Prefect records them: what the cluster needed) plus the soaks the fleet waits;
- **ratio**: wall over ideal (target <= 1.10), and per stage, the fleet's own time around its
  clusters: from the previous stage's soak end (the fleet's start for the canary) to the stage's
  first cluster run starting (the fleet's poll, the run's creation, the worker picking it up, its
  process starting), and from the stage's slowest run ending to the next stage;
- **requests / node** per cluster: every request of that cluster's rollout (its audit log, the
  cluster run's lifetime) over its nodes, as ``bench/rollout_scale.py`` counts them.

Usage: ``python bench/fleet_scale.py [--clusters 10] [--nodes 200] [--time-scale 5] [--soak 10s]
[--liveness default|fast] [--worker-poll S] [--database postgres|sqlite] [--workdir DIR]``; the result replaces its
table in bench/README.md.
"""

from __future__ import annotations

import argparse
import json
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import urllib.request
from collections import Counter
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import yaml

from rollout.policy import parse_duration
from rollout_cli.local import fleet_stack
from rollout_cli.local.fleet_stack import FleetStack
from rollout_cli.local.postgres import reachable_workdir

sys.path.insert(0, str(Path(__file__).resolve().parent))
from proc_usage import cpu_seconds  # noqa: E402 - a sibling module of the benchmarks

ROOT = Path(__file__).resolve().parents[1]
README = Path(__file__).with_name("README.md")
MARK_BEGIN, MARK_END = "<!-- fleet-scale:begin -->", "<!-- fleet-scale:end -->"
HALT_BEGIN, HALT_END = "<!-- fleet-halt:begin -->", "<!-- fleet-halt:end -->"
POLICY = {  # the single-cluster benchmark's policy, every health and deadline setting at its default
    "name": "bench-fleet",
    "steps": [1, "1%", "10%", "50%", "100%"],
    "maxUnavailable": "100%",
    "spreadAcrossZones": False,
    "done": {"until": "active", "requireReady": True, "soak": "0s"},
    "failureAction": "revert-batch",
}


def _t(stamp: str) -> float:
    return datetime.fromisoformat(stamp.replace("Z", "+00:00")).timestamp()


# hosts with the cgroup that enforcing systemReserved needs, or without it (a config enforcing it
# crash-loops their kubelets: the failing canary of --fail-canary)
CLUSTER_FILE = """\
apiVersion: kubesim.kubelet-rollout.io/v1
kind: Cluster
pools:
  - {{name: control-plane, count: 1, controlPlane: true}}
  - name: general
    count: {workers}
    host: {{cgroups: ["/", "/kubepods", {slice}]}}
"""
CRASH_LOOP = {"systemReserved": {"cpu": "500m", "memory": "512Mi"}, "systemReservedCgroup": "/system.slice",
              "enforceNodeAllocatable": ["pods", "system-reserved"]}


def kubesim(name: str, nodes: int, scale: float, work: Path, *,
            legacy: bool = False) -> tuple[subprocess.Popen[str], Path, Path]:
    """One cluster: `kubesim up` with its own state dir, kubeconfig and audit log, on a free port;
    ``legacy``: its hosts lack /system.slice."""
    state = work / name
    state.mkdir(parents=True, exist_ok=True)
    kubeconfig, audit, layout = state / "kubeconfig", state / "audit.log", state / "cluster.yaml"
    layout.write_text(CLUSTER_FILE.format(workers=nodes - 1, slice="" if legacy else '"/system.slice"')
                      .replace(', ]', ']'))
    proc = subprocess.Popen([sys.executable, "-m", "kubesim", "up", "--cluster", str(layout), "--kubeconfig",
                             str(kubeconfig), "--state-dir", str(state / "state"), "--audit-log", str(audit),
                             "--time-scale", str(scale), "--trial-period", "60s", "--ready-timeout", "900"],
                            cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    return proc, kubeconfig, audit


def stage_sizes(clusters: int, given: str | None) -> list[int]:
    """The clusters of each stage: as given ("1,5,15,29"), else a canary cluster, then about a tenth,
    then about a third, then the rest (ten clusters: 1, 3, 6, as the first runs had it)."""
    if given:
        sizes = [int(x) for x in given.split(",")]
        if sum(sizes) != clusters or min(sizes) < 1:
            raise SystemExit(f"--stages must add up to --clusters ({clusters}), each at least 1: {given}")
        return sizes
    if clusters <= 10:
        return [s for s in (1, min(3, clusters - 1), clusters - 1 - min(3, clusters - 1)) if s > 0]
    second, third = -(-clusters // 10), -(-clusters * 3 // 10)
    return [1, second, third, clusters - 1 - second - third]


class Usage:
    """CPU seconds and the largest resident memory of some process trees, sampled from /proc."""

    def __init__(self, roots: dict[str, int]) -> None:
        import threading

        self.roots = roots
        self.cpu: dict[str, dict[int, float]] = {k: {} for k in roots}
        self.rss_mb: dict[str, float] = dict.fromkeys(roots, 0.0)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> "Usage":
        self._sample()
        self.start_cpu = {k: sum(v.values()) for k, v in self.cpu.items()}
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()

    def _run(self) -> None:
        while not self._stop.wait(1.0):
            self._sample()

    def _sample(self) -> None:
        from rollout_cli.local.processes import descendants

        for key, root in self.roots.items():
            rss = 0.0
            for pid in [root, *descendants(root)]:
                try:
                    cpu = cpu_seconds(pid)
                    status = Path(f"/proc/{pid}/status").read_text()
                except OSError:
                    continue
                self.cpu[key][pid] = cpu
                rss += next((int(line.split()[1]) for line in status.splitlines() if line.startswith("VmRSS")), 0) / 1024
            self.rss_mb[key] = max(self.rss_mb[key], rss)

    def used_cpu(self) -> dict[str, float]:
        return {k: sum(v.values()) - self.start_cpu[k] for k, v in self.cpu.items()}


def run_states(stack: FleetStack, run_id: str) -> dict[str, float]:
    """When a flow run entered each state type (the first time), as Prefect recorded it."""
    request = urllib.request.Request(f"{stack.server.api_url}/flow_run_states/?flow_run_id={run_id}")
    with urllib.request.urlopen(request, timeout=60) as answer:
        states = json.loads(answer.read())
    first: dict[str, float] = {}
    for state in sorted(states, key=lambda s: s["timestamp"]):
        first.setdefault(state["type"], _t(state["timestamp"]))
    return first


def wait_ready(proc: subprocess.Popen[str]) -> None:
    assert proc.stdout is not None
    for line in proc.stdout:
        if "kubesim ready" in line:
            return
    raise RuntimeError("kubesim did not come up")


def config_text(kubeconfig: Path, *, crash_loop: bool = False) -> str:
    from rollout.gateway import open_gateway
    from rollout.kubeletconfig import export_from_configz

    gw = open_gateway(str(kubeconfig))
    worker = next(n.name for n in gw.list_nodes()[0] if "node-role.kubernetes.io/control-plane" not in n.labels)
    doc = export_from_configz(gw.configz(worker))
    doc["eventRecordQPS"] = 7
    if crash_loop:
        doc.update(CRASH_LOOP)
    gw.close()
    return yaml.safe_dump(doc, sort_keys=False)


def nodes_on_target(kubeconfig: Path) -> tuple[int, int, set[str]]:
    """(worker nodes active on their assigned config, worker nodes, the config names assigned): a
    cluster is done only when every worker runs the one config it was given."""
    from kubernetes import client, config

    with config.new_client_from_config(str(kubeconfig)) as api:
        items = json.loads(client.CoreV1Api(api).list_node(_preload_content=False).data)["items"]
    workers = [n for n in items if "node-role.kubernetes.io/control-plane" not in n["metadata"].get("labels", {})]
    names, active = set(), 0
    for node in workers:
        assigned = ((node.get("spec") or {}).get("configSource") or {}).get("configMap") or {}
        running = (((node.get("status") or {}).get("config") or {}).get("active") or {}).get("configMap") or {}
        if assigned:
            names.add(str(assigned.get("name")))
        # published configs are named by their content's hash: the name says which config runs
        active += bool(assigned) and running.get("name") == assigned.get("name")
    return active, len(workers), names


def requests_per_node(audit: Path, window: tuple[float, float], nodes: int) -> tuple[float, Counter[str]]:
    kinds: Counter[str] = Counter()
    with audit.open() as lines:
        for line in lines:
            if not line.strip():
                continue
            event = json.loads(line)
            user = str(event.get("user", {}).get("username", ""))
            if user.startswith("system:") or not window[0] <= _t(event["requestReceivedTimestamp"]) <= window[1]:
                continue
            ref = event.get("objectRef") or {}
            kinds[f"{event.get('verb')} {ref.get('resource', '')}"] += 1
    return sum(kinds.values()) / nodes, kinds  # over every node, as rollout_scale.py divides


def measure(args: argparse.Namespace, work: Path) -> dict[str, Any]:
    names = [f"c{i:02d}" for i in range(1, args.clusters + 1)]
    sizes = stage_sizes(args.clusters, args.stages)
    bounds = [sum(sizes[:i]) for i in range(len(sizes) + 1)]
    stages = [names[bounds[i]:bounds[i + 1]] for i in range(len(sizes))]
    soak_s = parse_duration(args.soak).total_seconds()
    clusters = {n: kubesim(n, args.nodes, args.time_scale, work / "clusters", legacy=args.fail_canary and n == names[0])
                for n in names}
    try:
        for proc, _, _ in clusters.values():
            wait_ready(proc)
        stack = FleetStack(work / "stack", {n: kubeconfig for n, (_, kubeconfig, _) in clusters.items()},
                           database=args.database)
        with stack.running():
            # a soak long enough for a crash-looping kubelet to be seen NotReady (notReadyFor: 20s)
            policy = ({**POLICY, "allowFields": sorted(CRASH_LOOP), "done": {**POLICY["done"], "soak": "40s"}}
                      if args.fail_canary else POLICY)
            (work / "policy.yaml").write_text(yaml.safe_dump(policy, sort_keys=False))
            fleet = {"name": "bench", "policy": "policy.yaml", "soak": args.soak, "maxConcurrent": "100%",
                     "clusters": [{"name": n, "workPool": stack.pool_of(n), "identity": stack.identity_of(n)}
                                  for n in names],
                     "stages": [{"clusters": s} for s in stages]}
            (work / "fleet.yaml").write_text(yaml.safe_dump(fleet, sort_keys=False))
            (work / "kubelet.yaml").write_text(config_text(clusters[names[-1]][1], crash_loop=args.fail_canary))
            roots = {"prefect server": stack.server.proc.pid if stack.server.proc else 0,
                     "postgresql": stack.postgres.proc.pid if stack.postgres and stack.postgres.proc else 0}
            with tempfile.TemporaryFile("w+") as out, Usage({k: v for k, v in roots.items() if v}) as usage:
                done = subprocess.run([sys.executable, "-m", "rollout_cli", "fleet", "start", "--fleet",
                                       str(work / "fleet.yaml"), "--config", str(work / "kubelet.yaml"), "--name",
                                       "bench", "-o", "json"], cwd=work, env=stack.server.env(), stdout=out,
                                      stderr=subprocess.DEVNULL, timeout=3600)
                out.seek(0)
                result = json.loads(out.read())
            on_target = {n: nodes_on_target(kubeconfig) for n, (_, kubeconfig, _) in clusters.items()}
            runs = stack.server.post("/flow_runs/filter", {"flow_runs": {"tags": {"all_": ["fleet:bench"]}},
                                                           "limit": 200})
            pickups = {r["id"]: run_states(stack, r["id"]).get("PENDING") for r in runs}
    finally:
        for proc, _, _ in clusters.values():
            proc.terminate()
        for proc, _, _ in clusters.values():
            proc.wait(timeout=60)
    by_cluster = {next(t.removeprefix("cluster:") for t in r["tags"] if t.startswith("cluster:")): r
                  for r in runs if any(t.startswith("cluster:") for t in r["tags"])}
    fleet_run = next(r for r in runs if not any(t.startswith("cluster:") for t in r["tags"]))
    start, end = _t(fleet_run["start_time"]), _t(fleet_run["end_time"])
    spans = {n: (_t(r["start_time"]), _t(r["end_time"])) for n, r in by_cluster.items()}
    # a cluster's own time counted from its worker picking the run up (its process starting is
    # the cluster's own work, on a worker of its own in a real fleet)
    picked = {n: (pickups.get(r["id"]) or spans[n][0], spans[n][1]) for n, r in by_cluster.items()}
    rows, previous_end, ideal, ideal_picked = [], start, 0.0, 0.0
    ran = [members for members in stages if all(n in spans for n in members)]
    for index, members in enumerate(ran):
        first_start = min(spans[n][0] for n in members)
        slowest = max(spans[n][1] - spans[n][0] for n in members)
        slowest_picked = max(picked[n][1] - picked[n][0] for n in members)
        last_end = max(spans[n][1] for n in members)
        soak = soak_s if index < len(ran) - 1 else 0.0
        ideal += slowest + soak
        ideal_picked += slowest_picked + soak
        rows.append({"stage": index, "clusters": len(members), "slowest_s": slowest, "slowest_picked_s": slowest_picked,
                     "soak_s": soak, "before_s": first_start - previous_end,
                     "last_started_s": max(spans[n][0] for n in members) - first_start})
        previous_end = last_end + soak
    per_node = {n: requests_per_node(clusters[n][2], spans[n], args.nodes) for n in names if n in spans}
    canary_end = spans[names[0]][1]
    return {"exit_code": done.returncode, "outcome": result.get("outcome"), "message": result.get("message", ""),
            "wall_s": end - start, "ideal_s": ideal, "ratio": (end - start) / ideal,
            "ideal_picked_s": ideal_picked, "ratio_picked": (end - start) / ideal_picked,
            "stages": rows, "end_s": end - previous_end, "halt_s": end - canary_end if args.fail_canary else None,
            "requests_per_node": {n: v[0] for n, v in per_node.items()}, "usage_cpu_s": usage.used_cpu(),
            "usage_rss_mb": usage.rss_mb,
            "on_target": on_target, "kinds": sum((v[1] for v in per_node.values()), Counter()), "attempts": {n: r["run_count"] for n, r in
                                                                                     by_cluster.items()}}


def render(args: argparse.Namespace, r: dict[str, Any], command: str) -> str:
    per_node = list(r["requests_per_node"].values())
    lines = [
        f"Last run: {datetime.now(timezone.utc):%Y-%m-%d %H:%M} UTC on {platform.machine()}, 2 CPUs, Python "
        f"{platform.python_version()}; command: `{command}`; {args.clusters} clusters x {args.nodes} nodes, kubesim "
        f"x{args.time_scale:g}, soak {args.soak} after each stage but the last; the Prefect server on "
        f"{'PostgreSQL' if args.database == 'postgres' else 'SQLite'}.", "",
        f"Exit {r['exit_code']} / {r['outcome']}: wall **{r['wall_s']:.1f} s**; ideal from each stage's slowest "
        f"cluster run's own start {r['ideal_s']:.1f} s, **ratio {r['ratio']:.2f}**; from its worker's pickup (the "
        f"run's process starting is the cluster's own work) {r['ideal_picked_s']:.1f} s, **ratio "
        f"{r['ratio_picked']:.2f}** (target <= 1.10); after the last stage {r['end_s']:.1f} s."
        + (f" The canary cluster's run ended (failed) **{r['halt_s']:.1f} s** before the fleet did (target <= 10 s): "
           f"{r['message']}" if r["halt_s"] is not None else ""), "",
        "| stage | clusters | slowest cluster run (s) | the same from its pickup (s) | soak after (s) | fleet's time before its first run started (s) | its last run started after its first (s) |",
        "|---:|---:|---:|---:|---:|---:|---:|",
        *[f"| {s['stage']} | {s['clusters']} | {s['slowest_s']:.1f} | {s['slowest_picked_s']:.1f} | {s['soak_s']:.0f} | "
          f"{s['before_s']:.1f} | {s['last_started_s']:.1f} |" for s in r["stages"]], "",
        "The fleet's rollout, CPU seconds and the most resident memory: "
        + ", ".join(f"{k} {r['usage_cpu_s'][k]:.0f} CPU-s, {r['usage_rss_mb'][k]:.0f} MB" for k in r["usage_cpu_s"])
        + ".", "",
        f"Requests per node per cluster (each cluster's audit log over its run): min {min(per_node):.2f}, median "
        f"{statistics.median(per_node):.2f}, max {max(per_node):.2f}; all clusters together: "
        + ", ".join(f"{k}: {v}" for k, v in r["kinds"].most_common(8)) + ".", "",
        "Worker nodes active on the config the fleet assigned: "
        f"{sum(a for a, _, _ in r['on_target'].values()):,} of {sum(w for _, w, _ in r['on_target'].values()):,}"
        + "".join(f"; {n}: {a} of {w}" for n, (a, w, _) in sorted(r["on_target"].items()) if a != w)
        + f" (configs assigned: {', '.join(sorted(set().union(*(c for _, _, c in r['on_target'].values())))) or 'none'}).",
        "",
        "Cluster runs run more than once (Prefect marked them Crashed, the run scheduled again): "
        + (", ".join(f"{n} x{a}" for n, a in sorted(r["attempts"].items()) if a > 1) or "none") + ".",
    ]
    return "\n".join(lines)


def write_readme(text: str, *, halt: bool) -> None:
    """Replace the result between its markers (the section's prose stays as written): a fleet that
    completes, or one whose canary cluster fails (``--fail-canary``)."""
    begin, end = (HALT_BEGIN, HALT_END) if halt else (MARK_BEGIN, MARK_END)
    readme = README.read_text()
    head, rest = readme.split(begin, 1)
    README.write_text(head + begin + "\n" + text + "\n" + end + rest.split(end, 1)[1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--clusters", type=int, default=10)
    parser.add_argument("--nodes", type=int, default=200, help="per cluster, the control-plane node included")
    parser.add_argument("--time-scale", type=float, default=5.0)
    parser.add_argument("--soak", default="10s")
    parser.add_argument("--workdir", type=Path)
    parser.add_argument("--database", choices=["postgres", "sqlite"], default="postgres",
                        help="the Prefect server's: a local PostgreSQL (what ten clusters' workers need), or "
                             "Prefect's default SQLite file")
    parser.add_argument("--stages", help="clusters per stage, e.g. 1,5,15,29 (default: a canary, about a tenth, "
                                         "about a third, the rest; ten clusters: 1,3,6)")
    parser.add_argument("--fail-canary", action="store_true",
                        help="the canary cluster's hosts lack /system.slice and the config enforces systemReserved: "
                             "its kubelets crash-loop; measures the time from its run's end to the fleet's")
    parser.add_argument("--no-readme", action="store_true", help="print the result only")
    parser.add_argument("--liveness", choices=["fast", "default"], default="default",
                        help="the stack's liveness: the tests' fast one, or Prefect's defaults")
    parser.add_argument("--worker-poll", type=float,
                        help="seconds between a worker's polls for runs (default: the liveness setting's; Prefect's "
                             "own default is 10): fifty workers polling every second keep a Prefect server busy")
    args = parser.parse_args()
    liveness = fleet_stack.FAST_LIVENESS if args.liveness == "fast" else fleet_stack.DEFAULT_LIVENESS
    if args.worker_poll is not None:
        liveness = {**liveness, "PREFECT_WORKER_QUERY_SECONDS": f"{args.worker_poll:g}"}
    fleet_stack.LIVENESS = liveness
    work = args.workdir or reachable_workdir("fleet-bench-")  # PostgreSQL (as `postgres`) reaches it
    try:
        result = measure(args, work)
    finally:
        if args.workdir is None:
            shutil.rmtree(work, ignore_errors=True)
    shown = [("DIR" if previous == "--workdir" else arg) for previous, arg in zip(["", *sys.argv[1:]], sys.argv[1:])]
    text = render(args, result, ".venv/bin/python bench/fleet_scale.py " + " ".join(shown))
    print(text)
    if not args.no_readme:
        write_readme(text, halt=args.fail_canary)


if __name__ == "__main__":
    main()
