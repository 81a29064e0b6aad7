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

from flows.run_logs import RUN_LOGGERS, hide_expected_tracebacks


@pytest.fixture
def screen() -> Iterator[io.StringIO]:
    text = io.StringIO()
    handler = logging.StreamHandler(text)
    handler.setFormatter(logging.Formatter("%(levelname)s | %(name)s - %(message)s"))
    logger = logging.getLogger(RUN_LOGGERS[1])
    logger.addHandler(handler)
    try:
        yield text
    finally:
        logger.removeHandler(handler)


def test_a_record_logged_with_exc_info_outside_an_exception_is_its_message_alone(screen: io.StringIO) -> None:
    hide_expected_tracebacks()
    logging.getLogger(RUN_LOGGERS[1]).error("Task run failed with state: Failed(message='batch 3 failed')",
                                            exc_info=True)
    assert screen.getvalue() == "ERROR | prefect.task_runs - Task run failed with state: Failed(message='batch 3 failed')\n"


def test_a_real_crash_keeps_its_traceback(screen: io.StringIO) -> None:
    hide_expected_tracebacks()
    try:
        {}["missing"]
    except KeyError:
        logging.getLogger(RUN_LOGGERS[1]).error("Task run encountered an unexpected error", exc_info=True)
    assert "Traceback (most recent call last)" in screen.getvalue() and "KeyError: 'missing'" in screen.getvalue()
