"""A command parses its policy once: the flag that names it refuses a bad one, and the run's request,
the preparation, the plan and the analysis take that one parsed policy (``rollout.run.request``).
Before: `rollout start` parsed it four to five times on its way (the flag, the offline check of the
config, the Prometheus check, the flow's parameter, the run's inputs twice)."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "flows"))
import scenario as sc  # noqa: E402

from rollout.policy import loading  # noqa: E402
from rollout_cli.main import app  # noqa: E402

runner = CliRunner()


def _forget(module: Any) -> None:
    """A fresh process's memory of parsed policies (each command runs as its own process)."""
    memo = getattr(module, "_parsed", None)
    if memo is not None:
        memo.cache_clear()


@pytest.fixture()
def parses(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The sources of every policy document parsed from now on."""
    seen: list[str] = []
    real = loading.parse_document

    def counted(text: Any, *, source: str, **kwargs: Any) -> Any:
        if kwargs.get("error") is loading.PolicyError:
            seen.append(source)
        return real(text, source=source, **kwargs)

    _forget(loading)
    monkeypatch.setattr(loading, "parse_document", counted)
    return seen


def test_each_command_parses_its_policy_once(tmp_path: Path, prefect_api: str, parses: list[str],
                                             monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PREFECT_API_URL", prefect_api)  # the run's flow run: the tests' Prefect API
    with sc.cluster(tmp_path, general=2) as c:
        gw = sc.gateway(c)
        cfg = tmp_path / "kubelet.yaml"
        cfg.write_text(sc.config_text(gw, maxPods=61))
        pol = tmp_path / "policy.yaml"
        pol.write_text(sc.policy(steps=[1, "100%"], maxUnavailable=2))
        kc = str(c.kubeconfig)
        for command in (["validate", "--config", str(cfg), "--policy", str(pol)],
                        ["plan", "--config", str(cfg), "--policy", str(pol), "--name", "once", "--kubeconfig", kc],
                        ["diff", "--config", str(cfg), "--policy", str(pol), "--kubeconfig", kc],
                        ["start", "--config", str(cfg), "--policy", str(pol), "--name", "once", "--kubeconfig", kc]):
            _forget(loading)
            parses.clear()
            result = runner.invoke(app, command)
            assert result.exit_code in (0, 1), (command[0], result.output[-2000:])  # diff: 1, it differs
            assert parses == [str(pol)], (command[0], parses)
