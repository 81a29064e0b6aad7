"""Pods, PodDisruptionBudgets and the Eviction subresource, through the real client and kubectl.

What is checked: pods are stored objects with the server's defaults (uid, creationTimestamp,
resourceVersion, a Pending phase whatever the client sent) and the pod rules (containers
required, spec immutable); field and label selectors; the disruption controller's status
(``disruptionsAllowed`` and the counts behind it); evictions spend a budget at once (201, then
429 naming the budget), 404 for a pod that is gone, 500 for a pod under two budgets; RBAC on
``pods/eviction``; the audit log's record of each eviction; ``kubectl get pods -o wide``,
``kubectl get pdb`` and ``kubectl drain``/``uncordon``.

The pods here are bare pods bound to a node by the test (kubesim's kubelets start them too; the
test sets the status it wants): a deleted or evicted one is Terminating for its grace period
(30 s, a second at this module's time scale) before its kubelet removes it.
"""

from __future__ import annotations

import json

import pytest
from kubernetes import client, watch
from kubernetes.client.rest import ApiException

from kubesim.apiserver.eviction import AUDIT_PREFIX
from tests.conftest import api_client, wait_for
from tests.kubesim.kubectl_helpers import BINARIES, Kubectl, needs_kubectl

NAMESPACE = "shop"


@pytest.fixture(scope="module")
def cluster(kubesim_cluster_module, tmp_path_factory):
    cluster = kubesim_cluster_module(nodes=2, time_scale=30, audit_log=tmp_path_factory.mktemp("audit") / "audit.log")
    core = client.CoreV1Api(api_client(cluster.kubeconfig))
    core.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name=NAMESPACE)))
    return cluster


@pytest.fixture(scope="module")
def core(cluster):
    return client.CoreV1Api(api_client(cluster.kubeconfig))


@pytest.fixture(scope="module")
def policy(cluster):
    return client.PolicyV1Api(api_client(cluster.kubeconfig))


def pod(name: str, node: str = "node-1", **labels: str) -> client.V1Pod:
    return client.V1Pod(
        metadata=client.V1ObjectMeta(name=name, labels=labels or None),
        spec=client.V1PodSpec(node_name=node, containers=[client.V1Container(name="app", image="shop:1.0")]),
        status=client.V1PodStatus(phase="Running"),  # the server ignores a status sent on create
    )


def start(core, name: str, namespace: str = NAMESPACE, ready: str = "True") -> None:
    """What a kubelet reports once the pod runs (no kubelet runs API pods in kubesim yet)."""
    status = {"phase": "Running", "conditions": [{"type": "Ready", "status": ready}]}
    core.patch_namespaced_pod_status(name, namespace, {"status": status})


def running_pods(core, count: int, prefix: str, **labels: str) -> list[str]:
    names = [f"{prefix}-{i}" for i in range(count)]
    for i, name in enumerate(names):
        core.create_namespaced_pod(NAMESPACE, pod(name, f"node-{i % 2 + 1}", **labels))
        start(core, name)
    return names


def budget(name: str, selector: dict[str, str], **spec: object) -> client.V1PodDisruptionBudget:
    return client.V1PodDisruptionBudget(
        metadata=client.V1ObjectMeta(name=name),
        spec=client.V1PodDisruptionBudgetSpec(selector=client.V1LabelSelector(match_labels=selector), **spec),
    )


def settled(policy, name: str) -> client.V1PodDisruptionBudget:
    """The budget once the disruption controller has answered its current generation."""

    def read():
        found = policy.read_namespaced_pod_disruption_budget(name, NAMESPACE)
        return found if found.status.observed_generation == found.metadata.generation else None

    return wait_for(read, what=f"budget {name} observed")


def evict(api, name: str, namespace: str = NAMESPACE) -> None:
    body = client.V1Eviction(metadata=client.V1ObjectMeta(name=name, namespace=namespace))
    api.create_namespaced_pod_eviction(name, namespace, body)


def gone(core, name: str, namespace: str = NAMESPACE) -> None:
    """Wait for the kubelet to remove a Terminating pod."""

    def absent() -> bool:
        try:
            core.read_namespaced_pod(name, namespace)
        except ApiException as exc:
            return exc.status == 404
        return False

    wait_for(absent, what=f"pod {name} removed")


