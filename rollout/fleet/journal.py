"""The fleet's journal: what only the fleet knows, kept where it outlives the fleet flow's process.

Where a fleet's state lives, and why: not in any cluster (the fleet holds no cluster's
credentials, and the cluster holding it could be the one failing), and not in the fleet flow
run (a re-run after ``kill -9`` is a new flow run). It lives in Prefect, in three parts:

- **the clusters' flow runs** are the truth about each cluster: started or not, how it ended,
  where it stands. The fleet finds them by their tags and starts each with an idempotency key,
  so Prefect's server answers a second start with the run it already has (``rollout.fleet.runs``).
- **this journal**, a keyed Prefect artifact (a new version at each write, so its history shows
  in the UI), holds the rest: the gate answers and their deadlines, why the failure action runs,
  an abort that was applied, how the fleet ended. Nothing in it is clipped, and it holds any
  number of stages.
- **the holder**, a small Prefect Variable: which process drives the fleet now, renewed every
  10 s; its liveness is judged by ``rollout.lock``'s rules.

A frozen value with ``with_*`` transitions; :func:`to_data` / :func:`from_data` are its JSON, and
:func:`holder_to_data` / :func:`holder_from_data` the holder's.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from datetime import datetime
from types import MappingProxyType
from typing import Any

from rollout.journal import ApprovalOutcome
from rollout.lock import Holder, LockInfo
from rollout.outcome import Outcome
from rollout.timefmt import parse_rfc3339, rfc3339

FORMAT = "kubelet-rollout.io/fleet-journal/v2"
# v1 kept the journal and its holder in one Prefect Variable (5,000 characters: texts were clipped
# and fleets capped at 10 stages); a fleet begun by an older release is read from it and carried on
V1_FORMAT = "kubelet-rollout.io/fleet-journal/v1"


class FleetStatus(str, enum.Enum):
    RUNNING = "running"
    FAILING = "failing"  # the failure action runs: no cluster starts any more
    ENDED = "ended"


@dataclass(frozen=True)
class Gate:
    """The approval gate after a stage: when it was first asked, until when, and its answer."""

    asked_at: datetime
    deadline: datetime
    outcome: ApprovalOutcome | None = None
    by: str = ""
    note: str = ""
    decided_at: datetime | None = None


NO_GATES: Mapping[int, Gate] = MappingProxyType({})


@dataclass(frozen=True)
class AbortRequest:
    """`rollout fleet abort`: kept apart from the journal (a second Variable), so the person asking
    and the fleet flow never write the same value; the fleet applies each request once."""

    request_id: str
    by: str
    at: datetime

    def to_data(self) -> dict[str, str]:
        return {"id": self.request_id, "by": self.by, "at": rfc3339(self.at)}

    @classmethod
    def from_data(cls, data: Any) -> AbortRequest | None:
        if not isinstance(data, Mapping) or not data.get("id"):
            return None
        at = _parse(data.get("at"))
        return cls(request_id=str(data["id"]), by=str(data.get("by", "")), at=at) if at else None


@dataclass(frozen=True)
class FleetJournal:
    rollout: str
    digest: str  # of the fleet and the config: a name is one fleet rollout
    created_at: datetime
    status: FleetStatus = FleetStatus.RUNNING
    gates: Mapping[int, Gate] = field(default_factory=lambda: NO_GATES)
    failure: str = ""  # why the failure action runs
    abort_id: str = ""  # the abort request applied (each is applied once)
    outcome: Outcome | None = None
    message: str = ""
    finished_at: datetime | None = None
    # every node of every cluster, counted once by the clusters' identity probes when the fleet
    # began: what a disruption budget given as a percentage is a share of (a re-run keeps it)
    fleet_nodes: int | None = None

    @property
    def finished(self) -> bool:
        return self.status is FleetStatus.ENDED

    def with_fleet_nodes(self, nodes: int) -> FleetJournal:
        return self if self.fleet_nodes is not None else replace(self, fleet_nodes=nodes)

    def with_gate_asked(self, stage: int, *, at: datetime, deadline: datetime) -> FleetJournal:
        if stage in self.gates:
            return self  # asked again after a re-run: the first deadline stands
        return replace(self, gates={**self.gates, stage: Gate(asked_at=at, deadline=deadline)})

    def with_gate_answer(self, stage: int, outcome: ApprovalOutcome, *, by: str, note: str,
                         at: datetime) -> FleetJournal:
        gate = self.gates[stage]
        answered = replace(gate, outcome=outcome, by=by, note=note, decided_at=at)
        return replace(self, gates={**self.gates, stage: answered})

    def with_failure(self, reason: str) -> FleetJournal:
        if self.status is not FleetStatus.RUNNING:
            return self
        return replace(self, status=FleetStatus.FAILING, failure=reason)

    def with_abort(self, request_id: str, reason: str) -> FleetJournal:
        return replace(self.with_failure(reason), abort_id=request_id)

    def with_end(self, outcome: Outcome, message: str, *, at: datetime) -> FleetJournal:
        return replace(self, status=FleetStatus.ENDED, outcome=outcome, message=message,
                       finished_at=at)


def _time(value: datetime | None) -> str | None:
    return rfc3339(value) if value is not None else None


def _parse(value: Any) -> datetime | None:
    return parse_rfc3339(str(value)) if value else None


def to_data(journal: FleetJournal) -> dict[str, Any]:
    """The journal as JSON (the artifact's data)."""
    return {
        "format": FORMAT,
        "rollout": journal.rollout,
        "digest": journal.digest,
        "createdAt": rfc3339(journal.created_at),
        "status": journal.status.value,
        "gates": {str(stage): {"askedAt": rfc3339(g.asked_at), "deadline": rfc3339(g.deadline),
                               "outcome": g.outcome.value if g.outcome else None, "by": g.by, "note": g.note,
                               "decidedAt": _time(g.decided_at)} for stage, g in sorted(journal.gates.items())},
        "failure": journal.failure,
        "abortId": journal.abort_id,
        "outcome": journal.outcome.value if journal.outcome else None,
        "message": journal.message,
        "finishedAt": _time(journal.finished_at),
        "fleetNodes": journal.fleet_nodes,
    }


def from_data(data: Mapping[str, Any]) -> FleetJournal:
    """The journal (of either format); ``ValueError`` when ``data`` is not a fleet journal."""
    if data.get("format") not in (FORMAT, V1_FORMAT):
        raise ValueError(f"not a fleet journal ({data.get('format')!r})")
    gates = {int(stage): Gate(asked_at=parse_rfc3339(g["askedAt"]), deadline=parse_rfc3339(g["deadline"]),
                              outcome=ApprovalOutcome(g["outcome"]) if g.get("outcome") else None,
                              by=str(g.get("by", "")), note=str(g.get("note", "")), decided_at=_parse(g.get("decidedAt")))
             for stage, g in dict(data.get("gates") or {}).items()}
    return FleetJournal(rollout=str(data["rollout"]), digest=str(data.get("digest", "")),
                        created_at=parse_rfc3339(data["createdAt"]), status=FleetStatus(data["status"]),
                        gates=gates, failure=str(data.get("failure", "")), abort_id=str(data.get("abortId", "")),
                        outcome=Outcome(data["outcome"]) if data.get("outcome") else None,
                        message=str(data.get("message", "")), finished_at=_parse(data.get("finishedAt")),
                        fleet_nodes=_count(data.get("fleetNodes")))


def _count(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else None


def holder_to_data(info: LockInfo | None) -> dict[str, Any] | None:
    """The holder as JSON (None: nobody holds the fleet)."""
    if info is None or not info.holder:
        return None
    return {"identity": info.holder, "details": info.held_by.details() if info.held_by else None,
            "acquiredAt": _time(info.acquired), "renewedAt": _time(info.renewed), "durationS": info.duration_s}


def holder_from_data(rollout: str, data: Any) -> LockInfo | None:
    """The holder ``holder_to_data`` wrote; None for anything else."""
    if not isinstance(data, Mapping) or not data.get("identity"):
        return None
    identity = str(data["identity"])
    return LockInfo(holder=identity, rollout=rollout, acquired=_parse(data.get("acquiredAt")),
                    renewed=_parse(data.get("renewedAt")), duration_s=float(data.get("durationS", 0)),
                    resource_version="", held_by=Holder.from_lease(identity, rollout, data.get("details")))
