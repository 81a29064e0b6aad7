"""RBAC as a 1.23 API server with ``--authorization-mode=Node,RBAC`` applies it.

ServiceAccounts authenticate with their own tokens and can do exactly what the stored Roles and
bindings grant; everything else is a 403 with the real message, in the audit log too. The
project's own least-privilege manifest is applied with the real kubectl and then exercised
through the real Python client as the orchestrator's ServiceAccount.
"""

from __future__ import annotations

import json
import stat
import subprocess
import sys
from pathlib import Path

import pytest
from kubernetes import client
from kubernetes.client.rest import ApiException

from tests.conftest import api_client, raw_request
from tests.kubesim.kubectl_helpers import BINARIES, Kubectl, needs_kubectl

REPO = Path(__file__).resolve().parents[2]
RBAC_YAML = REPO / "deployments" / "kubernetes" / "rbac.yaml"
WORKER = "system:serviceaccount:kubelet-rollout:kubelet-rollout"


@pytest.fixture(scope="module")
def cluster(kubesim_cluster_module):
    return kubesim_cluster_module(nodes=1)


@pytest.fixture(scope="module")
def applied(cluster, tmp_path_factory):
    """deployments/kubernetes/rbac.yaml applied once, with the PATH kubectl."""
    if not BINARIES:
        pytest.skip("kubectl is not installed")
    kubectl = Kubectl(BINARIES[0], cluster.kubeconfig, tmp_path_factory.mktemp("kubectl"))
    kubectl.run("apply", "-f", str(RBAC_YAML))
    return cluster


@pytest.fixture(scope="module")
def worker(applied):
    """The orchestrator's ServiceAccount, through the real Python client."""
    return api_client(applied.service_account_kubeconfig("kubelet-rollout", "kubelet-rollout"))


def forbidden(call, *args, **kwargs) -> str:
    with pytest.raises(ApiException) as info:
        call(*args, **kwargs)
    assert info.value.status == 403, info.value.body
    return json.loads(info.value.body)["message"]


# --- the manifest, applied with every kubectl ----------------------------------------------------


@needs_kubectl
@pytest.mark.parametrize("binary", BINARIES, ids=lambda b: b.rsplit("/", 1)[-1])
def test_kubectl_apply_of_the_rbac_manifest_creates_then_patches_then_is_unchanged(cluster, binary, tmp_path):
    kubectl = Kubectl(binary, cluster.kubeconfig, tmp_path)
    manifest = tmp_path / "rbac.yaml"
    text = RBAC_YAML.read_text().replace("kubelet-rollout", f"w-{kubectl.label.replace('.', '-')}")
    manifest.write_text(text)
    created = kubectl.run("apply", "-f", str(manifest)).stdout.splitlines()
    assert len(created) == 8 and all(line.endswith(" created") for line in created), created
    assert all(line.endswith(" unchanged") for line in kubectl.run("apply", "-f", str(manifest)).stdout.splitlines())
    manifest.write_text(text.replace("verbs: [create]", "verbs: [create, patch]"))
    changed = kubectl.run("apply", "-f", str(manifest)).stdout.splitlines()
    name = f"w-{kubectl.label.replace('.', '-')}"
    assert f"clusterrole.rbac.authorization.k8s.io/{name} configured" in changed
    patches = [
        e
        for e in cluster.audit_log.events(verb="patch")
        if e["objectRef"].get("resource") == "clusterroles" and e["objectRef"].get("name") == name
    ]
    assert [e["responseStatus"]["code"] for e in patches] == [200]
    rbac = client.RbacAuthorizationV1Api(api_client(cluster.kubeconfig))
    role = rbac.read_cluster_role(name)
    (events,) = [rule for rule in role.rules if rule.resources == ["events"]]
    assert events.verbs == ["create", "patch"]
    assert "kubectl.kubernetes.io/last-applied-configuration" in role.metadata.annotations


# --- the worker's ServiceAccount, through the Python client ------------------------------------


def test_the_worker_can_do_what_the_manifest_grants(worker):
    core = client.CoreV1Api(worker)
    assert [n.metadata.name for n in core.list_node().items]
    core.patch_node("node-1", {"metadata": {"annotations": {"kubelet-rollout.io/probe": "x"}}})
    assert core.read_namespaced_config_map("kube-root-ca.crt", "kube-system").data
    event = {"metadata": {"generateName": "probe-"}, "involvedObject": {"kind": "Node", "name": "node-1"}}
    assert core.create_namespaced_event("default", event).metadata.name.startswith("probe-")
    leases = client.CoordinationV1Api(worker)
    assert leases.list_namespaced_lease("kube-node-lease").items


