"""A fleet's disruption budget as a Prefect global concurrency limit (``rollout.ports.DisruptionBudget``).

The fleet flow creates the limit (``disruptionBudget`` nodes, :func:`set_budget`) and names it to
each cluster's rollout run; the run's loop takes a batch's nodes from it before the batch's first
write and gives them back when the batch is done (``rollout.loop.engine``). Each batch's slots
are one lease, renewed from a thread: a run whose process dies gives its slots back when Prefect
revokes the lease (:data:`LEASE_S` after its last renewal), with no timer of ours.
"""

from __future__ import annotations

import logging
import threading
from uuid import UUID

from flows.leases import ensure_limit, give_back, limit_in_use, renew, take
from rollout.errors import NotFoundError

log = logging.getLogger("flows.budget")

LEASE_S = 60.0  # a dead run's slots come back this long after its last renewal
RENEW_EVERY_S = LEASE_S / 4


def budget_name(fleet_rollout: str) -> str:
    """The global concurrency limit of a fleet rollout's disruption budget."""
    return f"kubelet-rollout-fleet-{fleet_rollout}-nodes"


def set_budget(fleet_rollout: str, nodes: int) -> str:
    """Create (or resize) the fleet's limit; its name, for the clusters' runs."""
    name = budget_name(fleet_rollout)
    ensure_limit(name, nodes)
    return name


class PrefectBudget:
    """The budget a cluster's run takes its batches' nodes from (see the module doc)."""

    def __init__(self, name: str) -> None:
        self._name = name
        held = limit_in_use(name)
        if held is None:
            raise NotFoundError(f"disruption budget {name!r}: Prefect has no global concurrency limit of that name "
                                "(a fleet's flow creates it before it starts its clusters' runs)")
        self._limit = held[1]
        self._leases: dict[str, UUID] = {}
        self._mutex = threading.Lock()
        self._closed = threading.Event()
        self._renewer: threading.Thread | None = None

    @property
    def name(self) -> str:
        return self._name

    @property
    def limit(self) -> int:
        return self._limit

    def take(self, key: str, slots: int) -> bool:
        with self._mutex:
            if key in self._leases:
                return True
        lease = take(self._name, slots, seconds=LEASE_S)
        if lease is None:  # the fleet's other clusters hold the rest
            return False
        with self._mutex:
            self._leases[key] = lease
            if self._renewer is None:
                self._renewer = threading.Thread(target=self._renew, name="budget-renewer", daemon=True)
                self._renewer.start()
        return True

    def release(self, key: str) -> None:
        with self._mutex:
            lease = self._leases.pop(key, None)
        if lease is not None:
            self._give_back(lease)

    def close(self) -> None:
        self._closed.set()
        with self._mutex:
            leases, self._leases = list(self._leases.values()), {}
        for lease in leases:
            self._give_back(lease)

    def _give_back(self, lease: UUID) -> None:
        try:
            give_back(lease)
        except Exception as exc:  # noqa: BLE001 - the lease lapses on its own within LEASE_S
            log.warning("disruption budget %s: slots not given back (%s); Prefect revokes them within %.0f s",
                        self._name, exc, LEASE_S)

    def _renew(self) -> None:
        while not self._closed.wait(RENEW_EVERY_S):
            with self._mutex:
                leases = list(self._leases.values())
            for lease in leases:
                try:
                    renew(lease, seconds=LEASE_S)
                except Exception as exc:  # noqa: BLE001 - tried again at the next renewal
                    log.warning("disruption budget %s: lease not renewed (%s)", self._name, exc)
