"""Fleet rollouts end to end: a real Prefect server, three kubesim clusters, one process worker per
cluster on its own work pool holding only that cluster's kubeconfig, and the fleet flow run as a
person runs it (`rollout fleet start`, a process of its own without any cluster's credentials)
or on the fleet's own worker (`--deployment`); the world is tests/flows/fleet_world.py's, this
module's own. What each test proves is the issue's acceptance list, in order:

1. a good config completes in stage order: the canary cluster completed, and its soak passed,
   before any other cluster's run started; every node is active on the target;
2. a config that crash-loops hosts only cluster 2 has: cluster 2 reverts per its policy, the
   fleet stops, cluster 3 sees no write at all (its audit log), and with ``rollback`` cluster 1
   is rolled back through a rollback run;
3. (test_fleet_kills.py) ``kill -9`` of the fleet flow at its gate and mid-stage, and a cluster's
   run frozen past Prefect's liveness bound;
4. a worker holds its own cluster's credentials and nothing that reaches another cluster;

and `rollout fleet abort` stops the cluster runs under way (cancelled through Prefect, each
rollout stopped where it was) and starts no other.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import scenario as sc
from fleet_world import CLUSTERS, Env, fleet_world, moment, wait_until

from rollout_cli.contract import validator
from rollout_cli.local.fleet_stack import FleetStack

# 10 minutes a test: 300 s were not enough on a loaded CI machine (the first test's included the
# module's stack coming up, and two wait out Prefect's 90 s liveness bound), and a run cut off by
# the timeout went on under the next tests
pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]


@pytest.fixture(scope="module")
def env(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Env]:
    with fleet_world(tmp_path_factory.mktemp("fleet")) as world:
        yield world


def test_a_good_config_crosses_the_fleet_in_stage_order_on_the_fleets_own_worker(env: Env) -> None:
    # c2 and c3 roll at once in stage 2, one node at a time across the fleet: 12 % of its 9 nodes
    # (each cluster's control plane and two workers), which the clusters' identity probes count first
    fleet = env.fleet_file("good", soak="2s", maxConcurrent=2, disruptionBudget="12%")
    started = env.run("fleet", "start", "--fleet", str(fleet), "--config", str(env.config("good", maxPods=91)),
                      "--name", "good", "--deployment", "kubelet-config-fleet-rollout/fleet", "-o", "json")
    assert started.returncode == 0, started.stdout + started.stderr + env.logs()
    data = json.loads(started.stdout)
    validator("fleet-run").validate(data)
    assert data["outcome"] == "completed" and data["fleet"]["state"] == "completed"
    assert data["message"] == "3/3 cluster(s) completed in 2 stage(s)"
    assert {r["cluster"]: r["phase"] for r in data["fleet"]["clusters"]} == dict.fromkeys(CLUSTERS, "completed")
    assert all(r["done"] == r["nodes"] and r["nodes"] > 0 for r in data["fleet"]["clusters"])
    assert data["fleet"]["disruption_budget"] == {"in_use": 0, "limit": 1, "given": "12%", "fleet_nodes": 9}
    most, which = sc.most_nodes_changing_at_once([(env.clusters[c], f"good-{c}") for c in CLUSTERS])
    assert most == 1, which

    runs = {c: env.cluster_runs("good", c) for c in CLUSTERS}
    assert {c: len(r) for c, r in runs.items()} == dict.fromkeys(CLUSTERS, 1)  # each cluster started once
    canary_end = moment(runs["c1"][0], "end_time")
    for later in ("c2", "c3"):  # the canary completed and its 2 s soak passed before any other started
        assert moment(runs[later][0], "start_time") >= canary_end + 2, (later, runs[later][0]["start_time"])
    fleet_run = next(r for r in env.flow_runs("fleet:good") if r["flow"] == "kubelet-config-fleet-rollout")
    assert fleet_run["work_pool_name"] == "kubelet-rollout-fleet"  # the fleet flow ran on a worker of its own
    for c, gw in env.gateways.items():  # every node of every cluster active on the target
        journal = sc.journal(gw, f"good-{c}")
        assert journal.status.value == "complete"
        nodes = sc.nodes(gw)
        assert all(journal.target.same_reference(nodes[n].active) for n in journal.plan.nodes), c
    # the UI's tree: each cluster's run is a subflow of the fleet's run, on its cluster's pool
    for c, (run,) in runs.items():
        assert run["parent_task_run_id"] is not None and run["work_pool_name"] == FleetStack.pool_of(c)


def test_a_crash_loop_in_cluster_2_stops_the_fleet_and_rolls_cluster_1_back(env: Env) -> None:
    fleet = env.fleet_file("bad", stages=[{"clusters": ["c1"]}, {"clusters": ["c2"]}, {"clusters": ["c3"]}],
                           failureAction="rollback")
    before = env.writes("c3")
    done = env.run("fleet", "start", "--fleet", str(fleet), "--name", "bad", "-o", "json",
                   "--config", str(env.config("bad", maxPods=92, **sc.CRASHLOOP_ON_LEGACY)))
    assert done.returncode == 1, done.stdout + done.stderr + env.logs()
    data = json.loads(done.stdout)
    validator("fleet-run").validate(data)
    assert data["outcome"] == "reverted", data["message"]
    assert "c2: reverted" in data["message"] and "rolled back c1" in data["message"]
    phases = {r["cluster"]: r["phase"] for r in data["fleet"]["clusters"]}
    assert phases == {"c1": "rolled-back", "c2": "reverted", "c3": "waiting"}

    assert sc.journal(env.gateways["c2"], "bad-c2").shown_status == "reverted"  # per its own policy
    assert env.writes("c3") == before  # cluster 3 was never written to
    assert env.cluster_runs("bad", "c3") == []
    c1 = sc.journal(env.gateways["c1"], "bad-c1")
    assert c1.status.value == "rolled-back"  # through a rollback run of its pool
    (rollback,) = env.cluster_runs("bad", "c1", flow="kubelet-config-rollback")
    assert rollback["work_pool_name"] == FleetStack.pool_of("c1") and rollback["state"]["type"] == "COMPLETED"
    nodes = sc.nodes(env.gateways["c1"])
    assert not any(c1.target.same_reference(nodes[n].active) for n in c1.plan.nodes)


def test_an_abort_stops_the_clusters_under_way_and_starts_no_other(env: Env) -> None:
    fleet = env.fleet_file("abort", policy="glacial.yaml")
    start = env.cli("fleet", "start", "--fleet", str(fleet), "--name", "abort", "-o", "json", "--config",
                    str(env.config("abort", maxPods=94)))
    wait_until("c1's rollout under way", lambda: sc.journal(env.gateways["c1"], "abort-c1").assigned_nodes()
               if env.gateways["c1"].load_journal("abort-c1") else None, env)
    asked = env.run("fleet", "abort", "abort", "--by", "alice", "-o", "json")
    assert asked.returncode == 0, asked.stderr
    validator("fleet-abort").validate(json.loads(asked.stdout))
    stdout, stderr = start.communicate(timeout=240)
    assert start.returncode == 1, stdout + stderr + env.logs()
    data = json.loads(stdout)
    validator("fleet-run").validate(data)
    assert data["outcome"] == "halted" and data["message"].startswith("aborted by alice"), data["message"]
    assert {r["cluster"]: r["phase"] for r in data["fleet"]["clusters"]} == {
        "c1": "stopped", "c2": "waiting", "c3": "waiting"}  # its run cancelled, the others never started
    (c1_run,) = env.cluster_runs("abort", "c1")
    assert c1_run["state"]["type"] == "CANCELLED"
    assert sc.journal(env.gateways["c1"], "abort-c1").status.value == "running"  # stopped where it was: resumable


def test_each_worker_holds_its_own_clusters_credentials_and_nothing_that_reaches_another(env: Env) -> None:
    import ssl
    from urllib.parse import urlsplit

    from kubesim.kubeconfig import read

    kubeconfigs = {c: Path(cluster.kubeconfig) for c, cluster in env.clusters.items()}
    secrets = {c: {str(path), read(path).server, read(path).token} for c, path in kubeconfigs.items()}
    for cluster, worker in env.stack.workers.items():
        assert worker.proc is not None
        environ = dict(item.split("=", 1) for item in
                       Path(f"/proc/{worker.proc.pid}/environ").read_text().split("\0") if "=" in item)
        held = " ".join(environ.values())
        others = [c for c in CLUSTERS if c != cluster]
        if not cluster:  # the fleet flow's worker: no cluster's credentials at all
            assert "KUBECONFIG" not in environ and not any(s in held for c in CLUSTERS for s in secrets[c])
            continue
        assert environ["KUBECONFIG"] == str(kubeconfigs[cluster])  # its own cluster's kubeconfig...
        assert not any(s in held for c in others for s in secrets[c])  # ...and nothing of another's
        own = read(kubeconfigs[cluster])
        for other in others:  # its credentials do not open another cluster's API server
            url = urlsplit(read(kubeconfigs[other]).server)
            trusting_own_ca = ssl.create_default_context(cadata=own.ca_pem.decode())
            with pytest.raises(ssl.SSLCertVerificationError):
                _get(url, trusting_own_ca, own.token)
            blind = ssl._create_unverified_context()  # even past TLS, its token is unknown there
            assert _get(url, blind, own.token) == 401


def _get(url: Any, context: Any, token: str) -> int:
    import http.client

    conn = http.client.HTTPSConnection(url.hostname, url.port, context=context, timeout=10)
    try:
        conn.request("GET", "/api/v1/nodes", headers={"Authorization": f"Bearer {token}"})
        return conn.getresponse().status
    finally:
        conn.close()


def test_a_worker_miswired_to_another_cluster_is_found_by_validate_and_refused_before_any_write(env: Env) -> None:
    """The canary pool's worker started with cluster 2's kubeconfig (one wrong environment
    variable): `fleet validate` names it before the fleet starts, and the cluster run it picks up
    refuses before its first write (exit 3's outcome, both identities named), so the fleet stops
    in its canary and cluster 2 sees no write."""
    fleet = env.fleet_file("wired", stages=[{"clusters": ["c1"]}, {}])
    # (a pool whose worker reaches its own cluster passes: tests/cli/test_readme_runs.py's fleet set-up)
    env.stack.workers["c1"].stop()
    env.stack.start_worker("c1", kubeconfig=Path(env.clusters["c2"].kubeconfig))
    try:
        checked = env.run("fleet", "validate", "--fleet", str(fleet), "-o", "json")
        assert checked.returncode == 3, checked.stdout + checked.stderr + env.logs()
        data = json.loads(checked.stdout)
        validator("fleet-validate").validate(data)
        verdicts = {r["cluster"]: r for r in data["clusters"]}
        assert not data["valid"] and not verdicts["c1"]["ok"] and verdicts["c2"]["ok"] and verdicts["c3"]["ok"]
        assert (verdicts["c1"]["nodes"], verdicts["c2"]["nodes"]) == (None, 3)  # counted where reached as named
        c1_uid, c2_uid = env.stack.identity_of("c1")["kubeSystemUID"], env.stack.identity_of("c2")["kubeSystemUID"]
        assert c1_uid in verdicts["c1"]["message"] and c2_uid in verdicts["c1"]["message"]

        before = {c: env.writes(c) for c in CLUSTERS}
        # a budget that is a share of the fleet counts its nodes first, through the same probes
        shared = env.fleet_file("wired-share", stages=[{"clusters": ["c1"]}, {}], disruptionBudget="50%")
        refused = env.run("fleet", "start", "--fleet", str(shared), "--name", "wired-share", "-o", "json",
                          "--config", str(env.config("wired-share", maxPods=93)))
        assert refused.returncode == 3, refused.stdout + refused.stderr + env.logs()
        assert "c1 (pool" in json.loads(refused.stdout)["message"] and c2_uid in json.loads(refused.stdout)["message"]
        assert all(env.cluster_runs("wired-share", c) == [] for c in CLUSTERS)  # no cluster was started
        done = env.run("fleet", "start", "--fleet", str(fleet), "--name", "wired", "-o", "json",
                       "--config", str(env.config("wired", maxPods=93)))
        assert done.returncode == 1, done.stdout + done.stderr + env.logs()
        result = json.loads(done.stdout)
        validator("fleet-run").validate(result)
        assert "c1: cluster-error" in result["message"], result["message"]
        assert {r["cluster"]: r["phase"] for r in result["fleet"]["clusters"]}["c1"] == "cluster-error"
        (run,) = env.cluster_runs("wired", "c1")
        assert "reach another cluster" in run["state"]["message"] and c2_uid in run["state"]["message"]
        assert {c: env.writes(c) for c in CLUSTERS} == before  # the lock included: nothing anywhere
        assert env.cluster_runs("wired", "c2") == env.cluster_runs("wired", "c3") == []
    finally:
        env.stack.workers["c1"].stop()
        env.stack.start_worker("c1")
