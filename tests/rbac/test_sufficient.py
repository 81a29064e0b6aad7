"""The shipped manifest is enough: every command works as the worker's ServiceAccount.

One operator's day, in order, through the real CLI with nothing but the ServiceAccount's
kubeconfig: export a node's config, validate and diff a change, plan and publish it, roll it out
through an approval gate, check it for drift, roll it back, roll out a config that crash-loops the kubelet (it is
reverted), and read the status of both rollouts.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import scenario as sc
import yaml
from rbac_rig import SA_NAME, SA_NAMESPACE, Rig, manifest_docs

from flows.approval import answer_gate, pending_gates

pytestmark = pytest.mark.usefixtures("prefect_api")

REPO = Path(__file__).resolve().parents[2]


def _approve(name: str, answered: list[str]) -> bool:
    gates = pending_gates(name)
    for gate in gates:
        answer_gate(gate.flow_run_id, approved=True, approver="alice", comment="canary looks good")
        answered.append(gate.gate)
    return bool(gates)


def test_the_worker_deployment_runs_as_the_service_account_the_manifest_binds() -> None:
    worker = [d for d in yaml.safe_load_all((REPO / "deployments/kubernetes/worker.yaml").read_text())
              if d and d["kind"] == "Deployment"][0]
    account = [d for d in manifest_docs() if d["kind"] == "ServiceAccount"][0]["metadata"]
    assert worker["metadata"]["namespace"] == account["namespace"] == SA_NAMESPACE
    assert worker["spec"]["template"]["spec"]["serviceAccountName"] == account["name"] == SA_NAME
    bound = [s for d in manifest_docs() if d["kind"].endswith("Binding") for s in d["subjects"]]
    assert all((s["kind"], s["name"], s["namespace"]) == ("ServiceAccount", SA_NAME, SA_NAMESPACE) for s in bound)


def test_every_command_succeeds_as_the_service_account(rig: Rig) -> None:
    node = sc.workers(rig.admin)[0]
    exported = rig.cli("export", node)
    assert exported.exit_code == 0, exported.output
    assert yaml.safe_load(exported.stdout)["kind"] == "KubeletConfiguration"

    identified = rig.cli("fleet", "identify", "-o", "json")
    assert identified.exit_code == 0, identified.output
    assert json.loads(identified.stdout)["kubeSystemUID"]

    good = rig.config()
    assert rig.cli("validate", "--config", str(good), "--policy", "fast").exit_code == 0
    gated = rig.policy(approval={"after": [0], "timeout": "60s"})
    diff = rig.cli("diff", "--config", str(good), "--policy", str(gated), "-o", "json")
    assert diff.exit_code == 1, diff.output  # 1 = differences found, as documented
    assert set(json.loads(diff.stdout)) == set(sc.workers(rig.admin))
    plan = rig.cli("plan", "--config", str(good), "--policy", str(gated), "--name", "sa-good", "-o", "json")
    assert plan.exit_code == 0, plan.output
    assert len(json.loads(plan.stdout)["batches"]) == 2
    published = rig.cli("publish", "--config", str(good), "-o", "json")
    assert published.exit_code == 0, published.output
    assert json.loads(published.stdout)["created"] is True

    answered: list[str] = []
    with sc.Background(lambda: _approve("sa-good", answered)):
        started = rig.cli("start", "--config", str(good), "--policy", str(gated), "--name", "sa-good", "-o", "json")
    assert started.exit_code == 0, started.output
    assert json.loads(started.stdout)["outcome"] == "completed" and len(answered) == 1
    status = rig.cli("status", "sa-good", "-o", "json")
    assert status.exit_code == 0 and json.loads(status.stdout)["state"] == "completed"
    # drift reads the journals by name (get configmaps: no list), each node's configz (get
    # nodes/proxy) and would record Events (create events): every node sa-good proved is in sync
    drift = rig.cli("drift", "--policy", str(gated), "-o", "json")
    assert drift.exit_code == 0, drift.output
    states = {n["node"]: n["state"] for n in json.loads(drift.stdout)["nodes"]}
    assert {states[n] for n in sc.workers(rig.admin)} == {"in-sync"}, states

    back = rig.cli("rollback", "sa-good", "--policy", str(gated), "-o", "json")
    assert back.exit_code == 0, back.output
    assert json.loads(back.stdout)["outcome"] == "rolled-back"

    legacy = [n for n in sc.workers(rig.admin) if n.startswith("legacy-")]
    crashing = rig.config(**sc.CRASHLOOP_ON_LEGACY)
    on_legacy = rig.policy(nodes={"selector": f"kubernetes.io/hostname={legacy[0]}"},
                           allowFields=sorted(sc.CRASHLOOP_ON_LEGACY))
    failed = rig.cli("start", "--config", str(crashing), "--policy", str(on_legacy), "--name", "sa-crash", "-o", "json")
    assert failed.exit_code == 1, failed.output
    assert json.loads(failed.stdout)["outcome"] == "reverted"
    status = rig.cli("status", "sa-crash", "-o", "json")
    assert status.exit_code == 0, status.output
    assert {n["name"]: n["phase"] for n in json.loads(status.stdout)["nodes"]} == {legacy[0]: "reverted"}
