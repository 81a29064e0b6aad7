"""The one traceback filter: a run's log lines show our errors as their message, never a traceback.

Our errors are outcomes, not crashes (``flows.outcome``). Prefect's task engine still logs a
refusing task's exception with ``exc_info`` ("Task run failed with exception: ConfigError(...)")
and ends the task in a state whose message is "Task run encountered an exception ConfigError:
..."; a task cannot fail otherwise without a worse log line. So the run loggers rewrite such a
record on its way to every handler (the terminal and the Prefect API alike): the error's message,
without traceback or class name. A record logged "with its exception" where there is none loses
the "NoneType: None" Python would print for it.

A flow run on a worker ends in the engine's ``result()``: for a run that did not complete, Prefect
raises the exception its state's data stands for and logs "Engine execution exited with unexpected
exception" with its traceback. Our runs end in a named state (``flows.outcome.ended``) whose data
is a :class:`LoggedEnd`; that line is dropped, as the flow logged its outcome in words already.

Installed where a process starts: the CLI's ``main`` and the start of every flow run (a worker's
process imports the flow, then runs it). Not at import: importing a module changes no logging.
This module imports no Prefect, so installing it costs the CLI nothing.
"""

from __future__ import annotations

import contextlib
import logging
import re
from collections.abc import Iterator
from typing import Any

from rollout.errors import RolloutError

# how Prefect's engine logs the exception of a flow run on a worker that did not complete
ENGINE_EXIT = "Engine execution exited with unexpected exception"
# how Prefect ends the log of a task run a person stopped (a batch of a run stopped by Ctrl-C)
STOPPED_TASK = "Finished in state Cancelled("
# Prefect's loggers of a flow run and its task runs; their records reach the console and the API
RUN_LOGGERS = ("prefect.flow_runs", "prefect.task_runs")


class LoggedEnd(Exception):
    """The data of a run's named end other than Completed: the outcome's dict (``data``). Prefect
    turns a failed or cancelled state's data into the exception its engine raises, and a dict
    cannot be one (a worker's log showed Prefect's own TypeError and its traceback); this can."""

    def __init__(self, data: dict[str, Any]) -> None:
        super().__init__(data)  # the one argument, so a pickled state (a worker's result) reads back
        self.data = data

    def __str__(self) -> str:
        return str(self.data.get("message", ""))


class ExpectedErrorsWithoutTraceback(logging.Filter):
    """A record about one of our errors becomes its message: no traceback, no class name."""

    def filter(self, record: logging.LogRecord) -> bool:
        if record.exc_info == (None, None, None):
            # logged with exc_info=True outside an exception (Prefect's "Task run failed with
            # state: ..."): Python would append the line "NoneType: None"
            record.exc_info = None
        error = record.exc_info[1] if record.exc_info else None
        if isinstance(error, LoggedEnd):
            return False  # the engine's line about a run that ended as the flow already logged
        if isinstance(error, RolloutError):
            record.exc_info, record.exc_text = None, None
            record.msg, record.args = str(error), ()
        elif isinstance(record.msg, str) and "encountered an exception" in record.msg:
            record.msg = _without_error_class(record.getMessage())
            record.args = ()
        elif record.levelno == logging.ERROR and record.getMessage().startswith(STOPPED_TASK):
            record.levelno, record.levelname = logging.WARNING, "WARNING"  # a stop is no error
        return True


_FILTER = ExpectedErrorsWithoutTraceback()


def hide_expected_tracebacks() -> None:
    """Install the filter on the run loggers (again is a no-op: a logger holds a filter once)."""
    for name in RUN_LOGGERS:
        logging.getLogger(name).addFilter(_FILTER)


def _error_names(cls: type[RolloutError] = RolloutError) -> set[str]:
    names = {cls.__name__}
    for sub in cls.__subclasses__():
        names |= _error_names(sub)
    return names


def _without_error_class(message: str) -> str:
    pattern = r"Task run encountered an exception (?:%s): " % "|".join(sorted(_error_names()))
    return re.sub(pattern, "", message)


class ToFlowRun(logging.Filter):
    """A record logged outside any Prefect run (the run's own threads: the loop, its writers, its
    lock) is sent to the log of the flow run showing the run, as the loop's lines were when it ran
    inside the flow (they reach the API when ``PREFECT_LOGGING_EXTRA_LOGGERS`` names their logger)."""

    def __init__(self, flow_run_id: str) -> None:
        super().__init__()
        self.flow_run_id = flow_run_id

    def filter(self, record: logging.LogRecord) -> bool:
        if getattr(record, "flow_run_id", None) is None and not _in_a_run():
            record.flow_run_id = self.flow_run_id
        return True


def _in_a_run() -> bool:
    from prefect.context import FlowRunContext, TaskRunContext

    return FlowRunContext.get() is not None or TaskRunContext.get() is not None


@contextlib.contextmanager
def sent_to_flow_run(flow_run_id: str) -> Iterator[None]:
    """For the block, records of no run reach the log of flow run ``flow_run_id`` in Prefect."""
    from prefect.logging.handlers import APILogHandler

    loggers = [logging.getLogger(), *(lg for lg in logging.Logger.manager.loggerDict.values()
                                      if isinstance(lg, logging.Logger))]
    handlers = {id(h): h for lg in loggers for h in lg.handlers if isinstance(h, APILogHandler)}.values()
    stamp = ToFlowRun(flow_run_id)
    for handler in handlers:
        handler.addFilter(stamp)
    try:
        yield
    finally:
        for handler in handlers:
            handler.removeFilter(stamp)
