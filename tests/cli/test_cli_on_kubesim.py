"""The `rollout` CLI against kubesim: the script contracts and exit codes the README promises."""

from __future__ import annotations

import json
import os
import sys
import threading
import time
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "flows"))
import scenario as sc  # noqa: E402

from rollout_cli.contract import validator  # noqa: E402
from rollout_cli.main import EXIT_FAILED, EXIT_INVALID, EXIT_LOCKED, EXIT_NOT_FOUND, EXIT_OK, app  # noqa: E402

pytestmark = pytest.mark.usefixtures("prefect_api")
runner = CliRunner()


def invoke(*args: str):
    return runner.invoke(app, list(args), catch_exceptions=False)


def test_publish_prints_namespace_and_name_and_is_idempotent(tmp_path) -> None:
    with sc.cluster(tmp_path, general=1) as c:
        gw = sc.gateway(c)
        cfg = tmp_path / "k.yaml"
        cfg.write_text(sc.config_text(gw, maxPods=66))
        first = invoke("publish", "--config", str(cfg), "-o", "json", "--kubeconfig", str(c.kubeconfig))
        assert first.exit_code == EXIT_OK, first.output
        data = json.loads(first.stdout)
        assert data["namespace"] == "kube-system" and data["name"].startswith("kubelet-config-")
        assert data["created"] is True
        cm = gw.read_configmap(data["name"], namespace=data["namespace"])
        assert cm["data"]["kubelet"] == cfg.read_text() and cm["immutable"] is True
        again = json.loads(invoke("publish", "--config", str(cfg), "-o", "json", "--kubeconfig",
                                  str(c.kubeconfig)).stdout)
        assert again["name"] == data["name"] and again["created"] is False


def test_start_exit_codes_and_status_json(tmp_path) -> None:
    with sc.cluster(tmp_path, general=2, legacy=2) as c:
        gw = sc.gateway(c)
        kc = str(c.kubeconfig)
        pol = tmp_path / "policy.yaml"
        pol.write_text(sc.policy(allowFields=sorted(sc.CRASHLOOP_ON_LEGACY), failureAction="revert-all",
                                 steps=[1, "100%"], maxUnavailable=3))
        good = tmp_path / "good.yaml"
        good.write_text(sc.config_text(gw, maxPods=55))
        ok = invoke("start", "--config", str(good), "--policy", str(pol), "--name", "cli-good", "--kubeconfig", kc)
        assert ok.exit_code == EXIT_OK, ok.output
        assert "completed" in ok.stdout

        status = invoke("status", "cli-good", "-o", "json", "--kubeconfig", kc)
        assert status.exit_code == EXIT_OK
        data = json.loads(status.stdout)
        assert data["state"] == "completed"
        assert sorted(n["name"] for n in data["nodes"]) == sc.workers(gw)
        assert {n["phase"] for n in data["nodes"]} <= {"active", "promoted"}
        assert yaml.safe_load(invoke("status", "cli-good", "-o", "yaml", "--kubeconfig", kc).stdout)["name"] == "cli-good"

        bad = tmp_path / "bad.yaml"
        bad.write_text(sc.config_text(gw, maxPods=56, **sc.CRASHLOOP_ON_LEGACY))
        halted = invoke("start", "--config", str(bad), "--policy", str(pol), "--name", "cli-bad",
                        "--kubeconfig", kc, "-o", "json")
        assert halted.exit_code == EXIT_FAILED, halted.output
        assert json.loads(halted.stdout)["outcome"] in ("reverted", "halted")
        phases = {n["name"]: n["phase"] for n in json.loads(invoke("status", "cli-bad", "-o", "json",
                                                                   "--kubeconfig", kc).stdout)["nodes"]}
        assert set(phases) == set(sc.workers(gw)) and "reverted" in phases.values()
        # as `kubectl rollout status`: a watch's exit code says how the rollout ended (before: 0)
        for name, code in (("cli-bad", EXIT_FAILED), ("cli-good", EXIT_OK)):
            watched = invoke("status", name, "--watch", "--kubeconfig", kc)
            assert watched.exit_code == code, (name, watched.output)

        invalid = tmp_path / "invalid.yaml"
        invalid.write_text(sc.config_text(gw, healthzPort=70000))
        assert invoke("validate", "--config", str(invalid)).exit_code == EXIT_INVALID
        assert invoke("validate", "--config", str(good), "--policy", str(pol)).exit_code == EXIT_OK
        refused = invoke("start", "--config", str(invalid), "--policy", str(pol), "--name", "cli-invalid",
                         "--kubeconfig", kc)
        assert refused.exit_code == EXIT_INVALID, refused.output
        assert invoke("status", "nope", "--kubeconfig", kc).exit_code == EXIT_NOT_FOUND

        plan = json.loads(invoke("plan", "--config", str(good), "--policy", str(pol), "-o", "json",
                                 "--kubeconfig", kc).stdout)
        assert plan["batches"] == []  # every worker already runs that config
        exported = yaml.safe_load(invoke("export", sc.workers(gw)[0], "--kubeconfig", kc).stdout)
        assert exported["kind"] == "KubeletConfiguration" and exported["maxPods"] == 55
        newer = tmp_path / "newer.yaml"
        newer.write_text(sc.config_text(gw, maxPods=58))
        diff = invoke("diff", "--config", str(newer), "--policy", str(pol), "-o", "json", "--kubeconfig", kc)
        assert diff.exit_code == EXIT_FAILED  # differences found
        changes = json.loads(diff.stdout)
        assert set(changes) == set(sc.workers(gw))
        assert all({"field": "maxPods", "old": 55, "new": 58} in [
            {k: ch[k] for k in ("field", "old", "new")} for ch in node_changes] for node_changes in changes.values())
        assert invoke("diff", "--config", str(good), "--policy", str(pol), "--kubeconfig", kc).exit_code == EXIT_OK

        back = invoke("rollback", "cli-good", "--to", "local", "--policy", str(pol), "--kubeconfig", kc, "-o", "json")
        assert back.exit_code == EXIT_OK, back.output
        assert json.loads(back.stdout)["outcome"] == "rolled-back"
        assert all(o.spec_source is None and o.active is None for n, o in sc.nodes(gw).items() if n in sc.workers(gw))


