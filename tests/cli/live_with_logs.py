"""Run by tests/cli/test_live_screen_logs.py in a terminal: `rollout start`'s live display of a
rollout (``rollout_cli.runs.live_progress``) while Prefect's console logger writes a line every
0.1 s, as a run's flow does once Prefect shows it. Prefect's logging is set up again after the
display began (``--late``: Prefect's import, after `rollout start`'s run began) or only before it
(the demo). ``--outage``: the status cannot be read after the display's first two reads, as a run on a
deployment's worker reads it from an API server that stopped answering."""

from __future__ import annotations

import logging
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from test_table_widths import status_data  # noqa: E402

from rollout_cli.runs import live_progress  # noqa: E402

LINES = 15


def main(late: bool) -> None:
    from prefect.logging.configuration import setup_logging

    if not late:
        setup_logging()
    with live_progress(status_data):
        time.sleep(1.2)  # the display is up
        if late:
            setup_logging()
        log = logging.getLogger("prefect.live-test")
        for i in range(LINES):
            log.warning("batch %d: 0/2 node(s) done; waiting for node-2, worker-pool-b-3", i)
            time.sleep(0.1)
        time.sleep(1.2)


def outage() -> None:
    from rollout.errors import TransientGatewayError

    reads = []

    def read() -> dict:  # type: ignore[type-arg]
        reads.append(time.monotonic())
        if len(reads) > 2:  # the display reads once a second
            raise TransientGatewayError("get configmap kube-system/kubelet-rollout-journal-r1: no response from "
                                        "the API server: Connection refused")
        return status_data()

    deadline = time.monotonic() + 60
    with live_progress(read):
        while len(reads) < 6 and time.monotonic() < deadline:  # up, then three reads failed
            time.sleep(0.1)


if __name__ == "__main__":
    if "--outage" in sys.argv:
        outage()
    else:
        main(late="--late" in sys.argv)
