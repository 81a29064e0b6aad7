"""`--help` keeps every name whole at any width: options (both forms of a flag), their metavars,
environment variables and commands; descriptions wrap between words, and a flag shows no type.
Checked at the widths people have (a split pane is 40-60 columns) and piped, in process for every
command and through a real terminal for `start`, the command people read most."""

from __future__ import annotations

import re
import sys
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

sys.path.insert(0, str(Path(__file__).resolve().parent))
from cli_commands import COMMANDS  # noqa: E402
from terminal import in_terminal, rollout_command  # noqa: E402

from rollout_cli.main import app  # noqa: E402

WIDTHS = (40, 60, 80, 120, 200)
runner = CliRunner()


def names_of(command: Any) -> list[str]:
    """Every name a person types or sets: options (both forms of a flag) and environment variables."""
    found: list[str] = []
    for param in command.params:
        found += [*param.opts, *param.secondary_opts] if param.param_type_name == "option" else []
        envvar = getattr(param, "envvar", None)
        found += [envvar] if isinstance(envvar, str) else list(envvar or [])
    return found


def whole_in(screen: str, name: str) -> bool:
    """``name`` on one line, not part of a longer word (``--config`` is not ``--configmap``)."""
    return any(re.search(rf"(?<![\w-]){re.escape(name)}(?![\w-])", line) for line in screen.splitlines())


@pytest.mark.parametrize("columns", [*WIDTHS, None], ids=[*map(str, WIDTHS), "piped"])
@pytest.mark.parametrize("name", sorted(COMMANDS))
def test_help_keeps_every_name_whole(name: str, columns: int | None) -> None:
    """Before: at 80 columns (and piped) `start --help` showed `--prometheus-tok…` and
    `KUBELET_ROLLOUT_P…`, and `<bool>` beside every flag."""
    env = {"COLUMNS": str(columns)} if columns else {}
    result = runner.invoke(app, [*name.split(), "--help"], env=env)
    assert result.exit_code == 0, result.output
    assert "…" not in result.output and "<bool>" not in result.output, result.output
    for typed in names_of(COMMANDS[name]):
        assert whole_in(result.output, typed), f"{typed} cut in `rollout {name} --help` at {columns}:\n{result.output}"


@pytest.mark.parametrize("group", [[], ["fleet"]], ids=["rollout", "fleet"])
def test_a_group_help_lists_every_command_whole(group: list[str]) -> None:
    result = runner.invoke(app, [*group, "--help"], env={"COLUMNS": "40"})
    listed = {name.split()[-1] for name in COMMANDS if name.split()[:-1] == group}
    assert result.exit_code == 0 and all(whole_in(result.output, n) for n in listed), result.output
    assert "…" not in result.output


@pytest.mark.parametrize("columns", [60, 80])
def test_help_in_a_terminal_keeps_every_name_whole(columns: int) -> None:
    code, screen = in_terminal(rollout_command("start", "--help"), columns=columns)
    assert code == 0, screen
    for typed in names_of(COMMANDS["start"]):
        assert whole_in(screen, typed), f"{typed} cut at {columns} columns:\n{screen}"
    assert "…" not in screen and "<bool>" not in screen