@pytest.mark.parametrize(
    "call, message",
    [
        pytest.param(
            lambda core: core.delete_node("node-1"),
            f'nodes "node-1" is forbidden: User "{WORKER}" cannot delete resource "nodes" in API group "" '
            "at the cluster scope",
            id="cluster-scoped-verb-not-granted",
        ),
        pytest.param(
            lambda core: core.list_namespaced_config_map("kube-system"),
            f'configmaps is forbidden: User "{WORKER}" cannot list resource "configmaps" in API group "" '
            'in the namespace "kube-system"',
            id="namespaced-verb-not-granted",
        ),
        pytest.param(
            lambda core: core.read_namespaced_config_map("kube-root-ca.crt", "default"),
            f'configmaps "kube-root-ca.crt" is forbidden: User "{WORKER}" cannot get resource "configmaps" '
            'in API group "" in the namespace "default"',
            id="role-binding-applies-only-in-its-namespace",
        ),
        pytest.param(
            lambda core: core.patch_node_status("node-1", {"metadata": {"labels": {"x": "y"}}}),
            f'nodes "node-1" is forbidden: User "{WORKER}" cannot patch resource "nodes/status" in API group "" '
            "at the cluster scope",
            id="a-resource-rule-does-not-cover-its-subresources",
        ),
    ],
)
def test_the_worker_is_denied_everything_else_with_the_real_message(worker, applied, call, message):
    assert forbidden(call, client.CoreV1Api(worker)) == message
    denied = [
        e
        for e in applied.audit_log.events()
        if e["user"]["username"] == WORKER and e["responseStatus"]["code"] == 403
    ]
    assert denied, "a denial is audited with its 403"


def test_service_account_groups_in_the_audit_log(worker, applied):
    client.CoreV1Api(worker).list_node()
    event = [e for e in applied.audit_log.events(verb="list") if e["user"]["username"] == WORKER][-1]
    assert event["user"]["groups"] == [
        "system:serviceaccounts",
        "system:serviceaccounts:kubelet-rollout",
        "system:authenticated",
    ]


# --- a ServiceAccount with no bindings: only the bootstrap policy of system:authenticated -----


def test_an_unbound_service_account_gets_only_discovery_and_self_reviews(cluster):
    nobody = api_client(cluster.service_account_kubeconfig("nobody", "default"))
    core = client.CoreV1Api(nobody)
    user = "system:serviceaccount:default:nobody"
    assert forbidden(core.list_node) == (
        f'nodes is forbidden: User "{user}" cannot list resource "nodes" in API group "" at the cluster scope'
    )
    assert client.VersionApi(nobody).get_code().git_version == "v1.23.17"
    assert client.CoreApi(nobody).get_api_versions().versions == ["v1"]
    assert client.ApisApi(nobody).get_api_versions().groups
    assert can(client.AuthorizationV1Api(nobody), "get", "nodes").allowed is False
    token = cluster.service_account_kubeconfig("nobody", "default").read_text().split("token: ")[1].split()[0]
    status, _, body = raw_request(cluster.kubeconfig, "GET", "/metrics", token=token)
    assert status == 403
    assert json.loads(body)["message"] == f'forbidden: User "{user}" cannot get path "/metrics"'


def test_a_deleted_service_account_token_no_longer_authenticates(cluster):
    kubeconfig = cluster.service_account_kubeconfig("ephemeral", "default")
    token = kubeconfig.read_text().split("token: ")[1].split()[0]
    assert raw_request(cluster.kubeconfig, "GET", "/api", token=token)[0] == 200
    client.CoreV1Api(api_client(cluster.kubeconfig)).delete_namespaced_service_account("ephemeral", "default")
    assert raw_request(cluster.kubeconfig, "GET", "/api", token=token)[0] == 401


# --- rule semantics, asked through SelfSubjectAccessReview --------------------------------------

RULES_NS = "rules"
RULES = [
    {"apiGroups": [""], "resources": ["configmaps"], "resourceNames": ["only-this"], "verbs": ["get"]},
    {"apiGroups": [""], "resources": ["*/status"], "verbs": ["patch"]},
    {"apiGroups": ["coordination.k8s.io"], "resources": ["*"], "verbs": ["*"]},
    {"apiGroups": ["*"], "resources": ["events"], "verbs": ["create"]},
    {"nonResourceURLs": ["/metrics", "/logs/*"], "verbs": ["get"]},
]


def role_ref(kind: str, name: str) -> dict[str, str]:
    return {"apiGroup": "rbac.authorization.k8s.io", "kind": kind, "name": name}


