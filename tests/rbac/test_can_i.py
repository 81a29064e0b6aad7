"""What an operator checks before a rollout, with the real ``kubectl auth can-i`` and nothing but
the ServiceAccount's kubeconfig: "yes" for every permission of the manifest, "no" for the
neighbours a careless role would grant too."""

from __future__ import annotations

from pathlib import Path

import pytest
from rbac_rig import Manifest, manifest_permissions

from tests.kubesim.kubectl_helpers import BINARIES, Kubectl

NOT_GRANTED = [
    ("delete", "nodes", ""),
    ("update", "nodes", ""),
    ("patch", "nodes/status", ""),
    ("list", "secrets", "kube-system"),
    ("get", "secrets", "kubelet-rollout"),
    ("create", "pods", "default"),
    ("update", "configmaps", "default"),
    ("delete", "configmaps", "kube-system"),
    ("list", "configmaps", "kube-system"),
    ("delete", "leases.coordination.k8s.io", "kube-system"),
    ("update", "leases.coordination.k8s.io", "kube-node-lease"),
    ("create", "clusterrolebindings.rbac.authorization.k8s.io", ""),
    ("get", "namespaces", ""),  # kube-system's alone (resourceNames), not any namespace
    ("get", "namespaces/default", ""),
]


@pytest.fixture(scope="module")
def can_i(manifest: Manifest, sa_kubeconfig: Path, tmp_path_factory: pytest.TempPathFactory):
    kubectl = Kubectl(BINARIES[0], sa_kubeconfig, tmp_path_factory.mktemp("can-i"))

    def ask(verb: str, resource: str, namespace: str) -> str:
        where = ["-n", namespace] if namespace else []
        # `can-i patch nodes/status` would ask about nodes: a subresource needs its own flag;
        # `namespaces/kube-system` names one object (kubectl's TYPE/NAME)
        subresource: list[str] = []
        if not resource.startswith("namespaces/"):
            resource, _, sub = resource.partition("/")
            subresource = [f"--subresource={sub}"] if sub else []
        answer = kubectl.run("auth", "can-i", verb, resource, *subresource, *where, check=False)
        assert answer.returncode in (0, 1), answer.stderr
        return answer.stdout.strip()

    return ask


@pytest.mark.parametrize("granted", manifest_permissions(), ids=lambda p: p.id)
def test_yes_for_every_permission_of_the_manifest(can_i, granted) -> None:
    for name in granted.names or ("",):  # a rule for named objects: asked of each
        assert can_i(granted.verb, f"{granted.qualified}/{name}" if name else granted.qualified, granted.namespace) == "yes"


@pytest.mark.parametrize("verb, resource, namespace", NOT_GRANTED,
                         ids=[f"{v} {r}" + (f" in {n}" if n else "") for v, r, n in NOT_GRANTED])
def test_no_for_what_the_orchestrator_never_does(can_i, verb: str, resource: str, namespace: str) -> None:
    assert can_i(verb, resource, namespace) == "no"
