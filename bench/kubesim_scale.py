#!/usr/bin/env python
"""kubesim at scale: time to ready, RSS, idle CPU and ``list nodes`` latency at 100/1,000/5,000 nodes.

Each size runs ``python -m kubesim up`` as a child process with the *default* (unscaled) Kubernetes
timings - 10 s lease renewals and status checks for every node - so "idle" means a real cluster's
steady heartbeat load. Measurements come from /proc of the child (RSS, CPU ticks) and from the
clients users actually run: the Python ``kubernetes`` client (raw bytes, ``_preload_content=False``,
and fully deserialized) and ``kubectl get nodes``. The last result is written into bench/README.md
between the ``<!-- kubesim-scale -->`` markers.

A size may carry a time scale (``20000@0.5``: kubesim's clock at half speed, every kubelet
renewing every 20 s). The **Lease renewals/s** column says whether the kubelets keep their
timings: it is measured in the idle window from the audit log, beside what the timings ask for
(every node renews its Lease every 10 s, divided by the time scale); a simulator that cannot keep
up renews fewer, and its nodes' Leases go stale as a dead kubelet's would.

With ``--pods-per-node N`` it measures a busy cluster instead (``kubesim up --pods-per-node N``:
ReplicaSets of 10 under budgets, docs/kubesim.md), without an audit log: the time to the ready line,
the time until every pod exists and is Running (polled every 2 s through the API: ``limit=1`` for
the count; once all exist, a ``status.phase!=Running`` field selector for the rest), and the RSS
then and at the peak. That table goes between the ``<!-- kubesim-pods -->`` markers.

Usage: ``python bench/kubesim_scale.py [--sizes 100,1000,5000,20000] [--idle-seconds 20]``
``python bench/kubesim_scale.py --pods-per-node 30 --sizes 500,5000``
"""

from __future__ import annotations

import argparse
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from proc_usage import cpu_seconds  # noqa: E402 - a sibling module of the benchmarks

README = Path(__file__).with_name("README.md")
MARK_BEGIN, MARK_END = "<!-- kubesim-scale:begin -->", "<!-- kubesim-scale:end -->"
PODS_BEGIN, PODS_END = "<!-- kubesim-pods:begin -->", "<!-- kubesim-pods:end -->"


@dataclass
class Result:
    nodes: int
    ready_s: float
    rss_mib: float
    idle_cpu_pct: float
    list_raw_ms: float
    list_model_ms: float
    kubectl_ms: float
    requests_per_s: float
    time_scale: float = 1.0
    lease_renewals_per_s: float = 0.0


def _rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


def _median_ms(action, repeat: int) -> float:
    samples = []
    for _ in range(repeat):
        start = time.perf_counter()
        action()
        samples.append((time.perf_counter() - start) * 1000)
    return statistics.median(samples)


def _audit_lines(path: Path) -> int:
    with open(path, "rb") as handle:
        return sum(1 for _ in handle)


def _lease_renewals(path: Path, skip: int, upto: int) -> int:
    """Lease updates among the audit log's lines ``skip`` to ``upto`` (the idle window's)."""
    count = 0
    with open(path, "rb") as handle:
        for index, line in enumerate(handle):
            if index >= upto:
                break
            if index >= skip and b'"verb":"update"' in line and b'"resource":"leases"' in line:
                count += 1
    return count



@contextmanager
def kubesim_up(cmd: list[str], total_nodes: int) -> Iterator[tuple[subprocess.Popen[str], float]]:
    """``kubesim up`` as a child: the process and the seconds to its ready line; stopped after."""
    start = time.perf_counter()
    process = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    try:
        assert process.stdout is not None
        line = process.stdout.readline()
        if not line.startswith("kubesim ready:"):
            raise RuntimeError(f"kubesim up failed at {total_nodes} nodes: {line!r}")
        yield process, time.perf_counter() - start
    finally:
        process.terminate()
        try:
            process.wait(60)
        except subprocess.TimeoutExpired:
            process.kill()

