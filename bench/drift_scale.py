#!/usr/bin/env python
"""`rollout drift` over a large kubesim fleet: wall time and requests per node, from kubesim's audit log.

For each size this starts ``kubesim up`` (a child process, with its audit log; 1.23, DKC), rolls a
good config (only ``eventRecordQPS`` changed) out to every worker with ``rollout start`` (a child
process, the fast benchmark policy with the shipped health settings: steps 1 / 1% / 10% / 50% /
100%), points ``--drifted`` workers' ``spec.configSource`` back at their local config by hand (as
a person would with kubectl), waits until their kubelets run it, and then runs ``rollout drift -o
json`` as a user runs it (a child process, the default policy: its ``apiQps``/``apiBurst``, 500/500,
are the client's rate limit). Measured:

- **wall**: ``rollout drift``'s process start to its exit (Python's start and imports included);
- **first request -> last request**: the part of it the API server sees;
- **requests** by verb and resource, from the audit log, between the process's start and exit,
  and **per node**; the configz reads (``get nodes/proxy``) per managed node (target: exactly 1);
- **exit code** (1: the drifted nodes were found) and the nodes it named drifted (exactly those
  made to drift); **CPU** and **peak RSS** of the ``rollout drift`` process (``wait4``).

Usage: ``python bench/drift_scale.py [--sizes 5000] [--drifted 10] [--workdir DIR]``; the last
result replaces its table in bench/README.md.
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
from collections import Counter
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import yaml

sys.path.insert(0, str(Path(__file__).resolve().parent))
from readme_blocks import write_block  # noqa: E402 - a sibling module of the benchmarks
# kubesim's clock by size (rollout_scale.time_scale_for): about 1,000 Lease renewals a second keep
# the kubelets on time on two cores: x2 at 5,000 nodes
from rollout_scale import stop_children, time_scale_for, wait_for_handoffs  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
MARK_BEGIN, MARK_END = "<!-- drift-scale:begin -->", "<!-- drift-scale:end -->"
BENCH_UA = "drift-bench"  # this script's own requests: not the command's
POLICY = {
    "name": "bench-fast",
    "steps": [1, "1%", "10%", "50%", "100%"],
    "maxUnavailable": "100%",
    "spreadAcrossZones": False,
    "done": {"until": "active", "requireReady": True, "soak": "0s"},
    "failureAction": "revert-batch",
}
# the shipped thresholds a kubelet's clock measures, stretched on a clock slower than real
KUBELET_CLOCK_DEFAULTS = {"progressDeadline": 600, "syncErrorGrace": 60, "leaseStaleAfter": 40, "notReadyFor": 20}


def policy_for(scale: float) -> dict[str, Any]:
    if scale >= 1:
        return dict(POLICY)
    return {**POLICY, **{key: f"{seconds / scale:g}s" for key, seconds in KUBELET_CLOCK_DEFAULTS.items()}}


@dataclass
class Result:
    nodes: int
    time_scale: float
    drifted_made: int
    exit_code: int = -1
    wall_s: float = 0.0
    requests_s: float = 0.0
    to_first_s: float = 0.0  # process start -> its first request (Python, imports, the kubeconfig)
    after_last_s: float = 0.0  # its last request -> exit
    requests: int = 0
    by_kind: dict[str, int] = field(default_factory=dict)
    configz: int = 0
    managed: int = 0
    named: list[str] = field(default_factory=list)
    expected: list[str] = field(default_factory=list)
    counts: dict[str, int] = field(default_factory=dict)
    cpu_s: float = 0.0
    peak_rss_mib: float = 0.0
    rollout_s: float = 0.0
    load: tuple[float, float, float] = (0.0, 0.0, 0.0)  # the machine's load average as drift started


def _kubesim(nodes: int, scale: float, work: Path) -> tuple[subprocess.Popen[str], Path, Path]:
    kubeconfig, audit = work / "kubeconfig", work / "audit.log"
    cmd = [sys.executable, "-m", "kubesim", "up", "--kubeconfig", str(kubeconfig), "--state-dir", str(work / "state"),
           "--audit-log", str(audit), "--time-scale", str(scale), "--ready-timeout", str(max(300, nodes // 20)),
           "--nodes", str(nodes - 1), "--trial-period", "60s"]
    proc = subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    assert proc.stdout is not None
    for line in proc.stdout:
        if "kubesim ready" in line:
            return proc, kubeconfig, audit
    raise RuntimeError("kubesim did not come up")


def _api(kubeconfig: Path) -> Any:
    from kubernetes import client, config

    api_client = config.new_client_from_config(str(kubeconfig))
    api_client.user_agent = BENCH_UA
    return client.CoreV1Api(api_client)


def _nodes(api: Any) -> list[dict[str, Any]]:
    return list(json.loads(api.list_node(_preload_content=False).data)["items"])


def _workers(api: Any) -> list[str]:
    return sorted(n["metadata"]["name"] for n in _nodes(api)
                  if "node-role.kubernetes.io/control-plane" not in (n["metadata"].get("labels") or {}))


def _config(api: Any, node: str, **changes: Any) -> str:
    from rollout.kubeletconfig import export_from_configz

    configz = json.loads(api.connect_get_node_proxy_with_path(node, "configz", _preload_content=False).data)
    doc = export_from_configz(configz)
    doc.update(changes)
    return yaml.safe_dump(doc, sort_keys=False)


def _run(args: list[str], env: dict[str, str], log: Path) -> tuple[int, str, float, float, float, float]:
    """``rollout ARGS`` as a child process: (exit code, stdout, started, ended, CPU s, peak RSS MiB),
    the CPU and peak RSS the process's own (``wait4``)."""
    with log.open("w") as err:
        started = time.time()
        proc = subprocess.Popen([sys.executable, "-m", "rollout_cli", *args], cwd=ROOT, env=env,
                                stdout=subprocess.PIPE, stderr=err, text=True)
        assert proc.stdout is not None
        out = proc.stdout.read()  # to its end: the process has closed it (exited)
        _, status, usage = os.wait4(proc.pid, 0)
        ended = time.time()
    proc.returncode = os.waitstatus_to_exitcode(status)
    return proc.returncode, out, started, ended, usage.ru_utime + usage.ru_stime, usage.ru_maxrss / 1024


