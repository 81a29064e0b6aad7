"""`validate`, `plan` and `diff` say what a change costs each node (restart, drain, state reset,
reboot, and about how long), from the disruption catalogue; a change that needs a drain is refused
without a `disruption:` section, naming the field, the reason and the section to add. In process:
the cluster is a fake of three DKC nodes on the `none` CPU policy (README, "Disruption")."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml
from typer.testing import CliRunner

from rollout.errors import NotFoundError
from rollout.model import ClusterFacts, ConfigRef, NodeObservation
from rollout_cli.contract import validator
from rollout_cli.main import EXIT_FAILED, EXIT_INVALID, app

runner = CliRunner()
HEAD = "apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\n"
PINNING = HEAD + "cpuManagerPolicy: static\nreservedSystemCPUs: '0'\n"
CPU_STATE = "/var/lib/kubelet/cpu_manager_state"
NODES = ("n1", "n2", "n3")
WIDE = {"COLUMNS": "400", "KUBECONFIG": ""}


class Cluster:
    """Three nodes running the kubelet defaults (the `none` CPU policy), each with the node agent
    (``backend``: "agent") or through Dynamic Kubelet Config (""); writes nothing."""

    def __init__(self, backend: str = "agent") -> None:
        self.backend = backend

    def list_nodes(self, selector: str | None = None) -> tuple[list[NodeObservation], str]:
        return [NodeObservation(name=n, uid=f"u-{n}", has_config_status=True, ready="True", backend=self.backend)
                for n in NODES], "1"

    def configz(self, node: str) -> dict[str, object]:
        return {"kubeletconfig": {"cpuManagerPolicy": "none", "maxPods": 110}}

    def impatient(self) -> Cluster:
        return self

    def resolve(self, ref: ConfigRef) -> ConfigRef:
        raise NotFoundError("not published")

    def probe_cluster(self, nodes: object = None) -> ClusterFacts:
        return ClusterFacts(server_version="v1.23.17")

    def __getattr__(self, name: str) -> object:
        raise AssertionError(f"asked the cluster for {name}")


@pytest.fixture()
def files(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> dict[str, str]:
    """The change, a plain one, a policy that may drain and one that may not (no Prometheus asked)."""
    monkeypatch.delenv("KUBELET_ROLLOUT_PROMETHEUS_URL", raising=False)
    monkeypatch.delenv("KUBELET_ROLLOUT_TIME_SCALE", raising=False)
    monkeypatch.setattr("rollout_cli.main.open_cluster", lambda *a, **k: Cluster())
    plain = {"name": "plain", "steps": [1, "100%"], "maxUnavailable": 1}
    written = {"pinning.yaml": PINNING, "maxpods.yaml": HEAD + "maxPods: 80\n",
               "plain.yaml": yaml.safe_dump(plain),
               "drains.yaml": yaml.safe_dump({**plain, "name": "drains", "disruption": {"drain": "auto"}}),
               "typo.yaml": yaml.safe_dump({**plain, "disruption": {"drain": "sometimes"}}),
               "kc": "apiVersion: v1\nkind: Config\n"}  # never read: the cluster is the fake
    for name, text in written.items():
        (tmp_path / name).write_text(text)
    return {name.partition(".")[0]: str(tmp_path / name) for name in written}


def test_validate_refuses_a_drain_change_without_the_section_and_names_what_to_add(files: dict[str, str]) -> None:
    said = runner.invoke(app, ["validate", "--config", files["pinning"], "-p", files["plain"]], env=WIDE)
    assert said.exit_code == EXIT_INVALID, said.output
    assert "Traceback" not in said.output
    assert "need the nodes drained before their kubelets restart" in said.output  # the headline
    assert "cpuManagerPolicy (state-reset, 'none' -> 'static')" in said.output  # the field
    assert f"the kubelet refuses to start while {CPU_STATE} was written under policy 'none'" in said.output  # why
    assert "add `disruption: {drain: auto}` to the policy" in said.output  # the section to add
    assert "draining is not implemented" not in said.output

    data = json.loads(runner.invoke(app, ["validate", "--config", files["pinning"], "-p", files["plain"], "-o", "json"],
                                    env=WIDE).stdout)
    validator("validate").validate(data)
    assert data["valid"] is False and data["drain_refusals"] and set(data["drain_refusals"]) <= set(data["refusals"])
    assert data["disruption"]["the kubelet defaults"]["class"] == "state-reset"


def test_validate_takes_it_with_the_section_and_shows_the_cost(files: dict[str, str]) -> None:
    said = runner.invoke(app, ["validate", "--config", files["pinning"], "-p", files["drains"]], env=WIDE)
    assert said.exit_code == 0, said.output
    assert "valid: the policy's disruption section takes it under policy drains" in said.output
    assert f"drain + state reset (delete {CPU_STATE}), about 1m10s, for cpuManagerPolicy" in said.output
    assert "each node is cordoned and drained through the Eviction API before its write" in said.output
    data = json.loads(runner.invoke(app, ["validate", "--config", files["pinning"], "-p", files["drains"], "-o", "json"],
                                    env=WIDE).stdout)
    validator("validate").validate(data)
    cost = data["disruption"]["the kubelet defaults"]
    assert data["valid"] is True and cost["stateFiles"] == [CPU_STATE] and cost["seconds"] == 70


def test_validate_against_the_nodes_says_the_cost_of_each(files: dict[str, str]) -> None:
    data = json.loads(runner.invoke(app, ["validate", "--config", files["pinning"], "-p", files["drains"], "-o", "json",
                                          "--kubeconfig", files["kc"]], env=WIDE).stdout)
    validator("validate").validate(data)
    assert set(data["disruption"]) == set(NODES)
    assert {d["class"] for d in data["disruption"].values()} == {"state-reset"}


def test_plan_shows_per_node_restart_drain_and_state_reset(files: dict[str, str]) -> None:
    shown = runner.invoke(app, ["plan", "--config", files["pinning"], "-p", files["drains"], "--kubeconfig", files["kc"]],
                          env=WIDE)
    assert shown.exit_code == 0, shown.output
    assert (f"cost on 3 node(s) [n1, n2, n3]: drain + state reset (delete {CPU_STATE}), about 1m10s, "
            "for cpuManagerPolicy, reservedSystemCPUs") in shown.output
    assert "state-reset (the policy's disruption section)" in shown.output  # the changes' start column
    assert ("start would take it under policy drains (its disruption section): each node is cordoned and drained "
            "through the Eviction API before its write") in shown.output

    data = json.loads(runner.invoke(app, ["plan", "--config", files["pinning"], "-p", files["drains"], "--kubeconfig",
                                          files["kc"], "-o", "json"], env=WIDE).stdout)
    validator("plan").validate(data)
    assert set(data["disruption"]) == set(NODES)
    for cost in data["disruption"].values():
        assert cost == {"class": "state-reset", "fields": ["cpuManagerPolicy", "reservedSystemCPUs"],
                        "stateFiles": [CPU_STATE], "reasons": cost["reasons"], "seconds": 70}
    changes = {c["field"]: c for c in data["changes"]["n1"]}
    assert changes["cpuManagerPolicy"]["disruption"] == "state-reset"
    assert changes["cpuManagerPolicy"]["stateFile"] == CPU_STATE and not changes["cpuManagerPolicy"]["refused"]


def test_plan_of_a_plain_change_costs_a_restart(files: dict[str, str]) -> None:
    shown = runner.invoke(app, ["plan", "--config", files["maxpods"], "-p", files["plain"], "--kubeconfig", files["kc"]],
                          env=WIDE)
    assert shown.exit_code == 0, shown.output
    assert "cost on 3 node(s) [n1, n2, n3]: restart, about 40s, for maxPods" in shown.output
    assert "start would take it under policy plain" in shown.output
    data = json.loads(runner.invoke(app, ["plan", "--config", files["maxpods"], "-p", files["plain"], "--kubeconfig",
                                          files["kc"], "-o", "json"], env=WIDE).stdout)
    assert {d["class"] for d in data["disruption"].values()} == {"restart"}


def test_plan_refuses_a_drain_change_without_the_section(files: dict[str, str]) -> None:
    shown = runner.invoke(app, ["plan", "--config", files["pinning"], "-p", files["plain"], "--kubeconfig", files["kc"]],
                          env=WIDE)
    assert shown.exit_code == EXIT_INVALID, shown.output
    assert "add `disruption: {drain: auto}` to the policy" in shown.output
    assert "refused (state-reset: no drain in the policy)" in shown.output
    assert "draining is not implemented" not in shown.output


def test_diff_shows_each_change_and_each_node_its_cost(files: dict[str, str]) -> None:
    shown = runner.invoke(app, ["diff", "--config", files["pinning"], "-p", files["drains"], "--kubeconfig", files["kc"]],
                          env=WIDE)
    assert shown.exit_code == EXIT_FAILED, shown.output  # it differs; start's refusal to drain is its own
    assert "state-reset (the policy's disruption section)" in shown.output
    assert f"cost on 3 node(s) [n1, n2, n3]: drain + state reset (delete {CPU_STATE}), about 1m10s" in shown.output
    data: dict[str, Any] = json.loads(runner.invoke(app, ["diff", "--config", files["pinning"], "-p", files["drains"],
                                                          "--kubeconfig", files["kc"], "-o", "json"], env=WIDE).stdout)
    validator("diff").validate(data)
    assert set(data) == set(NODES)
    assert {c["field"]: c["disruption"] for c in data["n2"]} == {"cpuManagerPolicy": "state-reset",
                                                                  "reservedSystemCPUs": "state-reset"}


def test_validate_and_plan_refuse_a_state_reset_on_nodes_without_the_agent(
        files: dict[str, str], monkeypatch: pytest.MonkeyPatch) -> None:
    """The refusal `start` gives (rollout.verdict: only the agent deletes a checkpoint between
    stopping and starting the kubelet), said before it: by validate and by plan."""
    monkeypatch.setattr("rollout_cli.main.open_cluster", lambda *a, **k: Cluster(backend=""))
    for command in ("validate", "plan"):
        said = runner.invoke(app, [command, "--config", files["pinning"], "-p", files["drains"], "--kubeconfig",
                                   files["kc"]], env=WIDE)
        assert said.exit_code == EXIT_INVALID, said.output
        assert f"the kubelet must start with {CPU_STATE} deleted, which only kubelet-rollout-agent does" in said.output
        assert "3 node(s) take their config through Dynamic Kubelet Config (n1, n2, n3)" in said.output
    data = json.loads(runner.invoke(app, ["validate", "--config", files["pinning"], "-p", files["drains"], "-o", "json",
                                          "--kubeconfig", files["kc"]], env=WIDE).stdout)
    validator("validate").validate(data)
    assert not data["valid"] and data["reset_refusals"] and data["problems"] == data["reset_refusals"]


def test_a_bad_disruption_section_is_one_clear_error(files: dict[str, str]) -> None:
    said = runner.invoke(app, ["validate", "--config", files["pinning"], "-p", files["typo"]], env=WIDE)
    assert said.exit_code == EXIT_INVALID, said.output
    assert "disruption.drain" in said.output and "Traceback" not in said.output


def test_the_readme_block_runs_as_written(tmp_path: Path) -> None:
    from docs_blocks import ROOT, command_blocks, reader_env, run_commands

    work, env = reader_env(tmp_path)
    block = command_blocks(ROOT / "README.md", "## Disruption: what a change costs a node")[0]
    out = run_commands(block, cwd=work, env=env, timeout=120, source="the README")
    assert "valid: the policy's disruption section takes it under policy drains" in out, out
    assert "cost against the kubelet defaults: drain + state reset (delete /var/lib/kubelet/cpu_manager_state)" in out