def refused(call, *args) -> tuple[int, dict]:
    with pytest.raises(ApiException) as info:
        call(*args)
    return info.value.status, json.loads(info.value.body)


# --- pods --------------------------------------------------------------------------------------


def test_a_created_pod_gets_the_server_defaults_and_starts_pending(core):
    created = core.create_namespaced_pod(NAMESPACE, pod("defaults"))
    assert created.metadata.uid and created.metadata.creation_timestamp and created.metadata.resource_version
    assert created.status.phase == "Pending"  # the Running sent with it is dropped
    assert (created.spec.restart_policy, created.spec.containers[0].image_pull_policy) == ("Always", "IfNotPresent")
    assert core.read_namespaced_pod("defaults", NAMESPACE).metadata.uid == created.metadata.uid


def test_pods_are_selected_by_node_namespace_and_labels(core):
    core.create_namespaced_pod(NAMESPACE, pod("on-two", "node-2", tier="db"))
    on_two = core.list_pod_for_all_namespaces(field_selector="spec.nodeName=node-2").items
    assert "on-two" in [p.metadata.name for p in on_two] and all(p.spec.node_name == "node-2" for p in on_two)
    elsewhere = core.list_pod_for_all_namespaces(field_selector=f"metadata.namespace!={NAMESPACE}").items
    assert "on-two" not in [p.metadata.name for p in elsewhere]
    assert [p.metadata.name for p in core.list_namespaced_pod(NAMESPACE, label_selector="tier=db").items] == [
        "on-two"
    ]
    status, body = refused(core.list_pod_for_all_namespaces, None, None, "spec.hostname=x")
    assert (status, body["message"]) == (400, "field label not supported: spec.hostname")


def test_a_pod_without_containers_is_invalid(core):
    bare = client.V1Pod(metadata=client.V1ObjectMeta(name="bare"), spec=client.V1PodSpec(containers=[]))
    status, body = refused(core.create_namespaced_pod, NAMESPACE, bare)
    assert (status, body["reason"]) == (422, "Invalid")
    assert body["details"]["causes"] == [
        {"reason": "FieldValueRequired", "message": "Required value", "field": "spec.containers"}
    ]


def test_a_pod_cannot_move_to_another_node(core):
    core.create_namespaced_pod(NAMESPACE, pod("stays"))
    status, body = refused(core.patch_namespaced_pod, "stays", NAMESPACE, {"spec": {"nodeName": "node-2"}})
    assert status == 422 and body["details"]["causes"][0]["field"] == "spec"
    assert "pod updates may not change fields other than" in body["message"]
    patched = core.patch_namespaced_pod("stays", NAMESPACE, {"spec": {"containers": [{"name": "app", "image": "shop:2"}]}})
    assert patched.spec.containers[0].image == "shop:2"  # the image is what may change


def test_deleting_a_pod_with_a_grace_period_makes_it_terminating_until_its_kubelet_removes_it(core):
    created = core.create_namespaced_pod(NAMESPACE, pod("short-lived"))
    stream = watch.Watch().stream(
        core.list_namespaced_pod, NAMESPACE, field_selector="metadata.name=short-lived",
        resource_version=created.metadata.resource_version, timeout_seconds=10,
    )
    core.delete_namespaced_pod("short-lived", NAMESPACE, grace_period_seconds=30)
    events = []
    for event in stream:
        events.append(event)
        if event["type"] == "DELETED":
            break
    terminating = [e["object"] for e in events if e["object"].metadata.deletion_timestamp is not None]
    assert terminating and terminating[0].metadata.deletion_grace_period_seconds == 30
    assert events[-1]["type"] == "DELETED"
    status, _ = refused(core.read_namespaced_pod, "short-lived", NAMESPACE)
    assert status == 404


def test_a_pod_deleted_with_grace_0_or_never_bound_goes_at_once(core):
    core.create_namespaced_pod(NAMESPACE, pod("forced"))
    core.delete_namespaced_pod("forced", NAMESPACE, grace_period_seconds=0)
    unbound = pod("unbound")
    unbound.spec.node_name, unbound.spec.scheduler_name = None, "nobody"  # no scheduler takes it
    core.create_namespaced_pod(NAMESPACE, unbound)
    core.delete_namespaced_pod("unbound", NAMESPACE)
    for name in ("forced", "unbound"):
        assert refused(core.read_namespaced_pod, name, NAMESPACE)[0] == 404


# --- budgets -----------------------------------------------------------------------------------


