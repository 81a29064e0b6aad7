"""The adapters a run works through, opened for its request: the cluster (the gateway), the
rollout's lock (``LockKeeper``), the Prometheus its analysis asks, and where the node Events left
at its end go. The one place that opens them, for a local ``rollout start`` and for a deployment's
flow run alike (:func:`begin_run`)."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

from flows.budget import PrefectBudget
from flows.event_handoff import hand_off_to_process
from flows.stop import STOP
from rollout.gateway import open_gateway
from rollout.lock import Holder
from rollout.ports import Gateway, HeldLock
from rollout.prometheus import ready_metrics_source
from rollout.run import Run, RunRequest, RunTools


@contextlib.contextmanager
def held_lock(gateway: Gateway, holder: Holder, outage_tolerance_s: float) -> Iterator[HeldLock]:
    """The rollout's lock, held by this process for the block, its lease outlasting the outages the
    run rides out (``rollout.lock``)."""
    from rollout.gateway import LockKeeper

    with LockKeeper(gateway, holder, outage_tolerance_s=outage_tolerance_s) as keeper:
        yield keeper


def run_tools(request: RunRequest) -> RunTools:
    """Open what ``request``'s run needs; a policy with analysis checks and nowhere to ask them, or a
    Prometheus that cannot measure them (``rollout.prometheus.probe``), is refused here, before
    anything is touched."""
    address = request.prometheus
    metrics = None if request.is_rollback else ready_metrics_source(
        request.policy, address=address.url, token_file=address.token_file, ca_file=address.ca_file)
    policy = request.policy
    budget = PrefectBudget(request.disruption_budget) if request.disruption_budget else None
    return RunTools(gateway=open_gateway(request.kubeconfig, request.context), hold_lock=held_lock, metrics=metrics,
                    hand_off=hand_off_to_process(request.kubeconfig, request.context, qps=policy.api_qps,
                                                 burst=policy.api_burst), budget=budget)


def begin_run(request: RunRequest, tools: RunTools | None = None, *, deferrable: bool = False) -> Run:
    """Begin ``request``'s run in this process, now (``rollout.run.Run``), stopped by the process's
    stop (Ctrl-C, SIGTERM: ``flows.stop``)."""
    return Run.begin(request, tools or run_tools(request), stop=STOP, deferrable=deferrable)


__all__ = ["begin_run", "held_lock", "run_tools"]
