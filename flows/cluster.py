"""The cluster a run works on: the gateway and the rollout lock, both set from the run's policy."""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator

from rollout.lock import this_process
from rollout.policy import RolloutPolicy
from rollout.ports import Gateway, Lock
from rollout.gateway import open_gateway


@contextlib.contextmanager
def gateway_and_lock(name: str, policy: RolloutPolicy, *, kubeconfig: str | None, context: str | None,
                     stop: threading.Event) -> Iterator[tuple[Gateway, Lock]]:
    """The gateway and the rollout lock a run holds, both set from the policy: transient API
    errors ridden out for ``apiOutageTolerance`` (``stop`` cuts that short), requests within
    ``apiQps``/``apiBurst``, the lock held by this process for rollout ``name`` (a rollback of it
    too), with a lease that outlasts the outages the run rides out (``rollout.lock``)."""
    from rollout.gateway import LockKeeper  # the Kubernetes client loads when a run opens the cluster

    gateway = open_gateway(kubeconfig, context)
    tolerance = policy.api_outage_tolerance.total_seconds()
    gateway.tolerate_outages(tolerance, stop=stop)
    gateway.limit_rate(policy.api_qps, policy.api_burst)
    with LockKeeper(gateway, this_process(name), outage_tolerance_s=tolerance) as lock:
        yield gateway, lock
