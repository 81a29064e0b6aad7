"""`rollout demo`: the product in one command, on embedded defaults.

An embedded kubesim (a control-plane node and a dozen workers on a fast clock, some of them
"legacy" hosts without the ``/system.slice`` cgroup) and a private Prefect API (``PREFECT_HOME``
in the demo's work dir, analytics off). Each rollout runs as ``rollout start`` runs one (its live
screen; Ctrl-C stops it, and the demo with it, exit 130):

1. ``demo-good``: the nodes' own config (exported from configz) with ``maxPods: 80``: canary,
   then batches, to completion.
2. ``demo-crashloop``: the same plus ``enforceNodeAllocatable: [pods, system-reserved]`` with a
   ``systemReservedCgroup`` the legacy hosts do not have (seed 002). It validates, but the kubelet
   dies at start on those hosts: no error string, the node goes NotReady. The rollout halts and
   reverts everything it touched (failureAction revert-all).
3. ``demo-evicts``: the good config with an ``evictionHard`` memory threshold above what the hosts
   have free. Every node stays Ready; its pods are evicted all day. A real Prometheus (Debian's,
   on loopback) scrapes every kubelet through the node proxy, and the policy's analysis checks
   catch the canary's evictions and revert it.

Then today's clusters: kubesim 1.31 (no DKC) with ``kubelet-rollout-agent`` on every host (real
agent code, one process, as ``kubelet-rollout-agent run --kubesim-fleet`` runs it):

3. ``demo-dropin-good``: a drop-in with one field, through every batch via the agents.
4. ``demo-dropin-crashloop``: a drop-in the legacy (cgroupfs) hosts cannot run: the agent restores
   the canary's previous config by itself (Ready again), reports the error, and the rollout reverts.

The database stays in the work dir, so the runs can be browsed afterwards with
``PREFECT_HOME=<dir> prefect server start``.

It lives with the command line, the composition root: with ``fleet_stack`` (``rollout demo --fleet``),
the only shipped code that starts a kubesim.
"""

from __future__ import annotations

import contextlib
import copy
import logging
import tempfile
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any, Iterator

import yaml
from rich.console import Console
from rich.panel import Panel

from rollout_cli.console import ornament_width, print_markdown

if TYPE_CHECKING:
    from kubesim.cluster import Cluster

    from flows.outcome import RunOutcome
    from rollout.ports import ClusterForStatus, RunningConfigs
    from rollout_cli.local.prometheus import LocalPrometheus

DEMO_CLUSTER = """\
apiVersion: kubesim.kubelet-rollout.io/v1
kind: Cluster
pools:
  - name: control-plane
    count: 1
    controlPlane: true
    zones: [zone-a]
  - name: general
    count: {general}
    host: {{cgroups: ["/", "/kubepods", "/system.slice"]}}
  - name: legacy
    count: {legacy}
    host: {{cgroups: ["/", "/kubepods"]}}
"""

DEMO_POLICY = """\
name: demo
description: canary, then 25% / 60% / 100%; any failure reverts everything touched
steps: [1, "25%", "60%", "100%"]
maxUnavailable: 4
done: {until: active, requireReady: true, soak: 3s}
# kubesim runs 40x here: its 40 s node-monitor grace is 1 s, so NotReady is judged as fast
notReadyFor: 1s
progressDeadline: 90s
syncErrorGrace: 10s
leaseStaleAfter: 20s
failureBudget: 0
failureAction: revert-all
revertTarget: previous
recheckEvery: 2s
# the crash-looping config changes reboot-class fields on purpose
allowFields: [systemReservedCgroup, enforceNodeAllocatable, systemReserved]
"""


MODERN_CLUSTER = """\
apiVersion: kubesim.kubelet-rollout.io/v1
kind: Cluster
kubernetesVersion: "1.31"
pools:
  - name: control-plane
    count: 1
    controlPlane: true
  - name: general
    count: {general}
    host: {{cgroupDriver: systemd, swap: false}}
    kubelet: {{config: {{cgroupDriver: systemd}}, unit: {{restart: always, restartSec: 10s}}}}
  - name: legacy
    count: {legacy}
    host: {{cgroupDriver: cgroupfs, swap: false}}
    kubelet: {{config: {{cgroupDriver: cgroupfs}}, unit: {{restart: always, restartSec: 10s}}}}
"""

# the node agents of the simulated fleet: real agent code, one process, on kubesim's clock (its
# durations divided by kubesim's factor, as the kubelets'); a short trial for the demo, and a long
# health deadline, for a busy machine (x20: 6 s and 30 s); the health wait and tick as shipped
AGENT_ARGS = ["--trial", "2m", "--health-deadline", "10m", "--crash-threshold", "3"]