@pytest.fixture(scope="module")
def ruled(cluster):
    """A ServiceAccount bound to one ClusterRole cluster-wide and one Role in ``rules``, plus a
    RoleBinding to a Role that does not exist."""
    admin = api_client(cluster.kubeconfig)
    core, rbac = client.CoreV1Api(admin), client.RbacAuthorizationV1Api(admin)
    core.create_namespace({"metadata": {"name": RULES_NS}})
    kubeconfig = cluster.service_account_kubeconfig("ruled", RULES_NS)
    subjects = [{"kind": "ServiceAccount", "name": "ruled", "namespace": RULES_NS}]
    pods_log = [{"apiGroups": [""], "resources": ["pods/log"], "verbs": ["get"]}]
    rbac.create_cluster_role({"metadata": {"name": "ruled"}, "rules": RULES})
    rbac.create_cluster_role_binding(
        {"metadata": {"name": "ruled"}, "roleRef": role_ref("ClusterRole", "ruled"), "subjects": subjects}
    )
    rbac.create_namespaced_role(RULES_NS, {"metadata": {"name": "pods-log"}, "rules": pods_log})
    for binding, role in (("pods-log", "pods-log"), ("dangling", "missing")):
        body = {"metadata": {"name": binding}, "roleRef": role_ref("Role", role), "subjects": subjects}
        rbac.create_namespaced_role_binding(RULES_NS, body)
    return client.AuthorizationV1Api(api_client(kubeconfig))


def can(authz_api, verb, resource="", namespace="", name="", subresource="", group="", path=""):
    """Ask the server (SelfSubjectAccessReview) whether the caller may do this."""
    if path:
        attributes = client.V1NonResourceAttributes(path=path, verb=verb)
        spec = client.V1SelfSubjectAccessReviewSpec(non_resource_attributes=attributes)
    else:
        attributes = client.V1ResourceAttributes(
            verb=verb,
            resource=resource,
            namespace=namespace or None,
            name=name or None,
            subresource=subresource or None,
            group=group,
        )
        spec = client.V1SelfSubjectAccessReviewSpec(resource_attributes=attributes)
    return authz_api.create_self_subject_access_review(client.V1SelfSubjectAccessReview(spec=spec)).status


LEASES = dict(resource="leases", namespace="x")


@pytest.mark.parametrize(
    "ask, allowed",
    [
        pytest.param(dict(verb="get", resource="configmaps", namespace="x", name="only-this"), True, id="names-match"),
        pytest.param(dict(verb="get", resource="configmaps", namespace="x", name="other"), False, id="names-other"),
        pytest.param(dict(verb="list", resource="configmaps", namespace="x"), False, id="names-list-unnamed"),
        pytest.param(dict(verb="patch", resource="nodes", subresource="status"), True, id="star-slash-subresource"),
        pytest.param(dict(verb="patch", resource="nodes"), False, id="star-slash-not-the-resource"),
        pytest.param(dict(verb="delete", group="coordination.k8s.io", **LEASES), True, id="star-verbs-and-resources"),
        pytest.param(dict(verb="get", group="", **LEASES), False, id="group-must-match"),
        pytest.param(dict(verb="create", resource="events", group="events.k8s.io", namespace="x"), True, id="star-group"),
        pytest.param(dict(verb="get", path="/metrics"), True, id="non-resource-exact"),
        pytest.param(dict(verb="get", path="/logs/kubelet.log"), True, id="non-resource-trailing-star"),
        pytest.param(dict(verb="get", path="/logsx"), False, id="non-resource-prefix-keeps-the-slash"),
        pytest.param(dict(verb="post", path="/metrics"), False, id="non-resource-verb"),
        pytest.param(dict(verb="get", resource="pods", subresource="log", namespace=RULES_NS), True, id="role-sub"),
        pytest.param(dict(verb="get", resource="pods", namespace=RULES_NS), False, id="role-sub-not-the-resource"),
        pytest.param(dict(verb="get", resource="pods", subresource="log", namespace="default"), False, id="role-elsewhere"),
        pytest.param(
            dict(verb="create", resource="selfsubjectaccessreviews", group="authorization.k8s.io"),
            True,
            id="bootstrap-basic-user",
        ),
        pytest.param(dict(verb="get", path="/version"), True, id="bootstrap-discovery"),
    ],
)
def test_rule_semantics(ruled, ask, allowed):
    assert can(ruled, **ask).allowed is allowed


def test_an_allow_names_the_binding_that_granted_it(ruled):
    status = can(ruled, verb="get", resource="pods", subresource="log", namespace=RULES_NS)
    assert status.allowed is True
    assert status.reason == (
        f'RBAC: allowed by RoleBinding "pods-log/{RULES_NS}" of Role "pods-log" to ServiceAccount "ruled/{RULES_NS}"'
    )


