"""What a batch's analysis verdict does to the rollout (the verdict itself: ``rollout.analysis``).

A batch whose policy has analysis checks is done only once its analysis passed (rule 7 waits for
it). A **failed** analysis is a batch failure: the policy's ``failureAction``, naming the nodes
that drove it (rule 4). An **inconclusive** one does what ``analysis.onInconclusive`` says: ``ask``
opens the batch's approval gate with the evidence (approve = go on, as if it had passed; reject
and timeout as ``approval.onReject``/``onTimeout`` say, like any gate), ``fail`` is a failure,
``halt`` stops, ``pass`` goes on. The gate is the batch's one approval record, so the person who
approved an inconclusive analysis is not asked again by a gate after the same batch.
"""

from __future__ import annotations

from rollout.machine.actions import NO_FAILED, Action, AwaitApproval, Halt
from rollout.journal import AnalysisRecord, AnalysisVerdict, ApprovalOutcome, BatchStatus, Journal
from rollout.machine.failures import Failure, on_failure
from rollout.machine.reasons import listed
from rollout.machine.situation import Situation
from rollout.policy import ApprovalRejectAction, ApprovalTimeoutAction, OnInconclusive
from rollout.timefmt import human


def _record(j: Journal, batch: int) -> AnalysisRecord | None:
    return j.batches[batch].analysis


def analysis_failure(j: Journal) -> Failure | None:
    """Rule 4 for analysis: a failed analysis (or an inconclusive one the policy fails) of a started batch."""
    for batch, state in enumerate(j.batches):
        record = state.analysis
        if record is None or state.status is BatchStatus.PENDING:
            continue
        label = j.plan.batches[batch].label
        if record.verdict is AnalysisVerdict.FAILED:
            failed = {n: f"analysis: {record.reason}" for n in record.nodes} or dict(NO_FAILED)
            named = f" ({listed(record.nodes)})" if record.nodes else ""
            return Failure(f"the analysis of {label} failed{named}: {record.reason}", failed, batch)
        if record.verdict is AnalysisVerdict.INCONCLUSIVE and \
                j.plan.policy.analysis.on_inconclusive is OnInconclusive.FAIL:
            return Failure(f"the analysis of {label} was inconclusive (analysis.onInconclusive is fail): "
                           f"{record.reason}", NO_FAILED, batch)
    return None


def analysis_hold(s: Situation, batch: int) -> Action | None:
    """An inconclusive analysis of the running batch: halt, or the gate and its answer."""
    j = s.journal
    record = _record(j, batch)
    if record is None or record.verdict is not AnalysisVerdict.INCONCLUSIVE:
        return None
    on = s.policy.analysis.on_inconclusive
    label = s.plan.batches[batch].label
    if on is OnInconclusive.HALT:
        return Halt(reason=f"the analysis of {label} was inconclusive (analysis.onInconclusive is halt): "
                    f"{record.reason}", batch=batch)
    if on is not OnInconclusive.ASK:
        return None
    gate = j.batches[batch].approval
    if gate is None or gate.outcome is None:
        deadline = gate.deadline if gate else s.now + s.policy.approval.timeout
        nxt = min(batch + 1, len(s.plan.batches) - 1)
        return AwaitApproval(
            reason=f"the analysis of {label} was inconclusive; a person decides whether to go on "
            f"(until {human(deadline)})",
            batch=batch, next_batch=nxt, deadline=deadline, about_analysis=True,
            evidence=(f"analysis of {label}: inconclusive: {record.reason}",
                      "approve: go on as if it had passed; reject: approval.onReject"),
        )
    if gate.outcome is ApprovalOutcome.APPROVED:
        return None
    who = f" by {gate.by}" if gate.by else ""
    if gate.outcome is ApprovalOutcome.REJECTED:
        reason = f"the inconclusive analysis of {label} was rejected{who}"
        if s.policy.approval.on_reject is ApprovalRejectAction.FAIL:
            return on_failure(j, Failure(f"{reason}; approval.onReject is fail", NO_FAILED, batch))
        return Halt(reason=reason, batch=batch)
    reason = f"nobody answered the inconclusive analysis of {label} within {s.policy.approval.timeout}"
    if s.policy.approval.on_timeout is ApprovalTimeoutAction.PROCEED:
        return None
    if s.policy.approval.on_timeout is ApprovalTimeoutAction.HALT:
        return Halt(reason=f"{reason}; approval.onTimeout is halt", batch=batch)
    return on_failure(j, Failure(f"{reason}; approval.onTimeout is fail", NO_FAILED, batch))
