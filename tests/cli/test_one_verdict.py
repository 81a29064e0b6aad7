"""One verdict on a config (rollout.verdict.judge): `validate` judges under the default policy when
none is given and says so, and `diff`, `plan` and `publish` refuse what `start` would, before they
ask the cluster. In process, offline (the kubeconfig points at a port nothing listens on)."""

from __future__ import annotations

import json
import socket
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from rollout.kubeletconfig.runtime import WHOLE_CONFIG_RULES
from rollout.errors import NotFoundError
from rollout.model import ClusterFacts, ConfigRef, NodeObservation
from rollout.policy import DEFAULT_POLICY, load_policy_ref
from rollout.verdict import judge
from rollout_cli.contract import validator
from rollout_cli.main import EXIT_INVALID, app

runner = CliRunner()
HEAD = "apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\n"
DANGER = HEAD + "cgroupDriver: systemd\n"  # a DKC-dangerous change (from the default) no shipped policy allows


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture()
def files(tmp_path: Path) -> dict[str, str]:
    (tmp_path / "danger.yaml").write_text(DANGER)
    (tmp_path / "nowhere.kc").write_text(yaml.safe_dump({
        "apiVersion": "v1", "kind": "Config", "current-context": "x",
        "clusters": [{"name": "c", "cluster": {"server": f"https://127.0.0.1:{_closed_port()}"}}],
        "users": [{"name": "u", "user": {"token": "t"}}],
        "contexts": [{"name": "x", "context": {"cluster": "c", "user": "u"}}]}))
    return {"danger": str(tmp_path / "danger.yaml"), "kc": str(tmp_path / "nowhere.kc")}


def test_validate_judges_under_the_default_policy_and_says_which(files: dict[str, str]) -> None:
    """Before: `validate` said `valid` (exit 0) for a config `start` refuses."""
    result = runner.invoke(app, ["validate", "--config", files["danger"], "-o", "json"], env={"KUBECONFIG": ""})
    assert result.exit_code == EXIT_INVALID, result.output
    data = json.loads(result.stdout)
    validator("validate").validate(data)
    assert data["valid"] is False and data["policy"] == DEFAULT_POLICY and data["default_policy"] is True
    assert any("cgroupDriver" in r for r in data["refusals"])


class Cluster:
    """One DKC node running the kubelet defaults (cgroupfs); records what is published."""

    def __init__(self) -> None:
        self.published: list[object] = []

    def list_nodes(self, selector: str | None = None) -> tuple[list[NodeObservation], str]:
        return [NodeObservation(name="n1", uid="u1", has_config_status=True, ready="True")], "1"

    def configz(self, node: str) -> dict[str, object]:
        return {"kubeletconfig": {"cgroupDriver": "cgroupfs", "maxPods": 110}}

    def impatient(self) -> Cluster:
        return self

    def resolve(self, ref: ConfigRef) -> ConfigRef:
        raise NotFoundError("not published")

    def probe_cluster(self, nodes: object = None) -> ClusterFacts:
        return ClusterFacts(server_version="v1.23.17")  # a real cluster: no kubesim marker

    def publish_configmap(self, manifest: object) -> object:
        self.published.append(manifest)
        raise AssertionError("a refused config was published")

    def __getattr__(self, name: str) -> object:
        raise AssertionError(f"asked the cluster for {name} after the verdict refused the config")


