"""PrefectShell: a run shown in its flow run - and nothing else.

The run (``rollout.run.Run``) decides and acts on a thread of its own; this shell follows what it
tells (:meth:`PrefectShell.follow`) and makes it visible in Prefect: one log line per change of
mind (in the operator's words) and per person's request, each batch as a task run of the flow run
(``flows.batch_runs``: the run graph shows the batches, with their nodes and times), a progress
artifact, a table artifact and a Prefect event per finished batch, the approval gate as a typed
``pause_flow_run`` whose answer it hands back to the run, and the run's end: the final report the
core wrote, published as an artifact, and a deferred run's continuation scheduled.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Mapping
from datetime import datetime, timezone
from typing import Any

from prefect import get_run_logger
from prefect.artifacts import (
    create_markdown_artifact,
    create_progress_artifact,
    create_table_artifact,
    update_progress_artifact,
)
from prefect.client.schemas.objects import FlowRun
from prefect.context import FlowRunContext

from flows import events
from flows.approval import wait_for_approval
from flows.batch_runs import BatchRuns
from flows.run_logs import sent_to_flow_run
from flows.stop import STOP as STOP  # the flows and the CLI take it from here too
from rollout.machine.actions import Action, AwaitApproval, Wait, WaitForWindow
from rollout.analysis import BatchEvidence, check_rows, evidence_event, evidence_lines, evidence_markdown
from rollout.journal import ApprovalOutcome, BatchStatus, Journal
from rollout.loop.engine import Answer
from rollout.model import NodeObservation, NodePhase
from rollout.machine.phases import BAD_CONFIG_PHASES, BUDGET_PHASES
from rollout.ports import EvidenceReader
from rollout.usecases.prepare import Prepared
from rollout.report import BatchResult, errors_markdown, rows_markdown, table_artifact_rows
from rollout.run import BatchFinished, Decided, Run
from rollout.run.report import ACTION_WORDS, batch_result
from rollout.timefmt import human

# nodes a progress report counts as failed: the config's doing, or put back after it
FAILED_PHASES = frozenset({*BAD_CONFIG_PHASES, *BUDGET_PHASES, NodePhase.REVERTING, NodePhase.REVERTED})
# decisions a person caused (rollout.machine.requests), logged when they appear in the journal
PERSON_KINDS = ("Request", "Retry")


def utcnow() -> datetime:
    return datetime.now(timezone.utc)


def tag_flow_run(**labels: str) -> None:
    """Tag the current flow run ``rollout:NAME``, ``policy:NAME``, ``config:NAME``, so the UI's tag
    filter finds every run of a rollout, of a policy or of a config. Best effort: a tag never stops
    a rollout."""
    from prefect.client.orchestration import get_client

    ctx = FlowRunContext.get()
    if ctx is None or ctx.flow_run is None:
        return
    tags = sorted(set(ctx.flow_run.tags or ()) | {f"{key}:{value}" for key, value in labels.items() if value})
    try:
        with get_client(sync_client=True) as client:
            client.update_flow_run(ctx.flow_run.id, tags=tags)
        ctx.flow_run.tags = tags
    except Exception as exc:  # noqa: BLE001 - visibility never stops a rollout
        get_run_logger().debug("tags: %s", exc)


def artifact_key(rollout: str, suffix: str) -> str:
    clean = "".join(c if c.isalnum() else "-" for c in rollout.lower()).strip("-") or "rollout"
    return f"{clean}-{suffix}"[:100]


class PrefectShell:
    """A run shown in the current flow run (see the module doc)."""

    def __init__(self, run: Run, *, prepared: Prepared | None = None, approval_poll_s: int = 2,
                 evidence: EvidenceReader | None = None) -> None:
        self.run = run
        self.name = run.name
        self.evidence = evidence
        self.batch_runs = BatchRuns()
        self.people_seen: int | None = None
        self.prepared = prepared
        self.approval_poll_s = approval_poll_s
        self.last_line = ""
        self.progress_id: Any = None
        self.results: dict[int, BatchResult] = {}
        self.asked: set[int] = set()  # the gates asked in this flow run (a gate is asked once)
        self.last_progress: dict[str, Any] = {}
        self.last_progress_sent = 0.0
        self.heartbeat_s = events.progress_heartbeat().total_seconds()

    def follow(self) -> None:
        """Show everything the run tells, in order, until it ends; ask a person at each gate. The
        run's own log lines go to this flow run's log meanwhile (``flows.run_logs``)."""
        ctx = FlowRunContext.get()
        with sent_to_flow_run(str(ctx.flow_run.id)) if ctx and ctx.flow_run else contextlib.nullcontext():
            self._follow()

    def _follow(self) -> None:
        for notice in self.run.notices():
            if isinstance(notice, BatchFinished):
                self.batch_finished(notice.index, notice.journal, notice.observations)
                continue
            assert isinstance(notice, Decided)
            self.decided(notice.action, notice.journal, notice.observations)
            if isinstance(notice.action, AwaitApproval) and notice.action.batch not in self.asked:
                self.asked.add(notice.action.batch)
                self.ask(notice.action, notice.journal)

    # -- what the run tells ----------------------------------------------------------------

    def decided(self, action: Action, journal: Journal, observations: Mapping[str, NodeObservation]) -> None:
        line = action.reason if isinstance(action, (Wait, WaitForWindow)) else \
            f"{ACTION_WORDS.get(action.kind, action.kind)}: {action.reason}"
        if line != self.last_line:
            get_run_logger().info(line)
            self.last_line = line
        self._people(journal)
        current = journal.current_batch()
        if current is not None and journal.batches[current].status is BatchStatus.IN_PROGRESS and \
                not journal.rollback_to:
            self._open_batch(journal, current)
        if not isinstance(action, Wait):
            self._progress(journal)
        else:
            self._progress_event(journal)  # unchanged: sent again each heartbeat, a sign of life

    def _open_batch(self, journal: Journal, index: int) -> None:
        plan_batch = journal.plan.batches[index]
        self.batch_runs.start(index, plan_batch.name, plan_batch.nodes)

    def _people(self, journal: Journal) -> None:
        """Log each request (pause, promote...) and retry once, as the journal records it."""
        said = [d for d in journal.decisions if d.kind in PERSON_KINDS]
        if self.people_seen is not None:
            for d in said[self.people_seen:]:
                get_run_logger().info("%s: %s", ACTION_WORDS[d.kind], d.reason)
        self.people_seen = len(said)

    def close(self) -> None:
        """The run ended, however it ended: every batch task run still open ends with it."""
        why = "the run was stopped during this batch" if STOP.is_set() else "the run ended during this batch"
        self.batch_runs.close(why)

    def batch_finished(self, index: int, journal: Journal, observations: Mapping[str, NodeObservation]) -> None:
        succeeded = journal.batches[index].status is BatchStatus.DONE
        result = batch_result(journal, observations, index, "succeeded" if succeeded else "failed", utcnow())
        self.results[index] = result
        if not journal.rollback_to:
            self._open_batch(journal, index)  # a batch begun and ended before the flow run attached
        self.batch_runs.finish(index, result)
        errors = errors_markdown(result.rows)  # in full here: the table's cell has the first clause only
        create_table_artifact(table=table_artifact_rows(result.rows, journal.target),
                              key=artifact_key(self.name, f"batch-{index + 1}"),
                              description=f"Rollout `{self.name}`, batch {result.label}: **{result.outcome}**"
                                          + (f"\n\n{errors}" if errors else ""))
        evidence = self._evidence_of(journal, index)
        payload: dict[str, Any] = {"batch": index + 1, "nodes": result.nodes, "outcome": result.outcome,
                                   "reason": result.reason, "target": str(journal.target)}
        if evidence is not None:
            create_table_artifact(table=check_rows(evidence), key=artifact_key(self.name, f"analysis-{index + 1}"),
                                  description=f"Rollout `{self.name}`, batch {result.label}: "
                                  + "; ".join(evidence_lines(evidence)[:1]))
            payload["analysis"] = evidence_event(evidence)
        events.emit_rollout_event(events.BATCH_SUCCEEDED if succeeded else events.BATCH_FAILED, self.name, payload)
        self._progress(journal)

    def _evidence_of(self, journal: Journal, index: int) -> BatchEvidence | None:
        """The batch's analysis evidence, when it has some (best effort: visibility never stops a rollout)."""
        if self.evidence is None or not journal.plan.policy.analysis.enabled:
            return None
        try:
            loaded = self.evidence.load_evidence(self.name, index)
        except Exception as exc:  # noqa: BLE001 - visibility never stops a rollout
            get_run_logger().debug("analysis evidence: %s", exc)
            return None
        return loaded[0] if loaded else None

    # -- a person's answer -------------------------------------------------------------------

    def ask(self, gate: AwaitApproval, journal: Journal) -> None:
        """Pause the flow run for the gate's answer and hand it to the run; stop asking once the
        gate no longer waits (a request ended it, its deadline passed, the run was stopped)."""
        nxt = journal.plan.batches[gate.next_batch]
        diff = "\n".join(f"    {d}" for d in (self.prepared.diff if self.prepared else ())[:40]) \
            or "    (no field changes read)"
        done = self.results.get(gate.batch)
        evidence = self._evidence_of(journal, gate.batch)
        title = (f"## Rollout `{self.name}`: the analysis of batch {gate.batch + 1} was inconclusive: go on?"
                 if gate.about_analysis else f"## Rollout `{self.name}`: approve batch {gate.next_batch + 1}?")
        description = "\n".join([
            title, "",
            f"Target: `{journal.target}`  ·  policy `{journal.policy_name}`  ·  answer by "
            f"{human(gate.deadline)}", "",
            "### Evidence", *[f"* {line}" for line in gate.evidence], "",
            rows_markdown(done.rows, journal.target) if done else "", "",
            "### Analysis", "", evidence_markdown(evidence) if evidence else "(no analysis)", "",
            "### Config diff (against a sample of the nodes' running config)", "", diff, "",
            *([f"### Next: batch {gate.next_batch + 1} ({nxt.size} nodes)", ", ".join(nxt.nodes), ""]
              if gate.next_batch != gate.batch else ["### Next: the last batch is done; approving completes the rollout", ""]),
            "Answer with **decision** `approve` or `reject` and your name; a comment is recorded too.",
        ])
        timeout = max(1, int((gate.deadline - utcnow()).total_seconds()))
        log = get_run_logger()
        log.info("waiting for approval %s (until %s): rollout approve %s",
                 f"after batch {gate.batch + 1}" if gate.about_analysis else f"before batch {gate.next_batch + 1}",
                 human(gate.deadline), self.name)
        # named for what it asks: the gate before a batch, or whether to go on after an inconclusive one
        key = (f"{artifact_key(self.name, 'batch')}-{gate.batch + 1}-analysis" if gate.about_analysis
               else f"{artifact_key(self.name, 'batch')}-{gate.next_batch + 1}")
        answer = wait_for_approval(key=key,
                                   description=description, timeout_s=timeout, poll_interval_s=self.approval_poll_s,
                                   stop=self.run.gate_closed(gate.batch))
        if answer.stopped:
            return  # the gate closed without this answer: the run's next decisions say why
        log.info("approval %s: %s", f"after batch {gate.batch + 1}" if gate.about_analysis
                 else f"before batch {gate.next_batch + 1}", answer.summary)
        if answer.timed_out:
            outcome, by = ApprovalOutcome.TIMED_OUT, "timeout"
        else:
            outcome = ApprovalOutcome.APPROVED if answer.approved else ApprovalOutcome.REJECTED
            by = answer.approver
        self.run.answer_gate(gate.batch, Answer(outcome, by=by, note=answer.comment))

    # -- the run's end -----------------------------------------------------------------------

    def publish_report(self, report: str, outcome: str) -> None:
        create_markdown_artifact(markdown=report, key=artifact_key(self.name, "report"),
                                 description=f"Rollout `{self.name}`: {outcome}")

    def continue_at(self, until: datetime, flow_params: Mapping[str, Any]) -> str:
        """Schedule a run of this flow run's deployment (same parameters: it resumes from the
        journal) at ``until``; its id. A deferred run hands the rest to it and ends."""
        from prefect.deployments import run_deployment

        ctx = FlowRunContext.get()
        run = ctx.flow_run if ctx else None
        assert run is not None and run.deployment_id is not None, "only a deployment's run defers"
        # the same tags: a fleet finds a cluster's runs (this one's continuation too) by them
        scheduled = run_deployment(run.deployment_id, parameters=dict(flow_params), scheduled_time=until,
                                   timeout=0, as_subflow=False, tags=list(run.tags or ()))
        assert isinstance(scheduled, FlowRun)  # called outside an event loop, it answers at once
        get_run_logger().info("deferred: flow run %s continues the rollout at %s", scheduled.name, human(until))
        return str(scheduled.id)

    # -- progress ----------------------------------------------------------------------------

    def _progress_event(self, journal: Journal) -> None:
        """Where the rollout stands, as a fleet shows it (a Prefect event): when it changed, and at
        least every heartbeat (``events.progress_heartbeat``): a fleet tells a live run from a dead one by it."""
        on_target = sum(1 for r in journal.nodes.values() if r.phase in (NodePhase.ACTIVE, NodePhase.PROMOTED))
        failed = sum(1 for r in journal.nodes.values() if r.phase in FAILED_PHASES)
        current = journal.current_batch()
        payload = {"state": journal.shown_status, "batch": len(journal.batches) if current is None else current + 1,
                   "batches": len(journal.batches), "nodes": len(journal.plan.nodes), "done": on_target,
                   "failed": failed}
        now = time.monotonic()
        if payload != self.last_progress or now - self.last_progress_sent >= self.heartbeat_s:
            self.last_progress, self.last_progress_sent = payload, now
            events.emit_rollout_event(events.ROLLOUT_PROGRESS, self.name, payload)

    def _progress(self, journal: Journal) -> None:
        planned = list(journal.plan.nodes)
        settled = (NodePhase.ACTIVE, NodePhase.PROMOTED, NodePhase.REVERTED, NodePhase.GONE)
        done = sum(1 for n in planned if journal.nodes[n].phase in settled)
        fraction = 100.0 if not planned else round(100.0 * done / len(planned), 1)
        self._progress_event(journal)
        try:
            if self.progress_id is None:
                self.progress_id = create_progress_artifact(
                    progress=fraction, key=artifact_key(self.name, "progress"),
                    description=f"Nodes of rollout `{self.name}` settled")
            else:
                update_progress_artifact(self.progress_id, progress=fraction)
        except Exception as exc:  # noqa: BLE001 - visibility never stops a rollout
            get_run_logger().debug("progress artifact: %s", exc)


__all__ = ["FAILED_PHASES", "PERSON_KINDS", "STOP", "PrefectShell", "artifact_key", "tag_flow_run", "utcnow"]
