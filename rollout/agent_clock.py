"""The node agent's timers as it advertises them, and whether a policy leaves a node time for them.

Why: a node run by kubelet-rollout-agent is reported ``active`` only once its kubelet stayed up
through the agent's health wait after the restart, and promoted to last-known-good only after the
agent's trial (docs/agent.md). Those are the agent's flags, on the agent's clock; the policy's
``progressDeadline`` runs on the orchestrator's. A deadline shorter than what the agent needs
times out every node, however good the config: a rehearsal at x20 with agents on wall-clock time
failed its canary that way. So each agent advertises its timers in wall-clock seconds, in its
``kubelet-rollout.io/agent`` annotation, and a rollout that could never see a node done is refused
before anything is written (:func:`check_agent_clocks`), naming both values.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from rollout.errors import PolicyError
from rollout.model import NodeObservation
from rollout.names import ANN_AGENT
from rollout.policy import DoneUntil, RolloutPolicy, format_duration

# keys of the agent's advertisement: its timers in wall-clock seconds, and the factor its flags
# were divided by (the host's clock: kubesim's on a simulated host, 1 on a real node)
ADVERTISED_SECONDS = "seconds"
ADVERTISED_TIME_SCALE = "timeScale"


@dataclass(frozen=True)
class AgentClock:
    """An agent's timers, in wall-clock time; ``time_scale``: what its flags were divided by."""

    health_wait: timedelta
    trial: timedelta
    tick: timedelta
    time_scale: float = 1.0

    def advertised(self) -> dict[str, Any]:
        """The annotation's part for this clock."""
        seconds = {"healthWait": self.health_wait, "trial": self.trial, "tick": self.tick}
        return {ADVERTISED_SECONDS: {k: v.total_seconds() for k, v in seconds.items()},
                ADVERTISED_TIME_SCALE: self.time_scale}

    def time_to(self, until: DoneUntil) -> timedelta:
        """The least time from the kubelet's restart until the agent reports what the policy
        waits for: active after the health wait, last-known-good after the trial (and never
        before active); the agent looks once per tick."""
        wait = max(self.trial, self.health_wait) if until is DoneUntil.LAST_KNOWN_GOOD else self.health_wait
        return wait + self.tick

    def flag(self, until: DoneUntil) -> str:
        """The agent flag behind :meth:`time_to`, as it was given, for people."""
        lkg = until is DoneUntil.LAST_KNOWN_GOOD and self.trial > self.health_wait
        name, wall = ("--trial", self.trial) if lkg else ("--health-wait", self.health_wait)
        if self.time_scale == 1:
            return f"its {name} {format_duration(wall)}"
        return (f"its {name} {format_duration(wall * self.time_scale)} on a clock at x{self.time_scale:g}, "
                f"{format_duration(wall)} of wall-clock time")


def advertised_clock(annotation: str | None) -> AgentClock | None:
    """The clock a node's agent advertises; None when it advertises none (an older agent) or
    the annotation cannot be read (the review reports that one)."""
    try:
        doc = json.loads(annotation or "")
        seconds = doc[ADVERTISED_SECONDS]
        values = {key: _seconds(seconds[key]) for key in ("healthWait", "trial", "tick")}
        scale = float(doc.get(ADVERTISED_TIME_SCALE, 1.0))
    except (ValueError, TypeError, KeyError):
        return None
    if not math.isfinite(scale) or scale <= 0:
        return None
    return AgentClock(health_wait=values["healthWait"], trial=values["trial"], tick=values["tick"],
                      time_scale=scale)


def _seconds(value: Any) -> timedelta:
    number = float(value)
    if not math.isfinite(number) or number < 0 or number > 1e9:
        raise ValueError(f"not a number of seconds: {value!r}")
    return timedelta(seconds=number)


def _deadline(policy: RolloutPolicy) -> str:
    deadline = format_duration(policy.progress_deadline)
    if policy.time_scale == 1:
        return deadline
    in_file = format_duration(policy.progress_deadline * policy.time_scale)
    return f"{deadline} ({in_file} / --time-scale {policy.time_scale:g})"


def check_agent_clocks(policy: RolloutPolicy, nodes: Iterable[NodeObservation]) -> None:
    """Refuse a policy whose ``progressDeadline`` ends before the agents of the nodes taking part
    can report a node done (:meth:`AgentClock.time_to`): ``PolicyError`` naming the nodes, their
    agent's timer and the deadline. Called before anything is written."""
    until = policy.done.until
    short: dict[AgentClock, list[str]] = {}
    for node in nodes:
        clock = advertised_clock(node.annotations.get(ANN_AGENT)) if node.backend == "agent" else None
        if clock is not None and clock.time_to(until) >= policy.progress_deadline:
            short.setdefault(clock, []).append(node.name)
    if not short:
        return
    clock, names = max(short.items(), key=lambda item: item[0].time_to(until))
    needed = clock.time_to(until)
    listed = ", ".join(sorted(names)[:5]) + (f" and {len(names) - 5} more" if len(names) > 5 else "")
    longer = format_duration(needed * policy.time_scale)
    raise PolicyError(
        f"{_deadline(policy)} ends before the kubelet-rollout-agent of {listed} can report a node {until.value}: "
        f"{format_duration(needed)} after the kubelet's restart at the earliest ({clock.flag(until)}, plus a "
        f"--tick of {format_duration(clock.tick)}); no node could finish in time, nothing was written",
        source=f"policy {policy.name}" if policy.name else "the policy", path="progressDeadline",
        advice=("run the agents on the rehearsal's clock (on kubesim, `kubelet-rollout-agent run` without "
                "--time-scale follows kubesim's), give them shorter timers, or give the policy a progressDeadline "
                f"longer than {longer}" + (" in its file" if policy.time_scale != 1 else "")))
