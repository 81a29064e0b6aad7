#!/usr/bin/env python
"""A whole rollout at 100 / 1,000 / 5,000 nodes, measured from kubesim's audit log in one run.

For each size this starts ``kubesim up`` (a child process, with its audit log) and runs
``rollout start`` (a child process, as a user runs it) with the shipped health and deadline
settings and a fast policy (steps 1 / 1% / 10% / 50% / 100%, ``done.until: active``, no soak) on a
good config (only ``eventRecordQPS`` changed). A watch in this process records when each node's
status first shows the target active; the audit log gives the time of the kubelet's status write
that showed it, and of every request the orchestrator made. From those:

- **wall**: the orchestrator's first request to its last journal write;
- **critical path**: per batch, its first assignment write to the status write that made its last
  node done, summed (what the kubelets themselves needed);
- **ratio**: first assignment -> end, over the critical path (target <= 1.05);
- **start-up**: first request -> first assignment write (the process start before it is Python and
  Prefect importing, not counted); **between batches** and **end** gaps;
- **requests per node** by verb and resource (target <= 3 in total), **reverts** (target 0);
- **observation lag**: a node's status write -> the orchestrator's journal write of the batch it
  finished (p50/p99, target p99 <= 1 s), measured on each batch's last node, to the write's
  commit; also reported per batch to the write's arrival at the API server (the orchestrator's
  side of the window, without the server's time to answer);
- **orchestrator peak RSS** (VmHWM; target <= 300 MiB at 5,000 nodes);
- **the orchestrator's full garbage collections** (a ``sitecustomize`` the child imports logs each
  one through ``gc.callbacks``): how many and how long, before its first assignment, during the
  rollout and after its last node was done, and which batches' lag windows (last status write ->
  journal write) one fell into: a lag over target says whether the collector was in it.

And once, at 100 nodes: **reaction time** from a kubelet's status write carrying
``status.config.error`` to the orchestrator's first revert write, over 20 rollouts of a config the
kubelet rejects (target p99 <= 0.5 s).

``--mode modern`` (default size 1,000): the same rollout on Kubernetes 1.31 without DKC. kubesim
runs every worker as a simulated host (systemd-like, kubelet from ``--config`` plus
``--config-dir``); ``kubelet-rollout-agent run --kubesim-fleet`` runs real agent code for all of
them in one process (one shared Node watch); the rollout starts once every worker advertises the
agent. The config is a drop-in changing only ``eventRecordQPS``. The measurements are the same,
with the node's side moved: a node's "status write that showed it" is its agent's annotation PATCH
reporting ``config-active`` (after it wrote the drop-in, restarted the kubelet through the host API
and read configz back), not a kubelet status write; requests per node are the orchestrator's; the
agents' requests (API and host calls, told apart by User-Agent) and CPU are reported beside them.

``--kill-at F``: the same rollout, but the first ``rollout start`` is killed (SIGKILL, as ``kill -9``)
once a fraction F of the nodes is done, and the same command is run again at once; the row is that
re-run's, over both processes, and **reverts** counts every node PATCHed more than once (a double
assignment). Its table is written beside the others.

``--drain`` (default size 1,000): a rollout that drains every node, in modern mode (1.31, the agents'
fleet). kubesim runs ``--pods-per-node 30`` (ReplicaSets of 10, each under a budget of
``maxUnavailable: 1``) and the rollout starts once every one of those pods is Running and every
worker advertises the agent. The change is a drop-in ``cpuManagerPolicy: static`` +
``reservedSystemCPUs: "0"`` (a drain and a reset of ``cpu_manager_state``), under the bench's
steps with ``maxUnavailable: 10%`` (batches of at most 99 nodes, drained together) and
``disruption: {drain: auto, timeout: 30m}`` (every other setting shipped); kubesim's clock keeps
500 Lease renewals a second (x20 at 100 nodes, x5 at 1,000: a pod's 30 s grace is 1.5 s or 6 s),
half of the other modes', for the pods' own traffic. From the audit log of that one run:

- per node, the orchestrator's three PATCHes in order: the cordon, the assignment (with the state
  reset), the uncordon; a batch starts at its first cordon (t0) and each eviction (201) belongs to
  the batch whose window [t0, next batch's t0) holds it;
- **drains** (the evictions' own time), per batch: the evictions of each budget in the order the
  run made them, the first at t0 and each next one as soon as the budget allowed it again after the
  one before (the disruption controller's first status write with ``disruptionsAllowed >= 1``
  after that eviction, which kubesim's audit event records; no wait when the run's next eviction
  passed before any such write), each pod then needing its own time to be gone (the eviction's 201
  -> its kubelet's final DELETE, i.e. its termination grace on kubesim's clock); the batch's
  drain is the latest such end after t0. Evictions are taken as sent all at once: the request
  rate the API server takes is not in it;
- **kubelets** (their own time), per batch: the longest of its nodes' assignment write -> its
  agent's ``config-active`` report (drop-in, state reset, kubelet restart, configz proof, report);
- **critical path**: the sum over batches of drains + kubelets; **ratio**: the first batch's first
  cordon -> the orchestrator's last journal write, over the critical path (target <= 1.10);
  **wall**: its first request -> its last journal write; the same split as run (t0 -> the batch's
  first assignment write; that -> its last node done) beside it;
- **requests per node**: the orchestrator's by verb and resource, without the evictions; the
  evictions per node and per pod evicted, by answer (429: refused by a budget);
- checks: every pod on a worker at the start evicted, none twice; no 201 on a budget whose
  ``disruptionsAllowed`` was below 1 when it was decided (kubesim's audit annotations); no node
  left cordoned at the end; three PATCHes per node.

Usage: ``python bench/rollout_scale.py [--mode dkc|modern] [--sizes 100,1000,5000] [--reactions 20]
[--kill-at F] [--drain] [--workdir DIR]``; the last result replaces its table in bench/README.md.
"""

from __future__ import annotations

import argparse
import bisect
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Callable

import yaml

sys.path.insert(0, str(Path(__file__).resolve().parent))
from proc_usage import cpu_seconds  # noqa: E402 - a sibling module of the benchmarks
from readme_blocks import write_block  # noqa: E402 - a sibling module of the benchmarks

ROOT = Path(__file__).resolve().parents[1]
MARK_BEGIN, MARK_END = "<!-- rollout-scale:begin -->", "<!-- rollout-scale:end -->"
KILLED_BEGIN, KILLED_END = "<!-- rollout-scale-killed:begin -->", "<!-- rollout-scale-killed:end -->"
MODERN_BEGIN, MODERN_END = "<!-- rollout-scale-modern:begin -->", "<!-- rollout-scale-modern:end -->"
DRAIN_BEGIN, DRAIN_END = "<!-- rollout-scale-drain:begin -->", "<!-- rollout-scale-drain:end -->"
AGENT_UA = "kubelet-rollout-agent/"
EVICTION_AUDIT = "eviction.kubesim.kubelet-rollout.io/"  # kubesim.apiserver.eviction.AUDIT_PREFIX
BENCH_UA = "rollout-bench"  # this script's own watch: not the orchestrator's requests
ANN_ACTIVE = "kubelet-rollout.io/config-active"
# the agents' own timings: the orchestrator waits for `active`, which follows the restart by the
# agent's health wait (30s, its default) plus up to one tick; the trial (soak before last-known-good)
# outlasts the rollout, so no promotion write lands inside it; the resync is the longest idle wait
# on the Node watch. All in wall-clock time (--time-scale 1; on kubesim the agent would take them on
# its clock), as in the runs bench/README.md records
AGENT_ARGS = ["--trial", "10m", "--health-deadline", "2m", "--crash-threshold", "3", "--tick", "1s",
              "--resync", "60s", "--time-scale", "1"]
POLICY = {
    "name": "bench-fast",
    "steps": [1, "1%", "10%", "50%", "100%"],
    "maxUnavailable": "100%",
    "spreadAcrossZones": False,
    "done": {"until": "active", "requireReady": True, "soak": "0s"},
    "failureAction": "revert-batch",
}  # every health and deadline setting stays at its shipped default
# kubesim's clock by size: as fast as the two cores keep the kubelets on time beside the
# orchestrator, which is about 1,000 Lease renewals a second (every node every 10 s, times the
# scale); alone, kubesim renews 1,976 of the 2,000 due at 20,000 nodes and x1, at 85% of its core
# (bench/README.md, kubesim scale). So 20,000 run at half speed, 5,000 at x2 and 1,000 at x10;
# never faster than x20
MAX_TIME_SCALE, KEPT_RENEWALS_PER_S, LEASE_RENEW_S = 20.0, 1000.0, 10.0


