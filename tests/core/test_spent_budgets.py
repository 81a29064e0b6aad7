"""A drain round asks a spent budget once (``rollout.drain.SpentBudgets``): a pod its budget
refused before is held, without a request, in a round where a pod of its controller was refused;
a pod never refused is always asked, and every pod is asked again in the next round."""

from __future__ import annotations

from rollout.drain import Eviction, PodOnNode, SpentBudgets

REFUSED = Eviction("shop/web-1", "refused", "The disruption budget web needs 2 healthy pods and has 2 currently")


def _pod(name: str, owner: str = "web") -> PodOnNode:
    return PodOnNode(namespace="shop", name=name, owner_kind="ReplicaSet", owner_name=owner)


def test_a_pod_refused_before_is_not_asked_again_once_its_controller_is_refused_this_round() -> None:
    memo = SpentBudgets()
    web1, web2 = _pod("web-1"), _pod("web-2")
    memo.answered(web2, REFUSED)  # an earlier round
    memo.new_round()
    assert memo.spent(web2) == ""  # nobody of web refused yet this round: ask
    memo.answered(web1, REFUSED)
    assert memo.spent(web2) == REFUSED.words


def test_a_pod_never_refused_is_always_asked() -> None:
    """A controller's pods need not all share a budget: one the budget never refused is asked."""
    memo = SpentBudgets()
    memo.answered(_pod("web-1"), REFUSED)
    assert memo.spent(_pod("web-2")) == ""


def test_another_controllers_refusal_spends_nothing_of_this_one() -> None:
    memo = SpentBudgets()
    web2, db1 = _pod("web-2"), _pod("db-1", owner="db")
    memo.answered(web2, REFUSED)
    memo.new_round()
    memo.answered(db1, Eviction(db1.ref, "refused", "The disruption budget db ..."))
    assert memo.spent(web2) == ""


def test_the_next_round_asks_again_and_an_eviction_forgets_the_refusal() -> None:
    memo = SpentBudgets()
    web1, web2 = _pod("web-1"), _pod("web-2")
    memo.answered(web2, REFUSED)
    memo.answered(web1, REFUSED)
    assert memo.spent(web2) == REFUSED.words
    memo.new_round()
    assert memo.spent(web2) == ""
    memo.answered(web2, Eviction(web2.ref, "evicted"))
    memo.answered(web1, REFUSED)
    assert memo.spent(web2) == ""  # evicted since: never held by an old refusal


def test_a_pod_no_controller_owns_is_never_held_by_a_refusal_of_another() -> None:
    memo = SpentBudgets()
    bare = PodOnNode(namespace="shop", name="bare")
    memo.answered(bare, REFUSED)
    memo.new_round()
    memo.answered(PodOnNode(namespace="shop", name="other"), REFUSED)
    assert memo.spent(bare) == ""
