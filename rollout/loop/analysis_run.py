"""The analysis of the running batch: measurements taken when due, evidence kept, the verdict
folded into the journal. Called by the engine once per turn of its loop; like the engine's other
waits, it is told the time (``now``) and says when it next has work (:meth:`next_due`).

* **When.** A batch's analysis window opens once every node assigned in it has settled on the
  target (active; the soak clock runs too), or failed within the failure budget (left out). Check ``c``'s measurement ``k`` is due ``k`` intervals
  after that, ``count`` times. The window and the cohorts are written to the evidence at once, so
  a resumed run carries on with the same window and counts.
* **What.** Each measurement renders the check's query for the batch's nodes and, when its
  condition compares against ``control``, for the control cohort (the taking-part nodes not yet
  assigned), and judges the answers (``rollout.analysis.rules``); a ``compare: {baseline: before}``
  check's query is asked of both again for a window as long before the batch's first write.
* **Outages.** A Prometheus out of reach is ridden out like the API server: the measurement is
  tried again every few seconds for ``analysis.prometheus.outageTolerance``, then recorded as
  inconclusive (then the policy's ``onInconclusive``: by default a gate). A query Prometheus
  refuses is inconclusive at once. Never a traceback.
* **Evidence.** Every measurement goes into the batch's evidence object (``EvidenceStore``,
  compare-and-swap, bounded); the journal gets only the verdict.
"""

from __future__ import annotations

import logging
from datetime import datetime, timedelta

from rollout.analysis import (
    BatchEvidence,
    CheckEvidence,
    CheckVerdict,
    Measurement,
    batch_analysis,
    judge,
    skipped_for_its_cohort,
    unreachable,
)
from rollout.errors import ConflictError, GatewayError, MetricsQueryError, MetricsUnreachableError
from rollout.journal import BatchStatus, Journal, RolloutStatus
from rollout.model import NodePhase
from rollout.machine.phases import NOT_OURS_PHASES, SETTLED_PHASES
from rollout.policy import AnalysisCheck
from rollout.policy.analysis import check_before_queries, check_queries
from rollout.ports import EvidenceStore, MetricsSource
from rollout.timefmt import human

log = logging.getLogger("rollout.analysis")

# a node still on its way to the config: the window waits for it (a node failed within the
# budget does not hold it up; it is judged by its phase, and left out of the queries)
CONVERGING = frozenset({NodePhase.PENDING, NodePhase.ASSIGNED, NodePhase.RESTARTING, NodePhase.SYNC_ERROR})
RETRY_S = 5.0  # how often an unreachable Prometheus is tried again while the outage is ridden out
NO_PROMETHEUS = ("no Prometheus to ask (rollout start --prometheus URL, KUBELET_ROLLOUT_PROMETHEUS_URL or "
                 "analysis.prometheus.address)")


