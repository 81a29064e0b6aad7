"""Node Events a run did not send before it ended, recorded by a process of their own.

A rollout is over when its last node is done, and the command returns then. The node Events of
its last batch may still be queued (an API server slow to take them): rather than wait for them,
or drop them, the engine hands them here (``rollout.loop.engine.Engine``'s ``hand_off``), and a
detached process (``python -m flows.event_handoff``) records each one, dated when what it reports
happened, within the run's rate ceiling, then exits. It outlives the command by as long as the
API server takes them (a few seconds), never holds the rollout's lock, and gives up on an Event
as the run would have (a few quick tries).
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime

from rollout.loop.node_events import PendingEvent

# requests in flight at once: alone in its process, the sender is bounded by the rate ceiling and
# the server's answers (the adaptive rate), not by a share kept for the run's writes
HANDOFF_SENDERS = 32


def hand_off_to_process(kubeconfig: str | None, context: str | None, *, qps: float,
                        burst: int) -> Callable[[Sequence[PendingEvent]], str]:
    """The engine's ``hand_off`` for a run on this cluster: a detached sender per call."""

    def hand_off(events: Sequence[PendingEvent]) -> str:
        order = {"kubeconfig": kubeconfig, "context": context, "qps": qps, "burst": burst,
                 "events": [{"node": e.node, "reason": e.reason, "message": e.message, "type": e.type,
                             "at": e.at.isoformat()} for e in events]}
        # its stdin a file, not a pipe: the order (100 KiB for 500 Events) outgrows a pipe's
        # buffer, and writing it would wait for the sender to boot and read (0.3 s of our end)
        with tempfile.TemporaryFile() as orders:
            orders.write(json.dumps(order).encode())
            orders.seek(0)
            sender = subprocess.Popen([sys.executable, "-m", "flows.event_handoff"], stdin=orders,
                                      stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
        return f"a background sender (pid {sender.pid})"

    return hand_off


def main() -> None:
    """Record the Events given on stdin (see :func:`hand_off_to_process`), then exit."""
    from rollout.gateway import open_gateway

    order = json.loads(sys.stdin.read())
    gateway = open_gateway(order["kubeconfig"], order["context"])
    gateway.limit_rate(order["qps"], order["burst"])

    def record(event: dict[str, str]) -> None:
        gateway.record_node_event(event["node"], event["reason"], event["message"], event["type"],
                                  at=datetime.fromisoformat(event["at"]))

    try:
        with ThreadPoolExecutor(max_workers=HANDOFF_SENDERS) as senders:
            list(senders.map(record, order["events"]))
    finally:
        gateway.close()


if __name__ == "__main__":
    main()