def time_scale_for(nodes: int, renewals_per_s: float = KEPT_RENEWALS_PER_S) -> float:
    """kubesim's clock for ``nodes``: as fast as keeps ``renewals_per_s`` Lease renewals a second."""
    return min(MAX_TIME_SCALE, renewals_per_s * LEASE_RENEW_S / nodes)


# the shipped thresholds a kubelet's clock measures (RolloutPolicy's defaults, the ones a rehearsal
# scales): on a clock slower than real they are stretched alike, or a kubelet that takes its real
# (simulated) time is judged against wall-clock seconds it never had
KUBELET_CLOCK_DEFAULTS = {"progressDeadline": 600, "syncErrorGrace": 60, "leaseStaleAfter": 40, "notReadyFor": 20}


def policy_for(scale: float) -> dict[str, Any]:
    """The benchmark's policy with the shipped health settings, on kubesim's clock when it runs
    slower than real (faster clocks keep them as shipped: the kubelets only get more time)."""
    from rollout.policy import RolloutPolicy

    shipped = RolloutPolicy()
    assert [shipped.progress_deadline.total_seconds(), shipped.sync_error_grace.total_seconds(),
            shipped.lease_stale_after.total_seconds(), shipped.not_ready_for.total_seconds()] \
        == list(KUBELET_CLOCK_DEFAULTS.values()), "the shipped defaults moved: update KUBELET_CLOCK_DEFAULTS"
    if scale >= 1:
        return dict(POLICY)
    return {**POLICY, **{key: f"{seconds / scale:g}s" for key, seconds in KUBELET_CLOCK_DEFAULTS.items()}}
MODERN_TIME_SCALE = 20.0


@dataclass
class Result:
    mode: str
    nodes: int
    time_scale: float
    exit_code: int
    outcome: str
    wall_s: float
    critical_s: float
    ratio: float
    startup_s: float
    between_s: float
    end_s: float
    requests_per_node: float
    by_kind: dict[str, int]
    reverts: int
    lag_p50_s: float
    lag_p99_s: float
    rss_mib: float
    batches: int
    batch_nodes: dict[int, list[str]]  # batch size -> its nodes (the largest batch of each size)
    agent_requests: int = 0  # modern: every request of the node agents (API and host calls)
    agent_host_requests: int = 0
    agent_by_kind: dict[str, int] | None = None
    agents_cpu_s: float = 0.0
    agents_rss_mib: float = 0.0
    # from the user's side: the `rollout start` process's exec and exit, against the audit log
    exec_at: float = float("nan")  # the `rollout start` process's exec (wall clock)
    exec_to_first_patch_s: float = float("nan")
    exit_after_done_s: float = float("nan")
    spreads: dict[int, float] | None = None  # batch size -> its first to last assignment write
    events_recorded: int = 0  # node Events in the cluster once the command and its hand-off senders ended
    handoff_s: float = 0.0  # how long the hand-off senders went on after the command returned
    cpu_s: float = 0.0  # the orchestrator's CPU time (user + system) over its whole run
    load: tuple[float, float, float] = (0.0, 0.0, 0.0)  # the machine's load average when it started
    killed_at: int = 0  # --kill-at: nodes done when the first process was killed
    killed_after_s: float = 0.0  # and how long after its exec
    rerun_exec_to_first_request_s: float = float("nan")  # the re-run: exec -> its first request
    lags_by_batch: list[float] | None = None  # each batch's observation lag, in batch order
    # the same to the journal write's arrival at the API server (the orchestrator's side of it)
    sent_lags_by_batch: list[float] | None = None
    lag_windows: list[tuple[float, float]] | None = None  # each batch's last status write -> journal write
    full_collections: list[tuple[float, float]] | None = None  # the orchestrator's: (began, seconds)
    rss_at_batch_ends: list[float] | None = None  # resident MiB sampled when each batch's last node was done
    rss_most: tuple[float, float] | None = None  # the most resident MiB sampled, and when (s after exec)


class Audit:
    """What the measurements need from kubesim's audit log, read once, streaming: every request of
    the orchestrator, and each node's status writes (the kubelets' Lease renewals, the bulk of
    the log, are skipped).

    DKC: a status write is the kubelet's PATCH of ``nodes/status``. Modern: the node agent's PATCH
    of the Node's annotations (that is where it reports ``config-active``); the agents run with the
    orchestrator's admin credentials here, so their requests are told apart by their User-Agent and
    counted separately (``agents``, host calls included)."""

    def __init__(self, modern: bool = False, drain: bool = False) -> None:
        self.modern = modern
        self.drain = drain
        self.pod_gone: dict[str, float] = {}  # drain: "ns/pod" -> its kubelet's final DELETE (the last)
        self.budget_writes: dict[str, list[tuple[float, int]]] = {}  # drain: "ns/budget" -> (time, allowed)
        self.ours: list[dict[str, Any]] = []
        self.all_ours: list[dict[str, Any]] = []  # the orchestrator's, also after the command returned
        self.agents: list[dict[str, Any]] = []
        self.status: dict[str, list[float]] = {}
        self.window = (0.0, float("inf"))

    @classmethod
    def read(cls, path: Path, modern: bool = False, window: tuple[float, float] = (0.0, float("inf")),
             drain: bool = False) -> "Audit":
        """``window``: the ``rollout start`` process's lifetime; this script's own requests before
        it (exporting the config, waiting for the agents) are not the orchestrator's. ``drain``:
        also each pod's removal by its kubelet and each budget status write of the disruption
        controller (with the ``disruptionsAllowed`` it wrote)."""
        audit = cls(modern, drain)
        audit.window = window
        with path.open() as lines:
            for line in lines:
                # drain: the kubelets' own requests but their pod deletions (Leases, Node GETs: the
                # bulk of the log) are skipped before parsing
                if drain and '"username":"system:node:' in line and '"resource":"pods"' not in line:
                    continue
                if line.strip():
                    audit._add(json.loads(line))
        for times in audit.status.values():
            times.sort()
        return audit

    def _add(self, event: dict[str, Any]) -> None:
        user = str(event.get("user", {}).get("username", ""))
        ref = event.get("objectRef") or {}
        if str(event.get("userAgent", "")).startswith(AGENT_UA):
            self.agents.append(event)
            if self.modern and event.get("verb") == "patch" and ref.get("resource") == "nodes" and _ok(event):
                self.status.setdefault(ref.get("name", ""), []).append(_t(event["stageTimestamp"]))
        elif not user.startswith("system:"):
            if not str(event.get("userAgent", "")).startswith(BENCH_UA) \
                    and self.window[0] <= _t(event["requestReceivedTimestamp"]):
                self.all_ours.append(event)
                if _t(event["requestReceivedTimestamp"]) <= self.window[1]:
                    self.ours.append(event)
        elif self.drain and user.startswith("system:node:") and event.get("verb") == "delete" \
                and ref.get("resource") == "pods" and not ref.get("subresource") and _ok(event):
            self.pod_gone[f"{ref.get('namespace')}/{ref.get('name')}"] = _t(event["stageTimestamp"])
        elif self.drain and ref.get("resource") == "poddisruptionbudgets" and ref.get("subresource") == "status" \
                and event.get("verb") == "update" and _ok(event):
            allowed = int((event.get("annotations") or {}).get(EVICTION_AUDIT + "disruptions-allowed", -1))
            self.budget_writes.setdefault(f"{ref.get('namespace')}/{ref.get('name')}", []).append(
                (_t(event["stageTimestamp"]), allowed))
        elif not self.modern and user.startswith("system:node:") and event.get("verb") == "patch" \
                and ref.get("subresource") == "status":
            self.status.setdefault(user.removeprefix("system:node:"), []).append(_t(event["stageTimestamp"]))

    def orchestrator(self) -> list[dict[str, Any]]:
        return self.ours

    def status_writes(self, node: str) -> list[float]:
        return self.status.get(node, [])


def _t(stamp: str) -> float:
    return datetime.fromisoformat(stamp.replace("Z", "+00:00")).timestamp()


def _ok(e: dict[str, Any]) -> bool:
    return 200 <= int((e.get("responseStatus") or {}).get("code", 0)) < 300