def test_approve_from_the_cli_resumes_the_paused_rollout(tmp_path) -> None:
    with sc.cluster(tmp_path, general=3) as c:
        gw = sc.gateway(c)
        pol = sc.policy(approval={"after": [0], "timeout": "60s"})
        result: dict = {}
        text = sc.config_text(gw, maxPods=57)

        def rollout() -> None:
            try:
                result["out"] = sc.run(name="cli-gated", config=text, policy=pol, kubeconfig=str(c.kubeconfig),
                                       approval_poll_seconds=1)
            except BaseException as exc:  # noqa: BLE001 - reported by the assertion below
                result["error"] = exc

        thread = threading.Thread(target=rollout)
        thread.start()
        try:
            deadline = time.monotonic() + 90
            while time.monotonic() < deadline and thread.is_alive():
                listed = invoke("approve", "-o", "json")
                if json.loads(listed.stdout or "[]"):
                    break
                time.sleep(0.5)
            gates = json.loads(listed.stdout)
            validator("approve").validate(gates)
            journal = sc.gateway(c).load_journal("cli-gated")
            assert [g["rollout"] for g in gates] == ["cli-gated"], (result, journal and journal[0].get("decisions"))
            # `rollout status` while the rollout runs: the canary is done, the rest pending
            during = json.loads(invoke("status", "cli-gated", "-o", "json", "--kubeconfig", str(c.kubeconfig)).stdout)
            assert during["state"] == "running"
            assert [n["phase"] for n in during["nodes"]].count("pending") == 2
            assert {n["phase"] for n in during["nodes"]} - {"pending"} <= {"active", "promoted"}
            # while it waits it holds the rollout lock: another rollout is refused (exit 4)
            other = tmp_path / "other.yaml"
            other.write_text(sc.config_text(gw, maxPods=59))
            locked = invoke("start", "--config", str(other), "--policy", "fast", "--name", "cli-other",
                            "--kubeconfig", str(c.kubeconfig))
            assert locked.exit_code == EXIT_LOCKED, locked.output
            assert f"rollout cli-gated (pid {os.getpid()} on host" in locked.stdout, locked.stdout
            answered = invoke("approve", "cli-gated", "--approver", "bob", "-m", "ok", "-o", "json")
            assert answered.exit_code == EXIT_OK, answered.output
            validator("approve").validate(json.loads(answered.stdout))
            assert json.loads(answered.stdout)["answer"] == "approved"
        finally:
            thread.join(timeout=120)
        assert result["out"].outcome == "completed", result["out"].message
        assert sc.journal(gw, "cli-gated").batches[0].approval.by == "bob"


