"""A drain's rounds and an uncordon, as the engine carries them out (``rollout.machine.drains``
decides them; ``rollout.drain`` says which pods go).

One round per node: cordon it if it is not (the journal already records the cordon as intended:
a run that died before the PATCH cordons it now), list its pods, evict those the rules let go,
and say whether it is empty and what holds it. A node somebody else cordoned is drained but
never claimed (no ``ANN_CORDONED_BY``), so it is never uncordoned by us either.
"""

from __future__ import annotations

import threading

from rollout.drain import SpentBudgets, blocked_words, drain_round
from rollout.errors import NotFoundError
from rollout.journal import Journal
from rollout.loop.fanout import fan_out
from rollout.loop.node_events import NodeEventQueue
from rollout.machine.actions import DrainNodes, UncordonNodes
from rollout.names import ANN_CORDONED_BY, ANN_STATE_RESET, EVENT_CORDONED, EVENT_DRAIN_BLOCKED, EVENT_UNCORDONED
from rollout.ports import Cluster, Informer


class Drainer:
    def __init__(self, cluster: Cluster, informer: Informer, events: NodeEventQueue, *, stop: threading.Event,
                 concurrency: int) -> None:
        self.cluster = cluster
        self.informer = informer
        self.events = events
        self.stop = stop
        self.concurrency = concurrency
        self.spent_budgets = SpentBudgets()

    def drain(self, action: DrainNodes, journal: Journal, progress: dict[str, tuple[bool, str]]) -> None:
        """One round on every node of ``action``; each node's answer lands in ``progress`` as it comes."""
        rollout = journal.rollout
        self.spent_budgets.new_round()

        def one(node: str) -> None:
            if self.stop.is_set():
                return
            held = self.informer.get(node)
            if held is None:
                return  # gone: nothing to drain
            if not held.unschedulable:
                self.informer.observe_written(self.cluster.cordon(node, rollout=rollout))
                self.events.put(node, EVENT_CORDONED, f"rollout {rollout}: cordoned, to be drained before its kubelet "
                                "restarts on the new config")
            look = drain_round(self.cluster.pods_on(node), action.rules)
            blocked = list(look.held)
            for pod in look.evict:
                if self.stop.is_set():
                    return
                words = self.spent_budgets.ask(
                    pod, lambda: self.cluster.evict(pod, grace_period_s=action.rules.grace_period_s))
                if words:
                    blocked.append((pod.ref, f"its PodDisruptionBudget allows no disruption now: {words}"))
            said = blocked_words(blocked)
            progress[node] = (look.drained, said)
            if said and said != journal.nodes[node].drain_blocked:
                self.events.put(node, EVENT_DRAIN_BLOCKED, f"rollout {rollout}: drain held: {said}", "Warning")

        def guarded(node: str) -> None:
            try:
                one(node)
            except NotFoundError:
                pass  # deleted while we drained it: nothing left to drain

        with self.events.writing():
            fan_out(guarded, action.nodes, concurrency=self.concurrency, stop=self.stop,
                    cut_short_by=self.cluster.cut_short_by)

    def uncordon(self, action: UncordonNodes, rollout: str) -> None:
        """Give each node back: uncordoned where this rollout cordoned it, the drain's annotations gone."""

        def one(node: str) -> None:
            if self.stop.is_set():
                return
            held = self.informer.get(node)
            if held is None:
                return
            ours = held.annotations.get(ANN_CORDONED_BY) == rollout
            if not ours and ANN_STATE_RESET not in held.annotations:
                return  # given back already (a resumed run), or somebody else's cordon
            try:
                self.informer.observe_written(self.cluster.uncordon(node, rollout=rollout, cordoned_by_us=ours))
            except NotFoundError:
                return
            if ours:
                self.events.put(node, EVENT_UNCORDONED, f"rollout {rollout}: uncordoned: {action.reason}")

        with self.events.writing():
            fan_out(one, action.nodes, concurrency=self.concurrency, stop=self.stop,
                    cut_short_by=self.cluster.cut_short_by)
