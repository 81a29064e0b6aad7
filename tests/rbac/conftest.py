"""The orchestrator as its least-privilege ServiceAccount, on kubesim, through the real tools.

One kubesim cluster (two general hosts, one legacy host, 40x clock) per test module (it stops
with the module, so nothing keeps running through the rest of a whole-suite run):
``deployments/kubernetes/rbac.yaml`` is applied to it with the real ``kubectl apply -f``, and
:class:`rbac_rig.Manifest` takes single verbs out of it (and puts them back) the same way, so
every test sees exactly the RBAC a cluster admin would have applied. The Prefect API is the
session's private one (``rollout_cli.local.prefect_home.ephemeral_prefect``), as in ``tests/flows``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Iterator

import pytest
from rbac_rig import SA_NAME, SA_NAMESPACE, Manifest, Rig, sc

from tests.kubesim.kubectl_helpers import BINARIES, Kubectl


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    """Two general hosts and one legacy host (where CRASHLOOP_ON_LEGACY crash-loops the kubelet)."""
    with sc.cluster(tmp_path_factory.mktemp("rbac-cluster"), general=2, legacy=1) as c:
        yield c


@pytest.fixture(scope="module")
def manifest(cluster: Any, tmp_path_factory: pytest.TempPathFactory) -> Manifest:
    if not BINARIES:
        pytest.skip("kubectl is not installed")
    work = tmp_path_factory.mktemp("kubectl")
    applied = Manifest(Kubectl(BINARIES[0], cluster.kubeconfig, work), work)
    applied.apply_shipped()
    return applied


@pytest.fixture(scope="module")
def sa_kubeconfig(cluster: Any, manifest: Manifest) -> Path:
    """The worker's ServiceAccount (``worker.yaml``'s ``serviceAccountName``) as a kubeconfig."""
    return cluster.service_account_kubeconfig(SA_NAME, SA_NAMESPACE)


@pytest.fixture(scope="module")
def admin(cluster: Any) -> Any:
    return sc.gateway(cluster)


@pytest.fixture(scope="module")
def rig(cluster: Any, sa_kubeconfig: Path, admin: Any, tmp_path_factory: pytest.TempPathFactory) -> Rig:
    return Rig(cluster, sa_kubeconfig, admin, tmp_path_factory.mktemp("rig"))
