"""The live display of a run and Prefect's log lines in one terminal: each log line is printed
above the display, whole, and the display stays one frame. Before: written straight to the
terminal, a line landed inside the display's frame (``lastKnownGood local06:42:35.538 | INFO ...``
glued to a node's record) and old copies of the frame were left on the screen (`rollout start`
and the demo at 80x30, once Prefect showed the run)."""

from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))
from live_with_logs import LINES  # noqa: E402
from terminal import Terminal  # noqa: E402

pytestmark = pytest.mark.slow  # a terminal each, and Prefect's import

HERE = Path(__file__).resolve().parent
LOG_LINE = re.compile(r"\d\d:\d\d:\d\d\.\d{3} \| WARNING \| prefect\.live-test - batch (\d+)")
GLUED = re.compile(r"\S\d\d:\d\d:\d\d\.\d{3} \| ")  # a log line's start behind other text on its line
HEADER = re.compile(r"rollout maxpods-150-eu-west: running")


@pytest.mark.parametrize("when", ["before", "late"])
def test_prefect_log_lines_print_above_the_live_display_never_into_it(when: str) -> None:
    argv = [sys.executable, str(HERE / "live_with_logs.py"), *(["--late"] if when == "late" else [])]
    with Terminal(argv, cwd=HERE.parents[1], cols=80, rows=30) as term:
        ended = term.wait_exit(120)
        assert ended is not None and ended.code == 0, term.transcript()[-3000:]
        frames = [screen for _, screen in term.frames]
        transcript = term.transcript()
    assert {int(n) for n in LOG_LINE.findall(transcript)} == set(range(LINES)), transcript[-3000:]
    for screen in frames:
        assert not GLUED.search(screen), f"a log line inside the display:\n{screen}"
        assert len(HEADER.findall(screen)) <= 1, f"the display shown twice:\n{screen}"


def test_a_live_display_that_cannot_read_the_status_says_so_under_the_last_one() -> None:
    """Before: a failed read left the last frame up, its elapsed time frozen, without a word (a
    run on a deployment's worker followed through an API outage)."""
    argv = [sys.executable, str(HERE / "live_with_logs.py"), "--outage"]
    with Terminal(argv, cwd=HERE.parents[1], cols=80, rows=30) as term:
        term.wait_for(HEADER.pattern, 60)
        term.wait_for(lambda screen: "no status read since: get configmap" in " ".join(screen.split()), 30)
        assert HEADER.search(term.screen()), term.screen()  # the last status stays up, under the line
        ended = term.wait_exit(60)
        assert ended is not None and ended.code == 0, term.transcript()[-3000:]
