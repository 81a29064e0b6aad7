"""The rollout journal: everything needed to resume a rollout, in the cluster.

A rollout must survive its own process dying at any moment, so its state is never held only in
memory: the engine stores the journal in a ``kube-system`` ConfigMap whenever the rollout's state
changes, before acting on it (write-ahead), and each node additionally carries annotations
written in the same PATCH as its assignment. Running a rollout with the same name again loads
the journal, observes the nodes again, and ``rollout.machine.step`` continues where it stopped.

One job per module:

- ``state``: the journal as a frozen value and its ``with_*`` transitions
- ``configmap``: the journal as ConfigMaps (``kubelet-rollout-journal/v2``): a head and its parts,
  each far below the API server's 1 MiB whatever the plan's size, and back
- ``parts``: the parts: nodes, batches and skipped nodes, packed and split by size
- ``v1``: reading a journal the previous release wrote (one ConfigMap)
- ``fields``: how values are spelled in them (milliseconds, sources, bytes as the server counts)
- ``annotations``: the journal on the node: the assignment's annotations and label, read back

This module re-exports every public name, so ``from rollout.journal import X`` is the way in.
Pure: no I/O, no clock.
"""

from rollout.journal.annotations import (
    AssignmentAnnotations,
    annotations_by_rollout,
    assignment_annotations,
    decode_previous,
    encode_previous,
    node_labels,
    parse_assignment_annotations,
    stamped,
)
from rollout.journal.configmap import FORMAT, HEAD_LIMIT, PART_LIMIT, JournalDocument, from_document, to_document
from rollout.journal.records import NodeRecord
from rollout.journal.state import (
    MAX_DECISIONS,
    MAX_FAILED_LISTED,
    MAX_REASON,
    PROGRESS_KINDS,
    TERMINAL,
    AnalysisRecord,
    AnalysisVerdict,
    ApprovalOutcome,
    ApprovalRecord,
    BatchState,
    BatchStatus,
    DecisionRecord,
    Journal,
    RolloutStatus,
)

__all__ = [
    "FORMAT", "HEAD_LIMIT", "MAX_DECISIONS", "MAX_FAILED_LISTED", "MAX_REASON", "PART_LIMIT", "PROGRESS_KINDS",
    "TERMINAL", "AnalysisRecord", "AnalysisVerdict", "ApprovalOutcome", "ApprovalRecord", "AssignmentAnnotations", "BatchState", "BatchStatus",
    "DecisionRecord", "Journal", "JournalDocument", "NodeRecord", "RolloutStatus", "annotations_by_rollout",
    "assignment_annotations", "decode_previous", "encode_previous", "from_document", "node_labels",
    "parse_assignment_annotations", "stamped", "to_document",
]