def test_cluster_without_dkc_is_refused_with_exit_3_and_zero_node_writes(tmp_path) -> None:
    from kubesim.cluster import Cluster

    with Cluster(nodes=2, state_dir=tmp_path / "kubesim", time_scale=sc.TIME_SCALE, gate_enabled=False) as c:
        cfg = tmp_path / "k.yaml"
        cfg.write_text("apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\nmaxPods: 80\n")
        # (the shipped canary would be refused first for its Prometheus: tests/analysis/test_prometheus_cli.py)
        result = invoke("start", "--config", str(cfg), "--policy", "fast", "--name", "no-dkc",
                        "--kubeconfig", str(c.kubeconfig))
        assert result.exit_code == 3, result.output
        assert "status.config" in result.stdout
        plan = invoke("plan", "--config", str(cfg), "--policy", "canary", "--kubeconfig", str(c.kubeconfig))
        assert plan.exit_code == 3 and "status.config" in plan.output, plan.output  # as start would
        assert sc.assignment_patches(c) == {}
        assert sc.gateway(c).load_journal("no-dkc") is None
        assert [e for e in c.audit_log.events(verb="create")  # nothing published by us
                if (e.get("objectRef") or {}).get("resource") == "configmaps"
                and not e["user"]["username"].startswith("system:")] == []


def _orchestrator_writes(c) -> list[dict]:
    """Every write the orchestrator (admin, not a kubelet or kubesim controller) made, from the audit log."""
    return [e for e in c.audit_log.events()
            if e.get("verb") in ("create", "update", "patch", "delete")
            and not str((e.get("user") or {}).get("username", "")).startswith("system:")]


def test_bad_config_and_bad_policy_get_one_clear_message_each_and_write_nothing(tmp_path) -> None:
    with sc.cluster(tmp_path, general=2) as c:
        gw, kc = sc.gateway(c), str(c.kubeconfig)
        good_policy, bad_policy = tmp_path / "policy.yaml", tmp_path / "typo-policy.yaml"
        good_policy.write_text(sc.policy())
        bad_policy.write_text(sc.policy(stpes=[1, "100%"]))
        good, bad = tmp_path / "good.yaml", tmp_path / "typo-config.yaml"
        good.write_text(sc.config_text(gw, maxPods=57))
        bad.write_text(sc.config_text(gw, evictionHardd={"memory.available": "100Mi"}))

        bad_pol = invoke("start", "--config", str(good), "--policy", str(bad_policy), "--name", "typo-p",
                         "--kubeconfig", kc)
        bad_cfg = invoke("start", "--config", str(bad), "--policy", str(good_policy), "--name", "typo-c",
                         "--kubeconfig", kc)

        assert bad_pol.exit_code == EXIT_INVALID, bad_pol.output
        assert "typo-policy.yaml" in bad_pol.output and "stpes" in bad_pol.output and "steps" in bad_pol.output
        assert bad_cfg.exit_code == EXIT_INVALID, bad_cfg.output
        assert "evictionHardd" in bad_cfg.output and "did you mean evictionHard" in bad_cfg.output
        assert _orchestrator_writes(c) == []
        # a field of later kubelets, on 1.23 ones: refused naming the nodes and what they run (judged
        # against the nodes, under the rollout's lock: taken and given back, nothing else written)
        later = tmp_path / "pulls.yaml"
        later.write_text(sc.config_text(gw, serializeImagePulls=False, maxParallelImagePulls=2))
        too_new = invoke("start", "--config", str(later), "--policy", str(good_policy), "--name", "pulls",
                         "--kubeconfig", kc)
        assert too_new.exit_code == EXIT_INVALID, too_new.output
        assert ("maxParallelImagePulls: a field of kubelets 1.27 and later; unknown to the kubelets of general-1 "
                "(v1.23.") in too_new.output
        assert "those nodes out (nodes.excludeNames / excludeSelector) until their kubelets know them" in too_new.output
        # a gate of later kubelets likewise: a 1.23 kubelet fails on a gate it does not know
        gated = tmp_path / "sidecars.yaml"
        gated.write_text(sc.config_text(gw, featureGates={"SidecarContainers": True}))
        no_gate = invoke("start", "--config", str(gated), "--policy", str(good_policy), "--name", "sidecars",
                         "--kubeconfig", kc)
        assert no_gate.exit_code == EXIT_INVALID, no_gate.output
        assert ("featureGates.SidecarContainers: a gate of kubelets 1.28 and later; unknown to the kubelets of "
                "general-1 (v1.23.") in no_gate.output and "leave those fields and gates out" in no_gate.output
        assert [e for e in _orchestrator_writes(c) if (e.get("objectRef") or {}).get("resource") != "leases"] == []
