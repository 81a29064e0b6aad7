"""The process's stop: set by the CLI's signal handler (Ctrl-C, SIGTERM), seen by every run of the
process, which then ends within a moment. A module of its own, without Prefect, so a rollout can
begin before Prefect is imported (``rollout.run.Run``, begun by ``rollout_cli.runs``)."""

from __future__ import annotations

import threading

STOP = threading.Event()
