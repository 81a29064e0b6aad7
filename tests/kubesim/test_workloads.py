"""Workloads from the cluster file, run as a real cluster runs them, through the client and kubectl.

What is checked: the cluster file's ReplicaSets and DaemonSet have their pods Running on nodes
(``kubectl get pods -o wide``, ``kubectl get rs``); an eviction leaves the pod Terminating until
its kubelet removes it, and the ReplicaSet's replacement (a new pod) runs on another node; a
cordoned node gets no new pod; ``kubectl drain --ignore-daemonsets --delete-emptydir-data``
empties a node, refuses local storage without the flag and stops at a budget; a daemon pod is
replaced on its own node only; a node whose kubelet cannot reach the API leaves its pods as they
are (nothing starts, nothing Terminating goes) until it is back; bad ``workloads:`` entries are
clear errors.
"""

from __future__ import annotations

import pytest
from kubernetes import client
from kubernetes.client.rest import ApiException

from kubesim.clusterfile import ClusterFileError, load_cluster_file
from tests.conftest import api_client, wait_for
from tests.kubesim.kubectl_helpers import BINARIES, Kubectl, needs_kubectl

SHOP = "shop"
CLUSTER_FILE = """\
apiVersion: kubesim.kubelet-rollout.io/v1
kind: Cluster
pools:
  - {name: cp, count: 1, controlPlane: true}
  - {name: node, count: 4}
workloads:
  - {name: web, namespace: shop, replicas: 8, pdb: {maxUnavailable: 1}}
  - {name: db, namespace: shop, replicas: 2, emptyDir: true, pdb: {minAvailable: "50%"}}
  - {name: batch, namespace: shop, replicas: 3, terminationGracePeriodSeconds: 60}
  - {name: agent, namespace: infra, kind: DaemonSet}
"""
NODES = ["cp-1", "node-1", "node-2", "node-3", "node-4"]
TOTAL = 8 + 2 + 3 + len(NODES)


@pytest.fixture(scope="module")
def cluster(kubesim_cluster_module, tmp_path_factory):
    path = tmp_path_factory.mktemp("cluster") / "cluster.yaml"
    path.write_text(CLUSTER_FILE)
    # 30 s of grace is a second; a partitioned node is Unknown after ~1.3 s
    return kubesim_cluster_module(cluster_file=path, time_scale=30)


@pytest.fixture(scope="module")
def core(cluster):
    core = client.CoreV1Api(api_client(cluster.kubeconfig))
    wait_for(lambda: len(running(core)) == TOTAL, timeout=60, what="every workload pod Running")
    return core


@pytest.fixture
def kubectl(cluster, tmp_path):
    if not BINARIES:
        pytest.skip("kubectl is not installed")
    return Kubectl(BINARIES[0], cluster.kubeconfig, tmp_path)


def running(core, selector: str = "", node: str = "") -> list[client.V1Pod]:
    """Pods Running and Ready, not Terminating."""
    fields = f"spec.nodeName={node}" if node else ""
    pods = core.list_pod_for_all_namespaces(label_selector=selector, field_selector=fields).items
    return [
        p for p in pods
        if p.status.phase == "Running" and p.metadata.deletion_timestamp is None
        and any(c.type == "Ready" and c.status == "True" for c in p.status.conditions or [])
    ]


def live(core, selector: str = "", node: str = "") -> list[client.V1Pod]:
    """Pods not Terminating, whatever their phase."""
    fields = f"spec.nodeName={node}" if node else ""
    pods = core.list_pod_for_all_namespaces(label_selector=selector, field_selector=fields).items
    return [p for p in pods if p.metadata.deletion_timestamp is None]


def absent(core, pod: client.V1Pod) -> bool:
    try:
        core.read_namespaced_pod(pod.metadata.name, pod.metadata.namespace)
    except ApiException as exc:
        return exc.status == 404
    return False


def evict(core, pod: client.V1Pod) -> None:
    body = client.V1Eviction(metadata=client.V1ObjectMeta(name=pod.metadata.name, namespace=pod.metadata.namespace))
    core.create_namespaced_pod_eviction(pod.metadata.name, pod.metadata.namespace, body)


def cordon(core, node: str, on: bool = True) -> None:
    core.patch_node(node, {"spec": {"unschedulable": True if on else None}})


def node_with(core, selector: str, avoid: tuple[str, ...] = ()) -> str:
    return next(p.spec.node_name for p in running(core, selector) if p.spec.node_name not in avoid)


# --- placement ---------------------------------------------------------------------------------


