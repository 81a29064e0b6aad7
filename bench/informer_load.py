#!/usr/bin/env python
"""The orchestrator's live view under a cluster's Lease traffic: CPU, and whether it keeps up.

At 20,000 nodes the kubelets renew a Lease every 10 s each: 2,000 Lease events a second reach the
rollout's informer (``rollout.gateway``: one node watch and one Lease watch, seeded from one list).
For each size this starts ``python -m kubesim up`` with its audit log, lets it settle, then runs the
informer alone in a child process for a window, as ``rollout start`` runs it, and measures:

- **Lease renewals/s**: what kubesim's kubelets wrote in the window (its audit log);
- **informer CPU**: the child's CPU over the window, as a share of one core, and its RSS;
- **view age vs list age**: at the window's end, each node's Lease renewal time as the informer
  holds it and as a fresh list returns it; now minus each, p50 / p99 / max. An informer that keeps
  up holds what the list holds (the renewal interval, 10 s over the time scale, plus its lag).

Usage: ``python bench/informer_load.py [--sizes 10000,20000] [--seconds 30] [--workdir DIR]``
(a size may carry a time scale: ``20000@0.5``). Prints a table for bench/README.md.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import datetime, timezone
from pathlib import Path

from rollout_cli.local.processes import stop_process

ROOT = Path(__file__).resolve().parents[1]


def _quantiles(values: list[float]) -> tuple[float, float, float]:
    values = sorted(values)
    if not values:
        return float("nan"), float("nan"), float("nan")
    return statistics.median(values), values[min(len(values) - 1, int(0.99 * len(values)))], values[-1]


def child(kubeconfig: str, seconds: float) -> None:
    """The informer alone, as a run holds it; prints what it measured as JSON."""
    from rollout.gateway import open_gateway

    gateway = open_gateway(kubeconfig)
    listing = gateway.listing()
    informer = gateway.informer(seed=listing)
    informer.start()
    cpu0 = time.process_time()
    time.sleep(seconds)
    cpu = time.process_time() - cpu0
    view = informer.snapshot()
    now = datetime.now(timezone.utc)
    fresh = {o.name: o for o in gateway.list_nodes()[0]}
    informer.stop()
    ages = lambda held: [(now - o.lease_renewed).total_seconds() for o in held.values()  # noqa: E731
                         if o.lease_renewed is not None]
    rss = next(int(line.split()[1]) / 1024 for line in Path("/proc/self/status").read_text().splitlines()
               if line.startswith("VmHWM:"))
    print(json.dumps({"cpu_s": cpu, "seconds": seconds, "rss_mib": rss, "view": _quantiles(ages(view)),
                      "list": _quantiles(ages(fresh)), "relists": informer.relists,
                      "reconnects": informer.reconnects}))


def _renewals(audit: Path, skip: int) -> tuple[int, int]:
    """Lease updates after the audit log's first ``skip`` lines, and its line count."""
    count = lines = 0
    with open(audit, "rb") as handle:
        for lines, line in enumerate(handle, 1):
            if lines > skip and b'"verb":"update"' in line and b'"resource":"leases"' in line:
                count += 1
    return count, lines


def measure(nodes: int, scale: float, seconds: float, workdir: Path) -> dict[str, float]:
    state = workdir / f"n{nodes}x{scale:g}"
    kubeconfig, audit = state / "kubeconfig", state / "audit.log"
    kubesim = subprocess.Popen([sys.executable, "-m", "kubesim", "up", "--nodes", str(nodes - 1), "--kubeconfig",
                                str(kubeconfig), "--state-dir", str(state), "--audit-log", str(audit),
                                "--ready-timeout", "10m", "--time-scale", str(scale)],
                               cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    try:
        assert kubesim.stdout is not None
        if not kubesim.stdout.readline().startswith("kubesim ready:"):
            raise RuntimeError(f"kubesim up failed at {nodes} nodes")
        time.sleep(10)  # the start-up burst drains
        _, skip = _renewals(audit, 0)
        began = time.monotonic()
        done = subprocess.run([sys.executable, __file__, "--child", str(kubeconfig), "--seconds", str(seconds)],
                              cwd=ROOT, capture_output=True, text=True, check=True)
        elapsed = time.monotonic() - began
        renewed, _ = _renewals(audit, skip)
        got = json.loads(done.stdout.splitlines()[-1])
        return {"nodes": nodes, "scale": scale, "renewals_per_s": renewed / elapsed,
                "cpu_pct": 100 * got["cpu_s"] / got["seconds"], **{k: got[k] for k in ("rss_mib", "relists",
                                                                                        "reconnects")},
                "view": got["view"], "list": got["list"]}
    finally:
        stop_process(kubesim, signal.SIGTERM, timeout=60)


def render(results: list[dict[str, float]], seconds: float) -> str:
    machine = f"{platform.machine()}, {os.cpu_count()} CPUs, Python {platform.python_version()}"
    rows = "".join(
        f"| {r['nodes']:,} | {r['scale']:g} | {r['renewals_per_s']:.0f} ({(r['nodes'] - 1) / 10 * r['scale']:.0f}) "
        f"| {r['cpu_pct']:.0f} | {r['rss_mib']:.0f} | {' / '.join(f'{v:.1f}' for v in r['view'])} "
        f"| {' / '.join(f'{v:.1f}' for v in r['list'])} | {r['relists']:.0f} / {r['reconnects']:.0f} |\n"
        for r in results)
    return (f"Last run: {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())} on {machine}; a {seconds:g} s window.\n\n"
            "| nodes | time scale | Lease renewals/s (the timings ask) | informer CPU (% of one core) | informer RSS (MiB) "
            "| Lease age in the informer's view p50 / p99 / max (s) | Lease age in a fresh list p50 / p99 / max (s) "
            "| relists / reconnects |\n|---:|---:|---:|---:|---:|---|---|---:|\n" + rows)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="10000,20000")
    parser.add_argument("--seconds", type=float, default=30.0)
    parser.add_argument("--workdir", type=Path, default=None)
    parser.add_argument("--child", default=None, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child(args.child, args.seconds)
        return
    results = []
    with tempfile.TemporaryDirectory(prefix="informer-bench-") as tmp:
        workdir = args.workdir or Path(tmp)
        for spec in args.sizes.split(","):
            size, _, scale = spec.partition("@")
            results.append(measure(int(size), float(scale or 1.0), args.seconds, workdir))
            print(results[-1], flush=True)
    print(render(results, args.seconds))


if __name__ == "__main__":
    main()
