"""Every `rollout` command line in the README's shell blocks names a command that exists and only
options that command takes (its values pass through the flag boundary when run)."""

from __future__ import annotations

import re
import shlex
from pathlib import Path
from typing import Any

import typer

from rollout_cli.main import app

README = Path(__file__).resolve().parents[2] / "README.md"
COMMANDS: dict[str, Any] = dict(typer.main.get_command(app).commands)  # type: ignore[attr-defined]
TOP_LEVEL = {"--version", "--install-completion", "--show-completion", "--help"}


def _command_lines() -> list[list[str]]:
    lines: list[list[str]] = []
    for block in re.findall(r"```sh\n(.*?)```", README.read_text(), flags=re.S):
        for line in block.splitlines():
            lexer = shlex.shlex(line, posix=True, punctuation_chars=True)
            lexer.whitespace_split, lexer.commenters = True, "#"
            words: list[str] = []
            for token in [*lexer, ";"]:
                if token in ("|", "||", "&&", ";", "&", ">", ">>", "<"):
                    if words and words[0] in ("rollout", ".venv/bin/rollout"):
                        lines.append(words[1:])
                    words = [] if token != ">" else ["redirected"]
                else:
                    words.append(token)
    return lines


def test_the_readme_has_commands_to_check() -> None:
    assert len(_command_lines()) >= 20


def test_every_readme_command_and_option_exists() -> None:
    wrong = []
    for words in _command_lines():
        if not words or words[0].startswith("-"):
            wrong += [w for w in words if w.startswith("--") and w.split("=")[0] not in TOP_LEVEL]
            continue
        command, name, rest = COMMANDS.get(words[0]), words[0], words[1:]
        while command is not None and hasattr(command, "commands") and rest and not rest[0].startswith("-"):
            command, name, rest = command.commands.get(rest[0]), f"{name} {rest[0]}", rest[1:]  # a group's command
        if command is None:
            wrong.append(" ".join(words))
            continue
        options = {o for p in command.params for o in (*p.opts, *p.secondary_opts)} | {"--help"}
        wrong += [f"{name} {w}" for w in rest if w.startswith("-") and w.split("=")[0] not in options]
    assert not wrong, f"the README names what the CLI does not take: {wrong}"


def test_the_readme_shows_every_command_and_every_fleet_command() -> None:
    """Before: `pause`, `resume`, `abort`, `promote` and `list` were missing from the README."""
    def named(words: list[str]) -> str:  # a group's subcommand by both words (`fleet start`, `prometheus sd`)
        group = COMMANDS.get(words[0])
        sub = words[1] if len(words) > 1 else ""
        return f"{words[0]} {sub}" if hasattr(group, "commands") and sub in group.commands else words[0]

    shown = {named(words) for words in _command_lines() if words}
    expected = {name for name, command in COMMANDS.items() if not hasattr(command, "commands")}
    expected |= {f"{name} {sub}" for name, command in COMMANDS.items() if hasattr(command, "commands")
                 for sub in command.commands}
    assert not expected - shown, f"commands the README's shell blocks never show: {sorted(expected - shown)}"
