"""Which cluster a run reaches (rollout.identity): what a fleet file may name, and the refusal."""

from __future__ import annotations

import pytest

from rollout.errors import FlagError, FleetError, WrongClusterError
from rollout.fleet import load_fleet_text
from rollout.identity import ClusterIdentity, check_cluster, fingerprint
from rollout.outcome import Outcome

CA = "3a7bd3e2360a3d29eea436fcfb7e44c735d117c42d1c1835420b6b9942dd4f1b"
GREEN = ClusterIdentity(server="https://green:6443", ca_sha256=CA, kube_system_uid="uid-green")
RED = ClusterIdentity(server="https://red:6443", ca_sha256="0" * 64, kube_system_uid="uid-red")


def test_openssl_and_plain_fingerprints_are_the_same() -> None:
    openssl = ":".join(CA[i:i + 2] for i in range(0, 64, 2)).upper()
    assert fingerprint(openssl) == fingerprint(f"sha256:{CA}") == CA
    with pytest.raises(ValueError, match="64 hex digits"):
        fingerprint("abcd")


def test_the_cluster_it_was_meant_for_passes_and_any_part_not_given_is_not_compared() -> None:
    check_cluster(GREEN, GREEN)
    check_cluster(ClusterIdentity.expected(kube_system_uid="uid-green"), GREEN)
    check_cluster(ClusterIdentity.expected(server="https://green:6443/"), GREEN)  # a trailing slash is the same URL
    check_cluster(None, RED)  # nothing expected: a single-cluster run


def test_another_cluster_is_refused_naming_both_identities_and_what_differs() -> None:
    with pytest.raises(WrongClusterError) as refused:
        check_cluster(GREEN, RED, named="green")
    message = str(refused.value)
    assert "cluster 'green'" in message and "server, caSha256, kubeSystemUID differ" in message
    assert "expected server https://green:6443" in message and "reached server https://red:6443" in message
    assert "uid-green" in message and "uid-red" in message and "Nothing was written" in message
    assert refused.value.outcome is Outcome.CLUSTER_ERROR and refused.value.outcome.exit_code == 3
    assert "kubeconfig" in refused.value.advice


def test_one_part_differing_is_enough() -> None:
    with pytest.raises(WrongClusterError, match=r"\(kubeSystemUID differs\)"):
        check_cluster(ClusterIdentity.expected(server="https://green:6443", kube_system_uid="uid-green"),
                      ClusterIdentity(server="https://green:6443", kube_system_uid="uid-rebuilt"))


def test_a_flow_parameter_is_checked_like_the_fleet_file() -> None:
    assert ClusterIdentity.from_params(None) is None
    assert ClusterIdentity.from_params({"kubeSystemUID": "u"}) == ClusterIdentity(kube_system_uid="u")
    with pytest.raises(FlagError, match="unknown identity key"):
        ClusterIdentity.from_params({"uid": "u"})
    with pytest.raises(FlagError, match="at least one of server, caSha256, kubeSystemUID"):
        ClusterIdentity.from_params({"server": ""})


@pytest.mark.parametrize(("identity", "problem"), [
    ("", "line 2: clusters.0.identity: Field required"),
    ("identity: {}", "clusters.0.identity: an identity names at least one of server"),
    ("identity: {caSha256: abc}", "clusters.0.identity: a SHA-256 fingerprint is 64 hex digits"),
    ("identity: {server: green:6443}", "clusters.0.identity: an API server URL starts with https://"),
    ("identity: {kubeSystemUid: u}", "clusters.0.identity.kubeSystemUid: unknown field; did you mean 'kubeSystemUID'?"),
])
def test_a_fleet_file_names_each_clusters_identity(identity: str, problem: str) -> None:
    body = f"clusters:\n  - {{name: a, workPool: p{', ' + identity if identity else ''}}}\nstages:\n  - clusters: [a]\n"
    with pytest.raises(FleetError) as refused:
        load_fleet_text(body, source="fleet.yaml")
    assert any(problem in p for p in refused.value.problems), refused.value.problems


def test_the_plan_carries_the_identity_each_cluster_run_checks() -> None:
    plan = load_fleet_text(f"clusters:\n  - {{name: a, workPool: p, identity: {{caSha256: '{CA.upper()}'}}}}\n"
                           "stages:\n  - clusters: [a]\n")
    assert plan.clusters["a"].identity == ClusterIdentity(ca_sha256=CA)
    assert plan.to_json()["stages"][0]["clusters"][0]["identity"] == {"caSha256": CA}
