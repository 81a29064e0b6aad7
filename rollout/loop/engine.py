"""The run loop: observe -> decide -> act, for a rollout and for a rollback, until it ends.

``rollout.machine`` decides; this module runs the decisions against a cluster and owns every
rule about *when* to decide and *how* to act, so the Prefect flows only add visibility:

* **Fresh state.** Decisions are made on a live informer (one node watch, one Lease watch,
  running for the whole run, through approval pauses and window waits). Before deciding the
  engine waits until both watches are live; a Lease is judged only over the time they were.
* **Exactly once.** Every write is checked against the freshest copy of the node first (a
  node already carrying the assignment, or already reverted, is not written again), and the
  write's answer is folded into the informer so a replayed, older watch event cannot hide it.
* **First things first.** A batch's end is written to the journal and told to the watcher before
  the decision that plans the next batch (which, at 20,000 nodes, takes as long again).
* **Economy.** The journal is written only when the rollout's state changes; a batch's PATCHes
  go out concurrently (``rollout.loop.fanout``, within the gateway's rate limit); node Events go out
  from a few background senders (``rollout.loop.node_events``), after the batch's writes and taking
  only the rate limit's spare tokens, so they never hold up a decision; at the end the run gives
  them a second at most and hands the rest off (``hand_off``), so it returns when the rollout is
  over.
* **Nothing slow on the deciding thread.** A person's lifecycle request (``rollout pause`` ...)
  is read by a thread of its own (``rollout.loop.requests``) and applied at the next decision.
* **Outages and stops.** An API outage is ridden out for ``apiOutageTolerance`` while the lock is
  kept; ``stop`` (Ctrl-C, SIGTERM) ends the loop within seconds in every state (the writes in
  flight give up their retries), marks the journal stopped (trying for a few seconds: the API
  server may be away) and returns :attr:`Outcome.STOPPED`; running the same name again resumes.
  No thread of the run outlives :meth:`Engine.run`.

* **A fleet's disruption budget.** A fleet's run takes a batch's nodes from the fleet's budget
  (``rollout.loop.budget``) before deciding to write them; while the fleet's other clusters hold
  it, the batch is not started (the decision is dropped, nothing is recorded) and the run waits
  and asks again.

* **Nobody watching holds it up.** Whoever shows the run (a terminal, a Prefect flow run) is told
  (:class:`RunWatcher`), never asked; a gate's answer is read when it has come (:class:`Gates`),
  and while it has not the loop goes on deciding, so a person's request or the gate's deadline is
  applied at a gate as anywhere else.

Nothing here imports Prefect or the Kubernetes client: the cluster is a port (``rollout.ports``),
the watcher and the gates protocols.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from datetime import datetime, timedelta, timezone

from rollout.machine.actions import (
    Action,
    AssignBatch,
    AwaitApproval,
    Complete,
    DrainNodes,
    Halt,
    RevertNodes,
    RollbackDone,
    UncordonNodes,
    Wait,
    WaitForWindow,
)
from rollout.loop.analysis_run import AnalysisRun
from rollout.loop.budget import BudgetHold
from rollout.errors import ConflictError, GatewayError, NotFoundError
from rollout.loop.fanout import fan_out
from rollout.journal import BatchStatus, Journal, JournalDocument, node_labels, stamped, to_document
from rollout.machine import apply_request, look, step_on
from rollout.model import ConfigRef, NodeObservation
from rollout.loop.drains import Drainer
from rollout.machine.drains import left_cordoned
from rollout.names import ANN_ROLLOUT, EVENT_ASSIGNED, EVENT_FAILED, EVENT_HALTED, EVENT_REVERTED
from rollout.loop.node_events import NodeEventQueue, PendingEvent
from rollout.outcome import Outcome
from rollout.policy import format_duration
from rollout.ports import Cluster, DisruptionBudget, Informer, Lock
from rollout.loop.requests import RequestReader
from rollout.loop.seams import Answer, Either, Gates, NoGates, OutageError, RunResult, RunWatcher

log = logging.getLogger("rollout.engine")

# PATCHes in flight at once: a batch goes out at this many over the server's answer time (the
# adaptive rate bounds it too; bench/README.md has how fewer held a large batch up)
DEFAULT_CONCURRENCY = 64
# how often `rollout pause/resume/abort/promote` is looked for, and the longest a wait goes
# without deciding again (so a request is applied within two of these)
REQUEST_POLL_S = 2.0
# at the end, with nobody to hand them to, the last node Events get this long (the rest are
# counted); with a hand-off they go to it at once: the command returns as soon as the rollout is over
EVENTS_DRAIN_S = 1.0
STOPPED_SAVE_S = 3.0  # a stop tries this long to say so in the journal (the API server may be away)
RECONNECT_QUIET_S = 5.0  # a watch reconnecting within this is routine, not an outage to report


# ------------------------------------------------------------------------------ the engine


def utcnow() -> datetime:
    return datetime.now(timezone.utc)


class Engine:
    """Run one rollout (or rollback) journal to its end. Build, then :meth:`run` once.

    Args:
        cluster: the gateway.
        journal: the journal to run (new, resumed, or with a rollback requested).
        journal_rv: its ConfigMap's resourceVersion (None when not saved yet).
        watcher: told every decision and every batch's end (visibility).
        gates: the answers to approval gates.
        deferrable: outside every maintenance window, end (DEFERRED) rather than wait: a run on a
            deployment hands the rest to a run scheduled at the window instead of holding its worker.
        lock: the rollout lock (its ``check`` raises when it was lost).
        stop: set it to stop the run (Ctrl-C); the engine returns STOPPED shortly after. Give the
            gateway the same event (``tolerate_outages(stop=...)``): requests in flight see it there.
        selector: label selector the informer watches (None: every node).
        informer: the live view to decide on, when the caller started one already (seeded with
            the list it planned from, so start-up lists the nodes once); by default a new one
            of ``selector``. Either way the engine stops it when the run ends.
        hand_off: takes the node Events still unsent when the run ends (and says who took them),
            so the run need not wait for them; without it they are counted and dropped.
        concurrency: PATCHes in flight at once for one batch (the gateway's token bucket still
            bounds the rate).
        clock: the wall clock (UTC-aware).
        analysis: the batches' analysis (``rollout.loop.analysis_run``), when the policy has checks.
        budget: a fleet's disruption budget, when the run is one cluster's of a fleet that has one.
    """

    def __init__(self, *, cluster: Cluster, journal: Journal, journal_rv: str | None, watcher: RunWatcher,
                 lock: Lock, gates: Gates | None = None, deferrable: bool = False, stop: threading.Event | None = None, selector: str | None = None,
                 informer: Informer | None = None, concurrency: int = DEFAULT_CONCURRENCY,
                 hand_off: Callable[[Sequence[PendingEvent]], str] | None = None,
                 clock: Callable[[], datetime] = utcnow, analysis: AnalysisRun | None = None,
                 budget: DisruptionBudget | None = None) -> None:
        self.cluster = cluster
        self.journal = journal
        self.journal_rv = journal_rv
        self.watcher = watcher
        self.gates = gates or NoGates()
        self.deferrable = deferrable
        self.lock = lock
        self.stop = stop or threading.Event()
        self.concurrency = max(1, concurrency)
        self.clock = clock
        self.analysis = analysis
        self.budget = BudgetHold(budget)
        self.informer = informer or cluster.informer(selector)
        self.events = NodeEventQueue(cluster, clock=clock)
        self.drainer = Drainer(cluster, self.informer, self.events, stop=self.stop, concurrency=self.concurrency)
        self.hand_off = hand_off
        # what this process last committed (nothing yet: a run starts by saving, which also
        # writes a journal of the previous format in the current one); a conflict on a head that
        # is still the one committed came from a person's request (an annotation)
        self._saved: tuple[object, ...] | None = None
        self._saved_head: Mapping[str, str] | None = None
        self._batch_status = tuple(b.status for b in journal.batches)
        self.requests = RequestReader(cluster, journal.rollout, period_s=REQUEST_POLL_S)
        self._was_synced = False

    # -- the loop --------------------------------------------------------------------------

    def run(self) -> RunResult:
        self.informer.start()
        self.events.start()
        try:
            if self.journal.stopped_at is not None:
                self.journal = self.journal.with_stopped(at=None)  # this run resumes it
            self._save()
            # the journal is there to carry a request now; one left while no run was going is
            # applied before the first decision, later ones as the reader finds them
            self._apply_request(self.requests.read_now())
            self.requests.start()
            return self._loop()
        except GatewayError:
            if not self.stop.is_set():
                raise
            return self._stopped()  # the stop cut that call short: the run was stopped, not failed
        finally:
            self.requests.close()
            self.informer.stop()
            self.events.close()
            self.budget.close()

    def _loop(self) -> RunResult:
        while True:
            if self.stop.is_set():
                return self._stopped()
            self.lock.check()
            if not self._wait_synced():
                return self._stopped()
            self._apply_request(self.requests.latest())
            seen = self.informer.version
            observations = self.informer.snapshot()
            now = self.clock()
            seen_now = look(self.journal, observations, now=now, watched_since=self.informer.watched_since)
            if _ended_batches(self._batch_status, seen_now.journal):
                # what a person (and the next gate) waits for is written and told first: at
                # 20,000 nodes planning and recording the next batch takes as long again
                self.journal = seen_now.journal
                self._save()
                self._announce_batches(observations)
            self.budget.follow(seen_now.journal)
            self.journal, action = step_on(seen_now)
            if isinstance(action, AssignBatch) and not self.budget.taken(action, self.journal):
                # not started: the decision and what it would have recorded are dropped
                self.journal, action = seen_now.journal, self.budget.wait(action, seen_now.journal, now)
            self._save()
            if self._analysed(now):
                continue  # a batch's analysis has its verdict: decide again on it
            self.watcher.decided(action, self.journal, observations)
            self._announce_batches(observations)
            result = self._act(action, observations, seen=seen, now=now)
            if result is not None:
                return result

    def _act(self, action: Action, observations: Mapping[str, NodeObservation], *, seen: int,
             now: datetime) -> RunResult | None:
        if isinstance(action, Wait):
            until = min(action.until, self._measurement_due(now) or action.until)
            timeout = min((until - now).total_seconds(), REQUEST_POLL_S)
            self.informer.wait_for_change(seen, timeout, stop=self.stop)
        elif isinstance(action, AssignBatch):
            self._assign(action)
        elif isinstance(action, DrainNodes):
            self._drain(action)
        elif isinstance(action, UncordonNodes):
            self.drainer.uncordon(action, self.journal.rollout)
        elif isinstance(action, RevertNodes):
            self._revert(action)
        elif isinstance(action, AwaitApproval):
            self._approval(action, seen=seen, now=now)
        elif isinstance(action, WaitForWindow):
            if self.deferrable:
                return self._result(Outcome.DEFERRED, action.reason, action)
            timeout = min((action.until - now).total_seconds(), REQUEST_POLL_S)
            self.informer.wait_for_change(seen, timeout, stop=self.stop)
        elif isinstance(action, (Complete, Halt, RollbackDone)):
            return self._finish(action, observations)
        return None

    def _analysed(self, now: datetime) -> bool:
        """Take the analysis measurements due now; True when a batch's verdict came in (saved)."""
        if self.analysis is None:
            return False
        analysed = self.analysis.advance(self.journal, now)
        if analysed is self.journal:
            return False
        self.journal = analysed
        self._save()
        return True

    def _measurement_due(self, now: datetime) -> datetime | None:
        return self.analysis.next_due(self.journal, now) if self.analysis is not None else None

    def _wait_synced(self) -> bool:
        """Decide only on a live view: ride out an outage for ``apiOutageTolerance``."""
        if self.informer.synced:
            self._was_synced = True
            return True
        tolerance = self.journal.plan.policy.api_outage_tolerance
        # a watch ends every few minutes and reconnects at once: only a longer gap is news (and
        # the quiet wait is part of the tolerance, not added to it)
        quiet = min(RECONNECT_QUIET_S, tolerance.total_seconds()) if self._was_synced else 0.0
        lost = self.clock()
        if quiet and self.informer.wait_synced(quiet, stop=self.stop):
            return True
        if self._was_synced:
            log.warning("lost the watch on the nodes; waiting up to %s for the API server", format_duration(tolerance))
            self.watcher.cluster_away(lost, lost + tolerance)
        else:
            log.debug("starting the node and Lease watches")
        synced = self.informer.wait_synced(tolerance.total_seconds() - quiet, stop=self.stop)
        if self._was_synced:
            self.watcher.cluster_away(None, None)
        if synced:
            if self._was_synced:
                log.info("watching the nodes again; re-synchronised before deciding")
            return True
        if self.stop.is_set():
            return False
        raise OutageError(f"the API server was out of reach for longer than apiOutageTolerance ({format_duration(tolerance)}); "
                          f"the journal is in the cluster: run the same rollout again to resume")

    # -- acting ----------------------------------------------------------------------------

    def _assign(self, action: AssignBatch) -> None:
        label = self.journal.plan.batches[action.batch].label
        target = f"{action.target.namespace}/{action.target.name}"

        def one(node: str) -> datetime | None:
            if self.stop.is_set():
                return None
            held = self.informer.get(node)
            if held is not None and _carries(held, action.target, action.annotations[node]):
                return None  # landed already (a resumed run, a retried batch): never write twice
            # stamped as it is sent: a node whose acknowledgment dies with this process is timed
            # from this moment on resume, not from when its batch was decided
            written = self._write(node, action.target, stamped(action.annotations[node], at=self.clock()))
            if written is not None:
                self.events.put(node, EVENT_ASSIGNED, f"rollout {self.journal.rollout}: {label}: assigned {target}")
            return written

        self._record_writes(one, action.nodes, Journal.with_written)

    def _revert(self, action: RevertNodes) -> None:
        for node, why in action.failed.items():
            if action.scope != "retry":
                self.events.put(node, EVENT_FAILED, f"rollout {self.journal.rollout}: {why}", "Warning")

        def one(node: str) -> datetime | None:
            if self.stop.is_set():
                return None
            to = action.nodes[node]
            held = self.informer.get(node)
            if held is not None and held.points_at(to):
                return None  # reverted already
            written = self._write(node, to, action.annotations.get(node, {}))
            if written is not None:
                where = f"{to.namespace}/{to.name}" if to else "local config"
                self.events.put(node, EVENT_REVERTED, f"rollout {self.journal.rollout}: back on {where}: "
                                f"{action.reason}", "Warning")
            return written

        self._record_writes(one, sorted(n for n in action.nodes if n not in action.held), Journal.with_revert_written)

    def _drain(self, action: DrainNodes) -> None:
        """One round of a drain (``rollout.loop.drains``), folded into the journal even when cut short;
        the next look ``poll`` after the round began (a round of thousands of evictions outlasts it)."""
        began, progress = self.clock(), dict[str, tuple[bool, str]]()
        try:
            self.drainer.drain(action, self.journal, progress)
        finally:
            self.journal = self.journal.with_drain_progress(progress, at=self.clock())
            self._save()
        if len(progress) < len(action.nodes) or not all(drained for drained, _ in progress.values()):
            self.stop.wait(max(0.0, action.poll.total_seconds() - (self.clock() - began).total_seconds()))

    def _record_writes(self, write: Callable[[str], datetime | None], nodes: Sequence[str],
                       fold: Callable[[Journal, Mapping[str, datetime]], Journal]) -> None:
        """Send the writes; each node's acknowledgment time goes into the journal (even when the
        fan-out ends early), so its clocks start when its own write landed."""
        acknowledged: dict[str, datetime] = {}

        def one(node: str) -> None:
            written = write(node)
            if written is not None:
                acknowledged[node] = written

        try:
            with self.events.writing():
                fan_out(one, nodes, concurrency=self.concurrency, stop=self.stop,
                        cut_short_by=self.cluster.cut_short_by)
        finally:  # a fan-out cut short (a stop, an outage) keeps what was acknowledged
            self.journal = fold(self.journal, acknowledged)
        self._save()

    def _write(self, node: str, source: ConfigRef | None, annotations: Mapping[str, str | None]) -> datetime | None:
        """One write, folded into the informer; when it was acknowledged (None: the node is gone)."""
        try:
            self.informer.observe_written(self.cluster.assign(node, source, annotations=annotations,
                                                              labels=node_labels(annotations)))
        except NotFoundError:
            log.warning("node %s: deleted before its write; nothing to do", node)
            return None
        return self.clock()

    def _approval(self, gate: AwaitApproval, *, seen: int, now: datetime) -> None:
        answer = self.gates.answer(gate)
        if answer is None:  # decide again soon: a request, the deadline or an answer may come meanwhile
            timeout = min(max((gate.deadline - now).total_seconds(), 0.0), REQUEST_POLL_S)
            self.informer.wait_for_change(seen, timeout, stop=Either(self.stop, self.gates.answered))
            return
        self.journal = self.journal.with_approval(gate.batch, answer.outcome, at=self.clock(),
                                                  by=answer.by, note=answer.note)
        self._save()

    # -- journal and visibility ------------------------------------------------------------

    def _apply_request(self, request: Mapping[str, str] | None) -> None:
        """Apply a person's pending lifecycle request (an annotation on the journal), once."""
        if request:
            before = self.journal.decisions
            self.journal = apply_request(self.journal, request.get("id", ""), request.get("action", ""),
                                         by=request.get("by", ""), at=self.clock())
            if self.journal.decisions != before:  # a new request: say what it does, once
                log.info("request: %s", self.journal.decisions[-1].reason)

    def _save(self, *, force: bool = False, cluster: Cluster | None = None) -> None:
        """Write the journal when the rollout's state changed (write-ahead: before acting).
        ``cluster``: the gateway to write through (default: the run's)."""
        cluster = cluster or self.cluster
        if self.journal.material() == self._saved and not force:
            return
        # node phases lag in the parts while the rollout runs (they are recomputed from the nodes
        # on resume): the save that records a batch's end re-encodes none of its nodes' records
        # for their phase alone; the finished journal is then written with where each node ended
        written = self._commit(cluster, phases=False)
        if self.journal.finished:
            self._commit(cluster, phases=True, unless_same_as=written)

    def _commit(self, cluster: Cluster, *, phases: bool, unless_same_as: JournalDocument | None = None,
                ) -> JournalDocument:
        material, document = self.journal.material(), self._document(phases=phases)
        if unless_same_as is not None and document.parts == unless_same_as.parts:
            return document
        try:
            self.journal_rv = cluster.save_journal(self.journal.rollout, document, resource_version=self.journal_rv)
        except ConflictError as exc:
            if not self._only_annotated(cluster):
                raise ConflictError(
                    f"the journal of rollout {self.journal.rollout!r} was changed by another process "
                    "(is the same rollout running twice?); stopping before acting") from exc
            self._apply_request(self.requests.read_now())  # a person's request: apply it before writing over it
            material, document = self.journal.material(), self._document(phases=phases)
            self.journal_rv = cluster.save_journal(self.journal.rollout, document, resource_version=self.journal_rv)
        self._saved, self._saved_head = material, document.head
        return document

    def _document(self, *, phases: bool) -> JournalDocument:
        """The journal's ConfigMaps; the journal keeps the layout of its parts for the next save."""
        document = to_document(self.journal, phases=phases)
        self.journal = replace(self.journal, layout=document.layout)
        return document

    def _only_annotated(self, cluster: Cluster) -> bool:
        """The conflict came from a lifecycle request (annotation), not another writer of the data."""
        loaded = cluster.load_journal(self.journal.rollout)
        if loaded is None or loaded[0].head != self._saved_head:
            return False
        self.journal_rv = loaded[1]
        return True

    def _announce_batches(self, observations: Mapping[str, NodeObservation]) -> None:
        for index in _ended_batches(self._batch_status, self.journal):
            self.watcher.batch_finished(index, self.journal, observations)
        self._batch_status = tuple(b.status for b in self.journal.batches)

    def _stopped(self) -> RunResult:
        """Say so in the journal, trying for :data:`STOPPED_SAVE_S` at most: a stop must not wait out
        an outage. Unsaid, the journal keeps its last state; the next run resumes from it alike."""
        was = self.journal.shown_status
        self.journal = self.journal.with_stopped(at=self.clock())
        try:
            self._save(force=True, cluster=self.cluster.within(STOPPED_SAVE_S))
        except GatewayError as exc:
            log.warning("rollout %s: the journal could not be marked stopped within %s (%s); it still says %r "
                        "until the rollout is run again", self.journal.rollout,
                        format_duration(timedelta(seconds=STOPPED_SAVE_S)), exc, was)
        return self._result(Outcome.STOPPED, f"rollout {self.journal.rollout} stopped by request; run it again with "
                            f"the same name to resume{left_cordoned(self.journal)}", None)

    def _finish(self, action: Action, observations: Mapping[str, NodeObservation]) -> RunResult:
        if isinstance(action, Complete):
            return self._result(Outcome.COMPLETED, action.reason, action)
        if isinstance(action, RollbackDone):
            outcome = Outcome.FAILED if action.failed else Outcome.ROLLED_BACK
            return self._result(outcome, action.reason, action, failed=action.failed)
        assert isinstance(action, Halt)
        reverted = bool(self.journal.reverting_nodes())
        failed = dict(action.failed) or dict(self.journal.failed_nodes)
        for node in sorted(set(self.journal.assigned_nodes()) - set(failed)):
            self.events.put(node, EVENT_HALTED, f"rollout {self.journal.rollout} "
                            f"{'reverted' if reverted else 'halted'}: {action.reason}", "Warning")
        return self._result(Outcome.REVERTED if reverted else Outcome.HALTED, action.reason, action, failed=failed)

    def _result(self, outcome: Outcome, message: str, action: Action | None, *,
                failed: Mapping[str, str] | None = None) -> RunResult:
        # the journal already says how it ended; the senders end and what they did not send is
        # handed off at once (not after a stop: a person asked for the run to end, not for more to
        # happen), or, with nobody to take it, given a moment more and then counted
        alone = self.hand_off is None and not self.stop.is_set()
        self.events.drain(timeout_s=EVENTS_DRAIN_S if alone else 0.0, stop=self.stop)
        unsent = self.events.close()
        if unsent and self.hand_off is not None and not self.stop.is_set():
            try:
                log.info("%d node Event(s) handed to %s", len(unsent), self.hand_off(unsent))
                unsent = []
            except Exception as exc:  # noqa: BLE001 - an Event is never worth a failed rollout
                log.warning("node Events not handed off: %s", exc)
        if unsent:
            log.warning("%d node Event(s) not recorded: the run ended first", len(unsent))
        return RunResult(outcome=outcome, message=message, journal=self.journal,
                         observations=self.informer.snapshot(), failed=dict(failed or {}), action=action,
                         watched_since=self.informer.watched_since)


def _ended_batches(announced: Sequence[BatchStatus], journal: Journal) -> list[int]:
    """The batches ``journal`` has DONE or FAILED that were not when last announced."""
    return [index for index, (old, new) in enumerate(zip(announced, (b.status for b in journal.batches)))
            if old is not new and new in (BatchStatus.DONE, BatchStatus.FAILED)]


def _carries(obs: NodeObservation, target: ConfigRef, annotations: Mapping[str, str]) -> bool:
    """The node's spec is the target and it carries this rollout's assignment annotations."""
    same_rollout = obs.annotations.get(ANN_ROLLOUT) == annotations.get(ANN_ROLLOUT)
    return target.same_reference(obs.spec_source) and same_rollout


__all__ = ["Answer", "Cluster", "Engine", "Gates", "Informer", "Lock", "NoGates", "OutageError",
           "RunResult", "RunWatcher", "utcnow"]
