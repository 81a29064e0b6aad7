"""`rollout demo --fleet`: a fleet of three simulated clusters, each rolled out by its own worker.

Three independent kubesim clusters (``dev``, the canary cluster, with some "legacy" hosts that
lack the ``/system.slice`` cgroup; ``eu`` and ``us``), a real Prefect server, and one process
worker per cluster on its own work pool holding only that cluster's kubeconfig, plus the fleet
flow's own worker, which holds none (``rollout_cli.local.fleet_stack``). Two fleet rollouts, each run
as a run of the fleet deployment:

1. ``fleet-good``: the nodes' own config with ``maxPods: 80`` crosses the fleet: ``dev`` first,
   its soak, then ``eu`` and ``us`` together;
2. ``fleet-crashloop``: the same plus a system-reserved cgroup the legacy hosts do not have: the
   canary cluster's own rollout catches the crash loop and reverts, the fleet halts, and ``eu``
   and ``us`` are never touched.

The Prefect database stays in the work dir: every run, the fleet's tree of cluster runs and the
clusters table can be browsed afterwards in the UI.
"""

from __future__ import annotations

import tempfile
import time
from pathlib import Path
from typing import Any

import yaml
from rich.console import Console
from rich.table import Table

from rollout_cli.demo import DEMO_CLUSTER, DEMO_POLICY, KUBESIM_LOG, demo_configs, kubesim_logs_in
from rollout_cli.local.fleet_stack import FleetStack, kubesim_clusters

CLUSTERS = {"dev": (2, 1), "eu": (3, 0), "us": (3, 0)}  # (general, legacy) workers


def _fleet(stack: FleetStack, failure_action: str) -> str:
    return yaml.safe_dump({
        "name": "demo",
        "clusters": [{"name": c, "workPool": FleetStack.pool_of(c), "identity": stack.identity_of(c),
                      "labels": {"region": c}} for c in CLUSTERS],
        "policy": DEMO_POLICY,
        "stages": [{"name": "canary", "clusters": ["dev"]}, {"name": "the rest"}],
        "soak": "5s", "maxConcurrent": 2, "failureAction": failure_action,
    }, sort_keys=False)


def run_fleet_demo(*, time_scale: float = 40.0, workdir: Path | None = None, console: Console | None = None) -> int:
    """Both fleet rollouts; 0 when the first completed and the second stopped in its canary cluster."""
    console = console or Console()
    workdir = Path(workdir or tempfile.mkdtemp(prefix="rollout-fleet-demo-")).resolve()
    workdir.mkdir(parents=True, exist_ok=True)
    with kubesim_logs_in(workdir / KUBESIM_LOG):
        return _run_fleet_demo(time_scale, workdir, console)


def _run_fleet_demo(time_scale: float, workdir: Path, console: Console) -> int:
    from prefect.settings import PREFECT_API_URL, temporary_settings

    from rollout.gateway import open_gateway

    started = time.monotonic()
    console.rule("[bold]kubelet-rollout fleet demo")
    console.print(f"work dir: {workdir}", soft_wrap=True)
    console.print(f"kubesim's own log (its kubelets' crash loops too): {workdir / KUBESIM_LOG}", soft_wrap=True)
    layouts = {c: DEMO_CLUSTER.format(general=g, legacy=legacy) for c, (g, legacy) in CLUSTERS.items()}
    with kubesim_clusters(workdir, layouts, time_scale=time_scale, trial_period="60s") as clusters:
        gateways = {c: open_gateway(str(cluster.kubeconfig)) for c, cluster in clusters.items()}
        _wait_for_status_config(gateways)
        for c, cluster in clusters.items():
            console.print(f"kubesim {c}: {len(cluster.node_names)} nodes at {cluster.server}, kubeconfig {cluster.kubeconfig}")
        stack = FleetStack(workdir / "stack", {c: cluster.kubeconfig for c, cluster in clusters.items()})
        with stack.running(), temporary_settings({PREFECT_API_URL: stack.server.api_url}):
            console.print(f"Prefect server {stack.server.api_url}; a worker per cluster, each with only its own "
                          "kubeconfig; the fleet flow on a worker of its own, with none")
            worker = next(n for n in clusters["dev"].node_names if n.startswith("general"))
            good, bad = demo_configs(gateways["dev"], worker)
            results = [_fleet_rollout(console, "fleet-good", _fleet(stack, "halt"), good, expect="completed"),
                       _fleet_rollout(console, "fleet-crashloop", _fleet(stack, "halt"), bad, expect="halted")]
        for gateway in gateways.values():
            gateway.close()
    console.rule("summary")
    for name, expect, outcome in results:
        console.print(f"{'✔' if outcome == expect else '✘'} {name}: {outcome} (expected {expect})")
    console.print(f"took {time.monotonic() - started:.0f} s")
    console.print("Browse the fleet's tree of cluster runs and its clusters table in the Prefect UI:\n"
                  f"  PREFECT_HOME={workdir / 'stack' / 'prefect'} PREFECT_SERVER_ANALYTICS_ENABLED=false "
                  "prefect server start   # then open http://127.0.0.1:4200/runs",
                  soft_wrap=True)  # one line a terminal wraps by itself: pasted, it runs with its PREFECT_HOME
    return 0 if all(outcome == expect for _, expect, outcome in results) else 1


def _fleet_rollout(console: Console, name: str, fleet: str, config: str, *, expect: str) -> tuple[str, str, str]:
    from prefect.client.schemas.objects import FlowRun
    from prefect.deployments import run_deployment

    from flows.fleet.status import fleet_status
    from flows.outcome import RunOutcome

    console.rule(f"fleet rollout {name} (expected: {expect})")
    run = run_deployment("kubelet-config-fleet-rollout/fleet", parameters={"name": name, "fleet": fleet,
                                                                           "config": config},
                         timeout=0, as_subflow=False)
    assert isinstance(run, FlowRun)
    shown = ""
    while True:
        time.sleep(2)
        from prefect.client.orchestration import get_client

        with get_client(sync_client=True) as client:
            run = client.read_flow_run(run.id)
        try:
            status = fleet_status(name)
        except Exception:  # noqa: BLE001 - not started yet
            status = None
        if status is not None:
            line = " · ".join(f"{r['cluster']} {r['phase']}" for r in status["clusters"])
            if line != shown:
                console.print(line, highlight=False)
                shown = line
        if run.state is not None and run.state.is_final():
            break
    outcome = RunOutcome.from_flow_run(run)
    status = fleet_status(name)
    console.print(_table(status))
    console.print(f"{name}: {outcome.outcome}: {outcome.message or status['message']}", highlight=False)
    return name, expect, outcome.outcome.value


def _table(data: dict[str, Any]) -> Table:
    t = Table("cluster", "stage", "phase", "batch", "nodes done", title=f"fleet {data['name']}: {data['state']}")
    for row in data["clusters"]:
        batch = f"{row['batch']}/{row['batches']}" if row["batches"] else ""
        nodes = f"{row['done']}/{row['nodes']}" if row["nodes"] is not None else ""
        t.add_row(row["cluster"], row["stage_name"], row["phase"], batch, nodes)
    return t


def _wait_for_status_config(gateways: dict[str, Any], timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while not all(n.has_config_status for gw in gateways.values() for n in gw.list_nodes()[0]):
        if time.monotonic() > deadline:  # a kubelet reports status.config a status period after start
            raise RuntimeError("kubesim nodes never reported status.config")
        time.sleep(0.2)
