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

from collections.abc import Iterable, Sequence
from dataclasses import dataclass


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
    mirror: bool = False  # a static pod's mirror (annotation kubernetes.io/config.mirror)
    local_storage: bool = False  # has an emptyDir volume
    terminating: bool = False  # metadata.deletionTimestamp is set

    @property
    def ref(self) -> str:
        return f"{self.namespace}/{self.name}"

    @property
    def finished(self) -> bool:
        return self.phase in ("Succeeded", "Failed")


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
