"""The command blocks of a markdown doc, run as a reader runs them: pasted into one shell, line by
line, from a scratch directory (issue 19: a doc's commands must work as written; issue 36: the
rehearsals as the docs give them).

What counts as a command: every line of a fenced ``sh`` block, and in a ``console`` block the
lines after a ``$ `` prompt (the others are output the reader sees). A trailing backslash
continues a command on the next line; the lines of a here-document (``<<'EOF'`` ... ``EOF``)
belong to the command that opens it; comment lines are not commands. A command must exit 0,
unless its own comment says otherwise (``# ... (exit 2: ...)``): then it must exit that.

What a reader would do differently is set the way a reader sets it (a ``HOME``, the environment),
never by editing the lines. The commands run in one ``bash`` (``pipefail``), in a session of
their own; whatever they leave running (a ``kubesim up ... &``) is stopped when the block ends.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
_FENCE = re.compile(r"^(\s*)```(\w*)\s*$")
_EXPECTED_EXIT = re.compile(r"#.*\(exit (\d+):")
_HEREDOC = re.compile(r"<<-?\s*(['\"]?)(\w+)\1")
COMMAND_BLOCKS = ("sh", "console")


@dataclass(frozen=True)
class Command:
    """One command as the doc gives it (continuation and here-document lines included)."""

    text: str
    line: int  # where it starts in the doc, 1-based
    expected_exit: int = 0

    @property
    def first_line(self) -> str:
        return self.text.splitlines()[0]


def _heading_level(line: str) -> int:
    match = re.match(r"^(#+)\s", line)
    return len(match.group(1)) if match else 0


def _commands(lines: list[tuple[int, str]], prompt: bool) -> list[Command]:
    """The commands of one block's lines (numbered as in the doc)."""
    commands: list[Command] = []
    i = 0
    while i < len(lines):
        number, line = lines[i]
        i += 1
        if prompt:
            if not line.startswith("$ "):
                continue  # output
            line = line[2:]
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        parts = [line]
        while parts[-1].rstrip().endswith("\\") and i < len(lines):
            parts.append(lines[i][1])
            i += 1
        heredoc = _HEREDOC.search(parts[-1])
        if heredoc:
            while i < len(lines):
                parts.append(lines[i][1])
                i += 1
                if parts[-1].strip() == heredoc.group(2):
                    break
        said = _EXPECTED_EXIT.search(parts[0])
        commands.append(Command("\n".join(parts), number, int(said.group(1)) if said else 0))
    return commands


def command_blocks(doc: Path, heading: str) -> list[list[Command]]:
    """The command blocks under ``heading`` (a whole line, ``## On kubesim``), up to the next
    heading of the same or a higher level; one list of commands per fenced block."""
    level = _heading_level(heading)
    blocks: list[list[Command]] = []
    inside, kind = False, ""
    fence: str | None = None  # the open fence's indentation
    body: list[tuple[int, str]] = []
    for number, line in enumerate(doc.read_text().splitlines(), start=1):
        match = _FENCE.match(line)
        if fence is not None:
            if match and not match.group(2):
                if inside and kind in COMMAND_BLOCKS:
                    blocks.append(_commands(body, prompt=kind == "console"))
                fence, body = None, []
            else:
                body.append((number, line[len(fence):] if line.startswith(fence) else line.lstrip()))
            continue
        if match:
            fence, kind = match.group(1), match.group(2)
        elif _heading_level(line):
            if line.strip() == heading.strip():
                inside = True
            elif _heading_level(line) <= level:
                inside = False
    return blocks


def reader_env(tmp_path: Path, **extra: str) -> tuple[Path, dict[str, str]]:
    """A reader's scratch directory (the project's venv reachable as ``.venv``, as in a clone)
    and environment: their own ``HOME`` (with ``~/.kube``) and Prefect home, nothing of ours
    (``KUBECONFIG``, ``KUBELET_ROLLOUT_*``, ``PREFECT_*``) inherited; ``extra`` on top."""
    work = tmp_path / "work"
    work.mkdir()
    (work / ".venv").symlink_to(ROOT / ".venv")
    home = tmp_path / "home"
    (home / ".kube").mkdir(parents=True)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("KUBECONFIG", "KUBELET_ROLLOUT_", "PREFECT_"))}
    env.update(HOME=str(home), PREFECT_HOME=str(tmp_path / "prefect"), COLUMNS="200", **extra)
    return work, env


def run_commands(commands: list[Command], *, cwd: Path, env: dict[str, str], timeout: float = 600,
                 source: str = "the doc") -> str:
    """Run ``commands`` in one bash session; stop at the first that does not exit as expected,
    naming its line of ``source``. Returns what they printed on stdout; the trace of every
    command and its stderr are kept in ``cwd/doc-commands.log``. Whatever they left running is
    stopped (SIGTERM, then SIGKILL after 20 s) before this returns."""
    script = ["set -o pipefail", "set -x"]
    for command in commands:
        quoted = command.first_line.replace("'", "'\"'\"'")
        script.append(f"{command.text}\nrc=$?; if [ $rc -ne {command.expected_exit} ]; then "
                      f"echo \"exit $rc\" 'from {source}, line {command.line}: {quoted}' >&2; exit 99; fi")
    log, out = cwd / "doc-commands.log", cwd / "doc-commands.out"
    with log.open("w") as err_sink, out.open("w") as out_sink:
        # files, not pipes: a process left running in the background keeps a pipe open
        shell = subprocess.Popen(["bash", "-c", "\n".join(script)], cwd=cwd, env=env, stdout=out_sink,
                                 stderr=err_sink, stdin=subprocess.DEVNULL, start_new_session=True)
        try:
            code: int | None = shell.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            code = None
        finally:
            stop_session(shell)
    stdout = out.read_text()
    assert code == 0, (f"{f'timed out after {timeout:g}s' if code is None else f'exit {code}'}\n"
                       f"{stdout[-4000:]}\n{log.read_text()[-6000:]}")
    return stdout


def stop_session(leader: subprocess.Popen[bytes], grace: float = 20.0) -> None:
    """SIGTERM to every process of the session ``leader`` started, SIGKILL to what is left after
    ``grace``; the leader is reaped."""
    for sig, wait in ((signal.SIGTERM, grace), (signal.SIGKILL, 5.0)):
        try:
            os.killpg(leader.pid, sig)
        except ProcessLookupError:
            break
        deadline = time.monotonic() + wait
        while time.monotonic() < deadline:
            leader.poll()  # a leader that ended is reaped, or it would count as still there
            try:
                os.killpg(leader.pid, 0)
            except ProcessLookupError:
                break
            time.sleep(0.2)
        else:
            continue
        break
    leader.wait()
