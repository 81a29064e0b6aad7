"""A drain round asks a spent budget once (``rollout.drain.SpentBudgets``): the pods a budget
refused before ask one at a time per controller, and once one is refused the others are held on
its words, unasked, until the next round; a pod never refused is always asked."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor

from rollout.drain import Eviction, PodOnNode, SpentBudgets

WORDS = "The disruption budget web needs 2 healthy pods and has 2 currently"


def _pod(name: str, owner: str = "web") -> PodOnNode:
    return PodOnNode(namespace="shop", name=name, owner_kind="ReplicaSet", owner_name=owner)


class _Server:
    """Eviction answers in order, each request counted by pod."""

    def __init__(self, *outcomes: str) -> None:
        self.outcomes = list(outcomes)
        self.asked: list[str] = []
        self.lock = threading.Lock()

    def evict(self, pod: PodOnNode, delay: float = 0.0) -> Callable[[], Eviction]:
        def call() -> Eviction:
            time.sleep(delay)
            with self.lock:
                self.asked.append(pod.name)
                outcome = self.outcomes.pop(0) if self.outcomes else "refused"
            return Eviction(pod.ref, outcome, WORDS if outcome == "refused" else "")
        return call


def _refused_once(memo: SpentBudgets, *pods: PodOnNode) -> None:
    for pod in pods:
        memo.ask(pod, _Server("refused").evict(pod))
    memo.new_round()


def test_once_a_sibling_is_refused_a_pod_refused_before_is_held_unasked() -> None:
    memo, server = SpentBudgets(), _Server("refused")
    web1, web2 = _pod("web-1"), _pod("web-2")
    _refused_once(memo, web1, web2)
    assert memo.ask(web1, server.evict(web1)) == WORDS
    assert memo.ask(web2, server.evict(web2)) == WORDS
    assert server.asked == ["web-1"]


def test_siblings_asking_at_once_send_one_request() -> None:
    """A batch's nodes walk their pods in step: the siblings wait for the one answer."""
    memo, server = SpentBudgets(), _Server()
    pods = [_pod(f"web-{i}") for i in range(8)]
    _refused_once(memo, *pods)
    with ThreadPoolExecutor(8) as pool:
        said = list(pool.map(lambda p: memo.ask(p, server.evict(p, delay=0.05)), pods))
    assert said == [WORDS] * 8 and len(server.asked) == 1


def test_after_an_eviction_that_passed_the_next_sibling_asks() -> None:
    """A budget may allow more than one: only a refusal holds the siblings."""
    memo, server = SpentBudgets(), _Server("evicted", "evicted", "refused")
    pods = [_pod(f"web-{i}") for i in range(4)]
    _refused_once(memo, *pods)
    said = [memo.ask(p, server.evict(p)) for p in pods]
    assert said == ["", "", WORDS, WORDS] and server.asked == ["web-0", "web-1", "web-2"]


def test_a_pod_never_refused_is_always_asked() -> None:
    """A controller's pods need not all share one budget."""
    memo, server = SpentBudgets(), _Server("refused", "evicted")
    assert memo.ask(_pod("web-1"), server.evict(_pod("web-1"))) == WORDS
    assert memo.ask(_pod("web-2"), server.evict(_pod("web-2"))) == ""
    assert server.asked == ["web-1", "web-2"]


def test_the_next_round_asks_again_and_another_controller_is_not_held() -> None:
    memo, server = SpentBudgets(), _Server("refused", "evicted", "refused")
    web1, web2, db1 = _pod("web-1"), _pod("web-2"), _pod("db-1", owner="db")
    _refused_once(memo, web1, web2, db1)
    assert memo.ask(web1, server.evict(web1)) == WORDS
    assert memo.ask(db1, server.evict(db1)) == ""
    memo.new_round()
    assert memo.ask(web2, server.evict(web2)) == WORDS
    assert server.asked == ["web-1", "db-1", "web-2"]


def test_a_pod_no_controller_owns_is_always_asked() -> None:
    memo, server = SpentBudgets(), _Server()
    bare, other = PodOnNode(namespace="shop", name="bare"), PodOnNode(namespace="shop", name="other")
    _refused_once(memo, bare, other)
    memo.ask(other, server.evict(other))
    memo.ask(bare, server.evict(bare))
    assert server.asked == ["other", "bare"]