def measure(total_nodes: int, idle_seconds: float, workdir: Path, time_scale: float = 1.0) -> Result:
    from kubernetes import client, config

    state = workdir / f"n{total_nodes}x{time_scale:g}"
    kubeconfig = state / "kubeconfig"
    audit = state / "audit.log"
    cmd = [
        sys.executable,
        "-m",
        "kubesim",
        "up",
        "--nodes",
        str(total_nodes - 1),
        "--kubeconfig",
        str(kubeconfig),
        "--state-dir",
        str(state),
        "--audit-log",
        str(audit),
        "--ready-timeout",
        "10m",
        "--time-scale",
        str(time_scale),
    ]
    with kubesim_up(cmd, total_nodes) as (process, ready):
        time.sleep(min(5.0, idle_seconds))  # let the start-up burst drain
        cpu0, lines0, t0 = cpu_seconds(process.pid), _audit_lines(audit), time.perf_counter()
        time.sleep(idle_seconds)
        elapsed = time.perf_counter() - t0
        idle_cpu = (cpu_seconds(process.pid) - cpu0) / elapsed * 100
        lines1 = _audit_lines(audit)
        requests = (lines1 - lines0) / elapsed
        renewals = _lease_renewals(audit, lines0, lines1) / elapsed
        rss = _rss_mib(process.pid)
        core = client.CoreV1Api(config.new_client_from_config(config_file=str(kubeconfig)))
        raw = _median_ms(lambda: core.list_node(_preload_content=False).data, 5)
        model = _median_ms(lambda: core.list_node(), 3)
        kubectl = _kubectl_ms(kubeconfig, workdir)
        rss = max(rss, _rss_mib(process.pid))
        return Result(total_nodes, ready, rss, idle_cpu, raw, model, kubectl, requests, time_scale, renewals)


@dataclass
class PodsResult:
    nodes: int
    pods: int
    ready_s: float
    running_s: float  # nan: not reached within the timeout
    rss_mib: float  # when all pods were Running (or at the timeout)
    peak_rss_mib: float  # up to ``settle`` seconds after that
    pods_at_end: int = 0
    running_at_end: int = -1  # -1: not counted (not all pods existed yet)


def _pod_count(core) -> int:
    """How many pods exist: one item and ``remainingItemCount``."""
    import json

    page = json.loads(core.list_pod_for_all_namespaces(limit=1, _preload_content=False).data)
    return len(page["items"]) + int(page["metadata"].get("remainingItemCount") or 0)


def _not_running(core) -> int:
    """Pods not Running (a field selector the server evaluates on every pod: asked only once all exist)."""
    import json

    rest = core.list_pod_for_all_namespaces(field_selector="status.phase!=Running", _preload_content=False)
    return len(json.loads(rest.data)["items"])