def test_a_binding_to_a_missing_role_grants_nothing_and_says_so(ruled, cluster):
    status = can(ruled, verb="delete", resource="configmaps", namespace=RULES_NS)
    assert status.allowed is False
    assert status.reason == 'RBAC: role.rbac.authorization.k8s.io "missing" not found'
    core = client.CoreV1Api(api_client(cluster.service_account_kubeconfig("ruled", RULES_NS)))
    message = forbidden(core.delete_namespaced_config_map, "x", RULES_NS)
    assert message.endswith(': RBAC: role.rbac.authorization.k8s.io "missing" not found')


def test_binding_validation_and_immutable_role_ref(cluster):
    rbac = client.RbacAuthorizationV1Api(api_client(cluster.kubeconfig))
    with pytest.raises(ApiException) as info:
        rbac.create_cluster_role_binding({"metadata": {"name": "bad"}, "roleRef": role_ref("Role", "x")})
    assert info.value.status == 422 and "roleRef.kind" in info.value.body
    no_verbs = [{"apiGroups": [""], "resources": ["nodes"], "verbs": []}]
    with pytest.raises(ApiException) as info:
        rbac.create_cluster_role({"metadata": {"name": "no-verbs"}, "rules": no_verbs})
    assert info.value.status == 422 and "rules[0].verbs: Required value" in info.value.body
    rbac.create_cluster_role_binding({"metadata": {"name": "fixed-ref"}, "roleRef": role_ref("ClusterRole", "a")})
    with pytest.raises(ApiException) as info:
        rbac.patch_cluster_role_binding("fixed-ref", {"roleRef": {"name": "b"}})
    assert info.value.status == 422 and "cannot change roleRef" in info.value.body


# --- kubectl auth can-i and kubectl create token, with every kubectl ----------------------------


@needs_kubectl
@pytest.mark.parametrize("binary", BINARIES, ids=lambda b: b.rsplit("/", 1)[-1])
def test_kubectl_auth_can_i_as_the_worker(applied, binary, tmp_path):
    worker_kc = applied.service_account_kubeconfig("kubelet-rollout", "kubelet-rollout")
    kubectl = Kubectl(binary, worker_kc, tmp_path)

    def answer(*args: str) -> str:
        return kubectl.run("auth", "can-i", *args, check=False).stdout.strip()

    assert answer("patch", "nodes") == "yes"
    assert answer("delete", "nodes") == "no"
    assert answer("get", "nodes/proxy") == "yes"
    assert answer("update", "configmaps", "-n", "kube-system") == "yes"
    assert answer("update", "configmaps", "-n", "default") == "no"
    assert answer("list", "leases.coordination.k8s.io", "-n", "kube-node-lease") == "yes"
    admin = Kubectl(binary, applied.kubeconfig, tmp_path)
    assert admin.run("auth", "can-i", "delete", "nodes").stdout.strip() == "yes"
    token = admin.run("create", "token", "kubelet-rollout", "-n", "kubelet-rollout").stdout.strip()
    assert raw_request(applied.kubeconfig, "GET", "/api/v1/nodes", token=token)[0] == 200


# --- kubesim token -------------------------------------------------------------------------------


def test_kubesim_token_prints_or_writes_a_kubeconfig(cluster, tmp_path):
    def token_cli(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "kubesim", "token", *args], capture_output=True, text=True, timeout=60
        )

    printed = token_cli("cli-sa", "-n", "default", "--state-dir", str(cluster.state_dir))
    assert printed.returncode == 0, printed.stderr
    assert "token: kubesim-sa.default.cli-sa." in printed.stdout
    out = tmp_path / "sa.kubeconfig"
    written = token_cli("cli-sa", "-n", "default", "--kubeconfig", str(cluster.kubeconfig), "-o", str(out))
    assert written.returncode == 0 and written.stdout == ""
    assert stat.S_IMODE(out.stat().st_mode) == 0o600
    core = client.CoreV1Api(api_client(out))
    assert "cannot list resource" in forbidden(core.list_namespaced_config_map, "default")
    missing = token_cli("x", "-n", "no-such-namespace", "--state-dir", str(cluster.state_dir))
    assert missing.returncode == 1 and 'namespaces "no-such-namespace" not found' in missing.stderr


@needs_kubectl
def test_kubectl_auth_whoami_is_not_served_as_on_a_123_server(cluster, tmp_path):
    """1.23 has no SelfSubjectReview: an unknown resource is a 404 before its body is read (it was
    a 415 UnsupportedMediaType), so kubectl says the API is not enabled."""
    result = Kubectl(BINARIES[0], cluster.kubeconfig, tmp_path).run("auth", "whoami", check=False)
    assert result.returncode == 1
    assert "the selfsubjectreviews API is not enabled in the cluster" in result.stderr