class AnalysisRun:
    """The analysis of one rollout's batches, one at a time (the engine's)."""

    def __init__(self, *, metrics: MetricsSource | None, evidence: EvidenceStore) -> None:
        self.metrics = metrics
        self.store = evidence
        self._evidence: BatchEvidence | None = None
        self._rv: str | None = None
        self._saved: BatchEvidence | None = None
        self._failing_since: dict[str, datetime] = {}
        self._retry_at: dict[str, datetime] = {}

    @property
    def current(self) -> BatchEvidence | None:
        """The evidence of the batch measured now, or last (a run's own status shows it)."""
        return self._evidence

    # -- the engine's two calls ------------------------------------------------------------

    def advance(self, journal: Journal, now: datetime) -> Journal:
        """Take the measurements due at ``now``; the journal with the batch's verdict once it has one."""
        batch = _analysed_batch(journal)
        if batch is None:
            return journal
        evidence = self._window(journal, batch, now)
        if evidence is None:
            return journal
        checks = journal.plan.policy.analysis.checks
        for check in checks:
            if self._due(check, evidence, now):
                measured = self._measure(journal, check, evidence, now)
                if measured is not None:
                    evidence = evidence.with_measurement(measured)
                    log.info("analysis of %s: check %s: %s: %s", evidence.label, check.name, measured.verdict.value,
                             measured.reason)
        verdict = batch_analysis(checks, {c.name: evidence.checks[c.name].status(c) for c in checks})
        if verdict.verdict is not None:
            evidence = evidence.with_verdict(f"{verdict.verdict.value}: {verdict.reason}")
        self._evidence = evidence
        self._save()
        if verdict.verdict is None:
            return journal
        log.info("analysis of %s: %s: %s", evidence.label, verdict.verdict.value, verdict.reason)
        return journal.with_analysis(batch, verdict.verdict, at=now, reason=verdict.reason, nodes=verdict.nodes)

    def next_due(self, journal: Journal, now: datetime) -> datetime | None:
        """When a measurement (or a retry) is next due for the running batch; None: nothing to do."""
        batch = _analysed_batch(journal)
        evidence = self._evidence
        if batch is None or evidence is None or evidence.batch != batch:
            return None
        times = [self._next_time(c, evidence) for c in journal.plan.policy.analysis.checks
                 if evidence.checks[c.name].status(c).verdict is CheckVerdict.RUNNING]
        return max(now, min(times)) if times else None

    # -- the window ------------------------------------------------------------------------

    def _window(self, journal: Journal, batch: int, now: datetime) -> BatchEvidence | None:
        """The running batch's evidence: kept, resumed from the store, or begun now if its nodes settled."""
        if self._evidence is not None and self._evidence.batch == batch:
            return self._evidence
        self._failing_since.clear()
        self._retry_at.clear()
        loaded = self.store.load_evidence(journal.rollout, batch)
        if loaded is not None:
            self._evidence, self._rv = loaded
            self._saved = loaded[0]
            log.info("analysis of %s: resumed (began %s)", loaded[0].label, human(loaded[0].started_at))
            return self._evidence
        assigned = [n for n in journal.assigned_nodes(batch=batch) if journal.nodes[n].phase not in NOT_OURS_PHASES]
        if any(journal.nodes[n].phase in CONVERGING for n in assigned):
            return None  # the window opens when every node of the batch has settled (or failed within budget)
        nodes = [n for n in assigned if journal.nodes[n].phase in SETTLED_PHASES]
        if not nodes:
            return None
        plan = journal.plan
        control = tuple(n for n in plan.nodes if not journal.nodes[n].assigned and not journal.nodes[n].skipped)
        checks = {c.name: CheckEvidence.of(c) for c in plan.policy.analysis.checks}
        self._evidence = BatchEvidence(journal.rollout, batch, plan.batches[batch].label, now, tuple(sorted(nodes)),
                                       control, checks)
        self._rv, self._saved = None, None
        log.info("analysis of %s begins: %d node(s), control cohort of %d, %d check(s)", self._evidence.label,
                 len(nodes), len(control), len(checks))
        self._save()
        return self._evidence

    def _next_time(self, check: AnalysisCheck, evidence: BatchEvidence) -> datetime:
        due = evidence.started_at + check.interval * (evidence.checks[check.name].taken + 1)
        return max(due, self._retry_at.get(check.name, due))

    def _due(self, check: AnalysisCheck, evidence: BatchEvidence, now: datetime) -> bool:
        if evidence.checks[check.name].status(check).verdict is not CheckVerdict.RUNNING:
            return False
        return now >= self._next_time(check, evidence)

    # -- one measurement -------------------------------------------------------------------

    def _measure(self, journal: Journal, check: AnalysisCheck, evidence: BatchEvidence,
                 now: datetime) -> Measurement | None:
        window = now - evidence.started_at
        written = [journal.nodes[n].assigned_at for n in evidence.nodes if n in journal.nodes]
        since_write = evidence.started_at - min((w for w in written if w is not None), default=evidence.started_at)
        query, control_query = check_queries(check, nodes=evidence.nodes, control=evidence.control, window=window,
                                             since_write=since_write)
        before_query, control_before_query = check_before_queries(check, nodes=evidence.nodes,
                                                                  control=evidence.control, window=window,
                                                                  since_write=since_write)
        control_nodes, canary = len(evidence.control), journal.plan.batches[evidence.batch].canary
        skipped = skipped_for_its_cohort(check, at=now, query=query, control_nodes=control_nodes, canary=canary)
        if skipped is not None:
            return skipped  # nothing to ask Prometheus
        if self.metrics is None:
            return unreachable(check, at=now, query=query, error=NO_PROMETHEUS)
        try:
            samples = self.metrics.instant(query, at=now)
            control = self.metrics.instant(control_query, at=now) if control_query and evidence.control else None
            before = self.metrics.instant(before_query, at=now) if before_query else None
            control_before = self.metrics.instant(control_before_query, at=now) \
                if control_before_query and evidence.control else None
        except MetricsQueryError as exc:
            return unreachable(check, at=now, query=query, error=f"the query failed: {exc}")
        except MetricsUnreachableError as exc:
            return self._ride_out(journal, check, query, now, str(exc))
        self._failing_since.pop(check.name, None)
        self._retry_at.pop(check.name, None)
        return judge(check, at=now, query=query, samples=samples, control_query=control_query,
                     control_samples=control, before_samples=before, control_before_samples=control_before,
                     control_nodes=control_nodes, canary=canary)

    def _ride_out(self, journal: Journal, check: AnalysisCheck, query: str, now: datetime,
                  error: str) -> Measurement | None:
        tolerance = journal.plan.policy.analysis.prometheus.outage_tolerance
        since = self._failing_since.setdefault(check.name, now)
        if now - since < tolerance:
            if since == now:
                log.warning("analysis: %s; riding it out for up to %s", error, tolerance)
            self._retry_at[check.name] = now + timedelta(seconds=RETRY_S)
            return None
        self._failing_since.pop(check.name, None)
        self._retry_at.pop(check.name, None)
        return unreachable(check, at=now, query=query,
                           error=f"Prometheus out of reach for {tolerance} (outageTolerance): {error}")

    # -- the evidence ----------------------------------------------------------------------

    def _save(self) -> None:
        """Compare-and-swap the evidence when it changed; a failed write is tried again next time
        (the evidence is kept in memory meanwhile: a measurement never stops the rollout)."""
        evidence = self._evidence
        if evidence is None or evidence == self._saved:
            return
        try:
            try:
                self._rv = self.store.save_evidence(evidence, resource_version=self._rv)
            except ConflictError:  # our last answer was lost: read the version and write again
                current = self.store.load_evidence(evidence.rollout, evidence.batch)
                self._rv = current[1] if current else None
                self._rv = self.store.save_evidence(evidence, resource_version=self._rv)
        except GatewayError as exc:
            log.warning("analysis of %s: the evidence could not be written (%s); kept, written again next time",
                        evidence.label, exc)
            return
        self._saved = evidence


def _analysed_batch(journal: Journal) -> int | None:
    """The batch whose analysis runs now: in progress, without a verdict, in a running rollout."""
    if not journal.plan.policy.analysis.enabled or journal.status is not RolloutStatus.RUNNING:
        return None
    batch = journal.current_batch()
    if batch is None:
        return None
    state = journal.batches[batch]
    if state.status is not BatchStatus.IN_PROGRESS or state.analysis is not None:
        return None
    return batch