def test_a_budget_counts_its_healthy_pods(core, policy):
    names = running_pods(core, 3, "count", app="count")
    start(core, names[2], ready="False")  # running, not ready: not healthy
    policy.create_namespaced_pod_disruption_budget(NAMESPACE, budget("count", {"app": "count"}, min_available=1))
    status = settled(policy, "count").status
    assert (status.expected_pods, status.current_healthy, status.desired_healthy) == (3, 2, 1)
    assert status.disruptions_allowed == 1
    assert [(c.type, c.status, c.reason) for c in status.conditions] == [("DisruptionAllowed", "True", "SufficientPods")]
    start(core, names[1], ready="False")
    wait_for(lambda: policy.read_namespaced_pod_disruption_budget("count", NAMESPACE).status.disruptions_allowed == 0,
             what="disruptionsAllowed 0 once a second pod is not ready")


def test_changing_a_budget_bumps_its_generation_until_the_controller_observes_it(policy):
    policy.create_namespaced_pod_disruption_budget(NAMESPACE, budget("gen", {"app": "nothing"}, min_available=1))
    first = settled(policy, "gen")
    changed = policy.patch_namespaced_pod_disruption_budget("gen", NAMESPACE, {"spec": {"minAvailable": 2}})
    assert changed.metadata.generation == first.metadata.generation + 1
    assert settled(policy, "gen").status.desired_healthy == 2


def test_a_budget_with_min_available_and_max_unavailable_is_invalid(policy):
    both = budget("both", {"app": "x"}, min_available=1, max_unavailable="50%")
    status, body = refused(policy.create_namespaced_pod_disruption_budget, NAMESPACE, both)
    assert (status, body["details"]["causes"][0]["field"]) == (422, "spec")
    assert "minAvailable and maxUnavailable cannot be both set" in body["message"]


def test_an_unmanaged_pod_counts_for_nothing_under_max_unavailable(core, policy):
    """As the real controller: without a controller there is no scale to take a share of."""
    running_pods(core, 2, "bare", app="bare")
    policy.create_namespaced_pod_disruption_budget(NAMESPACE, budget("bare", {"app": "bare"}, max_unavailable=1))
    status = settled(policy, "bare").status
    assert (status.expected_pods, status.current_healthy, status.disruptions_allowed) == (0, 2, 0)


# --- evictions ---------------------------------------------------------------------------------


def test_evictions_spend_the_budget_at_once_then_are_refused_naming_it(core, policy, cluster):
    names = running_pods(core, 3, "web", app="web")
    policy.create_namespaced_pod_disruption_budget(NAMESPACE, budget("web", {"app": "web"}, min_available=2))
    assert settled(policy, "web").status.disruptions_allowed == 1

    evict(core, names[0])
    assert core.read_namespaced_pod(names[0], NAMESPACE).metadata.deletion_timestamp is not None  # Terminating
    spent = policy.read_namespaced_pod_disruption_budget("web", NAMESPACE).status
    assert spent.disruptions_allowed == 0  # at once, before the controller looked

    status, body = refused(evict, core, names[1])
    assert (status, body["reason"]) == (429, "TooManyRequests")
    assert body["message"] == "Cannot evict pod as it would violate the pod's disruption budget."
    assert body["details"]["causes"] == [
        {"reason": "DisruptionBudget", "message": "The disruption budget web needs 2 healthy pods and has 2 currently"}
    ]
    assert core.read_namespaced_pod(names[1], NAMESPACE).metadata.name == names[1]
    after = settled(policy, "web").status
    assert (after.current_healthy, after.desired_healthy, after.disruptions_allowed) == (2, 2, 0)
    gone(core, names[0])

    evictions = [e for e in cluster.audit_log.events(verb="create") if e["objectRef"].get("subresource") == "eviction"
                 and e["objectRef"]["name"] in names]
    assert [(e["responseStatus"]["code"], e["annotations"][AUDIT_PREFIX + "disruptions-allowed"]) for e in evictions] == [
        (201, "1"), (429, "0")]
    assert {e["annotations"][AUDIT_PREFIX + "budget"] for e in evictions} == {"web"}
    # the controller's status writes say what the budget allows from then on: 1 before the eviction
    writes = [e for e in cluster.audit_log.events(verb="update") if e["objectRef"].get("resource") == "poddisruptionbudgets"
              and e["objectRef"].get("subresource") == "status" and e["objectRef"].get("name") == "web"]
    assert writes and writes[0]["annotations"][AUDIT_PREFIX + "disruptions-allowed"] == "1"
    assert {w["annotations"][AUDIT_PREFIX + "disruptions-allowed"] for w in writes} <= {"0", "1"}