@needs_kubectl
def test_the_cluster_files_pods_run_on_nodes_with_their_owners(core, kubectl):
    rows = [r.split() for r in kubectl.run("get", "pods", "-A", "-o", "wide").stdout.splitlines()[1:]]
    assert len(rows) == TOTAL
    assert {(r[3], r[2]) for r in rows} == {("Running", "1/1")}
    assert {r[7] for r in rows} <= set(NODES) and all(r[6].startswith("100.") for r in rows)  # NODE, IP
    agents = [r for r in rows if r[0] == "infra"]
    assert sorted(r[7] for r in agents) == NODES  # one daemon pod per node
    web = [p for p in running(core, "app=web")]
    assert max(sum(p.spec.node_name == n for p in web) for n in NODES) <= 2  # spread over five nodes
    assert all(p.metadata.owner_references[0].kind == "ReplicaSet" and p.metadata.owner_references[0].controller
               for p in web)
    rs = [r.split() for r in kubectl.run("get", "rs", "-n", SHOP).stdout.splitlines()]
    assert rs[0] == ["NAME", "DESIRED", "CURRENT", "READY", "AGE"]
    assert sorted(r[:4] for r in rs[1:]) == [["batch", "3", "3", "3"], ["db", "2", "2", "2"], ["web", "8", "8", "8"]]
    ds = kubectl.run("get", "ds", "agent", "-n", "infra").stdout.splitlines()[1].split()
    assert ds[:6] == ["agent", "5", "5", "5", "5", "5"]
    budget = client.PolicyV1Api(core.api_client).read_namespaced_pod_disruption_budget("web", SHOP).status
    assert (budget.expected_pods, budget.desired_healthy, budget.disruptions_allowed) == (8, 7, 1)  # the RS's scale


# --- evictions, cordon -------------------------------------------------------------------------


def test_an_evicted_pod_is_terminating_then_gone_and_replaced_on_another_node(core):
    node = node_with(core, "app=batch")
    victim = next(p for p in running(core, "app=batch", node))
    before = {p.metadata.name for p in live(core, "app=batch")}
    cordon(core, node)
    try:
        evict(core, victim)
        terminating = core.read_namespaced_pod(victim.metadata.name, SHOP)
        assert terminating.metadata.deletion_timestamp is not None  # 60 s of grace: two seconds here
        assert terminating.metadata.deletion_grace_period_seconds == 60
        replacement = wait_for(lambda: [p for p in running(core, "app=batch") if p.metadata.name not in before],
                               what="the replacement Running")[0]
        assert replacement.spec.node_name != node
        assert not absent(core, victim)  # the replacement did not wait for the old pod to go
        wait_for(lambda: absent(core, victim), what="the evicted pod removed by its kubelet")
        assert len(live(core, "app=batch")) == 3
    finally:
        cordon(core, node, False)


def test_a_cordoned_node_gets_no_new_pod(core):
    cordon(core, "node-2")
    try:
        apps = client.AppsV1Api(core.api_client)
        apps.patch_namespaced_replica_set("web", SHOP, {"spec": {"replicas": 14}})
        wait_for(lambda: len(running(core, "app=web")) == 14, what="six more web pods Running")
        on_two = [p for p in live(core, "app=web") if p.spec.node_name == "node-2"]
        assert len(on_two) <= 2  # only the pods it had before the cordon
        assert len(live(core, "app=web")) == 14
    finally:
        client.AppsV1Api(core.api_client).patch_namespaced_replica_set("web", SHOP, {"spec": {"replicas": 8}})
        cordon(core, "node-2", False)
    wait_for(lambda: len(live(core, "app=web")) == 8, what="web back to 8")


def test_a_daemon_pod_is_replaced_on_its_own_node_only(core):
    node = "node-4"
    cordon(core, node)
    try:
        daemon = running(core, "app=agent", node)[0]
        core.delete_namespaced_pod(daemon.metadata.name, "infra")
        fresh = wait_for(lambda: [p for p in running(core, "app=agent", node) if p.metadata.uid != daemon.metadata.uid],
                         what="a new daemon pod on the cordoned node")
        assert len(fresh) == 1
        agents = live(core, "app=agent")
        assert sorted(p.spec.node_name for p in agents) == NODES  # none placed elsewhere
    finally:
        cordon(core, node, False)


# --- kubectl drain -----------------------------------------------------------------------------


@needs_kubectl
def test_kubectl_drain_empties_a_node_but_for_its_daemon_pod(core, kubectl):
    node = node_with(core, "app=db")
    refused = kubectl.run("drain", node, "--ignore-daemonsets", "--timeout=20s", check=False, timeout=40)
    assert refused.returncode != 0
    assert "cannot delete Pods with local storage" in refused.stderr  # emptyDir needs the flag
    try:
        result = kubectl.run("drain", node, "--ignore-daemonsets", "--delete-emptydir-data", "--timeout=60s",
                             timeout=90)
        assert f"node/{node} drained" in result.stdout
        left = live(core, node=node)
        assert [p.metadata.labels["app"] for p in left] == ["agent"]
        wait_for(lambda: len(running(core)) == TOTAL, timeout=30, what="every replacement Running elsewhere")
        assert all(p.spec.node_name != node for p in running(core) if p.metadata.labels["app"] != "agent")
    finally:
        kubectl.run("uncordon", node)


