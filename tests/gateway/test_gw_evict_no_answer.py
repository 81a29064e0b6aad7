"""An eviction is one attempt (``rollout.gateway._drains``): one the API server never answers is
``busy`` (the drain's next round lists the node's pods again), not an error that ends the run."""

from __future__ import annotations

import socket

from gw_helpers import make_gateway

from rollout.drain import PodOnNode


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_an_eviction_without_an_answer_is_busy_and_sent_once() -> None:
    gw = make_gateway(f"http://127.0.0.1:{_closed_port()}")
    pod = PodOnNode(namespace="shop", name="web-1", uid="u1", phase="Running", owner_kind="ReplicaSet",
                    mirror=False, local_storage=False, terminating=False)
    answer = gw.evict(pod, grace_period_s=None)
    assert answer.outcome == "busy" and "no answer" in answer.words, answer