def test_evicting_a_pod_that_is_gone_is_not_found(core):
    status, body = refused(evict, core, "never-was")
    assert (status, body["message"]) == (404, 'pods "never-was" not found')


def test_a_pod_under_two_budgets_cannot_be_evicted(core, policy):
    running_pods(core, 2, "twice", app="twice")
    for name in ("twice-a", "twice-b"):
        policy.create_namespaced_pod_disruption_budget(NAMESPACE, budget(name, {"app": "twice"}, min_available=0))
        settled(policy, name)
    status, body = refused(evict, core, "twice-0")
    assert status == 500
    assert body["message"] == (
        "This pod has more than one PodDisruptionBudget, which the eviction subresource does not support."
    )


def test_a_pending_pod_is_evicted_whatever_its_budget(core, policy):
    pending = pod("pending-0", app="pending")
    pending.spec.node_name, pending.spec.scheduler_name = None, "nobody"  # no scheduler takes it
    core.create_namespaced_pod(NAMESPACE, pending)
    policy.create_namespaced_pod_disruption_budget(NAMESPACE, budget("pending", {"app": "pending"}, min_available=5))
    settled(policy, "pending")
    evict(core, "pending-0")
    assert refused(core.read_namespaced_pod, "pending-0", NAMESPACE)[0] == 404