@needs_kubectl
def test_kubectl_drain_stops_at_a_budget(core, kubectl):
    policy = client.PolicyV1Api(core.api_client)
    strict = {"metadata": {"name": "batch"}, "spec": {"minAvailable": "100%",
                                                      "selector": {"matchLabels": {"app": "batch"}}}}
    policy.create_namespaced_pod_disruption_budget(SHOP, strict)
    node = node_with(core, "app=batch")
    try:
        wait_for(lambda: policy.read_namespaced_pod_disruption_budget("batch", SHOP).status.observed_generation,
                 what="the budget observed")
        result = kubectl.run("drain", node, "--ignore-daemonsets", "--delete-emptydir-data", "--timeout=3s",
                             check=False, timeout=40)
        assert result.returncode != 0
        assert "Cannot evict pod as it would violate the pod's disruption budget." in result.stderr
        assert [p.metadata.labels["app"] for p in live(core, "app=batch", node)] == ["batch"] * len(
            live(core, "app=batch", node))
        assert live(core, "app=batch", node)
    finally:
        policy.delete_namespaced_pod_disruption_budget("batch", SHOP)
        kubectl.run("uncordon", node)


# --- a kubelet that is down --------------------------------------------------------------------


def test_a_node_whose_kubelet_is_cut_off_leaves_its_pods_as_they_are(cluster, core):
    """Against a live node doing the same at the same time: what it does, the cut-off one does not."""
    down, up = "node-1", "node-3"
    bare = {"containers": [{"name": "app", "image": "shop:1"}], "terminationGracePeriodSeconds": 1}
    victims = {n: running(core, "app=agent", n)[0] for n in (down, up)}
    cluster.faults.partition(down)
    try:
        for node in (down, up):
            core.create_namespaced_pod(SHOP, {"metadata": {"name": f"bare-{node}"}, "spec": {**bare, "nodeName": node}})
            core.delete_namespaced_pod(victims[node].metadata.name, "infra")
        wait_for(lambda: running(core, node=up) and any(p.metadata.name == f"bare-{up}" for p in running(core, node=up)),
                 what="the live node's new pod Running")
        wait_for(lambda: absent(core, victims[up]), what="the live node's deleted pod removed")
        assert core.read_namespaced_pod(f"bare-{down}", SHOP).status.phase == "Pending"
        stuck = core.read_namespaced_pod(victims[down].metadata.name, "infra")
        assert stuck.metadata.deletion_timestamp is not None  # Terminating, past its grace
    finally:
        cluster.faults.heal(down)
    wait_for(lambda: core.read_namespaced_pod(f"bare-{down}", SHOP).status.phase == "Running",
             what="the new pod Running once the kubelet is back")
    wait_for(lambda: absent(core, victims[down]), what="the Terminating pod removed once the kubelet is back")
    for node in (down, up):
        core.delete_namespaced_pod(f"bare-{node}", SHOP, grace_period_seconds=0)


# --- the cluster file --------------------------------------------------------------------------


@pytest.mark.parametrize(
    "entry, message",
    [
        ("{name: web, replicas: 2, pdb: {maxUnavailable: 1, minAvailable: 1}}",
         "workloads.0.pdb: Value error, a pdb needs exactly one of minAvailable and maxUnavailable"),
        ("{name: web, pdb: {minAvailable: 'ninety'}}", "workloads.0.pdb.minAvailable"),
        ("{name: agent, kind: DaemonSet, replicas: 3}", "a DaemonSet runs one pod per node: it takes no replicas"),
        ("{name: Web_1}", "workloads.0.name: Value error, name 'Web_1' must be lower-case"),
        ("{name: web, replica: 3}", "workloads.0.replica: Extra inputs are not permitted"),
        ("{name: web, kind: Deployment}", "workloads.0.kind"),
    ],
    ids=["both budgets", "a budget that is no amount", "a DaemonSet with replicas", "a bad name", "a typo",
         "an unknown kind"],
)
def test_a_bad_workload_entry_is_a_clear_error(tmp_path, entry, message):
    path = tmp_path / "cluster.yaml"
    path.write_text(f"pools: [{{name: node, count: 1}}]\nworkloads:\n  - {entry}\n")
    with pytest.raises(ClusterFileError) as info:
        load_cluster_file(path)
    assert message in str(info.value) and str(path) in str(info.value)


def test_pods_per_node_makes_replica_sets_of_ten_under_budgets():
    from kubesim.workloads import pods_per_node_workloads

    workloads = pods_per_node_workloads(30, 7)
    assert len(workloads) == 21 and {w.replicas for w in workloads} == {10}
    assert {w.pdb.max_unavailable for w in workloads if w.pdb} == {1}
    assert workloads[0].name == "app-01" and workloads[-1].name == "app-21"
