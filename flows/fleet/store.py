"""Where a fleet's own state lives: in Prefect (``rollout.fleet.journal`` says why).

- the artifact ``kubelet-rollout-fleet-<name>-<hash>``: the fleet journal, a new version at each
  write (its history is the fleet's, in the UI), whole however long its texts and its stages;
- the global concurrency limit ``kubelet-rollout-fleet-<rollout>-holder``, one slot: the one
  process that drives the fleet now holds it as a lease (``flows.leases``), taken atomically by
  the Prefect server, renewed every 10 s from a thread (through approval pauses too) and given
  back at the end. A second process is refused with exit 4 while the holder renews; a holder
  whose process is gone, as seen from its machine, has its lease given back by the re-run at
  once; from anywhere, a holder that stopped renewing frees the fleet when Prefect revokes its
  lease (``HOLDER_LEASE_S``). A process whose lease lapsed finds so at its next renewal and stops;
- the Variable ``kubelet-rollout-fleet__<rollout>``: who holds it (identity, times, lease), for
  ``rollout fleet status`` and for that re-run;
- the Variable ``kubelet-rollout-fleet-abort__<rollout>``: the last ``rollout fleet abort``
  request, written by the person asking, read by the fleet: two writers never share one value.

Each cluster's run is started once whatever the fleet's processes do (its idempotency key), and
each cluster's lock admits one run.
"""

from __future__ import annotations

import contextlib
import hashlib
import threading
from collections.abc import Callable
from datetime import datetime, timezone
from typing import Any
from uuid import UUID

from flows import leases
from flows.leases import ensure_limit
from rollout.errors import LockHeldError, NotFoundError
from rollout.fleet import AbortRequest, FleetJournal, from_data, holder_from_data, holder_to_data, to_data
from rollout.lock import (
    RENEW_EVERY_S,
    Holder,
    LockInfo,
    describe,
    mark_ended,
    mark_held,
    takeover_reason,
    this_process,
)

HOLDER_PREFIX = "kubelet-rollout-fleet__"
ABORT_PREFIX = "kubelet-rollout-fleet-abort__"
JOURNAL_ARTIFACT_PREFIX = "kubelet-rollout-fleet-"
JOURNAL_ARTIFACT_TYPE = "kubelet-rollout-fleet-journal"
HOLDER_FORMAT = "kubelet-rollout.io/fleet-holder/v1"
# the slot of the fleet's holder limit is a lease of this length, renewed every RENEW_EVERY_S:
# a holder whose process died frees the fleet this long after its last renewal, seen from anywhere
HOLDER_LEASE_S = 60.0


def holder_limit(rollout: str) -> str:
    """The global concurrency limit (one slot) that admits one process to drive the fleet."""
    return f"kubelet-rollout-fleet-{rollout}-holder"


def holder_variable(rollout: str) -> str:
    return HOLDER_PREFIX + rollout


def journal_artifact_key(rollout: str) -> str:
    """An artifact key is lowercase letters, digits and '-': the name so folded, and a hash of the
    name as given, so that ``Fleet_A`` and ``fleet-a`` stay two fleets."""
    folded = "".join(c if c.isalnum() else "-" for c in rollout.lower())
    return f"{JOURNAL_ARTIFACT_PREFIX}{folded}-{hashlib.sha256(rollout.encode()).hexdigest()[:10]}"


def abort_variable(rollout: str) -> str:
    return ABORT_PREFIX + rollout


def _utcnow() -> datetime:
    return datetime.now(timezone.utc)


def _read(name: str) -> Any:
    from prefect.client.orchestration import get_client

    with get_client(sync_client=True) as client:
        variable = client.read_variable_by_name(name)
    return variable.value if variable is not None else None


def _write(name: str, value: Any) -> None:
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.actions import VariableCreate, VariableUpdate

    with get_client(sync_client=True) as client:
        if client.read_variable_by_name(name) is None:
            client.create_variable(VariableCreate(name=name, value=value))
        else:
            client.update_variable(VariableUpdate(name=name, value=value))


def _read_journal_artifact(rollout: str) -> Any:
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import ArtifactCollectionFilter, ArtifactCollectionFilterKey

    with get_client(sync_client=True) as client:
        latest = client.read_latest_artifacts(artifact_filter=ArtifactCollectionFilter(
            key=ArtifactCollectionFilterKey(any_=[journal_artifact_key(rollout)])))
    return latest[0].data if latest else None


def _write_journal_artifact(journal: FleetJournal) -> None:
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.actions import ArtifactCreate
    from prefect.context import FlowRunContext

    ctx = FlowRunContext.get()
    flow_run_id = ctx.flow_run.id if ctx is not None and ctx.flow_run is not None else None
    with get_client(sync_client=True) as client:
        client.create_artifact(ArtifactCreate(
            key=journal_artifact_key(journal.rollout), type=JOURNAL_ARTIFACT_TYPE, data=to_data(journal),
            description=f"Fleet rollout `{journal.rollout}`: its journal ({journal.status.value})",
            flow_run_id=flow_run_id))


def _load(rollout: str) -> tuple[FleetJournal | None, LockInfo | None, bool]:
    """The journal, its holder, and whether the journal is in its artifact (a fleet begun by an
    older release kept it in the holder's Variable)."""
    holder_value = _read(holder_variable(rollout))
    holder = holder_from_data(rollout, holder_value.get("holder")) if isinstance(holder_value, dict) else None
    for data, in_artifact in ((_read_journal_artifact(rollout), True), (holder_value, False)):
        if isinstance(data, dict) and data.get("rollout") == rollout:
            try:
                return from_data(data), holder, in_artifact
            except (ValueError, KeyError):
                continue
    return None, holder, False