def test_an_eviction_needs_create_on_pods_eviction(cluster, core):
    running_pods(core, 1, "guarded")
    rbac = client.RbacAuthorizationV1Api(api_client(cluster.kubeconfig))
    reader_rules = [{"apiGroups": [""], "resources": ["pods"], "verbs": ["get", "list", "delete"]}]
    evictor_rules = reader_rules + [{"apiGroups": [""], "resources": ["pods/eviction"], "verbs": ["create"]}]
    for name, rules in (("reader", reader_rules), ("evictor", evictor_rules)):
        rbac.create_namespaced_role(NAMESPACE, {"metadata": {"name": name}, "rules": rules})
        subject = {"kind": "ServiceAccount", "name": name, "namespace": NAMESPACE}
        ref = {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": name}
        rbac.create_namespaced_role_binding(NAMESPACE, {"metadata": {"name": name}, "roleRef": ref, "subjects": [subject]})
    reader = client.CoreV1Api(api_client(cluster.service_account_kubeconfig("reader", NAMESPACE)))
    status, body = refused(evict, reader, "guarded-0")
    assert status == 403
    assert body["message"] == (
        f'pods "guarded-0" is forbidden: User "system:serviceaccount:{NAMESPACE}:reader" cannot create resource '
        f'"pods/eviction" in API group "" in the namespace "{NAMESPACE}"'
    )
    evictor = client.CoreV1Api(api_client(cluster.service_account_kubeconfig("evictor", NAMESPACE)))
    evict(evictor, "guarded-0")
    gone(core, "guarded-0")


# --- kubectl -----------------------------------------------------------------------------------


@pytest.fixture
def kubectl(cluster, tmp_path):
    if not BINARIES:
        pytest.skip("kubectl is not installed")
    return Kubectl(BINARIES[0], cluster.kubeconfig, tmp_path)


@needs_kubectl
def test_kubectl_get_pods_wide_on_one_node_and_get_pdb(kubectl, core, policy):
    running_pods(core, 2, "wide", app="wide")
    policy.create_namespaced_pod_disruption_budget(NAMESPACE, budget("wide", {"app": "wide"}, max_unavailable="50%"))
    settled(policy, "wide")
    out = kubectl.run("get", "pods", "-n", NAMESPACE, "-o", "wide", "--field-selector", "spec.nodeName=node-2",
                      "-l", "app=wide").stdout.splitlines()
    assert out[0].split() == ["NAME", "READY", "STATUS", "RESTARTS", "AGE", "IP", "NODE", "NOMINATED", "NODE",
                              "READINESS", "GATES"]
    assert [(row.split()[0], row.split()[2], row.split()[6]) for row in out[1:]] == [("wide-1", "Running", "node-2")]
    rows = kubectl.run("get", "pdb", "wide", "-n", NAMESPACE).stdout.splitlines()
    assert rows[0].split() == ["NAME", "MIN", "AVAILABLE", "MAX", "UNAVAILABLE", "ALLOWED", "DISRUPTIONS", "AGE"]
    assert rows[1].split()[:4] == ["wide", "N/A", "50%", "0"]


@needs_kubectl
def test_kubectl_drain_evicts_within_the_budget_and_uncordon_reopens_the_node(kubectl, core, policy, cluster):
    """node-1 holds two of the four pods a budget of one disruption covers: drain evicts one, the
    budget refuses the other (kubectl retries until its timeout), and the node stays cordoned."""
    names = running_pods(core, 4, "drain", app="drain")
    policy.create_namespaced_pod_disruption_budget(NAMESPACE, budget("drain", {"app": "drain"}, min_available=3))
    assert settled(policy, "drain").status.disruptions_allowed == 1
    result = kubectl.run("drain", "node-1", "--pod-selector", "app=drain", "--force", "--timeout=3s",
                         "--ignore-daemonsets", check=False, timeout=60)
    assert result.returncode != 0, result.stdout
    assert "node/node-1 cordoned" in result.stdout
    assert "Cannot evict pod as it would violate the pod's disruption budget." in result.stderr
    left = {p.metadata.name for p in core.list_namespaced_pod(NAMESPACE, label_selector="app=drain").items
            if p.metadata.deletion_timestamp is None}
    assert len(left & {names[0], names[2]}) == 1 and {names[1], names[3]} <= left  # node-2's untouched
    assert core.read_node("node-1").spec.unschedulable is True
    assert [n.metadata.name for n in core.list_node(field_selector="spec.unschedulable=true").items] == ["node-1"]
    assert kubectl.run("uncordon", "node-1").stdout.strip() == "node/node-1 uncordoned"
    assert not core.read_node("node-1").spec.unschedulable


def test_cordon_through_the_python_client(core):
    core.patch_node("node-2", {"spec": {"unschedulable": True}})
    assert [n.metadata.name for n in core.list_node(field_selector="spec.unschedulable=true").items] == ["node-2"]
    core.patch_node("node-2", {"spec": {"unschedulable": None}})
    assert core.list_node(field_selector="spec.unschedulable=true").items == []


# --- in process: the decrement is atomic, without any controller running ------------------------


def test_two_evictions_in_a_row_cannot_both_pass_a_budget_of_one():
    """No disruption controller runs here: only the eviction's own decrement stops the second."""
    import asyncio

    from kubesim.apiserver import ApiServer
    from kubesim.apiserver.client import local_client
    from kubesim.apiserver.errors import ApiError

    async def scenario() -> tuple[list[int], dict]:
        admin = local_client(ApiServer())
        pods, budgets = "/api/v1/namespaces/default/pods", "/apis/policy/v1/namespaces/default/poddisruptionbudgets"
        for name in ("a", "b"):
            await admin.create(pods, {"metadata": {"name": name, "labels": {"app": "x"}},
                                      "spec": {"containers": [{"name": "c", "image": "i"}]}})
            await admin.patch(f"{pods}/{name}/status", {"status": {
                "phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]}}, "merge")
        created = await admin.create(budgets, {"metadata": {"name": "one"},
                                               "spec": {"minAvailable": 1, "selector": {"matchLabels": {"app": "x"}}}})
        status = {"observedGeneration": 1, "disruptionsAllowed": 1, "currentHealthy": 2, "desiredHealthy": 1,
                  "expectedPods": 2}
        await admin.update(f"{budgets}/one/status", {**created, "status": status})
        codes = []
        for name in ("a", "b"):
            body = {"apiVersion": "policy/v1", "kind": "Eviction", "metadata": {"name": name}}
            try:
                codes.append((await admin.create(f"{pods}/{name}/eviction", body))["code"])
            except ApiError as exc:
                codes.append(exc.code)
        return codes, (await admin.get(f"{budgets}/one"))["status"]

    codes, status = asyncio.run(scenario())
    assert codes == [201, 429]
    assert status["disruptionsAllowed"] == 0 and list(status["disruptedPods"]) == ["a"]
    assert [(c["type"], c["status"], c["reason"]) for c in status["conditions"]] == [
        ("DisruptionAllowed", "False", "InsufficientPods")]
