"""CLI contracts that need no cluster: help, usage errors and exit codes."""

from __future__ import annotations

from typer.testing import CliRunner

from rollout_cli.main import EXIT_INVALID, app

runner = CliRunner()


def test_every_command_is_listed_in_help() -> None:
    result = runner.invoke(app, ["--help"])
    assert result.exit_code == 0
    for command in ("validate", "export", "diff", "plan", "publish", "start", "status",
                    "approve", "reject", "rollback", "demo"):
        assert command in result.output


def test_start_needs_exactly_one_config_source(tmp_path) -> None:
    cfg = tmp_path / "k.yaml"
    cfg.write_text("apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\n")
    neither = runner.invoke(app, ["start", "--name", "r"])
    both = runner.invoke(app, ["start", "--name", "r", "--config", str(cfg), "--configmap", "kube-system/x"])
    assert neither.exit_code == EXIT_INVALID
    assert both.exit_code == EXIT_INVALID


def test_unknown_output_format_is_a_usage_error() -> None:
    result = runner.invoke(app, ["status", "r", "-o", "xml"])
    assert result.exit_code == 2