class DoneWatch:
    """Records, per node, the wall time its status first showed the target active and Ready."""

    def __init__(self, kubeconfig: Path, modern: bool = False) -> None:
        from kubernetes import client, config

        api_client = config.new_client_from_config(str(kubeconfig))
        api_client.user_agent = BENCH_UA
        self.api = client.CoreV1Api(api_client)
        self.modern = modern
        self.target = ""
        self.seen: dict[str, float] = {}
        self._stopped = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stopped.set()

    def _run(self) -> None:
        """One raw watch (JSON lines, no model objects: 5,000 nodes stay cheap), resumed on drops."""
        from kubernetes.watch.watch import iter_resp_lines

        rv = ""
        while not self._stopped.is_set():
            try:
                resp = self.api.list_node(watch=True, resource_version=rv or None, timeout_seconds=30,
                                          allow_watch_bookmarks=True, _preload_content=False)
                for line in iter_resp_lines(resp):
                    if self._stopped.is_set():
                        return
                    if line:
                        event = json.loads(line)
                        rv = (event.get("object") or {}).get("metadata", {}).get("resourceVersion", rv)
                        if event.get("type") in ("ADDED", "MODIFIED"):
                            self._saw(event["object"])
            except Exception:  # noqa: BLE001 - a dropped stream: watch again
                time.sleep(0.2)

    def _saw(self, node: dict[str, Any]) -> None:
        name = node["metadata"]["name"]
        if self.modern:  # the agent's report: {"name": ..., "namespace": ..., ...} as JSON text
            try:
                active_name = json.loads(node["metadata"].get("annotations", {}).get(ANN_ACTIVE) or "{}").get("name")
            except ValueError:
                active_name = None
        else:
            active_name = (((node.get("status") or {}).get("config") or {}).get("active") or {}) \
                .get("configMap", {}).get("name")
        ready = any(c.get("type") == "Ready" and c.get("status") == "True"
                    for c in (node.get("status") or {}).get("conditions") or [])
        if self.target and name not in self.seen and active_name == self.target and ready:
            self.seen[name] = time.time()


def _modern_cluster(nodes: int) -> dict[str, Any]:
    """Kubernetes 1.31 (no DKC): every worker a simulated host whose kubelet runs under systemd."""
    return {"apiVersion": "kubesim.kubelet-rollout.io/v1", "kind": "Cluster", "kubernetesVersion": "1.31",
            "pools": [{"name": "cp", "count": 1, "controlPlane": True},
                      {"name": "general", "count": nodes - 1, "host": {"cgroupDriver": "systemd", "swap": False},
                       "kubelet": {"config": {"cgroupDriver": "systemd"},
                                   "unit": {"restart": "always", "restartSec": "10s"}}}]}