def measure_pods(total_nodes: int, pods_per_node: int, workdir: Path, timeout: float, settle: float) -> PodsResult:
    from kubernetes import client, config

    # kubesim up --nodes N-1 --pods-per-node P: ceil(P x N / 10) ReplicaSets of 10 over all N nodes
    # (docs/kubesim.md; the bench talks to kubesim only as a client, tests/test_import_contracts.py)
    want = -(-pods_per_node * total_nodes // 10) * 10
    state = workdir / f"pods-n{total_nodes}x{pods_per_node}"
    kubeconfig = state / "kubeconfig"
    cmd = [sys.executable, "-m", "kubesim", "up", "--nodes", str(total_nodes - 1), "--pods-per-node",
           str(pods_per_node), "--kubeconfig", str(kubeconfig), "--state-dir", str(state), "--ready-timeout", "10m"]
    start = time.perf_counter()
    with kubesim_up(cmd, total_nodes) as (process, ready):
        core = client.CoreV1Api(config.new_client_from_config(config_file=str(kubeconfig)))
        peak, running_s, total, running = 0.0, float("nan"), 0, -1
        while time.perf_counter() - start < timeout:
            peak = max(peak, _rss_mib(process.pid))
            total = _pod_count(core)
            running = total - _not_running(core) if total >= want else -1
            print(f"  {time.perf_counter() - start:6.1f} s: {total} pods" + (f", {running} Running" if running >= 0 else "")
                  + f", RSS {_rss_mib(process.pid):.0f} MiB", file=sys.stderr, flush=True)
            if running >= want:
                running_s = time.perf_counter() - start
                break
            time.sleep(2.0)
        rss = _rss_mib(process.pid)
        settle_end = time.perf_counter() + settle
        while time.perf_counter() < settle_end:  # the controllers' status writes after the pods
            time.sleep(1.0)
            peak = max(peak, _rss_mib(process.pid))
        return PodsResult(total_nodes, want, ready, running_s, rss, max(peak, rss), total, running)


def render_pods(results: list[PodsResult], pods_per_node: int, settle: float) -> str:
    header = ("| nodes | pods | ready line (s) | all pods Running (s after start) | RSS then (MiB) "
              f"| peak RSS to {settle:g} s later (MiB) |\n"
              "|---:|---:|---:|---:|---:|---:|\n")
    rows = "".join(
        f"| {r.nodes:,} | {r.pods:,} | {r.ready_s:.1f} | "
        + (f"{r.running_s:.1f}" if r.running_s == r.running_s else
           f"not reached: {r.pods_at_end:,} pods" + (f", {r.running_at_end:,} Running" if r.running_at_end >= 0 else ""))
        + f" | {r.rss_mib:,.0f} | {r.peak_rss_mib:,.0f} |\n"
        for r in results
    )
    machine = f"{platform.machine()}, {os.cpu_count()} CPUs, Python {platform.python_version()}"
    when = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    command = f"python bench/kubesim_scale.py --pods-per-node {pods_per_node} --sizes {','.join(str(r.nodes) for r in results)}"
    return (f"{PODS_BEGIN}\nLast run: {when} on {machine}, `{command}`.\n\n{header}{rows}{PODS_END}")


def _kubectl_ms(kubeconfig: Path, workdir: Path) -> float:
    if not shutil.which("kubectl"):
        return float("nan")
    home = workdir / "kubectl-home"
    home.mkdir(exist_ok=True)
    env = dict(os.environ, HOME=str(home), KUBECONFIG=str(kubeconfig))
    run = lambda: subprocess.run(["kubectl", "get", "nodes"], env=env, capture_output=True, check=True)  # noqa: E731
    run()  # warm the discovery cache: measure the list, not discovery
    return _median_ms(run, 3)


def render(results: list[Result], idle_seconds: float) -> str:
    header = (
        "| nodes | time scale | time to ready (s) | RSS (MiB) | idle CPU (% of one core) | API requests/s at idle "
        "| Lease renewals/s (the timings ask) | list nodes, python raw (ms) | list nodes, python models (ms) "
        "| `kubectl get nodes` (ms) |\n"
        "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n"
    )
    rows = "".join(
        f"| {r.nodes:,} | {r.time_scale:g} | {r.ready_s:.1f} | {r.rss_mib:.0f} | {r.idle_cpu_pct:.0f} "
        f"| {r.requests_per_s:.0f} | {r.lease_renewals_per_s:.0f} ({(r.nodes - 1) / 10 * r.time_scale:.0f}) "
        f"| {r.list_raw_ms:.0f} | {r.list_model_ms:.0f} | {r.kubectl_ms:.0f} |\n"
        for r in results
    )
    machine = f"{platform.machine()}, {os.cpu_count()} CPUs, Python {platform.python_version()}"
    when = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    return (
        f"{MARK_BEGIN}\nLast run: {when} on {machine}; default Kubernetes timings at the time scale shown; idle measured over "
        f"{idle_seconds:g} s after a 5 s settle; list latencies are medians.\n\n{header}{rows}{MARK_END}"
    )


def write_readme(table: str, begin: str = MARK_BEGIN, end: str = MARK_END, title: str = "kubesim scale") -> None:
    text = README.read_text() if README.exists() else ""
    if begin in text and end in text:
        before, rest = text.split(begin, 1)
        after = rest.split(end, 1)[1]
        text = before + table + after
    else:
        text = text.rstrip() + f"\n\n## {title}\n\n" + table + "\n"
    README.write_text(text)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="100,1000,5000,20000",
                        help="total node counts (incl. the control plane), each optionally @TIME_SCALE")
    parser.add_argument("--idle-seconds", type=float, default=20.0)
    parser.add_argument("--no-readme", action="store_true", help="print the table only")
    parser.add_argument("--pods-per-node", type=int, default=0,
                        help="a busy cluster: time until this many pods a node are all Running, and RSS")
    parser.add_argument("--pods-timeout", type=float, default=600.0,
                        help="with --pods-per-node: give up waiting for the pods after this many seconds")
    parser.add_argument("--settle-seconds", type=float, default=20.0,
                        help="with --pods-per-node: RSS sampled this long after all pods are Running, for the peak")
    args = parser.parse_args()
    if args.pods_per_node:
        pods_results = []
        with tempfile.TemporaryDirectory(prefix="kubesim-bench-") as tmp:
            for size in args.sizes.split(","):
                result = measure_pods(int(size), args.pods_per_node, Path(tmp), args.pods_timeout, args.settle_seconds)
                print(result, flush=True)
                pods_results.append(result)
        table = render_pods(pods_results, args.pods_per_node, args.settle_seconds)
        print(table)
        if not args.no_readme:
            write_readme(table, PODS_BEGIN, PODS_END, "kubesim with pods")
        return
    results = []
    with tempfile.TemporaryDirectory(prefix="kubesim-bench-") as tmp:
        for spec in args.sizes.split(","):
            size, _, scale = spec.partition("@")
            result = measure(int(size), args.idle_seconds, Path(tmp), float(scale or 1.0))
            print(result, flush=True)
            results.append(result)
    table = render(results, args.idle_seconds)
    print(table)
    if not args.no_readme:
        write_readme(table)


if __name__ == "__main__":
    main()
