#!/usr/bin/env python
"""A fleet rollout across 10 clusters of 200 nodes on this machine, against its ideal.

Ten ``kubesim up`` processes (each its own port, state dir, kubeconfig and audit log), a real
Prefect server, a work pool and a process worker per cluster holding only that cluster's
kubeconfig (``rollout_cli.local.fleet_stack``, as the tests and the demo run it), and ``rollout fleet
start`` as a user runs it (a child process): a canary cluster, then three, then six, every
cluster of a stage at once, a soak after each stage but the last.

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
[--liveness default|fast] [--database postgres|sqlite] [--workdir DIR]``; the result replaces its
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
from collections import Counter
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import yaml

from rollout.policy import parse_duration
from rollout_cli.local import fleet_stack
from rollout_cli.local.fleet_stack import FleetStack
from rollout_cli.local.postgres import reachable_workdir

ROOT = Path(__file__).resolve().parents[1]
README = Path(__file__).with_name("README.md")
MARK_BEGIN, MARK_END = "<!-- fleet-scale:begin -->", "<!-- fleet-scale:end -->"
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


def kubesim(name: str, nodes: int, scale: float, work: Path) -> tuple[subprocess.Popen[str], Path, Path]:
    """One cluster: `kubesim up` with its own state dir, kubeconfig and audit log, on a free port."""
    state = work / name
    state.mkdir(parents=True, exist_ok=True)
    kubeconfig, audit = state / "kubeconfig", state / "audit.log"
    proc = subprocess.Popen([sys.executable, "-m", "kubesim", "up", "--nodes", str(nodes - 1), "--kubeconfig",
                             str(kubeconfig), "--state-dir", str(state / "state"), "--audit-log", str(audit),
                             "--time-scale", str(scale), "--trial-period", "60s", "--ready-timeout", "600"],
                            cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    return proc, kubeconfig, audit


def wait_ready(proc: subprocess.Popen[str]) -> None:
    assert proc.stdout is not None
    for line in proc.stdout:
        if "kubesim ready" in line:
            return
    raise RuntimeError("kubesim did not come up")


def config_text(kubeconfig: Path) -> str:
    from rollout.gateway import open_gateway
    from rollout.kubeletconfig import export_from_configz

    gw = open_gateway(str(kubeconfig))
    worker = next(n.name for n in gw.list_nodes()[0] if "node-role.kubernetes.io/control-plane" not in n.labels)
    doc = export_from_configz(gw.configz(worker))
    doc["eventRecordQPS"] = 7
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
    stages = [names[:1], names[1:4], names[4:]]
    soak_s = parse_duration(args.soak).total_seconds()
    clusters = {n: kubesim(n, args.nodes, args.time_scale, work / "clusters") for n in names}
    try:
        for proc, _, _ in clusters.values():
            wait_ready(proc)
        stack = FleetStack(work / "stack", {n: kubeconfig for n, (_, kubeconfig, _) in clusters.items()},
                           database=args.database)
        with stack.running():
            (work / "policy.yaml").write_text(yaml.safe_dump(POLICY, sort_keys=False))
            fleet = {"name": "bench", "policy": "policy.yaml", "soak": args.soak, "maxConcurrent": "100%",
                     "clusters": [{"name": n, "workPool": stack.pool_of(n), "identity": stack.identity_of(n)}
                                  for n in names],
                     "stages": [{"clusters": s} for s in stages]}
            (work / "fleet.yaml").write_text(yaml.safe_dump(fleet, sort_keys=False))
            (work / "kubelet.yaml").write_text(config_text(clusters[names[0]][1]))
            with tempfile.TemporaryFile("w+") as out:
                done = subprocess.run([sys.executable, "-m", "rollout_cli", "fleet", "start", "--fleet",
                                       str(work / "fleet.yaml"), "--config", str(work / "kubelet.yaml"), "--name",
                                       "bench", "-o", "json"], cwd=work, env=stack.server.env(), stdout=out,
                                      stderr=subprocess.DEVNULL, timeout=3600)
                out.seek(0)
                result = json.loads(out.read())
            on_target = {n: nodes_on_target(kubeconfig) for n, (_, kubeconfig, _) in clusters.items()}
            runs = stack.server.post("/flow_runs/filter", {"flow_runs": {"tags": {"all_": ["fleet:bench"]}},
                                                           "limit": 200})
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
    rows, previous_end, ideal = [], start, 0.0
    for index, members in enumerate(stages):
        first_start = min(spans[n][0] for n in members)
        slowest = max(spans[n][1] - spans[n][0] for n in members)
        last_end = max(spans[n][1] for n in members)
        soak = soak_s if index < len(stages) - 1 else 0.0
        ideal += slowest + soak
        rows.append({"stage": index, "clusters": len(members), "slowest_s": slowest, "soak_s": soak,
                     "before_s": first_start - previous_end})
        previous_end = last_end + soak
    per_node = {n: requests_per_node(clusters[n][2], spans[n], args.nodes) for n in names}
    return {"exit_code": done.returncode, "outcome": result.get("outcome"), "wall_s": end - start,
            "ideal_s": ideal, "ratio": (end - start) / ideal, "stages": rows, "end_s": end - previous_end,
            "requests_per_node": {n: v[0] for n, v in per_node.items()},
            "on_target": on_target, "kinds": sum((v[1] for v in per_node.values()), Counter()), "attempts": {n: r["run_count"] for n, r in
                                                                                     by_cluster.items()}}


def render(args: argparse.Namespace, r: dict[str, Any], command: str) -> str:
    per_node = list(r["requests_per_node"].values())
    lines = [
        f"Last run: {datetime.now(timezone.utc):%Y-%m-%d %H:%M} UTC on {platform.machine()}, 2 CPUs, Python "
        f"{platform.python_version()}; command: `{command}`; {args.clusters} clusters x {args.nodes} nodes, kubesim "
        f"x{args.time_scale:g}, soak {args.soak} after each stage but the last; the Prefect server on "
        f"{'PostgreSQL' if args.database == 'postgres' else 'SQLite'}.", "",
        f"Exit {r['exit_code']} / {r['outcome']}: wall **{r['wall_s']:.1f} s**, ideal {r['ideal_s']:.1f} s, "
        f"**ratio {r['ratio']:.2f}** (target <= 1.10); after the last stage {r['end_s']:.1f} s.", "",
        "| stage | clusters | slowest cluster run (s) | soak after (s) | fleet's time before its first run started (s) |",
        "|---:|---:|---:|---:|---:|",
        *[f"| {s['stage']} | {s['clusters']} | {s['slowest_s']:.1f} | {s['soak_s']:.0f} | {s['before_s']:.1f} |"
          for s in r["stages"]], "",
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


def write_readme(text: str) -> None:
    """Replace the table between the markers (the section's prose stays as written)."""
    readme = README.read_text()
    head, rest = readme.split(MARK_BEGIN, 1)
    README.write_text(head + MARK_BEGIN + "\n" + text + "\n" + MARK_END + rest.split(MARK_END, 1)[1])


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
    parser.add_argument("--liveness", choices=["fast", "default"], default="default",
                        help="the stack's liveness: the tests' fast one, or Prefect's defaults")
    args = parser.parse_args()
    fleet_stack.LIVENESS = fleet_stack.FAST_LIVENESS if args.liveness == "fast" else fleet_stack.DEFAULT_LIVENESS
    work = args.workdir or reachable_workdir("fleet-bench-")  # PostgreSQL (as `postgres`) reaches it
    try:
        result = measure(args, work)
    finally:
        if args.workdir is None:
            shutil.rmtree(work, ignore_errors=True)
    shown = [("DIR" if previous == "--workdir" else arg) for previous, arg in zip(["", *sys.argv[1:]], sys.argv[1:])]
    text = render(args, result, ".venv/bin/python bench/fleet_scale.py " + " ".join(shown))
    print(text)
    write_readme(text)


if __name__ == "__main__":
    main()