def _kubesim(nodes: int, scale: float, work: Path, modern: bool = False,
             pods_per_node: int = 0) -> tuple[subprocess.Popen[str], Path, Path]:
    kubeconfig, audit = work / "kubeconfig", work / "audit.log"
    cmd = [sys.executable, "-m", "kubesim", "up", "--kubeconfig", str(kubeconfig),
           "--state-dir", str(work / "state"), "--audit-log", str(audit), "--time-scale", str(scale),
           "--ready-timeout", str(max(300, nodes // 20))]
    if modern:
        (work / "cluster.yaml").write_text(yaml.safe_dump(_modern_cluster(nodes)))
        cmd += ["--cluster", str(work / "cluster.yaml"), "--kubernetes-version", "1.31"]
        if pods_per_node:
            cmd += ["--pods-per-node", str(pods_per_node)]
    else:
        cmd += ["--nodes", str(nodes - 1), "--trial-period", "60s"]
    proc = subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    assert proc.stdout is not None
    for line in proc.stdout:
        if "kubesim ready" in line:
            return proc, kubeconfig, audit
    raise RuntimeError("kubesim did not come up")


def _config(kubeconfig: Path, **changes: Any) -> str:
    from rollout.kubeletconfig import export_from_configz
    from rollout.gateway import open_gateway

    gw = open_gateway(str(kubeconfig))
    worker = next(n.name for n in gw.list_nodes()[0] if "node-role.kubernetes.io/control-plane" not in n.labels)
    doc = export_from_configz(gw.configz(worker))
    doc.update(changes)
    return yaml.safe_dump(doc, sort_keys=False)


def _memory_mib(pid: int, field: str = "VmHWM") -> float:
    """The process's peak resident memory in MiB (``field="VmRSS"``: its resident memory now)."""
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith(f"{field}:"):
                return int(line.split()[1]) / 1024
    except OSError:
        pass
    return 0.0


@dataclass
class Started:
    code: int
    stdout: str
    peak_rss_mib: float
    exec_at: float  # wall clock, as the person typing the command would time it
    exit_at: float
    cpu_s: float
    pid: int
    rss_trace: list[tuple[float, float]]  # (wall clock, resident MiB), about every half second


def _start(args: list[str], env: dict[str, str], kill_when: Callable[[], bool] | None = None,
           log: Path | None = None) -> Started:
    """`rollout start` as a child; its JSON answer goes to a file (a pipe would fill and block it).
    ``kill_when``: SIGKILL it (no handler runs, as with ``kill -9``) once that is true."""
    with tempfile.TemporaryFile("w+") as out, open(log or os.devnull, "a") as err:
        exec_at = time.time()
        proc = subprocess.Popen([sys.executable, "-m", "rollout_cli", *args], cwd=ROOT, env=env, text=True,
                                stdout=out, stderr=err)
        peak, cpu = 0.0, 0.0
        trace: list[tuple[float, float]] = []
        while proc.poll() is None:
            peak = max(peak, _memory_mib(proc.pid))
            cpu = max(cpu, _cpu_s(proc.pid))
            if not trace or time.time() - trace[-1][0] >= 0.5:
                trace.append((time.time(), _memory_mib(proc.pid, "VmRSS")))
            if kill_when is not None and kill_when():
                proc.kill()
                proc.wait()
                break
            time.sleep(0.05)
        exit_at = time.time()
        out.seek(0)
        return Started(proc.returncode, out.read(), peak, exec_at, exit_at, cpu, proc.pid, trace)


# Imported by every Python child started with BENCH_GC_LOG set (it is first on their PYTHONPATH):
# each full collection (generation 2) as "pid began seconds collected thread", one line each.
GC_PROBE = """
import gc, os, threading, time

_path = os.environ.get("BENCH_GC_LOG")
if _path:
    _out, _began = open(_path, "a", buffering=1), []

    def _log_full_collection(phase, info):
        if info["generation"] != 2:
            return
        if phase == "start":
            _began[:] = [time.time(), time.perf_counter()]
        elif _began:
            _out.write(f"{os.getpid()} {_began[0]:.4f} {time.perf_counter() - _began[1]:.4f} "
                       f"{info['collected']} {threading.current_thread().name}\\n")

    gc.callbacks.append(_log_full_collection)
"""


def _with_gc_log(env: dict[str, str], work: Path) -> tuple[dict[str, str], Path]:
    probe, log = work / "gc-probe", work / "full-collections.log"
    probe.mkdir(exist_ok=True)
    (probe / "sitecustomize.py").write_text(GC_PROBE)
    path = os.pathsep.join(p for p in (str(probe), env.get("PYTHONPATH", "")) if p)
    return {**env, "PYTHONPATH": path, "BENCH_GC_LOG": str(log)}, log


def _full_collections(log: Path, pid: int) -> list[tuple[float, float]]:
    """The full collections process ``pid`` logged: (began, seconds)."""
    if not log.exists():
        return []
    rows = [line.split() for line in log.read_text().splitlines()]
    return [(float(row[1]), float(row[2])) for row in rows if len(row) >= 3 and row[0] == str(pid)]


def _cpu_s(pid: int) -> float:
    try:
        return cpu_seconds(pid)
    except (OSError, IndexError, ValueError):
        return 0.0


def _agents(kubeconfig: Path, work: Path, nodes: int, env: dict[str, str],
            args: Sequence[str] = AGENT_ARGS) -> subprocess.Popen[bytes]:
    """The fleet's node agents, one process (real agent code); returns once every worker's agent
    has advertised itself on its Node."""
    from rollout.gateway import open_gateway

    log = (work / "agents.log").open("wb")
    proc = subprocess.Popen([sys.executable, "-m", "kubelet_rollout_agent", "run", "--kubeconfig", str(kubeconfig),
                             "--kubesim-fleet", str(work / "state"), *args],
                            cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT)
    gw = open_gateway(str(kubeconfig))
    deadline = time.monotonic() + 600
    while True:
        observed = [o for o in gw.list_nodes()[0] if "node-role.kubernetes.io/control-plane" not in o.labels]
        if len(observed) == nodes - 1 and all(o.backend == "agent" for o in observed):
            gw.close()
            return proc
        if proc.poll() is not None or time.monotonic() > deadline:
            proc.kill()
            raise RuntimeError(f"the node agents did not all advertise themselves (see {work / 'agents.log'})")
        time.sleep(1.0)


def _dropin(**fields: Any) -> str:
    return yaml.safe_dump({"apiVersion": "kubelet.config.k8s.io/v1beta1", "kind": "KubeletConfiguration", **fields})


HANDOFF_WAIT_S = 180.0


def wait_for_handoffs(limit_s: float = HANDOFF_WAIT_S) -> float:
    """Wait (at most ``limit_s``) for the detached senders `rollout start` handed its last
    node Events to (``python -m flows.event_handoff``, started in this checkout); how long it took."""
    began = time.time()
    while time.time() - began < limit_s:
        senders = 0
        for cmdline in Path("/proc").glob("[0-9]*/cmdline"):
            try:
                if b"flows.event_handoff" in cmdline.read_bytes() and (cmdline.parent / "cwd").resolve() == ROOT:
                    senders += 1
            except OSError:
                continue
        if not senders:
            break
        time.sleep(0.2)
    return time.time() - began


def _user_env(env: dict[str, str], work: Path) -> dict[str, str]:
    """`rollout start` as a person runs it without a Prefect profile: the temporary Prefect server
    the command starts for itself, on a Prefect home already migrated (as after a first run)."""
    import shutil

    from rollout_cli.local.prefect_home import template_db

    home = work / "prefect-home"
    home.mkdir(exist_ok=True)
    shutil.copyfile(template_db(), home / "prefect.db")
    user = {k: v for k, v in env.items() if k != "PREFECT_API_URL"}
    return {**user, "PREFECT_HOME": str(home)}


def measure(nodes: int, work: Path, env: dict[str, str], modern: bool = False, temporary_prefect: bool = True,
            kill_at: float | None = None) -> Result:
    scale = MODERN_TIME_SCALE if modern else time_scale_for(nodes)
    kubesim, kubeconfig, audit_path = _kubesim(nodes, scale, work, modern)
    agents: subprocess.Popen[bytes] | None = None
    try:
        cfg, pol = work / "kubelet.yaml", work / "policy.yaml"
        cfg.write_text(_dropin(eventRecordQPS=7) if modern else _config(kubeconfig, eventRecordQPS=7))
        pol.write_text(yaml.safe_dump(policy_for(scale)))
        from rollout.publish import build_configmap

        if modern:
            agents = _agents(kubeconfig, work, nodes, env)
            time.sleep(5)  # let the agents' start-up writes settle before the rollout's window
        watcher = DoneWatch(kubeconfig, modern)
        watcher.target = build_configmap("kube-system", base_name="kubelet-config", config_text=cfg.read_text(),
                                         rollout_name="bench")["metadata"]["name"]
        watcher.start()
        agents_cpu = _cpu_s(agents.pid) if agents else 0.0
        load = os.getloadavg()
        command = ["start", "--config", str(cfg), "--policy", str(pol), "--name", "bench", "--kubeconfig",
                   str(kubeconfig), "-o", "json"]
        run_env, gc_log = _with_gc_log(_user_env(env, work) if temporary_prefect else env, work)
        killed: Started | None = None
        if kill_at is not None:  # kill -9 mid-rollout, then the same command again at once
            killed = _start(command, run_env, kill_when=lambda: len(watcher.seen) >= kill_at * (nodes - 1),
                            log=work / "rollout-start.log")
            killed_at = len(watcher.seen)
        run = _start(command, run_env, log=work / "rollout-start.log")  # its stderr, kept with the workdir
        watcher.stop()
        agents_cpu = _cpu_s(agents.pid) - agents_cpu if agents else 0.0
        agents_rss = _memory_mib(agents.pid) if agents else 0.0
        answer = json.loads(run.stdout) if run.stdout.strip().startswith("{") else {}
        outcome = answer.get("outcome", "?")
        if outcome != "completed":
            print(f"{nodes} nodes: {outcome}: {answer.get('message', run.stdout[-2000:])}", file=sys.stderr, flush=True)
        handoff_s = wait_for_handoffs()  # the Events handed to a sender after the command returned count too
        audit = Audit.read(audit_path, modern, ((killed or run).exec_at, run.exit_at))
        result = _analyse(nodes, scale, run.code, outcome, max(run.peak_rss_mib, killed.peak_rss_mib if killed else 0),
                          audit, watcher.seen, kubeconfig, modern)
        result.agents_cpu_s, result.agents_rss_mib = agents_cpu, agents_rss
        _user_side(result, run, audit, watcher.seen)
        result.cpu_s, result.load, result.handoff_s = run.cpu_s, load, handoff_s
        result.full_collections = _full_collections(gc_log, run.pid)
        if killed is not None:
            result.killed_at, result.killed_after_s = killed_at, killed.exit_at - killed.exec_at
            rerun = [_t(e["requestReceivedTimestamp"]) for e in audit.orchestrator()
                     if _t(e["requestReceivedTimestamp"]) >= run.exec_at]
            result.rerun_exec_to_first_request_s = min(rerun) - run.exec_at if rerun else float("nan")
        return result
    finally:
        stop_children(agents, kubesim)  # kubesim too, whatever the agents did


def stop_children(*procs: subprocess.Popen[Any] | None) -> None:
    """Stop each child started (SIGTERM, then SIGKILL after a minute), in the order given."""
    for proc in procs:
        if proc is not None:
            proc.terminate()
            try:
                proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


def _analyse(nodes: int, scale: float, code: int, outcome: str, peak: float, audit: Audit,
             seen: dict[str, float], kubeconfig: Path, modern: bool = False) -> Result:
    from rollout.usecases.prepare import load_journal
    from rollout.gateway import open_gateway

    journal, _ = load_journal(open_gateway(str(kubeconfig)), "bench") or (None, None)
    assert journal is not None, "no journal"
    ours = audit.orchestrator()
    patches = [e for e in ours if e.get("verb") == "patch" and (e.get("objectRef") or {}).get("resource") == "nodes"
               and _ok(e)]
    assigned_at: dict[str, float] = {}
    for e in patches:
        assigned_at.setdefault(e["objectRef"]["name"], _t(e["stageTimestamp"]))
    done_at = {n: _status_write_before(audit, n, t) for n, t in seen.items()}
    critical, between, lags, previous_end = 0.0, 0.0, [], None
    windows: list[tuple[float, float]] = []
    journal_events = [e for e in ours if e.get("verb") in ("update", "create")
                      and (e.get("objectRef") or {}).get("resource") == "configmaps"
                      and "journal" in (e.get("objectRef") or {}).get("name", "")]
    journal_writes = sorted(_t(e["stageTimestamp"]) for e in journal_events)
    journal_sent = sorted(_t(e["requestReceivedTimestamp"]) for e in journal_events)
    sent_lags: list[float] = []
    for batch in journal.plan.batches:
        starts = [assigned_at[n] for n in batch.nodes if n in assigned_at]
        ends = [done_at[n] for n in batch.nodes if n in done_at]
        if not starts or not ends:
            continue
        start, end = min(starts), max(ends)
        critical += end - start
        if previous_end is not None:
            between += max(0.0, start - previous_end)
        noticed = next((w for w in journal_writes if w >= end), None)
        if noticed is not None:
            lags.append(noticed - end)
            windows.append((end, noticed))
        sent = next((w for w in journal_sent if w >= end), None)
        if sent is not None:
            sent_lags.append(sent - end)
        previous_end = end
    first_request = min(_t(e["requestReceivedTimestamp"]) for e in ours)
    first_assign = min(assigned_at.values())
    last_write = journal_writes[-1] if journal_writes else max(_t(e["stageTimestamp"]) for e in ours)
    by_kind = Counter(_kind(e) for e in ours)
    reverts = sum(1 for n in Counter(e["objectRef"]["name"] for e in patches).values() if n > 1)
    by_batch = list(lags)
    lags.sort()
    # the agents' requests inside the rollout's window (their start-up before it is not the rollout's)
    agents = [e for e in audit.agents if first_request <= _t(e["requestReceivedTimestamp"]) <= last_write + 1.0]
    host = [e for e in agents if str(e.get("requestURI", "")).startswith("/kubesim/")]
    agent_kinds = Counter(_kind(e, subresource=True) for e in agents)
    return Result(
        mode="modern" if modern else "dkc", agent_requests=len(agents), agent_host_requests=len(host),
        agent_by_kind=dict(agent_kinds.most_common()),
        nodes=nodes, time_scale=scale, exit_code=code, outcome=outcome,
        wall_s=last_write - first_request, critical_s=critical,
        ratio=(last_write - first_assign) / critical if critical else float("nan"),
        startup_s=first_assign - first_request, between_s=between,
        end_s=last_write - (previous_end or last_write), requests_per_node=len(ours) / nodes,
        by_kind=dict(by_kind.most_common()), reverts=reverts,
        lag_p50_s=statistics.median(lags) if lags else float("nan"),
        lag_p99_s=lags[min(len(lags) - 1, int(0.99 * len(lags)))] if lags else float("nan"),
        rss_mib=peak, batches=len(journal.plan.batches),
        batch_nodes={b.size: list(b.nodes) for b in sorted(journal.plan.batches, key=lambda b: b.size)},
        lags_by_batch=by_batch, sent_lags_by_batch=sent_lags, lag_windows=windows)


def _user_side(result: Result, run: Started, audit: Audit, seen: dict[str, float]) -> None:
    """What a person timing the command sees: exec -> first assignment write, the last node done
    (its status write) -> the process's exit, each batch's write spread, and the node Events."""
    patches = sorted((_t(e["stageTimestamp"]), e["objectRef"]["name"]) for e in audit.all_ours
                     if e.get("verb") == "patch" and (e.get("objectRef") or {}).get("resource") == "nodes"
                     and _ok(e))
    result.exec_at = run.exec_at
    if run.rss_trace:
        at, most = max(run.rss_trace, key=lambda sample: sample[1])
        result.rss_most = (most, at - run.exec_at)
        times = [t for t, _ in run.rss_trace]
        result.rss_at_batch_ends = [run.rss_trace[max(0, bisect.bisect_right(times, end) - 1)][1]
                                    for end, _ in (result.lag_windows or [])]
    if patches:
        result.exec_to_first_patch_s = patches[0][0] - run.exec_at
    done = [_status_write_before(audit, n, t) for n, t in seen.items()]
    if done:
        result.exit_after_done_s = run.exit_at - max(done)
    result.events_recorded = sum(1 for e in audit.all_ours if e.get("verb") == "create"
                                 and (e.get("objectRef") or {}).get("resource") == "events" and _ok(e))
    result.spreads = {}
    first: dict[str, float] = {}
    for at, node in patches:
        first.setdefault(node, at)
    for size, nodes in result.batch_nodes.items():
        times = [first[n] for n in nodes if n in first]
        if times:
            result.spreads[size] = max(times) - min(times)


def _kind(e: dict[str, Any], subresource: bool = False) -> str:
    ref = e.get("objectRef") or {}
    if "resource" in ref:
        sub = f"/{ref['subresource']}" if subresource and ref.get("subresource") else ""
        return f"{e.get('verb')} {ref['resource']}{sub}"
    uri = str(e.get("requestURI", "?")).split("?")[0]
    if uri.startswith("/kubesim/v1/hosts/"):  # one host per node: name the action, not the node
        uri = "host " + "/".join(uri.split("/")[5:])
    return f"{e.get('verb')} {uri}"


def _status_write_before(audit: Audit, node: str, seen_at: float) -> float:
    writes = audit.status_writes(node)
    i = bisect.bisect_right(writes, seen_at + 0.001)
    return writes[i - 1] if i else seen_at


def reactions(count: int, work: Path) -> list[float]:
    """Status write carrying config.error -> the orchestrator's first revert write, per rollout.

    The rollouts run in this process (the flow, as a deployment's worker runs it) with our own
    validation skipped, so the kubelet's 1.23 validation is what rejects the config.
    """
    from flows.rollout_flow import kubelet_config_rollout

    kubesim, kubeconfig, audit_path = _kubesim(100, 20.0, work)
    try:
        bad = yaml.safe_load(_config(kubeconfig))
        bad["healthzPort"] = 70000  # out of range: the kubelet refuses it and falls back
        for i in range(count):
            bad["eventRecordQPS"] = 100 + i  # a new config (and ConfigMap) per rollout
            kubelet_config_rollout(name=f"react-{i}", config=yaml.safe_dump(bad), policy=yaml.safe_dump(POLICY),
                                   kubeconfig=str(kubeconfig), skip_validation=True, return_state=True)
        audit = Audit.read(audit_path)
        ours = [e for e in audit.orchestrator() if e.get("verb") == "patch"
                and (e.get("objectRef") or {}).get("resource") == "nodes" and _ok(e)]
        by_node: dict[str, list[float]] = {}
        for e in ours:
            by_node.setdefault(e["objectRef"]["name"], []).append(_t(e["stageTimestamp"]))
        out: list[float] = []
        for node, times in by_node.items():
            times.sort()
            for assign, revert in zip(times[0::2], times[1::2]):
                # the kubelet's last status write before the revert is the one carrying the error
                writes = [t for t in audit.status_writes(node) if assign < t <= revert]
                if writes:
                    out.append(revert - writes[-1])
        return sorted(out)
    finally:
        kubesim.terminate()
        kubesim.wait(timeout=60)


DRAIN_PODS_PER_NODE = 30
# the drain rollout's policy: the bench's steps, batches of at most a tenth of the fleet (drained
# together, within every workload's budget), and `disruption: {drain: auto}` at its defaults
DRAIN_POLICY = {**POLICY, "name": "bench-drain", "maxUnavailable": "10%", "disruption": {"drain": "auto", "timeout": "30m"}}
# (the drain's timeout: a 90-node batch's own budget chain ran 7.5 minutes at 1,000 nodes, and the
# default 10 minutes halted batch 4 while it still moved)
# kubesim's clock for the drain rollout keeps half the Lease renewals of the others: at 1,000 nodes
# and x10 its one event loop spent itself on about 1,300 heartbeat requests a second, and each
# evicted pod's replacement waited minutes to be created and placed (its budget's chain with it)
DRAIN_KEPT_RENEWALS_PER_S = 500.0


@dataclass
class DrainResult:
    nodes: int
    time_scale: float
    exit_code: int
    outcome: str
    wall_s: float  # the orchestrator's first request -> its last journal write
    span_s: float  # the first batch's first cordon -> the last journal write (the ratio's numerator)
    critical_s: float  # sum over batches of drain_ideal + kubelets
    drain_ideal_s: float
    kubelets_s: float
    drain_actual_s: float  # sum over batches: first cordon -> first assignment write
    kubelets_actual_s: float  # sum over batches: first assignment write -> last node done
    between_s: float  # sum: a batch's last node done -> the next batch's first cordon
    end_s: float  # the last node done -> the last journal write
    batches: int
    workers: int
    requests: Counter[str]  # the orchestrator's, by verb and resource (subresource named)
    evictions: Counter[int]  # eviction requests by HTTP code
    pods_before: int  # workload pods on the workers when the rollout started
    pods_evicted: int  # distinct pods evicted (201)
    evicted_twice: int
    missed: int  # pods on a worker at the start never evicted
    past_budget: int  # 201 on a budget that allowed nothing when it was decided
    left_cordoned: int
    patches_per_node: Counter[int]  # how many PATCHes each worker got (cordon, assignment, uncordon: 3)
    per_batch: list[tuple[int, float, float, float, float, int]]  # size, drain ideal/actual, kubelets ideal/actual, 429s
    rss_mib: float
    cpu_s: float
    agents_cpu_s: float
    load: tuple[float, float, float]


def _drain_batch_ideal(t0: float, evictions: list[tuple[float, str, str]], audit: Audit) -> float:
    """A batch's drain as the evictions alone allow it, from its first cordon: the evictions of
    each budget in their order in the run, the first at ``t0``, each next one as soon as the budget
    allowed it again after the one before (the disruption controller's first status write with
    ``disruptionsAllowed >= 1`` after that eviction; no wait when the run's next eviction passed
    before any such write: the budget had room left), each pod then its own time to be gone (201
    -> its kubelet's DELETE). ``evictions``: (201 time, "ns/pod", "ns/budget" or "")."""
    chains: dict[str, list[tuple[float, str]]] = {}
    longest = 0.0
    for at, pod, budget in sorted(evictions):
        chains.setdefault(budget or f"none:{pod}", []).append((at, pod))
    for budget, chain in chains.items():
        writes = audit.budget_writes.get(budget, [])
        ideal = 0.0  # this eviction's ideal moment, after t0
        for i, (at, pod) in enumerate(chain):
            if i:
                before = chain[i - 1][0]
                restored = next((w for w, allowed in writes if w > before and allowed >= 1), None)
                if restored is not None and restored <= at:
                    ideal += restored - before
            gone = audit.pod_gone.get(pod)
            longest = max(longest, ideal + (gone - at if gone is not None and gone > at else 0.0))
    return longest


def measure_drain(nodes: int, work: Path, env: dict[str, str], temporary_prefect: bool = True) -> DrainResult:
    """The drain rollout (see the module doc): 1.31 and the agents, ``DRAIN_PODS_PER_NODE`` pods a
    node under budgets, a change that needs each node drained and its CPU manager state reset."""
    from kubernetes import client, config as kconfig

    scale = time_scale_for(nodes, DRAIN_KEPT_RENEWALS_PER_S)  # 20 at 100 nodes, 5 at 1,000
    kubesim, kubeconfig, audit_path = _kubesim(nodes, scale, work, modern=True, pods_per_node=DRAIN_PODS_PER_NODE)
    agents: subprocess.Popen[bytes] | None = None
    try:
        cfg, pol = work / "kubelet.yaml", work / "policy.yaml"
        cfg.write_text(_dropin(cpuManagerPolicy="static", reservedSystemCPUs="0"))
        pol.write_text(yaml.safe_dump(DRAIN_POLICY))  # the shipped health settings: kubesim runs x5 to x20
        from rollout.publish import build_configmap

        api_client = kconfig.new_client_from_config(str(kubeconfig))
        api_client.user_agent = BENCH_UA
        core = client.CoreV1Api(api_client)
        expected = -(-DRAIN_PODS_PER_NODE * nodes // 10) * 10
        deadline = time.monotonic() + 900
        while True:  # every workload pod Running before the rollout (the ready line does not wait for them)
            pods = _workload_pods(core)
            running = [p for p in pods if p[2] == "Running" and not p[3]]
            if len(running) == expected:
                break
            if time.monotonic() > deadline:
                raise RuntimeError(f"{len(running)} of {expected} workload pods Running after 15 minutes")
            time.sleep(3)
        agents = _agents(kubeconfig, work, nodes, env)
        time.sleep(5)  # let the agents' start-up writes settle before the rollout's window
        workers = {n.metadata.name for n in core.list_node().items
                   if "node-role.kubernetes.io/control-plane" not in (n.metadata.labels or {})}
        before = {name for name, node, phase, deleting in _workload_pods(core) if node in workers}
        watcher = DoneWatch(kubeconfig, modern=True)
        watcher.target = build_configmap("kube-system", base_name="kubelet-config", config_text=cfg.read_text(),
                                         rollout_name="bench")["metadata"]["name"]
        watcher.start()
        agents_cpu = _cpu_s(agents.pid)
        load = os.getloadavg()
        command = ["start", "--config", str(cfg), "--policy", str(pol), "--name", "bench", "--kubeconfig",
                   str(kubeconfig), "-o", "json"]
        run_env = _user_env(env, work) if temporary_prefect else env
        run = _start(command, run_env, log=work / "rollout-start.log")
        watcher.stop()
        agents_cpu = _cpu_s(agents.pid) - agents_cpu
        answer = json.loads(run.stdout) if run.stdout.strip().startswith("{") else {}
        outcome = answer.get("outcome", "?")
        if outcome != "completed":
            print(f"{nodes} nodes: {outcome}: {answer.get('message', run.stdout[-2000:])}", file=sys.stderr, flush=True)
        wait_for_handoffs()
        left_cordoned = sum(1 for n in core.list_node().items if n.spec.unschedulable)
        audit = Audit.read(audit_path, modern=True, window=(run.exec_at, run.exit_at), drain=True)
        return _analyse_drain(nodes, scale, run, outcome, audit, watcher.seen, kubeconfig, before, left_cordoned,
                              agents_cpu, load)
    finally:
        stop_children(agents, kubesim)


def _workload_pods(core: Any) -> list[tuple[str, str, str, bool]]:
    """("ns/name", node, phase, being deleted) of every pod of the ``podsPerNode`` workloads."""
    resp = core.list_namespaced_pod("workloads", _preload_content=False, _request_timeout=120)
    items = json.loads(resp.data).get("items") or []
    return [(f"{p['metadata']['namespace']}/{p['metadata']['name']}", (p.get("spec") or {}).get("nodeName", ""),
             (p.get("status") or {}).get("phase", ""), bool(p["metadata"].get("deletionTimestamp"))) for p in items]


def _analyse_drain(nodes: int, scale: float, run: Started, outcome: str, audit: Audit, seen: dict[str, float],
                   kubeconfig: Path, before: set[str], left_cordoned: int, agents_cpu: float,
                   load: tuple[float, float, float]) -> DrainResult:
    from rollout.gateway import open_gateway
    from rollout.usecases.prepare import load_journal

    journal, _ = load_journal(open_gateway(str(kubeconfig)), "bench") or (None, None)
    assert journal is not None, "no journal"
    ours = audit.orchestrator()
    patched: dict[str, list[float]] = {}
    for e in ours:
        if e.get("verb") == "patch" and (e.get("objectRef") or {}).get("resource") == "nodes" and _ok(e):
            patched.setdefault(e["objectRef"]["name"], []).append(_t(e["stageTimestamp"]))
    for times in patched.values():
        times.sort()
    # a drained node's PATCHes, in order: the cordon, the assignment (with the state reset), the uncordon
    cordon_at = {n: times[0] for n, times in patched.items()}
    assign_at = {n: times[1] for n, times in patched.items() if len(times) > 1}
    done_at = {n: _status_write_before(audit, n, t) for n, t in seen.items()}
    evictions = [e for e in ours if (e.get("objectRef") or {}).get("subresource") == "eviction"]
    passed = sorted((_t(e["stageTimestamp"]), f"{e['objectRef'].get('namespace')}/{e['objectRef']['name']}",
                     (e.get("annotations") or {}).get(EVICTION_AUDIT + "budget", "")) for e in evictions
                    if e["responseStatus"]["code"] == 201)
    journal_writes = sorted(_t(e["stageTimestamp"]) for e in ours if e.get("verb") in ("update", "create")
                            and (e.get("objectRef") or {}).get("resource") == "configmaps"
                            and "journal" in (e.get("objectRef") or {}).get("name", ""))
    batches = [b for b in journal.plan.batches if any(n in cordon_at for n in b.nodes)]
    starts = [min(cordon_at[n] for n in b.nodes if n in cordon_at) for b in batches]
    critical = drain_ideal = kubelets = drain_actual = kubelets_actual = between = 0.0
    per_batch: list[tuple[int, float, float, float, float, int]] = []
    previous_end: float | None = None
    complete = [b for b in batches if all(n in done_at for n in b.nodes)]
    for i, batch in enumerate(batches):
        t0, t1 = starts[i], starts[i + 1] if i + 1 < len(starts) else float("inf")
        if batch not in complete:  # a run stopped inside it: only whole batches are measured
            continue
        mine = [(at, pod, f"{pod.split('/')[0]}/{budget}" if budget and not budget.startswith("none") else "")
                for at, pod, budget in passed if t0 <= at < t1]
        drain = _drain_batch_ideal(t0, mine, audit)
        own = max((done_at[n] - assign_at[n] for n in batch.nodes if n in done_at and n in assign_at), default=0.0)
        first_assign = min((assign_at[n] for n in batch.nodes if n in assign_at), default=t0)
        end = max((done_at[n] for n in batch.nodes if n in done_at), default=first_assign)
        refused = sum(1 for e in evictions if e["responseStatus"]["code"] == 429
                      and t0 <= _t(e["stageTimestamp"]) < t1)
        per_batch.append((batch.size, drain, first_assign - t0, own, end - first_assign, refused))
        critical += drain + own
        drain_ideal += drain
        kubelets += own
        drain_actual += first_assign - t0
        kubelets_actual += end - first_assign
        if previous_end is not None:
            between += max(0.0, t0 - previous_end)
        previous_end = end
    first_request = min(_t(e["requestReceivedTimestamp"]) for e in ours)
    last_write = journal_writes[-1] if journal_writes else max(_t(e["stageTimestamp"]) for e in ours)
    if len(complete) < len(journal.plan.batches) and previous_end is not None:  # stopped: to its last whole batch
        last_write = next((w for w in journal_writes if w >= previous_end), last_write)
    evicted = Counter(pod for _, pod, _ in passed)
    past_budget = sum(1 for e in evictions if e["responseStatus"]["code"] == 201
                      and int((e.get("annotations") or {}).get(EVICTION_AUDIT + "disruptions-allowed", 1)) < 1)
    return DrainResult(
        nodes=nodes, time_scale=scale, exit_code=run.code, outcome=outcome,
        wall_s=last_write - first_request, span_s=last_write - starts[0] if starts else float("nan"),
        critical_s=critical, drain_ideal_s=drain_ideal, kubelets_s=kubelets, drain_actual_s=drain_actual,
        kubelets_actual_s=kubelets_actual, between_s=between, end_s=last_write - (previous_end or last_write),
        batches=len(complete), workers=sum(len(b.nodes) for b in journal.plan.batches),
        requests=Counter(_kind(e, subresource=True) for e in ours),
        evictions=Counter(int(e["responseStatus"]["code"]) for e in evictions),
        pods_before=len(before), pods_evicted=len(evicted), evicted_twice=sum(1 for c in evicted.values() if c > 1),
        missed=len(before - set(evicted)), past_budget=past_budget, left_cordoned=left_cordoned,
        patches_per_node=Counter(len(t) for t in patched.values()), per_batch=per_batch,
        rss_mib=run.peak_rss_mib, cpu_s=run.cpu_s, agents_cpu_s=agents_cpu, load=load)


def render_drain(results: list[DrainResult], command: str) -> str:
    lines = [_last_run(command) + f"; agents: `{' '.join(AGENT_ARGS)}`; policy: `{json.dumps(DRAIN_POLICY)}`.", "",
             "| nodes | pods | kubesim time scale | exit / outcome | wall (s) | first cordon -> end (s) "
             "| critical path (s): drains + kubelets | ratio | drains as run (s) | kubelets as run (s) "
             "| between batches / end (s) | orchestrator requests / node (without evictions) "
             "| evictions / node | evictions / pod | refused by a budget (429) "
             "| orchestrator peak RSS (MiB) / CPU (s) |",
             "|---:|---:|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for r in results:
        ev = sum(r.evictions.values())
        other = sum(v for k, v in r.requests.items() if not k.endswith("/eviction"))
        lines.append(
            f"| {r.nodes:,} | {r.pods_before:,} | {r.time_scale:g} | {r.exit_code} / {r.outcome} | {r.wall_s:.1f} "
            f"| {r.span_s:.1f} | {r.critical_s:.1f}: {r.drain_ideal_s:.1f} + {r.kubelets_s:.1f} | {r.span_s / r.critical_s:.3f} "
            f"| {r.drain_actual_s:.1f} | {r.kubelets_actual_s:.1f} | {r.between_s:.1f} / {r.end_s:.1f} "
            f"| {other / r.workers:.2f} | {ev / r.workers:.1f} | {ev / max(1, r.pods_evicted):.2f} "
            f"| {r.evictions.get(429, 0):,} | {r.rss_mib:.0f} / {r.cpu_s:.0f} |")
    for r in results:
        kinds = ", ".join(f"{k}: {v / r.workers:.2f}" for k, v in r.requests.most_common()
                          if not k.endswith("/eviction"))
        codes = ", ".join(f"{code}: {n:,}" for code, n in sorted(r.evictions.items()))
        lines.append(f"\nAt {r.nodes:,} nodes ({r.workers:,} workers, {r.batches} whole batches measured): orchestrator "
                     f"requests per node: {kinds}. Evictions by answer: {codes}; pods evicted: {r.pods_evicted:,} "
                     f"(on the workers at the start: {r.pods_before:,}, of them never evicted: {r.missed}); evicted "
                     f"more than once: {r.evicted_twice}; passed past `disruptionsAllowed`: {r.past_budget}; nodes "
                     f"left cordoned: {r.left_cordoned}; PATCHes per node: "
                     + ", ".join(f"{k}: {v:,} nodes" for k, v in sorted(r.patches_per_node.items()))
                     + f". Agents' CPU {r.agents_cpu_s:.0f} s; machine load at start "
                     + " / ".join(f"{x:.1f}" for x in r.load) + ".")
        lines.append("\nPer batch (size: drain ideal / as run, kubelets ideal / as run, s; 429s): "
                     + "; ".join(f"{size}: {d:.1f} / {da:.1f}, {k:.1f} / {ka:.1f}; {refused}"
                                 for size, d, da, k, ka, refused in r.per_batch) + ".")
    return "\n".join(lines)


def _last_run(command: str) -> str:
    when = datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    return (f"Last run: {when} on {platform.machine()}, {os.cpu_count()} CPUs, Python {platform.python_version()}; "
            f"command: `{command}`")


def render(results: list[Result], react: list[float], command: str) -> str:
    lines = [_last_run(command) + ".", "",
             "| nodes | kubesim time scale | exit / outcome | wall (s) | critical path (s) | ratio | start-up (s) "
             "| between batches (s) | end (s) | requests / node | reverts | observation lag p50 / p99 (s) "
             "| orchestrator peak RSS (MiB) |",
             "|---:|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for r in results:
        lines.append(f"| {r.nodes:,} | {r.time_scale:g} | {r.exit_code} / {r.outcome} | {r.wall_s:.1f} | "
                     f"{r.critical_s:.1f} | {r.ratio:.2f} | {r.startup_s:.1f} | {r.between_s:.1f} | {r.end_s:.1f} | "
                     f"{r.requests_per_node:.2f} | {r.reverts} | {r.lag_p50_s:.2f} / {r.lag_p99_s:.2f} | {r.rss_mib:.0f} |")
    lines += ["", "From the user's side (the `rollout start` process, as a person timing it sees it; the Prefect "
              "API a temporary server, as without a profile):", "",
              "| nodes | exec -> first PATCH (s) | last node done -> exit (s) | write spread per batch (s, by batch size) "
              "| node Events recorded / assigned (hand-off ended s after exit) | orchestrator CPU (s) | machine load at start (1/5/15 min) |",
              "|---:|---:|---:|---|---:|---:|---|"]
    for r in results:
        spreads = ", ".join(f"{size:,}: {spread:.1f}" for size, spread in sorted((r.spreads or {}).items())
                            if size >= 10)
        assigned = r.by_kind.get("patch nodes", 0)
        lines.append(f"| {r.nodes:,} | {r.exec_to_first_patch_s:.1f} | {r.exit_after_done_s:.1f} | {spreads} | "
                     f"{r.events_recorded:,} / {assigned:,} ({r.handoff_s:.1f}) | {r.cpu_s:.0f} | "
                     f"{' / '.join(f'{x:.1f}' for x in r.load)} |")
    for r in results:
        kinds = ", ".join(f"{k}: {v}" for k, v in list(r.by_kind.items())[:8])
        lines.append(f"\nRequests at {r.nodes:,} nodes ({r.batches} batches): {kinds}.")
        if r.lags_by_batch:
            lines.append(f"Observation lag per batch at {r.nodes:,} nodes (s): "
                         + ", ".join(f"{lag:.2f}" for lag in r.lags_by_batch) + ".")
        if r.sent_lags_by_batch:
            lines.append(f"The same to the journal write's arrival at the API server at {r.nodes:,} nodes (s): "
                         + ", ".join(f"{lag:.2f}" for lag in r.sent_lags_by_batch) + ".")
        if r.full_collections is not None:
            lines.append(_collections_line(r))
        if r.rss_most is not None:
            ends = ", ".join(f"{mib:.0f}" for mib in r.rss_at_batch_ends or [])
            lines.append(f"Orchestrator resident memory at {r.nodes:,} nodes (MiB): {ends} when each batch's last "
                         f"node was done; the most sampled {r.rss_most[0]:.0f}, {r.rss_most[1]:.0f} s after exec.")
    if react:
        p99 = react[min(len(react) - 1, int(0.99 * len(react)))]
        lines.append(f"\nReaction (status write with `status.config.error` -> first revert write), {len(react)} "
                     f"rollouts at 100 nodes: p50 {statistics.median(react):.2f} s, p99 {p99:.2f} s.")
    return "\n".join(lines)


def _collections_line(r: Result) -> str:
    """The orchestrator's full collections by phase of the run, and those inside a lag window."""
    full = r.full_collections or []
    windows = r.lag_windows or []
    first_patch = r.exec_at + r.exec_to_first_patch_s
    done = windows[-1][0] if windows else float("inf")

    def phase(picked: list[tuple[float, float]], what: str) -> str:
        longest = f", longest {max(s for _, s in picked):.2f} s" if picked else ""
        return f"{len(picked)} {what} ({sum(s for _, s in picked):.2f} s{longest})"

    # the collections overlapping each batch's window, and the batches that had any
    inside = [[s for at, s in full if start <= at + s and at <= end] for start, end in windows]
    in_windows = [f"batch {i + 1} ({sum(spent):.2f} s)" for i, spent in enumerate(inside) if spent]
    return (f"Full collections of the orchestrator at {r.nodes:,} nodes: "
            + ", ".join([phase([c for c in full if c[0] < first_patch], "before its first assignment"),
                         phase([c for c in full if first_patch <= c[0] < done], "during the rollout"),
                         phase([c for c in full if c[0] >= done], "after its last node was done")])
            + "; inside a batch's lag window: " + (", ".join(in_windows) or "none") + ".")


def render_killed(results: list[Result], command: str) -> str:
    lines = [_last_run(command) + ".", "",
             "| nodes | kubesim time scale | killed (SIGKILL) after | nodes done then | re-run: exit / outcome "
             "| re-run: exec -> first request (s) | nodes PATCHed more than once | node PATCHes / nodes "
             "| wall, both processes (s) |",
             "|---:|---:|---:|---:|---|---:|---:|---:|---:|"]
    for r in results:
        workers = r.nodes - 1
        lines.append(f"| {r.nodes:,} | {r.time_scale:g} | {r.killed_after_s:.1f} s | {r.killed_at:,} of {workers:,} "
                     f"| {r.exit_code} / {r.outcome} | {r.rerun_exec_to_first_request_s:.1f} | {r.reverts} "
                     f"| {r.by_kind.get('patch nodes', 0):,} / {workers:,} | {r.wall_s:.1f} |")
    return "\n".join(lines)


def render_modern(results: list[Result], command: str) -> str:
    lines = [_last_run(command) + f"; agents: `{' '.join(AGENT_ARGS)}`.", "",
             "| nodes | kubesim time scale | exit / outcome | wall (s) | critical path (s) | ratio | start-up (s) "
             "| between batches (s) | end (s) | orchestrator requests / node | reverts "
             "| observation lag p50 / p99 (s) | orchestrator peak RSS (MiB) | agent requests / node (API + host) "
             "| agents' CPU (s) | agents' peak RSS (MiB) |",
             "|---:|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for r in results:
        api = r.agent_requests - r.agent_host_requests
        lines.append(f"| {r.nodes:,} | {r.time_scale:g} | {r.exit_code} / {r.outcome} | {r.wall_s:.1f} | "
                     f"{r.critical_s:.1f} | {r.ratio:.2f} | {r.startup_s:.1f} | {r.between_s:.1f} | {r.end_s:.1f} | "
                     f"{r.requests_per_node:.2f} | {r.reverts} | {r.lag_p50_s:.2f} / {r.lag_p99_s:.2f} | "
                     f"{r.rss_mib:.0f} | {r.agent_requests / r.nodes:.1f} ({api / r.nodes:.1f} + "
                     f"{r.agent_host_requests / r.nodes:.1f}) | {r.agents_cpu_s:.0f} | {r.agents_rss_mib:.0f} |")
    for r in results:
        kinds = ", ".join(f"{k}: {v}" for k, v in list(r.by_kind.items())[:8])
        agent_kinds = ", ".join(f"{k}: {v}" for k, v in list((r.agent_by_kind or {}).items())[:10])
        lines.append(f"\nOrchestrator's requests at {r.nodes:,} nodes ({r.batches} batches): {kinds}.")
        lines.append(f"\nAgents' requests at {r.nodes:,} nodes, inside the rollout's window: {agent_kinds}.")
    return "\n".join(lines)


def write_readme(text: str, begin: str = MARK_BEGIN, end_mark: str = MARK_END) -> None:
    write_block(text, begin, end_mark)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mode", choices=("dkc", "modern"), default="dkc",
                        help="dkc: Kubernetes 1.23, spec.configSource; modern: 1.31, node agents and drop-ins")
    parser.add_argument("--sizes", default=None, help="default: 100,1000,5000 (dkc), 1000 (modern)")
    parser.add_argument("--reactions", type=int, default=None, help="default: 20 (dkc), 0 (modern)")
    parser.add_argument("--no-readme", action="store_true")
    parser.add_argument("--prefect", choices=("temporary", "server"), default="temporary",
                        help="the Prefect API `rollout start` uses: the temporary server it starts itself, as "
                             "without a profile (default), or a server already running")
    parser.add_argument("--kill-at", type=float, default=None, metavar="F",
                        help="kill -9 the first `rollout start` once this fraction of the nodes is done, then run "
                             "the same command again (dkc only)")
    parser.add_argument("--drain", action="store_true",
                        help="the drain rollout: modern mode, 30 pods a node under budgets, a change that needs a "
                             "drain (default size 1000)")
    parser.add_argument("--workdir", type=Path, help="keep audit logs, agent logs and state here (default: a temp dir)")
    args = parser.parse_args()
    modern = args.mode == "modern"
    sizes = args.sizes or ("1000" if modern else "100,1000,5000")
    reactions_count = args.reactions if args.reactions is not None else (0 if modern else 20)
    shown = [("DIR" if previous == "--workdir" else arg) for previous, arg in zip(["", *sys.argv[1:]], sys.argv[1:])]
    command = ".venv/bin/python bench/rollout_scale.py" + (" " + " ".join(shown) if shown else "")
    sys.path.insert(0, str(ROOT))
    from rollout_cli.local.prefect_home import ephemeral_prefect

    with tempfile.TemporaryDirectory(prefix="rollout-bench-") as scratch, \
            ephemeral_prefect(Path(args.workdir or scratch) / "prefect") as api:
        tmp = str(args.workdir or scratch)
        env = {**os.environ, "PREFECT_API_URL": api, "PREFECT_SERVER_ANALYTICS_ENABLED": "false",
               "PREFECT_HOME": str(Path(tmp) / "prefect"), "PYTHONPATH": str(ROOT)}
        if args.drain:
            drained = []
            for size in [int(s) for s in (args.sizes or "1000").split(",") if s]:
                work = Path(tmp) / f"drain{size}"
                work.mkdir()
                drained.append(measure_drain(size, work, env, temporary_prefect=args.prefect == "temporary"))
                print(render_drain(drained, command), flush=True)
            if not args.no_readme:
                write_readme(render_drain(drained, command), DRAIN_BEGIN, DRAIN_END)
            return
        results = []
        for size in [int(s) for s in sizes.split(",") if s]:
            work = Path(tmp) / f"n{size}"
            work.mkdir()
            results.append(measure(size, work, env, modern, temporary_prefect=args.prefect == "temporary",
                                   kill_at=args.kill_at))
            if args.kill_at is None:
                print(render_modern(results, command) if modern else render(results, [], command), flush=True)
        if args.kill_at is not None:
            text = render_killed(results, command)
            print(text)
            if not args.no_readme:
                write_readme(text, KILLED_BEGIN, KILLED_END)
            return
        if modern:
            text = render_modern(results, command)
            print(text)
            if not args.no_readme:
                write_readme(text, MODERN_BEGIN, MODERN_END)
            return
        react: list[float] = []
        if reactions_count:
            work = Path(tmp) / "reactions"
            work.mkdir()
            react = reactions(reactions_count, work)
        text = render(results, react, command)
        print(text)
        if not args.no_readme:
            write_readme(text)


if __name__ == "__main__":
    main()
