"""Analysis of a batch by its workloads: the verdict rules (pure) and the evidence they leave.

A batch with ``analysis.checks`` in its policy is measured during its soak: each check's query
runs every ``interval``, ``count`` times, for the batch's nodes (and, when its condition compares
against ``control``, for the control cohort: the taking-part nodes not yet assigned, in the same
window). These modules say what each measurement means and when the analysis has a verdict; the
run (``rollout.loop.analysis_run``) takes the measurements through the ``MetricsSource`` port and keeps
the evidence through the ``EvidenceStore`` port.

- ``rules``: one measurement's verdict (condition, no data, the control cohort, a ``compare:``
  check's test and effect band), a check's verdict over its measurements (failure and
  inconclusive limits), the batch's over its checks
- ``stats``: the two-sample statistics a ``compare:`` check uses (Mann-Whitney U, Hodges-Lehmann,
  a histogram's buckets as observations)
- ``summary``: the evidence as people read it (gate, artifacts, report, events, status)
- ``evidence``: what is kept of every measurement, bounded (the last few per check, with counts),
  and its ConfigMap form

Pure: no I/O, no clock, no logging.
"""

from rollout.analysis.evidence import (
    EVIDENCE_FORMAT,
    KEPT_MEASUREMENTS,
    BatchEvidence,
    CheckEvidence,
    comparison_to_json,
    evidence_from_data,
    evidence_to_data,
    evidence_to_json,
)
from rollout.analysis.rules import (
    BatchAnalysis,
    CheckStatus,
    CheckVerdict,
    Comparison,
    Measurement,
    MeasurementVerdict,
    Sample,
    batch_analysis,
    check_verdict,
    judge,
    skipped_for_its_cohort,
    unreachable,
)
from rollout.analysis.summary import check_rows, evidence_event, evidence_lines, evidence_markdown

__all__ = [
    "EVIDENCE_FORMAT", "KEPT_MEASUREMENTS", "BatchAnalysis", "BatchEvidence", "CheckEvidence", "CheckStatus", "CheckVerdict",
    "Comparison", "Measurement", "MeasurementVerdict", "Sample", "batch_analysis", "check_rows", "check_verdict",
    "comparison_to_json", "evidence_event", "evidence_lines", "evidence_markdown", "evidence_from_data",
    "evidence_to_data", "evidence_to_json", "judge", "skipped_for_its_cohort", "unreachable",
]
