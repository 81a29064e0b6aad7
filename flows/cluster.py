"""The cluster a run works on: the gateway and the rollout lock, both set from the run's policy.

A local ``rollout start`` takes the lock itself, before Prefect starts (:func:`lock_taken_early`):
from that moment ``rollout status NAME`` shows the rollout starting, and a lock held by another
rollout is refused before a flow run is made. The run in the same process then holds that lock
rather than asking for it again; a run elsewhere (a deployment's worker) takes its own.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator

from rollout.lock import this_process
from rollout.policy import RolloutPolicy
from rollout.ports import Gateway, Lock
from rollout.gateway import open_gateway

def rollout_policy(name: str, *, kubeconfig: str | None, context: str | None) -> RolloutPolicy:
    """The policy rollout ``name`` ran with (its journal's); the default one when its journal is
    gone: a rollback keeps the rollout's pace, and its policy in `rollout list`."""
    from rollout.policy import load_policy_ref
    from rollout.status import load_journal

    loaded = load_journal(open_gateway(kubeconfig, context), name)
    return loaded[0].plan.policy if loaded is not None else load_policy_ref(None)


def rollback_policy(name: str, policy: str | None, *, kubeconfig: str | None, context: str | None) -> RolloutPolicy:
    """The policy rollout ``name``'s rollback runs with: the one ``policy`` names, else the rollout's own."""
    from rollout.policy import load_policy_ref

    return load_policy_ref(policy) if policy else rollout_policy(name, kubeconfig=kubeconfig, context=context)


# rollout name -> the lock this process took for it before its run started
_TAKEN_EARLY: dict[str, Lock] = {}


def _opened(policy: RolloutPolicy, *, kubeconfig: str | None, context: str | None,
            stop: threading.Event) -> Gateway:
    """A gateway set from the policy: transient API errors ridden out for ``apiOutageTolerance``
    (``stop`` cuts that short), requests within ``apiQps``/``apiBurst``."""
    gateway = open_gateway(kubeconfig, context)
    gateway.tolerate_outages(policy.api_outage_tolerance.total_seconds(), stop=stop)
    gateway.limit_rate(policy.api_qps, policy.api_burst)
    return gateway


@contextlib.contextmanager
def gateway_and_lock(name: str, policy: RolloutPolicy, *, kubeconfig: str | None, context: str | None,
                     stop: threading.Event) -> Iterator[tuple[Gateway, Lock]]:
    """The gateway and the rollout lock a run holds, both set from the policy: the lock held by
    this process for rollout ``name`` (a rollback of it too), with a lease that outlasts the
    outages the run rides out (``rollout.lock``)."""
    from rollout.gateway import LockKeeper  # the Kubernetes client loads when a run opens the cluster

    gateway = _opened(policy, kubeconfig=kubeconfig, context=context, stop=stop)
    early = _TAKEN_EARLY.get(name)
    if early is not None:  # this process took it before the run: its writes are fenced by it
        gateway.fence_writes(early.check)
        try:
            yield gateway, early
        finally:
            gateway.fence_writes(None)
        return
    tolerance = policy.api_outage_tolerance.total_seconds()
    with LockKeeper(gateway, this_process(name), outage_tolerance_s=tolerance) as lock:
        yield gateway, lock


@contextlib.contextmanager
def lock_taken_early(name: str, policy: RolloutPolicy, *, kubeconfig: str | None, context: str | None,
                     stop: threading.Event) -> Iterator[Lock]:
    """Take rollout ``name``'s lock now, for a run this process starts inside the block
    (``LockHeldError`` when another process holds it); released when the block ends."""
    from rollout.gateway import LockKeeper

    gateway = _opened(policy, kubeconfig=kubeconfig, context=context, stop=stop)
    tolerance = policy.api_outage_tolerance.total_seconds()
    with LockKeeper(gateway, this_process(name), outage_tolerance_s=tolerance) as lock:
        _TAKEN_EARLY[name] = lock
        try:
            yield lock
        finally:
            _TAKEN_EARLY.pop(name, None)
