"""Which pods a drain evicts, and what holds it back (pure): kubectl drain's rules, as values.

A node is drained when no pod that counts is left on it, terminating ones included (their
containers still run until the kubelet confirms). Like ``kubectl drain``: mirror pods (static
pods, the kubelet's own) never count and are never evicted; DaemonSet pods are left alone unless
``evictDaemonSetPods`` (their controller puts them straight back: kubectl's ``--ignore-daemonsets``
is the default here); a pod with an ``emptyDir`` (its data is lost) and a pod no controller owns
(nothing re-creates it) hold the drain unless the policy says to evict them (kubectl's
``--delete-emptydir-data`` and ``--force``). Finished pods are evicted whatever their budget (the
API server ignores budgets for them). A pod already being deleted is never evicted again.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field


@dataclass(frozen=True)
class DrainRules:
    """The policy's ``disruption:`` as a drain applies it (``RolloutPolicy.drain_rules``)."""

    grace_period_s: int | None = None  # None: each pod's own terminationGracePeriodSeconds
    evict_daemon_set_pods: bool = False
    evict_local_storage: bool = False
    evict_unmanaged_pods: bool = False


@dataclass(frozen=True)
class PodOnNode:
    """A pod bound to a node, as a drain needs to see it."""

    namespace: str
    name: str
    uid: str = ""
    phase: str = "Running"
    owner_kind: str = ""  # the controller's kind ("" : no controller owns it)
    owner_name: str = ""
    mirror: bool = False  # a static pod's mirror (annotation kubernetes.io/config.mirror)
    local_storage: bool = False  # has an emptyDir volume
    terminating: bool = False  # metadata.deletionTimestamp is set

    @property
    def ref(self) -> str:
        return f"{self.namespace}/{self.name}"

    @property
    def finished(self) -> bool:
        return self.phase in ("Succeeded", "Failed")

    @property
    def controller(self) -> str:
        return f"{self.namespace}/{self.owner_kind}/{self.owner_name}" if self.owner_kind else ""


@dataclass(frozen=True)
class DrainRound:
    """What one look at a node's pods says: evict ``evict``; ``held`` names what the policy keeps
    from being evicted (pod, why); ``left`` counts the pods that keep the node from being drained."""

    evict: tuple[PodOnNode, ...]
    held: tuple[tuple[str, str], ...]
    left: int

    @property
    def drained(self) -> bool:
        return self.left == 0


@dataclass(frozen=True)
class Eviction:
    """One eviction's answer: ``evicted``; ``gone`` (no such pod any more); ``refused`` (a
    PodDisruptionBudget allows no disruption now: ``words`` are the server's, naming the budget);
    ``busy`` (the server asked to slow down, or never answered: the next round tries again)."""

    pod: str
    outcome: str
    words: str = ""


@dataclass
class SpentBudgets:
    """A drain round's evictions, asked so that a spent budget is asked once a round.

    A batch's nodes drain at once and hold pods of the same workloads: a budget's disruption goes
    to the first to ask, and every other node's request draws the same 429 (at 99 nodes, ten
    requests per pod evicted, each the API server's work; ``kubectl drain`` asks a refused pod
    again every five seconds). So the pods a budget refused before ask one at a time per
    controller in a round, and once one is refused the others stay held on its words until the
    next round (after an eviction that passed, the next asks: the budget may allow more). A pod
    never refused is always asked: a controller's pods need not all share one budget.
    """

    _refused_before: set[str] = field(default_factory=set)
    _spent_now: dict[str, str] = field(default_factory=dict)
    _asking: dict[str, threading.Lock] = field(default_factory=dict)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def new_round(self) -> None:
        with self._lock:
            self._spent_now.clear()
            self._asking.clear()

    def ask(self, pod: PodOnNode, evict: Callable[[], Eviction]) -> str:
        """Evict ``pod`` (``evict``) unless its budget refused a sibling this round: the words of
        the refusal that holds it, or "" (evicted, gone, or busy: the next round's list tells)."""
        with self._lock:
            again = pod.ref in self._refused_before and bool(pod.controller)
            asking = self._asking.setdefault(pod.controller, threading.Lock()) if again else None
        if asking is None:
            return self._answered(pod, evict())
        with asking:  # siblings wait for this answer rather than draw the same 429
            with self._lock:
                words = self._spent_now.get(pod.controller, "")
            return words or self._answered(pod, evict())

    def _answered(self, pod: PodOnNode, answer: Eviction) -> str:
        with self._lock:
            if answer.outcome != "refused":
                self._refused_before.discard(pod.ref)
                return ""
            self._refused_before.add(pod.ref)
            if pod.controller:
                self._spent_now[pod.controller] = answer.words
            return answer.words


def counts(pod: PodOnNode, rules: DrainRules) -> bool:
    """Does this pod keep the node from being drained?"""
    if pod.mirror:
        return False
    return pod.owner_kind != "DaemonSet" or rules.evict_daemon_set_pods


def drain_round(pods: Iterable[PodOnNode], rules: DrainRules) -> DrainRound:
    """The pods to evict now, and what the policy holds back."""
    evict: list[PodOnNode] = []
    held: list[tuple[str, str]] = []
    left = 0
    for pod in sorted(pods, key=lambda p: (p.namespace, p.name)):
        if not counts(pod, rules):
            continue
        left += 1
        if pod.terminating:
            continue  # evicted already (by us or anyone): wait for it to go, never evict it twice
        why = _held_by_policy(pod, rules)
        if why and not pod.finished:
            held.append((pod.ref, why))
        else:
            evict.append(pod)
    return DrainRound(tuple(evict), tuple(held), left)


def _held_by_policy(pod: PodOnNode, rules: DrainRules) -> str:
    if pod.local_storage and not rules.evict_local_storage:
        return "it has local storage (an emptyDir), lost on eviction; disruption.evictLocalStorage is false"
    if not pod.owner_kind and not rules.evict_unmanaged_pods:
        return "no controller owns it, so nothing would re-create it; disruption.evictUnmanagedPods is false"
    return ""


def blocked_words(held: Sequence[tuple[str, str]]) -> str:
    """``pod shop/web-1: why`` for the first pod that holds a drain (and how many more)."""
    if not held:
        return ""
    pod, why = held[0]
    more = f" (and {len(held) - 1} more pod(s))" if len(held) > 1 else ""
    return f"pod {pod}: {why}{more}"
