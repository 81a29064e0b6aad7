"""CLI contracts that need no cluster: help, usage errors and exit codes."""

from __future__ import annotations

import json

import pytest
import typer
from typer.testing import CliRunner

from rollout_cli.main import EXIT_INVALID, app

runner = CliRunner()


def test_every_command_is_listed_in_help() -> None:
    result = runner.invoke(app, ["--help"])
    assert result.exit_code == 0
    for command in ("validate", "export", "diff", "plan", "publish", "start", "status",
                    "approve", "reject", "rollback", "demo", "pause", "resume", "abort", "promote", "list", "retry"):
        assert command in result.output


def test_start_takes_one_config_source_not_both(tmp_path) -> None:
    """(Neither: `start --name` alone resumes from the journal; tests/cli/test_resume_by_name.py.)"""
    cfg = tmp_path / "k.yaml"
    cfg.write_text("apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\n")
    both = runner.invoke(app, ["start", "--name", "r", "--config", str(cfg), "--configmap", "kube-system/x"])
    assert both.exit_code == EXIT_INVALID


def test_unknown_output_format_is_a_usage_error() -> None:
    result = runner.invoke(app, ["status", "r", "-o", "xml"])
    assert result.exit_code == 2


def test_completion_offers_policy_and_rollout_names(monkeypatch: pytest.MonkeyPatch) -> None:
    """Before: completion offered neither rollout nor policy names."""
    from rollout.journal import JournalDocument
    from rollout_cli import base

    assert "canary" in base.complete_policies("ca")

    class Journals:
        def within(self, _: float) -> Journals:
            return self

        def list_journals(self) -> list[JournalDocument]:  # the heads as the gateway reads them
            return [JournalDocument(head={"meta": json.dumps({"rollout": name})}) for name in ("maxpods-80", "other")]

    monkeypatch.setattr(base, "open_cluster", lambda *_: Journals())
    ctx = typer.Context(typer.main.get_command(app))
    assert base.complete_rollouts(ctx, "max") == ["maxpods-80"]


def test_hints_say_what_to_do_about_what_went_wrong(tmp_path) -> None:
    """Before: a missing file was told to "fix the kubelet config", an unknown rollout to "re-observe"."""
    from rollout.errors import RolloutNotFoundError

    missing = runner.invoke(app, ["validate", "--config", str(tmp_path / "nope.yaml")], env={"KUBECONFIG": ""})
    assert missing.exit_code == EXIT_INVALID and "check the path" in missing.output
    assert "fix the kubelet config" not in missing.output
    assert "rollout list" in RolloutNotFoundError("no rollout named 'x'").advice


def test_the_kubectl_plugin_names_itself_as_people_type_it(monkeypatch: pytest.MonkeyPatch,
                                                           capsys: pytest.CaptureFixture[str]) -> None:
    """Before: the plugin's help said `kubectl-kubelet_rollout`."""
    from rollout_cli.main import cli

    monkeypatch.setattr("sys.argv", ["/usr/local/bin/kubectl-kubelet_rollout", "--help"])
    with pytest.raises(SystemExit):
        cli()
    shown = capsys.readouterr().out
    assert "kubectl kubelet-rollout" in shown and "kubectl-kubelet_rollout" not in shown


def test_a_policy_with_analysis_and_no_prometheus_is_refused_before_anything_starts(tmp_path, monkeypatch) -> None:
    """The shipped canary asks Prometheus: without one named, `start` says where to name it (exit 2)."""
    monkeypatch.delenv("KUBELET_ROLLOUT_PROMETHEUS_URL", raising=False)
    config = tmp_path / "kubelet.yaml"
    config.write_text("apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\nmaxPods: 80\n")
    result = runner.invoke(app, ["start", "--config", str(config), "--policy", "canary", "--name", "r1"],
                           env={"KUBECONFIG": ""})  # no cluster: the refusal comes before any call
    assert result.exit_code == EXIT_INVALID, result.output
    assert "no Prometheus to ask" in result.output and "--prometheus URL" in result.output
    assert "Traceback" not in result.output
