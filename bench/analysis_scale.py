#!/usr/bin/env python
"""A 1,000-node rollout with three analysis checks, against the same rollout without analysis.

Starts ``kubesim up`` (a child process) and a real Prometheus (Debian's, on loopback) scraping
every kubelet through the node proxy as the ServiceAccount of
deployments/kubernetes/prometheus-rbac.yaml (HTTP node discovery; two scrapes per ``--interval``,
the fewest ``rollout start`` takes), then runs ``rollout start`` twice as a user runs it (a child
process): a fast policy (steps 1 / 1% / 10% / 50% / 100%, no soak) without analysis, then the
same policy with three checks on a new config (evictions, pod start p95 against the control
cohort, container restarts; each measured ``--count`` times every ``--interval``). Measured:

- **wall** of each rollout (process start to exit) and the **added** wall time of the analysed one,
  against the **analysis windows themselves** (per batch ``count x interval``, summed; target:
  added <= the windows + 2 % of the plain rollout's wall);
- **queries per batch** (from the evidence: every measurement, and the control cohort's query);
- **Prometheus' and kubesim's RSS** at the end (``/proc/PID/status`` VmRSS) and Prometheus' series.

Usage: ``python bench/analysis_scale.py [--nodes 1000] [--interval 15s] [--count 2]``; the result
replaces its table in bench/README.md.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import yaml
from kubernetes import client, config

from rollout.names import analysis_configmap_name
from rollout_cli.local.prometheus import LocalPrometheus

ROOT = Path(__file__).resolve().parents[1]
README = Path(__file__).with_name("README.md")
BEGIN, END = "<!-- analysis-scale:begin -->", "<!-- analysis-scale:end -->"
SCALE = 10.0
POLICY: dict[str, Any] = {
    "name": "bench-analysis", "steps": [1, "1%", "10%", "50%", "100%"], "maxUnavailable": "100%",
    "spreadAcrossZones": False, "done": {"until": "active", "requireReady": True, "soak": "0s"},
    "failureAction": "revert-batch", "recheckEvery": "5s",
}
P95 = ('histogram_quantile(0.95, sum by (le) (rate(kubelet_pod_start_duration_seconds_bucket'
       '{node=~"{{nodes}}"}[{{window}}])))')


def checks(interval: str, count: int) -> list[dict[str, Any]]:
    common = {"interval": interval, "count": count}
    return [
        {"name": "evictions", "condition": "< 1",
         "query": 'sum by (node) (kubelet_evictions{node=~"{{nodes}}"} or 0 * kubelet_running_pods{node=~"{{nodes}}"})',
         "noData": "inconclusive", **common},
        {"name": "pod-start-p95-vs-control", "query": P95, "condition": "<= 1.5 * control", "noData": "pass",
         **common},
        {"name": "container-restarts", "condition": "< 1", "noData": "pass",
         "query": 'sum by (node) (increase(kube_pod_container_status_restarts_total{node=~"{{nodes}}"}[{{window}}]))',
         **common},
    ]


def head_series(url: str) -> int:
    """How many series Prometheus holds in memory (its TSDB status; it does not scrape itself here)."""
    import urllib.request

    with urllib.request.urlopen(f"{url}/api/v1/status/tsdb", timeout=30) as response:
        return int(json.loads(response.read())["data"]["headStats"]["numSeries"])


def rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


def kubesim(nodes: int, work: Path) -> tuple[subprocess.Popen[str], Path]:
    kubeconfig = work / "kubeconfig"
    proc = subprocess.Popen([sys.executable, "-m", "kubesim", "up", "--nodes", str(nodes - 1), "--kubeconfig",
                             str(kubeconfig), "--state-dir", str(work / "state"), "--time-scale", str(SCALE)],
                            stdout=subprocess.PIPE, stderr=open(work / "kubesim.log", "w"), text=True)  # noqa: SIM115
    assert proc.stdout is not None
    line = proc.stdout.readline()
    if not line.startswith("kubesim ready"):
        raise RuntimeError(f"kubesim did not start: {line!r}; see {work / 'kubesim.log'}")
    return proc, kubeconfig


def scraper(kubeconfig: Path, work: Path) -> Path:
    env = dict(os.environ, KUBECONFIG=str(kubeconfig))
    subprocess.run(["kubectl", "apply", "-f", str(ROOT / "deployments/kubernetes/prometheus-rbac.yaml")], env=env,
                   check=True, capture_output=True)
    out = work / "prometheus.kubeconfig"
    subprocess.run([sys.executable, "-m", "kubesim", "token", "kubelet-rollout-prometheus", "-n", "kubelet-rollout",
                    "--kubeconfig", str(kubeconfig), "-o", str(out)], check=True, capture_output=True)
    return out


def config_text(kubeconfig: Path, qps: int) -> str:
    from rollout.gateway import open_gateway
    from rollout.kubeletconfig import export_from_configz

    gateway = open_gateway(str(kubeconfig))
    node = next(n.name for n in gateway.list_nodes()[0] if not n.name.startswith("control-plane"))
    doc = export_from_configz(gateway.configz(node))
    gateway.close()
    doc["eventRecordQPS"] = qps
    return yaml.safe_dump(doc, sort_keys=False)


def roll(name: str, kubeconfig: Path, work: Path, policy: dict[str, Any], qps: int, prometheus: str) -> float:
    cfg, pol = work / f"{name}.yaml", work / f"{name}-policy.yaml"
    cfg.write_text(config_text(kubeconfig, qps))
    pol.write_text(yaml.safe_dump(policy))
    env = dict(os.environ, PREFECT_HOME=str(work / "prefect"), PREFECT_SERVER_ANALYTICS_ENABLED="false")
    started = time.monotonic()
    done = subprocess.run([sys.executable, "-m", "rollout_cli", "start", "--config", str(cfg), "--policy", str(pol), "--name", name,
                           "--kubeconfig", str(kubeconfig), "--prometheus", prometheus, "-o", "json"],
                          env=env, capture_output=True, text=True, timeout=3600)
    wall = time.monotonic() - started
    (work / f"{name}.out").write_text(done.stdout + done.stderr)
    if done.returncode != 0:
        raise RuntimeError(f"rollout {name} exited {done.returncode}; see {work / (name + '.out')}")
    return wall


def queries_per_batch(kubeconfig: Path, name: str, batches: int) -> list[int]:
    core = client.CoreV1Api(config.new_client_from_config(str(kubeconfig)))
    out = []
    for batch in range(batches):
        cm = core.read_namespaced_config_map(analysis_configmap_name(name, batch), "kube-system")
        evidence = json.loads(cm.data["evidence.json"])
        controlled = sum(1 for c in evidence["checks"] for m in c["measurements"] if m.get("controlQuery"))
        out.append(sum(c["taken"] for c in evidence["checks"]) + controlled)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=1000)
    parser.add_argument("--interval", default="15s", help="Prometheus scrapes twice per interval")
    parser.add_argument("--count", type=int, default=2)
    parser.add_argument("--no-readme", action="store_true")
    args = parser.parse_args()
    from rollout.policy import parse_duration

    work = Path(tempfile.mkdtemp(prefix="analysis-bench-"))
    proc, kubeconfig = kubesim(args.nodes, work)
    try:
        scrape_s = parse_duration(args.interval).total_seconds() / 2  # the fewest scrapes a window may hold
        with LocalPrometheus(scraper(kubeconfig, work), scrape_interval_s=scrape_s) as prom:
            while len(prom.query('up{job="kubelet"} == 1')) < args.nodes:
                time.sleep(2)
            plain = roll("plain", kubeconfig, work, POLICY, 6, prom.url)
            print(f"plain rollout: {plain:.1f} s", flush=True)
            # inconclusive fails here: a benchmark has nobody to answer a gate
            analysed_policy = {**POLICY, "analysis": {"checks": checks(args.interval, args.count),
                                                      "onInconclusive": "fail"}}
            analysed = roll("analysed", kubeconfig, work, analysed_policy, 7, prom.url)
            print(f"analysed rollout: {analysed:.1f} s", flush=True)
            batches = len(POLICY["steps"])
            windows = batches * args.count * parse_duration(args.interval).total_seconds()
            queries = queries_per_batch(kubeconfig, "analysed", batches)
            series = head_series(prom.url)
            prom_rss, sim_rss = rss_mib(prom.process.pid if prom.process else 0), rss_mib(proc.pid)
    finally:
        proc.terminate()
        proc.wait(60)
    added = analysed - plain
    over = added - windows
    row = (f"| {args.nodes:,} | 3 x {args.count} every {args.interval} | {', '.join(map(str, queries))} | "
           f"{plain:.1f} | {analysed:.1f} | {added:.1f} | {windows:.0f} | {over:+.1f} ({100 * over / analysed:+.1f} %) | "
           f"{prom_rss:.0f} ({series:,} series) | {sim_rss:.0f} |")
    text = "\n".join([
        f"Last run: {datetime.now(timezone.utc):%Y-%m-%d %H:%M} UTC on {platform.machine()}, {os.cpu_count()} CPUs, "
        f"Python {platform.python_version()}; kubesim x{SCALE:g}, Prometheus scraping every {scrape_s:g} s.", "",
        "| nodes | checks | queries per batch | plain rollout (s) | with analysis (s) | added (s) | analysis windows (s) "
        "| added beyond the windows | Prometheus RSS (MiB) | kubesim RSS (MiB) |",
        "|---:|---|---|---:|---:|---:|---:|---:|---:|---:|", row])
    print(text)
    if not args.no_readme:
        readme = README.read_text()
        start, end = readme.index(BEGIN) + len(BEGIN), readme.index(END)
        README.write_text(readme[:start] + "\n" + text + "\n" + readme[end:])


if __name__ == "__main__":
    main()
