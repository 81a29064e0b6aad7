"""The journal on the node: the annotations (and label) written in the same PATCH as an assignment.

Every assignment writes the rollout's name, the batch, the node's previous source and when it was
sent onto the node itself (system-upgrade-controller keeps progress on the nodes the same way), so
a resumed run knows which nodes this rollout already wrote, and a rollback can rebuild a lost
journal from the nodes alone. The keys are in ``rollout.names``. Pure: encoding only.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime

from rollout.model import ConfigRef
from rollout.names import (
    ANN_ASSIGNED_AT,
    ANN_BATCH,
    ANN_PREVIOUS_SOURCE,
    ANN_ROLLOUT,
    LABEL_ROLLOUT,
    LOCAL_SOURCE,
    label_value,
)
from rollout.timefmt import parse_rfc3339, rfc3339


@dataclass(frozen=True)
class AssignmentAnnotations:
    """What a node's annotations say about the rollout that assigned it (the journal on the node)."""

    rollout: str
    batch: int
    previous: ConfigRef | None  # None = the node ran its local config
    assigned_at: datetime


def encode_previous(previous: ConfigRef | None) -> str:
    if previous is None:
        return LOCAL_SOURCE
    return json.dumps(previous.to_api(), separators=(",", ":"), sort_keys=True)


def decode_previous(text: str) -> ConfigRef | None:
    if text == LOCAL_SOURCE:
        return None
    body = json.loads(text)
    if not isinstance(body, dict):
        raise ValueError(f"previous-source is neither 'local' nor a configMap object: {text!r}")
    return ConfigRef.from_api({"configMap": body})


def assignment_annotations(
    rollout: str, *, batch: int, previous: ConfigRef | None, now: datetime
) -> dict[str, str]:
    """Annotations to write in the same PATCH as the assignment."""
    return {
        ANN_ROLLOUT: rollout,
        ANN_BATCH: str(batch),
        ANN_PREVIOUS_SOURCE: encode_previous(previous),
        ANN_ASSIGNED_AT: rfc3339(now),
    }


def stamped(annotations: Mapping[str, str], *, at: datetime) -> dict[str, str]:
    """The assignment annotations with ``assigned-at`` set to ``at`` (the moment of sending)."""
    return {**annotations, ANN_ASSIGNED_AT: rfc3339(at)}


def node_labels(annotations: Mapping[str, str | None]) -> dict[str, str | None]:
    """The labels written in the same PATCH as ``annotations``: an assignment labels the node with
    its rollout, so ``kubectl get nodes -l kubelet-rollout.io/rollout=NAME`` lists what a rollout
    touched; a revert (no assignment annotations) removes the label."""
    rollout = annotations.get(ANN_ROLLOUT)
    return {LABEL_ROLLOUT: label_value(rollout) if rollout else None}


def parse_assignment_annotations(annotations: Mapping[str, str]) -> AssignmentAnnotations | None:
    """Read them back; None when the node carries no (complete, well-formed) assignment record."""
    keys = (ANN_ROLLOUT, ANN_BATCH, ANN_PREVIOUS_SOURCE, ANN_ASSIGNED_AT)
    if not all(k in annotations for k in keys):
        return None
    try:
        return AssignmentAnnotations(
            rollout=annotations[ANN_ROLLOUT],
            batch=int(annotations[ANN_BATCH]),
            previous=decode_previous(annotations[ANN_PREVIOUS_SOURCE]),
            assigned_at=parse_rfc3339(annotations[ANN_ASSIGNED_AT]),
        )
    except (ValueError, json.JSONDecodeError):
        return None


def annotations_by_rollout(
    rollout: str, annotations: Iterable[tuple[str, Mapping[str, str]]]
) -> dict[str, AssignmentAnnotations]:
    """Node name -> its record, for the nodes this rollout assigned (rebuilds a lost journal)."""
    found = {}
    for name, anns in annotations:
        parsed = parse_assignment_annotations(anns)
        if parsed is not None and parsed.rollout == rollout:
            found[name] = parsed
    return found
