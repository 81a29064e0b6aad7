"""`rollout fleet ...` as scripts and people meet it before any cluster runs: the plan and its JSON
contract, and every bad input as one message naming the file, the line and the field, with its
exit code and no traceback. (Whole fleets run in tests/flows/test_fleet.py.)"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from rollout_cli.contract import validator
from rollout_cli.local.fleet_stack import free_port
from rollout_cli.main import EXIT_CLUSTER, EXIT_INVALID, EXIT_NOT_FOUND, EXIT_OK, app

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "docs" / "fleet-example.yaml"
runner = CliRunner()
GOOD_CONFIG = "apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\nmaxPods: 80\n"


def invoke(*args: str, code: int, env: dict[str, str] | None = None) -> tuple[str, str]:
    result = runner.invoke(app, list(args), env=env, catch_exceptions=False)
    assert result.exit_code == code, result.output
    assert "Traceback" not in result.output
    return result.stdout, result.stderr


def test_plan_shows_the_stages_and_meets_its_schema() -> None:
    stdout, _ = invoke("fleet", "plan", "--fleet", str(EXAMPLE), "-o", "json", code=EXIT_OK)
    data = json.loads(stdout)
    validator("fleet-plan").validate(data)
    assert [s["name"] for s in data["stages"]] == ["canary", "staging", "prod-first", "prod-rest"]
    assert [c["name"] for c in data["stages"][2]["clusters"]] == ["prod-eu-1"]  # 25% of 4 prod clusters
    assert [s["approval_after"] for s in data["stages"]] == [True, False, True, False]
    table, _ = invoke("fleet", "plan", "--fleet", str(EXAMPLE), code=EXIT_OK)
    assert all(word in table for word in ("prod-eu-1", "cautious", "2h", "approval"))


@pytest.mark.parametrize("command", ["plan", "start"])
def test_a_bad_fleet_file_is_one_error_naming_its_line_and_field(tmp_path: Path, command: str) -> None:
    fleet = tmp_path / "fleet.yaml"
    fleet.write_text("clusters:\n  - {name: a, workPool: p, identity: {kubeSystemUID: uid-a}}\nstages:\n  - clusters: [a]\nfailureBudgt: 1\n")
    config = tmp_path / "kubelet.yaml"
    config.write_text(GOOD_CONFIG)
    extra = ("--name", "x", "--config", str(config)) if command == "start" else ()
    _, stderr = invoke("fleet", command, "--fleet", str(fleet), *extra, code=EXIT_INVALID)
    assert stderr.startswith(f"error: {fleet}: invalid fleet file (1 problem(s))")
    assert "line 5: failureBudgt: unknown field; did you mean 'failureBudget'?" in stderr


def test_start_refuses_bad_input_before_any_run(tmp_path: Path) -> None:
    config = tmp_path / "kubelet.yaml"
    config.write_text(GOOD_CONFIG)
    _, stderr = invoke("fleet", "start", "--fleet", str(EXAMPLE), "--name", "has.dot", "--config", str(config),
                       code=EXIT_INVALID)
    assert "--name: 'has.dot': letters, digits, '-' and '_'" in stderr
    # not a valid KubeletConfiguration: refused offline, as `rollout start` refuses it (a change a
    # policy does not allow is refused by each cluster's run against its nodes, before any write)
    invalid = tmp_path / "invalid.yaml"
    invalid.write_text(GOOD_CONFIG + "maxPods: -1\n")
    _, stderr = invoke("fleet", "start", "--fleet", str(EXAMPLE), "--name", "x", "--config", str(invalid),
                       code=EXIT_INVALID)
    assert "maxPods" in stderr and str(invalid) in stderr
    _, stderr = invoke("fleet", "start", "--fleet", str(EXAMPLE), "--name", "x", code=EXIT_INVALID)
    assert "give exactly one of --config FILE or --configmap" in stderr


def test_a_fleet_needs_the_prefect_server_its_workers_poll(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    config = tmp_path / "kubelet.yaml"
    config.write_text(GOOD_CONFIG)
    monkeypatch.delenv("PREFECT_API_URL", raising=False)
    from prefect.settings import PREFECT_API_URL, temporary_settings

    with temporary_settings(restore_defaults={PREFECT_API_URL}):
        _, stderr = invoke("fleet", "start", "--fleet", str(EXAMPLE), "--name", "x", "--config", str(config),
                           code=EXIT_INVALID)
    assert "set PREFECT_API_URL" in stderr
    gone = f"http://127.0.0.1:{free_port()}/api"  # nothing listens there: one line, not Prefect's traceback
    with temporary_settings({PREFECT_API_URL: gone}):
        for args in (("start", "--fleet", str(EXAMPLE), "--name", "x", "--config", str(config)),
                     ("status", "x"), ("approve", "x"), ("abort", "x")):
            _, stderr = invoke("fleet", *args, code=EXIT_CLUSTER)
            assert f"the Prefect server at PREFECT_API_URL={gone} does not answer" in stderr, args


@pytest.mark.usefixtures("prefect_api")
def test_what_is_not_there_is_not_found() -> None:
    _, stderr = invoke("fleet", "status", "nosuch", code=EXIT_NOT_FOUND)
    assert "no fleet rollout named 'nosuch'" in stderr
    _, stderr = invoke("fleet", "status", "Not.A/Name", code=EXIT_INVALID)  # a name no fleet can have
    assert "NAME: 'Not.A/Name': letters, digits" in stderr
    _, stderr = invoke("fleet", "abort", "nosuch", code=EXIT_NOT_FOUND)
    assert "no fleet rollout named 'nosuch'" in stderr
    stdout, _ = invoke("fleet", "approve", code=EXIT_OK)
    assert "no fleet waits for approval" in stdout
    stdout, _ = invoke("fleet", "approve", "-o", "json", code=EXIT_OK)
    validator("approve").validate(json.loads(stdout))
    _, stderr = invoke("fleet", "reject", "nosuch", code=EXIT_NOT_FOUND)
    assert "no gate of fleet nosuch waits for approval" in stderr


@pytest.mark.usefixtures("prefect_api")
def test_abort_of_an_ended_fleet_is_refused_as_a_request_it_cannot_take() -> None:
    """As `rollout abort` of an ended rollout: exit 2 and what to do instead (before: exit 5, "not
    found", for a fleet `rollout fleet status` shows)."""
    from datetime import datetime, timezone

    from flows.fleet.store import _write_journal_artifact
    from rollout.fleet.journal import FleetJournal
    from rollout.outcome import Outcome

    now = datetime.now(timezone.utc)
    ended = FleetJournal(rollout="ended", digest="d", created_at=now).with_end(Outcome.COMPLETED, "done", at=now)
    _write_journal_artifact(ended)
    _, stderr = invoke("fleet", "abort", "ended", code=EXIT_INVALID)
    assert "abort refused: fleet rollout ended has ended (completed)" in stderr
    assert "hint: `rollout fleet status ended`" in stderr


@pytest.mark.usefixtures("prefect_api")
def test_status_shows_a_twenty_stage_fleet_and_its_whole_message() -> None:
    """The journal once lived in a Prefect Variable (5,000 characters): fleets were capped at 10
    stages and the fleet's message clipped at 400 characters, losing the clusters not started.
    Here: what a fleet flow run leaves (its run, tagged, with its fleet file; its journal, ended
    with a failure naming 19 clusters), read back by `rollout fleet status` as a person would."""
    from datetime import datetime, timezone

    from prefect.client.orchestration import get_client
    from prefect.states import Failed

    from flows.fleet.flow import kubelet_config_fleet_rollout
    from flows.fleet.runs import fleet_tag
    from flows.fleet.store import _write_journal_artifact
    from rollout.fleet import FleetJournal, Gate, load_fleet_text
    from rollout.journal import ApprovalOutcome
    from rollout.outcome import Outcome

    names = [f"cluster-{i:02d}" for i in range(20)]
    fleet_text = "\n".join(["clusters:", *[f"  - {{name: {n}, workPool: {n}, identity: {{kubeSystemUID: uid-{n}}}}}"
                                            for n in names],
                            "stages:", *[f"  - {{clusters: [{n}]}}" for n in names]]) + "\n"
    assert len(load_fleet_text(fleet_text, source="test").stages) == 20
    now = datetime.now(timezone.utc)
    message = ("1 cluster(s) failed, more than the fleet's failure budget (0): cluster-00: reverted: "
               + "the canary's kubelets crash-looped " * 20 + "; not started: " + ", ".join(names[1:]))
    gates = {s: Gate(asked_at=now, deadline=now, outcome=ApprovalOutcome.APPROVED, by="alice", note="fine")
             for s in range(19)}
    journal = FleetJournal(rollout="twenty", digest="d", created_at=now, gates=gates).with_end(
        Outcome.HALTED, message, at=now)
    with get_client(sync_client=True) as client:
        client.create_flow_run(kubelet_config_fleet_rollout, parameters={"name": "twenty", "fleet": fleet_text},
                               tags=[fleet_tag("twenty")], state=Failed(message="halted"))
    _write_journal_artifact(journal)
    stdout, _ = invoke("fleet", "status", "twenty", "-o", "json", code=EXIT_OK)
    data = json.loads(stdout)
    validator("fleet-status").validate(data)
    assert [s["clusters"] for s in data["stages"]] == [[n] for n in names]
    assert data["state"] == "halted" and data["message"] == message and len(message) > 1000
    assert len(data["gates"]) == 19
    table, _ = invoke("fleet", "status", "twenty", code=EXIT_OK)
    flat = " ".join(table.split())
    assert "not started: " + ", ".join(names[1:]) in flat, table
