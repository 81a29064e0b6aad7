"""The fleet tests' world (tests/flows/test_fleet.py, test_fleet_kills.py): three kubesim
clusters, a real Prefect server on PostgreSQL, one process worker per cluster on its own work pool
holding only that cluster's kubeconfig, and a person's way of driving a fleet (`rollout fleet ...`
in a process of its own without any cluster's credentials).

Each test module brings up a world of its own (module-scoped): the two modules run on two CI
workers at once, where one module of seven tests was the longest path of the whole run. The
clusters are tiny (two or three nodes on a 40x clock) and every cluster policy short, so each
fleet takes tens of seconds.
"""

from __future__ import annotations

import contextlib
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import scenario as sc
import yaml

from rollout_cli.local.fleet_stack import FleetStack, kubesim_clusters
from rollout_cli.local.postgres import reachable_workdir

ROOT = Path(__file__).resolve().parents[2]
CLUSTERS = {"c1": (2, 0), "c2": (1, 1), "c3": (2, 0)}  # (general, legacy) workers: c2 alone has a legacy host
WRITES = ("create", "update", "patch", "delete")
GRACE_S = 5.0  # kubesim's node-monitor grace here, in wall seconds (see fleet_world)


class Env:
    """The module's world: the clusters, the Prefect stack, and how a person drives a fleet."""

    def __init__(self, tmp: Path, clusters: dict[str, Any], stack: FleetStack) -> None:
        self.tmp, self.clusters, self.stack = tmp, clusters, stack
        self.gateways = {name: sc.gateway(c) for name, c in clusters.items()}
        # a node's soak outlasts the grace and notReadyFor (1 s) by 2 s: a kubelet crash-looping
        # on the new config is caught before its batch is done; slow: a cluster busy long enough to be killed
        # glacial: a cluster still under way when a person's `fleet abort` lands, however loaded the machine
        for name, soak in (("policy", f"{GRACE_S + 3:.0f}s"), ("slow", f"{GRACE_S + 8:.0f}s"), ("glacial", "90s")):
            (tmp / f"{name}.yaml").write_text(sc.policy(
                name=name, steps=[1, "100%"], maxUnavailable=2, done={"soak": soak}, failureAction="revert-all",
                allowFields=sorted(sc.CRASHLOOP_ON_LEGACY)))

    def fleet_file(self, name: str, **fields: Any) -> Path:
        body = {"name": name,
                "clusters": [{"name": c, "workPool": FleetStack.pool_of(c), "identity": self.stack.identity_of(c),
                              "labels": {"cluster": c}} for c in self.clusters],
                "policy": "policy.yaml",  # a file next to the fleet file: the flow gets its text
                "stages": [{"clusters": ["c1"]}, {}], **fields}
        body = {k: v for k, v in body.items() if v is not None}
        path = self.tmp / f"{name}.yaml"
        path.write_text(yaml.safe_dump(body, sort_keys=False))
        return path

    def config(self, name: str, **changes: Any) -> Path:
        path = self.tmp / f"{name}-kubelet.yaml"
        path.write_text(sc.config_text(self.gateways["c1"], **changes))
        return path

    def cli(self, *args: str) -> subprocess.Popen[str]:
        """`rollout ...` in a process of its own, with no cluster's credentials."""
        return subprocess.Popen([sys.executable, "-m", "rollout_cli", *args], env=self.stack.server.env(),
                                cwd=self.tmp, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                start_new_session=True)

    def run(self, *args: str, timeout: float = 420) -> subprocess.CompletedProcess[str]:
        proc = self.cli(*args)
        stdout, stderr = proc.communicate(timeout=timeout)
        return subprocess.CompletedProcess(proc.args, proc.returncode, stdout, stderr)

    def flow_runs(self, tag: str) -> list[dict[str, Any]]:
        runs = self.stack.server.post("/flow_runs/filter", {"flow_runs": {"tags": {"all_": [tag]}}, "limit": 200})
        flows = {f["id"]: f["name"] for f in self.stack.server.post("/flows/filter", {})}
        return [{**r, "flow": flows.get(r["flow_id"], "")} for r in runs]

    def cluster_runs(self, fleet: str, cluster: str, flow: str = "kubelet-config-rollout") -> list[dict[str, Any]]:
        return [r for r in self.flow_runs(f"fleet:{fleet}") if f"cluster:{cluster}" in r["tags"] and r["flow"] == flow]

    def writes(self, cluster: str) -> int:
        """Writes the orchestrator (not kubesim's own components) made in one cluster, per its audit log."""
        return sum(1 for e in self.clusters[cluster].audit_log.events() if e.get("verb") in WRITES
                   and not str((e.get("user") or {}).get("username", "")).startswith("system:"))

    def logs(self) -> str:
        """The tails of the workers' and the server's logs (the stack's directory goes with the module)."""
        logs = [*(self.stack.workdir / "workers").glob("*.log"), self.stack.server.home / "server.log"]
        return "\n".join(f"--- {p.name}\n{p.read_text(errors='replace')[-2500:]}" for p in logs if p.exists())



@contextlib.contextmanager
def fleet_world(tmp: Path) -> Iterator[Env]:
    from prefect.settings import PREFECT_API_URL, temporary_settings

    layouts = {name: sc.CLUSTER.format(general=general, legacy=legacy) for name, (general, legacy) in CLUSTERS.items()}
    # a node goes Unknown after 5 s of silence, not kubesim's 1 s at 40x: with a Prefect server,
    # four workers and three clusters on one loaded machine a heartbeat can be a second late, and
    # a cluster whose nodes read NotReady when its rollout plans halts with nothing to roll
    timings = {**sc.TIMINGS, "node_monitor_grace": f"{GRACE_S * sc.TIME_SCALE:.0f}s"}
    with kubesim_clusters(tmp, layouts, time_scale=sc.TIME_SCALE, **timings) as clusters:
        for c in clusters.values():
            sc.wait_for_dkc(c)
        # the Prefect server on a PostgreSQL of its own, as FleetStack advises for a fleet: on SQLite
        # four workers' heartbeats and the runs' writes queue for one write lock, which a loaded
        # machine held for a minute in CI, so the server's /health and the CLI timed out.
        work = reachable_workdir("fleet-stack-")  # not pytest's 0700 tmp: as root it runs as `postgres`
        stack = FleetStack(work, {name: c.kubeconfig for name, c in clusters.items()},
                           prefect_yaml=ROOT / "deployments" / "prefect.yaml", database="postgres")
        try:
            with stack.running(), temporary_settings({PREFECT_API_URL: stack.server.api_url}):
                yield Env(tmp, clusters, stack)
        finally:
            shutil.rmtree(work, ignore_errors=True)


def wait_until(what: str, condition: Any, env: Env, timeout: float = 120) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = condition()
        if value:
            return value
        time.sleep(1)
    pytest.fail(f"timed out waiting for {what}\n{env.logs()}")


def moment(run: dict[str, Any], key: str) -> float:
    from rollout.timefmt import parse_rfc3339

    return parse_rfc3339(run[key]).timestamp()




def new_patches(env: Env, before: dict[str, int]) -> dict[str, int]:
    """Assignment PATCHes per node of c3 since `before` (sc.assignment_patches)."""
    after = sc.assignment_patches(env.clusters["c3"])
    return {n: after.get(n, 0) - before.get(n, 0) for n in after if after.get(n, 0) != before.get(n, 0)}
