"""Slots of a Prefect global concurrency limit, held as leases: the fleet's holder (one slot) and
its disruption budget (a batch's nodes) are both held this way.

A lease is taken atomically by the Prefect server (no read-back, no race between two takers),
renewed by its holder, and revoked by the server once it has not been renewed for its duration:
a holder whose process died frees its slots with no timer of ours.
"""

from __future__ import annotations

from uuid import UUID


def ensure_limit(name: str, slots: int) -> None:
    """Create the limit (or set its size)."""
    from prefect.client.orchestration import get_client

    with get_client(sync_client=True) as client:
        client.upsert_global_concurrency_limit_by_name(name, slots)


def limit_in_use(name: str) -> tuple[int, int] | None:
    """(slots held now, the limit's size); None when there is no such limit."""
    from prefect.client.orchestration import get_client
    from prefect.exceptions import ObjectNotFound

    with get_client(sync_client=True) as client:
        try:
            limit = client.read_global_concurrency_limit_by_name(name)
        except ObjectNotFound:
            return None
    return limit.active_slots, limit.limit


def take(name: str, slots: int, *, seconds: float) -> UUID | None:
    """A lease on ``slots`` of the limit; None when the others hold too many of them."""
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.responses import ConcurrencyLimitWithLeaseResponse
    from prefect.exceptions import PrefectHTTPStatusError

    try:
        with get_client(sync_client=True) as client:
            response = client.increment_concurrency_slots_with_lease(
                names=[name], slots=slots, mode="concurrency", lease_duration=seconds)
    except PrefectHTTPStatusError as exc:
        if exc.response.status_code == 423:  # Locked: no room now
            return None
        raise
    return ConcurrencyLimitWithLeaseResponse.model_validate(response.json()).lease_id


def renew(lease: UUID, *, seconds: float) -> bool:
    """Renewed; False when the server no longer has the lease (it lapsed and was revoked)."""
    from prefect.client.orchestration import get_client
    from prefect.exceptions import PrefectHTTPStatusError

    try:
        with get_client(sync_client=True) as client:
            client.renew_concurrency_lease(lease, lease_duration=seconds)
    except PrefectHTTPStatusError as exc:
        if exc.response.status_code in (404, 410):
            return False
        raise
    return True


def give_back(lease: UUID) -> None:
    from prefect.client.orchestration import get_client

    with get_client(sync_client=True) as client:
        client.release_concurrency_slots_with_lease(lease)
