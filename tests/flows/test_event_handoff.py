"""The node Events a run ends before sending are handed to a process of their own, which records
each one on kubesim with the time of what it reports, after the run (and its command) returned;
an Event sent twice (its first answer lost) is recorded once."""

from __future__ import annotations

import json
import time
from datetime import datetime, timezone

import scenario as sc

from flows.event_handoff import hand_off_to_process
from rollout.loop.node_events import PendingEvent

T0 = datetime(2026, 11, 23, 10, 0, tzinfo=timezone.utc)


def test_handed_off_events_are_recorded_once_dated_when_they_happened(tmp_path) -> None:
    with sc.cluster(tmp_path, general=2) as c:
        nodes = sc.workers(sc.gateway(c))
        events = [PendingEvent(n, "KubeletConfigAssigned", f"rollout r: assigned {n}", "Normal", T0) for n in nodes]
        assert sc.gateway(c).record_node_event(nodes[0], "KubeletConfigAssigned", "sent by the run", at=T0)
        who = hand_off_to_process(str(c.kubeconfig), None, qps=50, burst=50)(events)
        assert who.startswith("a background sender (pid ")
        deadline = time.monotonic() + 30
        while sc.node_events(c, "KubeletConfigAssigned") != {n: 1 for n in nodes}:
            assert time.monotonic() < deadline, "the handed-off Events were never recorded (or one twice)"
            time.sleep(0.2)
        time.sleep(1)  # the sender is done: nothing more arrives
        assert sc.node_events(c, "KubeletConfigAssigned") == {n: 1 for n in nodes}
        body = json.loads(sc.gateway(c).core.list_namespaced_event("default", _preload_content=False).data)
        stamps = {e["lastTimestamp"] for e in body["items"] if e.get("reason") == "KubeletConfigAssigned"}
        assert stamps == {"2026-11-23T10:00:00Z"}
