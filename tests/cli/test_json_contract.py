"""Every `-o json` output validates against its shipped JSON Schema (rollout_cli/schemas), with
JSON types (booleans, numbers, null) rather than strings, and one rollout shape shared by
`start`, `rollback` and `status`."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "flows"))
import scenario as sc  # noqa: E402

from rollout_cli.contract import validator  # noqa: E402
from rollout_cli.main import EXIT_FAILED, EXIT_INVALID, EXIT_OK, app  # noqa: E402

pytestmark = pytest.mark.usefixtures("prefect_api")
runner = CliRunner()


def json_of(schema: str, *args: str, code: int = EXIT_OK) -> dict:
    result = runner.invoke(app, [*args, "-o", "json"], catch_exceptions=False)
    assert result.exit_code == code, result.output
    data = json.loads(result.stdout)
    validator(schema).validate(data)
    return data


def test_validate_json_for_valid_and_invalid_input(tmp_path) -> None:
    good, bad = tmp_path / "good.yaml", tmp_path / "bad.yaml"
    good.write_text("apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\nmaxPods: 80\n")
    bad.write_text("apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\nmaxPods: -1\n")
    assert json_of("validate", "validate", "--config", str(good), "--policy", "fast")["valid"] is True
    invalid = json_of("validate", "validate", "--config", str(bad), code=EXIT_INVALID)
    assert invalid["valid"] is False and any("maxPods" in p for p in invalid["problems"])
    assert json_of("validate", "validate", "--policy", "fast")["policy"] == "fast"
    # the shipped canary's analysis asks a Prometheus, and none is named: start would refuse it
    unmeasured = json_of("validate", "validate", "--policy", "canary", code=EXIT_INVALID)
    assert unmeasured["policy"] == "canary" and unmeasured["message"].startswith("--prometheus: ")


def test_validate_with_a_policy_refuses_what_start_would(tmp_path) -> None:
    """dkc_refusals with the policy's allowFields, as start applies it (offline: kubelet defaults);
    with no policy, under the default one, as start would."""
    risky = tmp_path / "risky.yaml"
    risky.write_text("apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\n"
                     "systemReservedCgroup: /system.slice\n")
    allowing = tmp_path / "allowing.yaml"
    allowing.write_text("name: allowing\nsteps: [1, '100%']\nallowFields: [systemReservedCgroup]\n")
    default = json_of("validate", "validate", "--config", str(risky), code=EXIT_INVALID)
    assert default["policy"] == "canary" and default["default_policy"] is True
    refused = json_of("validate", "validate", "--config", str(risky), "--policy", "canary", code=EXIT_INVALID)
    assert any("systemReservedCgroup" in p for p in refused["problems"])
    assert json_of("validate", "validate", "--config", str(risky), "--policy", str(allowing))["valid"] is True


def test_plan_start_status_rollback_and_approve_json(tmp_path) -> None:
    with sc.cluster(tmp_path, general=2, legacy=1) as c:
        gw, kc = sc.gateway(c), str(c.kubeconfig)
        pol = tmp_path / "policy.yaml"
        pol.write_text(sc.policy(steps=[1, "100%"], maxUnavailable=2,
                                 allowFields=sorted(sc.CRASHLOOP_ON_LEGACY), failureAction="revert-all"))
        good, bad = tmp_path / "good.yaml", tmp_path / "bad.yaml"
        good.write_text(sc.config_text(gw, maxPods=71))
        bad.write_text(sc.config_text(gw, maxPods=72, **sc.CRASHLOOP_ON_LEGACY))
        common = ("--policy", str(pol), "--kubeconfig", kc)

        plan = json_of("plan", "plan", "--config", str(good), "--name", "contract", *common)
        assert plan["estimate_seconds"] > 0 and [b["index"] for b in plan["batches"]] == [1, 2]
        assert all(ch["field"] == "maxPods" and ch["new"] == 71 for chs in plan["changes"].values() for ch in chs)

        started = json_of("run", "start", "--config", str(good), "--name", "contract", *common)
        assert started["outcome"] == "completed" and started["ok"] is True and started["exit_code"] == 0
        status = json_of("rollout", "status", "contract", "--kubeconfig", kc)
        # one shape, the same rollout (a node may be promoted to lastKnownGood between the two reads)
        shape = [(n["name"], n["batch"], sorted(n)) for n in status["nodes"]]
        assert [(n["name"], n["batch"], sorted(n)) for n in started["rollout"]["nodes"]] == shape
        assert {n["ready"] for n in status["nodes"]} == {True} and {n["batch"] for n in status["nodes"]} == {1, 2}
        drift = json_of("drift", "drift", *common)  # every node `contract` proved runs it
        assert drift["ok"] is True and drift["counts"]["drifted"] == 0 and drift["exit_code"] == 0
        assert {n["rollout"] for n in drift["nodes"] if n["state"] == "in-sync"} == {"contract"}

        halted = json_of("run", "start", "--config", str(bad), "--name", "contract-bad", *common, code=EXIT_FAILED)
        assert halted["outcome"] == "reverted" and halted["rollout"]["state"] == "reverted"
        assert not halted["message"].startswith("reverted:")

        back = json_of("run", "rollback", "contract", "--to", "local", *common)
        assert back["outcome"] == "rolled-back" and back["rollout"]["name"] == "contract"

        assert json_of("approve", "approve") == []  # nothing waits
        nothing = runner.invoke(app, ["approve", "contract", "--kubeconfig", kc])
        assert nothing.exit_code == 5 and "the rollout is " in nothing.output, nothing.output  # and why
        newer = tmp_path / "newer.yaml"
        newer.write_text(sc.config_text(gw, maxPods=73))
        assert json_of("publish", "publish", "--config", str(newer), "--kubeconfig", kc)["created"] is True
        assert json_of("diff", "diff", "--config", str(newer), *common, code=EXIT_FAILED)
