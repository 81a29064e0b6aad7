"""How a 403 reads: one line, the API server's own words for who may not do what, where.

The Status messages below are a 1.23 kube-apiserver's (kubesim returns the same); the line must
name the identity, the verb, the resource with its API group or subresource and the scope, and
tell the operator what to apply. Pure: no cluster.
"""

from __future__ import annotations

import json

import pytest
from kubernetes.client.exceptions import ApiException

from rollout.errors import ForbiddenError, GatewayError
from rollout.gateway._errors import translate_api_exception

SA = "system:serviceaccount:kubelet-rollout:kubelet-rollout"
HINT = "apply deployments/kubernetes/rbac.yaml (see README: Permissions)"


def _refused(message: str) -> ApiException:
    exc = ApiException(status=403, reason="Forbidden")
    exc.body = json.dumps({"kind": "Status", "status": "Failure", "reason": "Forbidden", "code": 403,
                           "message": message})
    return exc


@pytest.mark.parametrize("what, message, line", [
    pytest.param(
        "patch node/n1",
        f'nodes "n1" is forbidden: User "{SA}" cannot patch resource "nodes" in API group "" at the cluster scope',
        f"patch node/n1: forbidden: {SA} cannot patch nodes (cluster-wide); {HINT}",
        id="cluster-scoped resource"),
    pytest.param(
        "node n1: get configz",
        f'nodes "n1" is forbidden: User "{SA}" cannot get resource "nodes/proxy" in API group "" at the cluster scope',
        f"node n1: get configz: forbidden: {SA} cannot get nodes/proxy (cluster-wide); {HINT}",
        id="a subresource is named with its resource"),
    pytest.param(
        "watch leases",
        f'leases.coordination.k8s.io is forbidden: User "{SA}" cannot watch resource "leases" in API group '
        '"coordination.k8s.io" in the namespace "kube-node-lease"',
        f"watch leases: forbidden: {SA} cannot watch leases.coordination.k8s.io (in namespace kube-node-lease); {HINT}",
        id="namespaced resource of a named API group"),
    pytest.param(
        "update journal kube-system/j",
        f'configmaps "j" is forbidden: User "{SA}" cannot update resource "configmaps" in API group "" in the '
        'namespace "kube-system": RBAC: role.rbac.authorization.k8s.io "gone" not found',
        f"update journal kube-system/j: forbidden: {SA} cannot update configmaps (in namespace kube-system); {HINT}",
        id="the evaluator's RBAC: suffix is left out"),
    pytest.param(
        "get /version",
        f'forbidden: User "{SA}" cannot get path "/version"',
        f"get /version: forbidden: {SA} cannot get /version; {HINT}",
        id="non-resource URL"),
    pytest.param(
        "patch node/n1",
        'nodes "n1" is forbidden: node "n2" is not allowed to modify node "n1"',
        f'patch node/n1: forbidden: nodes "n1" is forbidden: node "n2" is not allowed to modify node "n1"; {HINT}',
        id="an admission refusal is quoted as it is"),
])
def test_a_403_is_one_line_naming_the_missing_permission(what: str, message: str, line: str) -> None:
    err = translate_api_exception(_refused(message), what=what)
    assert isinstance(err, ForbiddenError) and isinstance(err, GatewayError)
    assert str(err) == line
    assert "\n" not in str(err) and err.status == 403  # type: ignore[attr-defined]


def test_the_parts_are_kept_for_callers() -> None:
    err = translate_api_exception(_refused(
        f'leases.coordination.k8s.io "l" is forbidden: User "{SA}" cannot create resource "leases" in API group '
        '"coordination.k8s.io" in the namespace "kube-system"'), what="create lease kube-system/l")
    assert (err.user, err.verb, err.resource, err.namespace) == (  # type: ignore[attr-defined]
        SA, "create", "leases.coordination.k8s.io", "kube-system")
    assert err.advice == HINT