@pytest.mark.parametrize("command", ["diff", "plan", "publish"])
def test_every_command_refuses_what_start_refuses(command: str, files: dict[str, str],
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    """Before: `publish` published a config `start` refuses (and `diff` hid the refusal)."""
    cluster = Cluster()
    monkeypatch.setattr("rollout_cli.main.open_cluster", lambda *a, **k: cluster)
    result = runner.invoke(app, [command, "--config", files["danger"], "--kubeconfig", files["kc"]])
    assert result.exit_code == EXIT_INVALID, result.output
    assert "cgroupDriver" in result.output and "Traceback" not in result.output
    assert not cluster.published


def test_a_rehearsal_is_refused_on_a_cluster_that_is_not_kubesim(files: dict[str, str],
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    """Before: the policies' soaks ran in wall-clock time whatever kubesim's time scale;
    `--time-scale` divides them, and only against kubesim."""
    monkeypatch.setattr("rollout_cli.main.open_cluster", lambda *a, **k: Cluster())
    result = runner.invoke(app, ["plan", "-p", "cautious", "--time-scale", "20", "--kubeconfig", files["kc"]])
    assert result.exit_code == EXIT_INVALID, result.output
    assert "--time-scale" in result.output and "not kubesim" in result.output


def test_a_rehearsal_divides_every_duration_a_kubelet_measures() -> None:
    cautious = load_policy_ref("cautious")
    rehearsal = cautious.rehearsal(20)
    assert rehearsal.done.soak == cautious.done.soak / 20
    assert rehearsal.approval.timeout == cautious.approval.timeout / 20
    assert rehearsal.progress_deadline == cautious.progress_deadline / 20
    # the analysis measures the workloads, which run on the kubelets' clock (a rehearsal of the
    # shipped canary waited three minutes per batch for its checks before this)
    assert cautious.analysis.checks
    for check, scaled in zip(cautious.analysis.checks, rehearsal.analysis.checks):
        assert scaled.interval == check.interval / 20 and scaled.window == check.window / 20
    assert rehearsal.analysis.prometheus.outage_tolerance == cautious.analysis.prometheus.outage_tolerance


def _agent_node(name: str) -> NodeObservation:
    return NodeObservation(name=name, uid=f"uid-{name}", backend="agent", ready="True")


def test_a_drop_in_gets_no_warnings_about_the_fields_it_omits() -> None:
    """Before: `maxPods: 150` alone drew six warnings about omitted fields that `start` does not give."""
    policy = load_policy_ref(None)
    whole = judge(HEAD + "maxPods: 150\n", policy=policy)
    assert whole.warnings  # as a whole config, the omitted fields take the kubelet defaults
    dropin = judge(HEAD + "maxPods: 150\n", policy=policy, candidates=[_agent_node("n1")], samples=[])
    assert dropin.dropin and dropin.valid
    assert not any(rule in w for w in dropin.warnings for rule in WHOLE_CONFIG_RULES), dropin.warnings


GOOD = HEAD + "maxPods: 80\n"


@pytest.fixture()
def good(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    """A config start takes; no Prometheus named anywhere."""
    monkeypatch.delenv("KUBELET_ROLLOUT_PROMETHEUS_URL", raising=False)
    monkeypatch.delenv("KUBELET_ROLLOUT_TIME_SCALE", raising=False)
    (tmp_path / "good.yaml").write_text(GOOD)
    return str(tmp_path / "good.yaml")


def test_validate_refuses_what_start_refuses_for_want_of_a_prometheus_and_names_the_flag(good: str) -> None:
    """Before: `validate` said "valid: start would take it" (exit 0) under the shipped canary with no
    Prometheus named, where start refused (exit 2), and the hint said to fix the policy file."""
    said = runner.invoke(app, ["validate", "--config", good], env={"KUBECONFIG": ""})
    assert said.exit_code == EXIT_INVALID, said.output
    assert "start would take it" not in said.output and "the config is valid" in said.output
    assert "--prometheus: policy canary has analysis checks but no Prometheus to ask" in said.output
    assert "export KUBELET_ROLLOUT_PROMETHEUS_URL=URL" in said.output and "rollout prometheus" in said.output
    assert "fix the policy file" not in said.output
    data = json.loads(runner.invoke(app, ["validate", "--config", good, "-o", "json"], env={"KUBECONFIG": ""}).stdout)
    validator("validate").validate(data)
    assert data["valid"] is False and data["message"].startswith("--prometheus: ") and data["problems"]
    assert runner.invoke(app, ["validate", "--policy", "canary"], env={"KUBECONFIG": ""}).exit_code == EXIT_INVALID
    fast = runner.invoke(app, ["validate", "--config", good, "-p", "fast"], env={"KUBECONFIG": ""})
    assert fast.exit_code == 0 and "start would take it" in fast.output, fast.output


def test_validate_asks_the_prometheus_named_unless_offline(good: str) -> None:
    nowhere = f"http://127.0.0.1:{_closed_port()}"
    asked = runner.invoke(app, ["validate", "--config", good, "--prometheus", nowhere], env={"KUBECONFIG": ""})
    assert asked.exit_code == EXIT_INVALID and "out of reach" in asked.output, asked.output
    offline = runner.invoke(app, ["validate", "--config", good, "--prometheus", nowhere, "--offline"],
                            env={"KUBECONFIG": ""})
    assert offline.exit_code == 0 and "was not asked (--offline)" in offline.output, offline.output


def test_start_refuses_with_the_same_words_before_anything_starts(good: str) -> None:
    said = runner.invoke(app, ["start", "--config", good, "--name", "r1"], env={"KUBECONFIG": ""})
    assert said.exit_code == EXIT_INVALID, said.output
    assert "--prometheus: policy canary has analysis checks but no Prometheus to ask" in said.output
    assert "fix the policy file" not in said.output and "KUBELET_ROLLOUT_PROMETHEUS_URL=URL" in said.output


def test_plan_never_says_start_would_take_what_start_refuses(good: str, files: dict[str, str],
                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    """Before: `plan` ended "start would take it under policy canary" with no Prometheus named."""
    monkeypatch.setattr("rollout_cli.main.open_cluster", lambda *a, **k: Cluster())
    shown = runner.invoke(app, ["plan", "--config", good, "--kubeconfig", files["kc"]], env={"COLUMNS": "300"})
    assert shown.exit_code == 0, shown.output  # the plan's exit code is the config's
    assert "start would take it" not in shown.output, shown.output
    assert "start would refuse to run it under policy canary" in shown.output
    assert "no Prometheus to ask" in shown.output and "KUBELET_ROLLOUT_PROMETHEUS_URL=URL" in shown.output
    data = json.loads(runner.invoke(app, ["plan", "--config", good, "--kubeconfig", files["kc"], "-o", "json"]).stdout)
    validator("plan").validate(data)
    assert data["analysis"]["checks"] == ["evictions", "allocatable-pods-vs-control", "allocatable-memory-vs-control",
                                          "image-pull-backoffs-vs-control", "pod-start-vs-control",
                                          "image-pull-wait-vs-control", "pleg-relist-vs-control", "image-removals-vs-control",
                                          "log-reopens-vs-control", "container-restarts"]
    assert data["analysis"]["prometheus"] is None and "no Prometheus to ask" in data["analysis"]["problems"][0]
    fast = json.loads(runner.invoke(app, ["plan", "--config", good, "-p", "fast", "--kubeconfig", files["kc"],
                                          "-o", "json"]).stdout)
    assert fast["analysis"] == {"checks": [], "prometheus": None, "problems": []}
