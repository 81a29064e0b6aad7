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

from flows.outcome import RunOutcome, ended
from flows.run_logs import ENGINE_EXIT, ExpectedErrorsWithoutTraceback, LoggedEnd
from rollout.outcome import Outcome


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


@pytest.mark.parametrize("outcome", [o for o in Outcome if o.state_type in ("FAILED", "CANCELLED")], ids=str)
def test_a_worker_run_that_did_not_complete_ends_without_prefects_traceback(run_logger, outcome: Outcome) -> None:
    """A flow run on a worker ends in the engine's ``result()``, which raises what the state's data
    stands for and logs it with its traceback (a dict was Prefect's own TypeError, in CI's worker
    logs): the outcome's data is an exception Prefect raises as is, and that line is dropped."""
    import cloudpickle

    logger, screen = run_logger
    state = ended(outcome, "1 node(s) of batch 2 failed (legacy-1)", nodes=["legacy-1"])
    assert not isinstance(state, dict)
    try:
        state.result()  # what the engine does once the flow returned
    except LoggedEnd as error:
        raised: BaseException = error
        logger.error(ENGINE_EXIT, exc_info=True)
    assert isinstance(raised, LoggedEnd) and str(raised) == "1 node(s) of batch 2 failed (legacy-1)"
    assert screen.getvalue() == ""
    stored = cloudpickle.loads(cloudpickle.dumps(state.data))  # a worker's result, read by the fleet
    read = RunOutcome.from_state(state.model_copy(update={"data": stored}))
    assert (read.outcome, read.message) == (outcome, "1 node(s) of batch 2 failed (legacy-1)")
    assert read.details.get("nodes", ["legacy-1"]) == ["legacy-1"]  # a stopped run's are not read
