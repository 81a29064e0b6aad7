"""A run told which cluster it is for (a fleet's run: ``cluster_identity``) checks the cluster its
credentials reach before its first write, and refuses another, naming both identities.

The gateway's identity is checked against what the user's own tools say (the kubeconfig's server
and CA, `kubectl get namespace kube-system`); the refusal against two kubesim clusters, through the
rollout and rollback flows as a deployment's run calls them, with each cluster's audit log as
witness that nothing was written (the lock included).
"""

from __future__ import annotations

import base64
import hashlib
import ssl
import subprocess
from pathlib import Path

import pytest
import scenario as sc
import yaml

from rollout.outcome import Outcome

pytestmark = pytest.mark.usefixtures("prefect_api")
WRITES = ("create", "update", "patch", "delete")


def _writes(c) -> int:
    return sum(1 for e in c.audit_log.events() if e.get("verb") in WRITES
               and not str((e.get("user") or {}).get("username", "")).startswith("system:"))


def test_the_identity_is_what_the_kubeconfig_and_kubectl_say_and_a_run_for_another_cluster_writes_nothing(
        tmp_path: Path) -> None:
    (tmp_path / "green").mkdir(), (tmp_path / "red").mkdir()
    with sc.cluster(tmp_path / "green", general=2) as green, sc.cluster(tmp_path / "red", general=2) as red:
        kubeconfig = yaml.safe_load(Path(green.kubeconfig).read_text())
        entry = kubeconfig["clusters"][0]["cluster"]
        ca_der = ssl.PEM_cert_to_DER_cert(base64.b64decode(entry["certificate-authority-data"]).decode())
        uid = subprocess.run(["kubectl", "--kubeconfig", str(green.kubeconfig), "get", "namespace", "kube-system",
                              "-o", "jsonpath={.metadata.uid}"], capture_output=True, text=True, timeout=60,
                             check=True).stdout
        identity = sc.gateway(green).cluster_identity()
        assert identity.given() == {"server": entry["server"].rstrip("/"),
                                    "caSha256": hashlib.sha256(ca_der).hexdigest(), "kubeSystemUID": uid}
        other = sc.gateway(red).cluster_identity()
        assert other.server != identity.server and other.ca_sha256 != identity.ca_sha256
        assert other.kube_system_uid != identity.kube_system_uid

        config = sc.config_text(sc.gateway(red), maxPods=97)
        before = _writes(red)
        # green's run, on a worker holding red's kubeconfig
        refused = sc.run(name="green-run", config=config, policy=sc.policy(), kubeconfig=str(red.kubeconfig),
                         cluster_identity=identity.given())
        assert refused.outcome is Outcome.CLUSTER_ERROR and refused.outcome.exit_code == 3, refused.message
        assert "reach another cluster" in refused.message and "server, caSha256, kubeSystemUID differ" in refused.message
        assert identity.kube_system_uid in refused.message and other.kube_system_uid in refused.message
        rollback = sc.run_rollback(name="green-run", kubeconfig=str(red.kubeconfig),
                                   cluster_identity={"kubeSystemUID": identity.kube_system_uid})
        assert rollback.outcome is Outcome.CLUSTER_ERROR and "kubeSystemUID differs" in rollback.message
        assert _writes(red) == before  # no lock, no ConfigMap, no node: nothing

        # the same run on red's own identity goes ahead (any part given is enough)
        done = sc.run(name="red-run", config=config, policy=sc.policy(steps=[1, "100%"]),
                      kubeconfig=str(red.kubeconfig), cluster_identity={"caSha256": other.ca_sha256})
        assert done.outcome is Outcome.COMPLETED, done.message