def read_journal(rollout: str) -> tuple[FleetJournal, LockInfo | None] | None:
    """The fleet's journal and holder; None when no fleet rollout has that name."""
    journal, holder, _ = _load(rollout)
    return (journal, holder) if journal is not None else None


def _holder_lease(rollout: str) -> UUID | None:
    """The lease the recorded holder took (to give it back for a holder known to be gone)."""
    value = _read(holder_variable(rollout))
    lease = value.get("leaseId") if isinstance(value, dict) else None
    try:
        return UUID(str(lease)) if lease else None
    except ValueError:
        return None


def _read_holder(rollout: str) -> LockInfo | None:
    value = _read(holder_variable(rollout))
    return holder_from_data(rollout, value.get("holder")) if isinstance(value, dict) else None


def read_abort(rollout: str) -> AbortRequest | None:
    return AbortRequest.from_data(_read(abort_variable(rollout)))


def post_abort(rollout: str, *, by: str, request_id: str) -> AbortRequest:
    """What `rollout fleet abort` writes; the fleet applies it within a poll."""
    if read_journal(rollout) is None:
        raise NotFoundError(f"no fleet rollout named {rollout!r}")
    request = AbortRequest(request_id=request_id, by=by, at=_utcnow())
    _write(abort_variable(rollout), request.to_data())
    return request


class FleetKeeper:
    """The fleet journal, held by this process for the length of a fleet run."""

    def __init__(self, rollout: str, *, start: Callable[[datetime], FleetJournal]) -> None:
        self.rollout = rollout
        self.holder: Holder = this_process(rollout)
        self._start = start  # the journal of a fleet rollout this name never had
        self._journal: FleetJournal | None = None
        self._acquired = _utcnow()
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._lost = ""
        self._lease: UUID | None = None
        self._thread: threading.Thread | None = None

    @property
    def journal(self) -> FleetJournal:
        assert self._journal is not None
        return self._journal

    def __enter__(self) -> FleetKeeper:
        now = _utcnow()
        loaded, info, in_artifact = _load(self.rollout)
        journal = loaded if loaded is not None else self._start(now)
        ensure_limit(holder_limit(self.rollout), 1)
        self._lease = leases.take(holder_limit(self.rollout), 1, seconds=HOLDER_LEASE_S)
        if self._lease is None:
            self._lease = self._take_over(info, now)
        if not in_artifact:  # a new fleet; or an older release's, before the holder's write replaces it
            _write_journal_artifact(journal)
        self._journal = journal
        self._put()
        mark_held(self.holder.identity)
        self._thread = threading.Thread(target=self._renew, name="fleet-holder", daemon=True)
        self._thread.start()
        return self

    def _take_over(self, info: LockInfo | None, now: datetime) -> UUID:
        """The holder's slot, when its holder is known to be done with it (its process gone from this
        machine): its lease is given back for it. Otherwise refused (exit 4), naming the holder."""
        reason = takeover_reason(info, self.holder, now) if info is not None else None
        theirs = _holder_lease(self.rollout)
        if info is None or reason is None or theirs is None:
            raise LockHeldError(describe(info, now) if info is not None else
                                f"another process (Prefect's limit {holder_limit(self.rollout)} holds its slot, "
                                f"freed {HOLDER_LEASE_S:.0f} s after its holder's last renewal)",
                                lease=f"fleet {self.rollout}", rollout=self.rollout)
        with contextlib.suppress(Exception):  # revoked already: it lapsed
            leases.give_back(theirs)
        lease = leases.take(holder_limit(self.rollout), 1, seconds=HOLDER_LEASE_S)
        if lease is None:  # a third process took it meanwhile
            raise LockHeldError(describe(_read_holder(self.rollout) or info, _utcnow()),
                                lease=f"fleet {self.rollout}", rollout=self.rollout)
        return lease

    def save(self, journal: FleetJournal) -> None:
        """Write the journal (before the action it records is carried out)."""
        self.check()
        with self._lock:
            self._journal = journal
            _write_journal_artifact(journal)

    def check(self) -> None:
        """Raise when another process took the fleet over while this one was silent."""
        if self._lost:
            raise LockHeldError(self._lost, lease=f"fleet {self.rollout}", rollout=self.rollout)

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=15)
        mark_ended(self.holder.identity)
        if not self._lost:
            with self._lock:
                self._put(holding=False)
            if self._lease is not None:
                with contextlib.suppress(Exception):  # it lapses on its own
                    leases.give_back(self._lease)

    def _put(self, *, holding: bool = True) -> None:
        """Write who holds the fleet (this process, renewed now; or nobody), for people and for
        a re-run on this machine that finds it gone."""
        now = _utcnow()
        info = LockInfo(holder=self.holder.identity, rollout=self.rollout, acquired=self._acquired, renewed=now,
                        duration_s=HOLDER_LEASE_S, resource_version="", held_by=self.holder) if holding else None
        _write(holder_variable(self.rollout),
               {"format": HOLDER_FORMAT, "rollout": self.rollout, "holder": holder_to_data(info),
                "leaseId": str(self._lease) if holding and self._lease else None})

    def _renew(self) -> None:
        while not self._stop.wait(RENEW_EVERY_S):
            try:
                assert self._lease is not None
                if not leases.renew(self._lease, seconds=HOLDER_LEASE_S):
                    self._lost = (f"this process's hold on fleet {self.rollout} lapsed (not renewed for "
                                  f"{HOLDER_LEASE_S:.0f} s): another process may drive it now")
                    return
                with self._lock:
                    self._put()
            except Exception:  # noqa: BLE001 - a missed renewal is retried; the lease outlasts a few
                continue
