"""A run's log lines on the screen: a failed batch is its message, never a "NoneType: None".

Prefect's task engine logs a task that returns a Failed state as "Task run failed with state: ..."
with ``exc_info=True`` while no exception is being handled; Python's formatter then appends the
line "NoneType: None" (seen in `rollout demo`'s output after every failed batch).
"""

from __future__ import annotations

import io
import logging
from collections.abc import Iterator

import pytest

from flows.run_logs import ExpectedErrorsWithoutTraceback


@pytest.fixture
def run_logger() -> Iterator[tuple[logging.Logger, io.StringIO]]:
    """A logger with the run loggers' filter and a screen of its own (Prefect's handlers, which a
    run logger has once Prefect configured logging in this process, stay out of it)."""
    screen = io.StringIO()
    handler = logging.StreamHandler(screen)
    handler.setFormatter(logging.Formatter("%(levelname)s | %(name)s - %(message)s"))
    logger = logging.getLogger("tests.run_log_lines")
    logger.addFilter(ExpectedErrorsWithoutTraceback())
    logger.addHandler(handler)
    logger.propagate = False
    yield logger, screen
    logger.removeHandler(handler)


def test_a_record_logged_with_exc_info_outside_an_exception_is_its_message_alone(run_logger) -> None:
    logger, screen = run_logger
    logger.error("Task run failed with state: Failed(message='batch 3 failed')", exc_info=True)
    assert screen.getvalue() == ("ERROR | tests.run_log_lines - "
                                 "Task run failed with state: Failed(message='batch 3 failed')\n")


def test_a_real_crash_keeps_its_traceback(run_logger) -> None:
    logger, screen = run_logger
    try:
        {}["missing"]
    except KeyError:
        logger.error("Task run encountered an unexpected error", exc_info=True)
    assert "Traceback (most recent call last)" in screen.getvalue() and "KeyError: 'missing'" in screen.getvalue()