def _audit(path: Path, window: tuple[float, float]) -> list[dict[str, Any]]:
    """The command's requests: a user's (not a kubelet's, not kubesim's own), not this script's,
    received within its process's lifetime."""
    found = []
    with path.open() as lines:
        for line in lines:
            if not line.strip():
                continue
            event = json.loads(line)
            user = str((event.get("user") or {}).get("username", ""))
            if user.startswith("system:") or str(event.get("userAgent", "")).startswith(BENCH_UA):
                continue
            at = datetime.fromisoformat(event["requestReceivedTimestamp"].replace("Z", "+00:00")).timestamp()
            if window[0] <= at <= window[1]:
                found.append(event)
    return found


def _kind(event: dict[str, Any]) -> str:
    ref = event.get("objectRef") or {}
    resource = ref.get("resource", event.get("requestURI", "?"))
    if ref.get("subresource"):
        resource += "/" + ref["subresource"]
    return f"{event.get('verb')} {resource}"


HANDOFF_WAIT_S = 300.0


def _wait_local(api: Any, names: list[str], timeout: float = 300) -> None:
    """Until every one of ``names`` reports its local config active (its kubelet restarted onto it)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        status = {n["metadata"]["name"]: ((n.get("status") or {}).get("config") or {}) for n in _nodes(api)}
        if all(not (status.get(n, {}).get("active") or {}).get("configMap") for n in names):
            return
        time.sleep(1)
    raise RuntimeError("the drifted nodes never ran their local config")


def measure(nodes: int, drifted: int, work: Path, env: dict[str, str]) -> Result:
    scale = time_scale_for(nodes)
    kubesim, kubeconfig, audit_path = _kubesim(nodes, scale, work)
    result = Result(nodes, scale, drifted)
    try:
        api = _api(kubeconfig)
        workers = _workers(api)
        cfg, pol = work / "kubelet.yaml", work / "policy.yaml"
        cfg.write_text(_config(api, workers[0], eventRecordQPS=7))
        pol.write_text(yaml.safe_dump(policy_for(scale)))
        code, out, began, ended, _, _ = _run(["start", "--config", str(cfg), "--policy", str(pol), "--name", "bench",
                                              "--kubeconfig", str(kubeconfig), "-o", "json"], env, work / "start.log")
        result.rollout_s = ended - began
        if code != 0:
            raise RuntimeError(f"the rollout did not complete (exit {code}): {out[-2000:]}")
        result.expected = workers[:: max(1, len(workers) // drifted)][:drifted]
        for node in result.expected:  # a person points the kubelet back at its local config
            api.patch_node(node, {"spec": {"configSource": None}})
        _wait_local(api, result.expected)
        wait_for_handoffs(HANDOFF_WAIT_S)  # drift is measured alone, not beside them
        time.sleep(5)  # the rollout's last requests (its Prefect server's end) settle
        result.load = os.getloadavg()
        code, out, began, ended, cpu, rss = _run(["drift", "--kubeconfig", str(kubeconfig), "-o", "json"], env,
                                                 work / "drift.log")
        result.exit_code, result.wall_s, result.cpu_s, result.peak_rss_mib = code, ended - began, cpu, rss
        answer = json.loads(out) if out.strip().startswith("{") else {}
        result.counts = answer.get("counts", {})
        result.named = sorted(n["node"] for n in answer.get("nodes", []) if n["state"] == "drifted")
        result.managed = len(answer.get("nodes", [])) - result.counts.get("unmanaged", 0)
        time.sleep(2)  # the audit log's last lines
        events = _audit(audit_path, (began, ended))
        kinds = Counter(_kind(e) for e in events)
        result.by_kind = dict(kinds.most_common())
        result.requests = len(events)
        result.configz = kinds.get("get nodes/proxy", 0)
        stamps = sorted(datetime.fromisoformat(e["requestReceivedTimestamp"].replace("Z", "+00:00")).timestamp()
                        for e in events)
        result.requests_s = stamps[-1] - stamps[0] if stamps else 0.0
        result.to_first_s = stamps[0] - began if stamps else 0.0
        result.after_last_s = ended - stamps[-1] if stamps else 0.0
        return result
    finally:
        stop_children(kubesim)


def render(results: list[Result], command: str) -> str:
    when = datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    lines = [f"Last run: {when} on {platform.machine()}, {os.cpu_count()} CPUs, Python {platform.python_version()}; "
             f"command: `{command}`.", "",
             "| nodes | clock | exit | drifted named / made | wall s | start -> first request s | first -> last "
             "request s | last request -> exit s | requests | per node | configz reads / managed node | CPU s | "
             "peak RSS MiB |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in results:
        exact = "exactly" if r.named == sorted(r.expected) else "NOT"
        per_node = r.requests / r.nodes if r.nodes else 0.0
        per_managed = r.configz / r.managed if r.managed else 0.0
        lines.append(f"| {r.nodes:,} | x{r.time_scale:g} | {r.exit_code} | {len(r.named)} / {r.drifted_made} ({exact}) | "
                     f"{r.wall_s:.1f} | {r.to_first_s:.1f} | {r.requests_s:.1f} | {r.after_last_s:.1f} | {r.requests:,} | {per_node:.3f} | {per_managed:.3f} | "
                     f"{r.cpu_s:.1f} | {r.peak_rss_mib:.0f} |")
    for r in results:
        kinds = ", ".join(f"{k}: {v:,}" for k, v in r.by_kind.items())
        lines.append(f"\nRequests at {r.nodes:,} nodes: {kinds}. The rollout before it took {r.rollout_s:.0f} s; "
                     f"counts: {', '.join(f'{k} {v:,}' for k, v in r.counts.items())}; the machine's load "
                     f"average as drift started: {' / '.join(f'{x:.1f}' for x in r.load)} (2 CPUs).")
    return "\n".join(lines)


def write_readme(text: str) -> None:
    write_block(text, MARK_BEGIN, MARK_END)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="5000")
    parser.add_argument("--drifted", type=int, default=10, help="workers made to drift by hand")
    parser.add_argument("--no-readme", action="store_true")
    parser.add_argument("--workdir", type=Path, help="keep audit logs and state here (default: a temp dir)")
    args = parser.parse_args()
    shown = [("DIR" if previous == "--workdir" else arg) for previous, arg in zip(["", *sys.argv[1:]], sys.argv[1:])]
    command = ".venv/bin/python bench/drift_scale.py" + (" " + " ".join(shown) if shown else "")
    sys.path.insert(0, str(ROOT))
    from rollout_cli.local.prefect_home import template_db

    with tempfile.TemporaryDirectory(prefix="drift-bench-") as scratch:
        tmp = Path(args.workdir or scratch)
        home = tmp / "prefect-home"  # `rollout start`'s temporary Prefect server, on a migrated database
        home.mkdir(parents=True, exist_ok=True)
        import shutil

        shutil.copyfile(template_db(), home / "prefect.db")
        env = {k: v for k, v in os.environ.items() if not k.startswith(("PREFECT_API_URL", "KUBECONFIG"))}
        env.update(PREFECT_HOME=str(home), PREFECT_SERVER_ANALYTICS_ENABLED="false", PYTHONPATH=str(ROOT))
        results = []
        for size in [int(s) for s in args.sizes.split(",") if s]:
            work = tmp / f"n{size}"
            work.mkdir()
            results.append(measure(size, args.drifted, work, env))
            print(render(results, command), flush=True)
        if not args.no_readme:
            write_readme(render(results, command))


if __name__ == "__main__":
    main()