def _demo_policy(**changes: Any) -> str:
    """The demo policy with some fields replaced (YAML text, as a deployment passes it)."""
    return yaml.safe_dump({**yaml.safe_load(DEMO_POLICY), **changes}, sort_keys=False)


def _dropin(**fields: Any) -> str:
    return yaml.safe_dump({"apiVersion": "kubelet.config.k8s.io/v1beta1", "kind": "KubeletConfiguration", **fields})


def _cluster_file(workdir: Path, workers: int) -> Path:
    legacy = max(1, workers // 3)
    path = workdir / "demo-cluster.yaml"
    path.write_text(DEMO_CLUSTER.format(general=workers - legacy, legacy=legacy))
    return path


def demo_configs(gateway: RunningConfigs, node: str) -> tuple[str, str]:
    """(good, crash-looping) configs, both starting from ``node``'s running config."""
    from rollout.kubeletconfig import export_from_configz

    base = export_from_configz(gateway.configz(node))
    good = copy.deepcopy(base)
    good["maxPods"] = 80
    bad = copy.deepcopy(good)
    bad["systemReserved"] = {"cpu": "500m", "memory": "512Mi"}
    bad["systemReservedCgroup"] = "/system.slice"
    bad["enforceNodeAllocatable"] = ["pods", "system-reserved"]
    return yaml.safe_dump(good, sort_keys=False), yaml.safe_dump(bad, sort_keys=False)


def evicting_config(good: str) -> str:
    """The good config with a hard memory threshold above what a demo host (16Gi, about 10Gi free)
    has free: the kubelet runs, the node stays Ready, and the eviction manager evicts all day."""
    doc = yaml.safe_load(good)
    doc["evictionHard"] = {**(doc.get("evictionHard") or {}), "memory.available": "12Gi"}
    return yaml.safe_dump(doc, sort_keys=False)


# the demo policy plus the shipped canary's analysis checks, measured every 2 s (the clock runs 40x)
def analysis_policy() -> str:
    from rollout.policy import resolve_policy

    checks = [{**c.model_dump(mode="json", by_alias=True, exclude_defaults=True), "interval": "2s", "count": 3}
              for c in resolve_policy("canary").analysis.checks]
    return _demo_policy(analysis={"checks": checks, "onInconclusive": "ask"})


KUBESIM_LOG = "kubesim.log"  # in the work dir
AGENTS_LOG = "agents.log"


@contextlib.contextmanager
def kubesim_logs_in(path: Path) -> Iterator[None]:
    """kubesim's own log lines (the simulated kubelets' crash loops, start-up races, transient 403s:
    what ``kubesim up`` prints on stderr) go to ``path``, not among the rollouts' lines."""
    logger = logging.getLogger("kubesim")
    handler = logging.FileHandler(path)
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    saved = logger.level, logger.propagate
    logger.addHandler(handler)
    logger.setLevel(logging.WARNING)
    logger.propagate = False
    try:
        yield
    finally:
        logger.removeHandler(handler)
        handler.close()
        logger.setLevel(saved[0])
        logger.propagate = saved[1]


def run_demo(*, nodes: int = 11, time_scale: float = 40.0, workdir: Path | None = None,
             console: Console | None = None) -> int:
    """Run every rollout; 0 when each ended as expected (completed, or halted and reverted)."""
    console = console or Console()
    workdir = Path(workdir or tempfile.mkdtemp(prefix="rollout-demo-")).resolve()
    workdir.mkdir(parents=True, exist_ok=True)
    with kubesim_logs_in(workdir / KUBESIM_LOG):
        return _run_demo(nodes, time_scale, workdir, console)


def _run_demo(nodes: int, time_scale: float, workdir: Path, console: Console) -> int:
    from kubesim.cluster import Cluster

    from rollout.gateway import open_gateway
    from rollout_cli.local.prefect_home import ephemeral_prefect

    started = time.monotonic()
    console.rule("[bold]kubelet-rollout demo")
    console.print(f"work dir: {workdir}", soft_wrap=True)
    console.print(f"kubesim's own log (its kubelets' crash loops too): {workdir / KUBESIM_LOG}", soft_wrap=True)
    cluster_file = _cluster_file(workdir, nodes)
    with Cluster(cluster_file=cluster_file, state_dir=workdir / "kubesim", time_scale=time_scale) as cluster:
        console.print(f"kubesim: {len(cluster.node_names)} nodes, time x{time_scale:g}, kubeconfig {cluster.kubeconfig}")
        with ephemeral_prefect(workdir / "prefect") as api_url:
            console.print(f"Prefect API (ephemeral): {api_url}")
            gateway = open_gateway(str(cluster.kubeconfig))
            deadline = time.monotonic() + 60
            while not all(n.has_config_status for n in gateway.list_nodes()[0]):
                if time.monotonic() > deadline:  # a kubelet reports status.config a status period after start
                    raise RuntimeError("kubesim nodes never reported status.config")
                time.sleep(0.2)
            worker = next(n for n in cluster.node_names if n.startswith("general"))
            good, bad = demo_configs(gateway, worker)
            (workdir / "good.yaml").write_text(good)
            (workdir / "crashloop.yaml").write_text(bad)
            outcomes = []
            with _prometheus(cluster, console) as prometheus:
                runs = [("demo-good", good, DEMO_POLICY, "completed"), ("demo-crashloop", bad, DEMO_POLICY, "reverted")]
                if prometheus is not None:
                    runs.append(("demo-evicts", evicting_config(good), analysis_policy(), "reverted"))
                outcomes += _run_all(runs, cluster.kubeconfig, gateway, console, prometheus)
            gateway.close()
    with ephemeral_prefect(workdir / "prefect"):  # the same Prefect home: one UI shows every run
        outcomes += run_modern_demo(console, workdir=workdir, nodes=nodes, time_scale=time_scale)
    elapsed = time.monotonic() - started
    console.rule("summary")
    ok = True
    for name, expect, outcome in outcomes:
        mark = "✔" if outcome.outcome == expect else "✘"
        ok &= outcome.outcome == expect
        console.print(f"{mark} {name}: {outcome.outcome} (expected {expect})")
    console.print(f"took {elapsed:.0f} s")
    console.print(
        "See every run, its batch tables, progress and reports in the Prefect UI:\n"
        f"  PREFECT_HOME={workdir / 'prefect'} PREFECT_SERVER_ANALYTICS_ENABLED=false "
        "prefect server start   # then open http://127.0.0.1:4200/runs",
        soft_wrap=True,  # one line a terminal wraps by itself: pasted, it runs with its PREFECT_HOME
    )
    return 0 if ok else 1


def _run_all(runs: list[tuple[str, str, str, str]], kubeconfig: Path, gateway: ClusterForStatus, console: Console,
             prometheus: LocalPrometheus | None) -> list[tuple[str, str, Any]]:
    from rollout.usecases.status import rollout_status

    outcomes = []
    for name, text, policy, expect in runs:
        console.rule(f"rollout {name} (expected: {expect})")
        outcome = _roll(name, text, policy, kubeconfig, prometheus.url if prometheus else None)
        outcomes.append((name, expect, outcome))
        print_markdown(console, outcome.report or outcome.message)
        phases: dict[str, int] = {}
        try:
            for n in rollout_status(gateway, name)["nodes"]:
                phases[n["phase"]] = phases.get(n["phase"], 0) + 1
        except Exception as exc:  # noqa: BLE001 - e.g. refused before any journal
            console.print(f"(no status: {exc})")
        colour = "green" if outcome.outcome == expect else "red"
        # an ornament, as wide as the section rules (piped and fit to a halt's reason, its border was
        # a line of 1,100 columns); the reason is whole on one line in the report above
        console.print(Panel(f"[{colour}]{name}: {outcome.outcome}[/{colour}] - {outcome.message}\n"
                            f"node phases: {', '.join(f'{n} {p}' for p, n in sorted(phases.items()))}", title=name,
                            expand=False), width=ornament_width(console))
    return outcomes


def _roll(name: str, config: str, policy: str, kubeconfig: Path, prometheus: str | None = None) -> RunOutcome:
    """One rollout, run as ``rollout start`` runs it (the house's one run path): its live screen on
    a terminal, and Ctrl-C stops it as it stops ``rollout start``, then ends the demo (exit 130)."""
    from rollout.outcome import Outcome
    from rollout.run import PrometheusAddress, rollout_request
    from rollout_cli.runs import run_here

    request = rollout_request(name=name, config=config, policy=policy, kubeconfig=str(kubeconfig),
                              prometheus=PrometheusAddress(prometheus))
    outcome = run_here(request)
    if outcome.outcome is Outcome.STOPPED:
        raise KeyboardInterrupt  # every helper the demo started is stopped on the way out
    return outcome


@contextlib.contextmanager
def _prometheus(sim: Cluster, console: Console) -> Iterator[LocalPrometheus | None]:
    """A real Prometheus scraping every node through the node proxy, as its own ServiceAccount
    (None, said so, when Debian's prometheus is not installed: `make system-deps`)."""
    import shutil

    from rollout_cli.local.prometheus import SCRAPER, LocalPrometheus, grant_scraper

    if shutil.which("prometheus") is None:
        console.print("[yellow]prometheus is not installed (make system-deps): the analysis rollout is skipped")
        yield None
        return
    grant_scraper(sim.kubeconfig)
    with LocalPrometheus(sim.service_account_kubeconfig(*SCRAPER), scrape_interval_s=1.0) as prometheus:
        deadline = time.monotonic() + 60
        while len(prometheus.query('up{job="kubelet"} == 1')) < len(sim.node_names):
            if time.monotonic() > deadline:
                raise RuntimeError("Prometheus did not scrape every node within 60 s")
            time.sleep(0.3)
        console.print(f"Prometheus {prometheus.url}: scraping {len(sim.node_names)} kubelets through the node proxy")
        yield prometheus


def run_modern_demo(console: Console, *, workdir: Path, nodes: int, time_scale: float) -> list[tuple[str, str, Any]]:
    """Today's clusters: kubesim 1.31 (no DKC) with the node agent on every host; a good drop-in
    completes, a crash-looping one is caught and the agent brings the canary back by itself."""
    import signal
    import subprocess
    import sys
    from collections import Counter

    from kubesim.cluster import Cluster

    from rollout.gateway import open_gateway
    from rollout_cli.local.processes import start_helper, stop_process

    console.rule("today's clusters: Kubernetes 1.31, no DKC, kubelet-rollout-agent on every node")
    legacy = max(1, nodes // 3)
    path = workdir / "modern-cluster.yaml"
    path.write_text(MODERN_CLUSTER.format(general=nodes - legacy, legacy=legacy))
    outcomes: list[tuple[str, str, Any]] = []
    with Cluster(cluster_file=path, state_dir=workdir / "kubesim-modern", time_scale=time_scale / 2,
                 kubernetes_version="1.31") as cluster:
        with open(workdir / AGENTS_LOG, "ab") as log:  # the child keeps its own handle
            agents = start_helper([sys.executable, "-m", "kubelet_rollout_agent", "run", "--kubeconfig",
                                   str(cluster.kubeconfig), "--kubesim-fleet", str(cluster.state_dir), *AGENT_ARGS],
                                  stdout=log, stderr=subprocess.STDOUT)
        try:
            gateway = open_gateway(str(cluster.kubeconfig))
            workers = [n for n in cluster.node_names if not n.startswith("control-plane")]
            deadline = time.monotonic() + 90
            while not all(o.backend == "agent" for o in gateway.list_nodes()[0] if o.name in workers):
                if time.monotonic() > deadline:
                    raise RuntimeError("the node agents never advertised themselves")
                time.sleep(0.5)
            # what each agent advertises it writes (a drop-in, or a kubelet's whole --config file)
            writes = Counter(o.writes or "?" for o in gateway.list_nodes()[0] if o.name in workers)
            console.print(f"kubesim 1.31: {len(workers)} workers, each with kubelet-rollout-agent ("
                          + ", ".join(f"{n} writing a {what}" for what, n in sorted(writes.items()))
                          + f"; the report's tables name each node's); the agents' log: {workdir / AGENTS_LOG}",
                          soft_wrap=True)
            runs = (
                ("demo-dropin-good", _dropin(eventRecordQPS=7), _demo_policy(), "completed"),
                # the legacy hosts use cgroupfs: a kubelet told systemd dies at start, over and over
                ("demo-dropin-crashloop", _dropin(cgroupDriver="systemd"),
                 _demo_policy(allowFields=["cgroupDriver"], nodes={"selector": "kubesim.kubelet-rollout.io/pool=legacy"}),
                 "reverted"),
            )
            for name, text, policy, expect in runs:
                console.rule(f"rollout {name} (expected: {expect})")
                outcome = _roll(name, text, policy, cluster.kubeconfig)
                outcomes.append((name, expect, outcome))
                print_markdown(console, outcome.report or outcome.message)
            console.print("The crash-looping canary is back on its previous config, Ready, by the agent alone: "
                          + ", ".join(f"{o.name} Ready={o.ready}" for o in gateway.list_nodes()[0] if o.name.startswith("legacy")))
            gateway.close()
        finally:
            stop_process(agents, signal.SIGTERM, timeout=30)
    return outcomes
