"""A run of a rollout (or of its rollback) in this process: one way it executes, whoever starts it.

:meth:`Run.begin` starts it at once on a thread of its own: take the rollout's lock, list the nodes
once (the live view the loop decides on watches on from that list), probe, validate, review and
publish the config, plan or resume (a rollback: put the journal in the rolling-back state), then
run the loop (``rollout.loop.engine``) to the end. Whoever shows the run only watches it:

* the terminal's live screen reads :meth:`Run.status`, the status as ``rollout status`` shows it
  (``rollout.usecases.status.status_dict``), from the run's own view of the nodes, its own lock and the
  outage it rides out, judged at its latest decision, with no request;
* a Prefect flow run reads :meth:`Run.began` and :meth:`Run.notices` (each decision and each
  batch's end, in order), and answers a gate with :meth:`Run.answer_gate`; it never holds the loop
  up: the gate is read when its answer has come, and :meth:`Run.gate_closed` tells it when the
  gate no longer waits (a request ended it, its deadline passed, the run ended).

A local ``rollout start`` begins its run before Prefect is even imported and a flow run shows it
once a Prefect API answers; a deployment's flow run begins it itself. Either way it is this class.
The adapters (the cluster, its lock, Prometheus, where the last node Events go) are opened by the
caller and handed in (:class:`RunTools`): the core opens nothing.
"""

from __future__ import annotations

import contextlib
import logging
import os
import threading
import time
from collections import deque
from collections.abc import Callable, Iterator, Mapping, Sequence
from concurrent.futures import Future
from contextlib import AbstractContextManager
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any

from rollout.machine.actions import Action, AwaitApproval, Wait, WaitForWindow
from rollout.analysis import BatchEvidence
from rollout.identity import check_cluster
from rollout.journal import Journal
from rollout.lock import Holder, this_process
from rollout.loop.analysis_run import AnalysisRun
from rollout.loop.budget import WAIT_ON as BUDGET_WAIT
from rollout.loop.engine import Answer, Engine, RunResult
from rollout.loop.heap import frozen_while, quiet_start
from rollout.loop.node_events import PendingEvent
from rollout.model import NodeObservation
from rollout.ports import DisruptionBudget, Gateway, HeldLock, MetricsSource
from rollout.usecases.prepare import Prepared, plan_or_resume, prepare
from rollout.usecases.rollback import start_rollback
from rollout.errors import GatewayError
from rollout.outcome import Outcome
from rollout.run.report import Ending, ending, run_report
from rollout.run.request import RunRequest
from rollout.usecases.status import load_evidence, starting_dict, status_dict, timestamp

log = logging.getLogger("rollout.run")

STOP_POLL_S = 0.1  # how soon the process's stop reaches its runs
EVIDENCE_READ_S = 5.0  # the report's read of the analysis evidence, at most
HoldLock = Callable[[Gateway, Holder, float], AbstractContextManager[HeldLock]]


@dataclass(frozen=True)
class RunTools:
    """The adapters a run works through, opened by whoever starts it."""

    gateway: Gateway
    hold_lock: HoldLock  # takes the rollout's lock and keeps it for a ``with`` block
    metrics: MetricsSource | None = None  # where the analysis asks, when the policy has checks
    hand_off: Callable[[Sequence[PendingEvent]], str] | None = None  # takes the node Events left at the end
    budget: DisruptionBudget | None = None  # a fleet's nodes changing at once (a fleet's run)


@dataclass(frozen=True)
class Began:
    """What a run did before its first decision."""

    journal: Journal  # planned, resumed, or (a rollback) put in the rolling-back state
    resumed: bool
    prepared: Prepared | None  # the config published (None: a rollback)
    at: datetime  # when the run began: a rollback's report counts from here


@dataclass(frozen=True)
class Decided:
    action: Action
    journal: Journal
    observations: Mapping[str, NodeObservation]


@dataclass(frozen=True)
class BatchFinished:
    index: int
    journal: Journal
    observations: Mapping[str, NodeObservation]


Notice = Decided | BatchFinished


def utcnow() -> datetime:
    return datetime.now(timezone.utc)


def retried(journal: Journal) -> Journal:
    """A halted rollout's failed batches to run again (``rollout retry``), asked by this user."""
    return journal.with_retry(at=utcnow(), by=os.environ.get("USER") or "someone")


def _waits_again(before: Notice, after: Notice) -> bool:
    """``after`` is the same wait as ``before`` decided again (a gate decided every few seconds for
    hours is one notice); anything that acts (a batch's writes, a revert, the end) is never dropped."""
    waiting = (Wait, AwaitApproval, WaitForWindow)
    return (isinstance(before, Decided) and isinstance(after, Decided) and isinstance(after.action, waiting)
            and type(before.action) is type(after.action))


class _Notices:
    """What the run tells its watcher, in order; a wait decided again replaces the same wait when
    that one was not read yet."""

    def __init__(self) -> None:
        self._items: deque[Notice] = deque()
        self._ready = threading.Condition()
        self._closed = False

    def put(self, notice: Notice) -> None:
        with self._ready:
            if self._items and _waits_again(self._items[-1], notice):
                self._items[-1] = notice
            else:
                self._items.append(notice)
            self._ready.notify_all()

    def close(self) -> None:
        with self._ready:
            self._closed = True
            self._ready.notify_all()

    def __iter__(self) -> Iterator[Notice]:
        while True:
            with self._ready:
                while not self._items and not self._closed:
                    self._ready.wait()
                if not self._items:
                    return
                notice = self._items.popleft()
            yield notice


@dataclass(frozen=True)
class _View:
    journal: Journal
    observations: Mapping[str, NodeObservation]
    at: datetime  # the decision's moment: a view that went stale since is judged as of then


class Run:
    """One rollout or rollback run (see the module doc). Build it with :meth:`begin`."""

    def __init__(self, request: RunRequest, tools: RunTools, *, stop: threading.Event,
                 deferrable: bool = False) -> None:
        self.request = request
        self.name = request.name
        self.tools = tools
        self._process_stop = stop  # the process's (Ctrl-C): every run of it stops
        self._stop = threading.Event()  # this run's: set by the process's, or by :meth:`stop`
        self._deferrable = deferrable
        self._holding = threading.Event()
        self._under_way = threading.Event()  # its first action carried out (or one that writes nothing)
        self._decisions = 0
        self._lock: HeldLock | None = None
        self._began: Future[Began] = Future()
        self._ended: Future[RunResult] = Future()
        self._notices = _Notices()
        self._view: _View | None = None
        self._away: tuple[datetime, datetime] | None = None
        self._held_back: Wait | None = None  # a batch the fleet's disruption budget holds back
        self._analysis: AnalysisRun | None = None
        self._gates = _Gates()
        self._reporting = threading.Lock()
        self._report: str | None = None
        self._thread = threading.Thread(target=self._main, name=f"run-{request.name}", daemon=True)

    @classmethod
    def begin(cls, request: RunRequest, tools: RunTools, *, stop: threading.Event, deferrable: bool = False) -> Run:
        """Start the run now; ``stop`` is the process's stop (Ctrl-C, SIGTERM)."""
        run = cls(request, tools, stop=stop, deferrable=deferrable)
        run._thread.start()
        threading.Thread(target=run._stop_with_process, name=f"run-{request.name}-stop", daemon=True).start()
        return run

    def stop(self) -> None:
        """Ask the run to stop (it ends within seconds, its journal marked stopped); nothing once it ended."""
        self._stop.set()

    def _stop_with_process(self) -> None:
        while not self._ended.done():
            if self._process_stop.wait(STOP_POLL_S):
                self._stop.set()
                return

    # -- how far it got ----------------------------------------------------------------------

    def wait_holding(self, stop: threading.Event | None = None) -> bool:
        """Until the run holds the rollout's lock (True), or ended before it did, or ``stop``."""
        while not self._holding.wait(0.05):
            if self._ended.done() or (stop is not None and stop.is_set()):
                return self._holding.is_set()
        return True

    def wait_began(self, stop: threading.Event | None = None) -> None:
        """Until the run has prepared and planned (or ended, or ``stop``); raises nothing."""
        settled = threading.Event()  # waited on, never polled: a spin here starved the run's thread
        self._began.add_done_callback(lambda _: settled.set())
        self._ended.add_done_callback(lambda _: settled.set())
        while not settled.wait(0.05):
            if stop is not None and stop.is_set():
                return

    def wait_under_way(self, timeout_s: float, stop: threading.Event | None = None) -> None:
        """Until the run's first action is carried out (its first batch written, or a first decision
        that writes nothing: a wait), or it ended, or ``timeout_s``, or ``stop``. What a process
        does next on its own CPU (Prefect's import: a second of it) then no longer slows the first
        writes."""
        deadline = time.monotonic() + timeout_s
        while not self._under_way.wait(0.05):
            if self._ended.done() or (stop is not None and stop.is_set()) or time.monotonic() >= deadline:
                return

    def began(self) -> Began:
        """What the run did before its first decision; raises the error that ended it before."""
        return self._began.result()

    @property
    def ended(self) -> bool:
        return self._ended.done()

    def wait_ended(self, timeout_s: float | None = None) -> bool:
        self._thread.join(timeout_s)
        return self._ended.done()

    def result(self) -> RunResult:
        """How the loop ended (waits for it); raises the error that ended the run instead."""
        return self._ended.result()

    def ending(self) -> Ending:
        """How the run ended, in words (waits for it; raises as :meth:`result`)."""
        return ending(self.result(), rollback=self.request.is_rollback)

    def report(self) -> str:
        """The run's final report (``rollout.run.report``), made once for every screen that shows
        it; empty for a run stopped or deferred (it has no end to report yet)."""
        with self._reporting:
            if self._report is None:
                result, end = self.result(), self.ending()
                self._report = "" if end.outcome in (Outcome.STOPPED, Outcome.DEFERRED) else run_report(
                    result, end, now=utcnow(), evidence=self._evidence_at_end(result),
                    rollback_began=self.began().at if self.request.is_rollback else None)
            return self._report

    def _evidence_at_end(self, result: RunResult) -> dict[int, BatchEvidence]:
        """Every analysed batch's evidence, read back quickly (a report never waits out an outage)."""
        if self.request.is_rollback or not result.journal.plan.policy.analysis.enabled:
            return {}
        try:
            return load_evidence(self.tools.gateway.within(EVIDENCE_READ_S), result.journal)
        except GatewayError as exc:
            log.warning("the report's analysis evidence could not be read: %s", exc)
            return self.evidence()

    # -- the watcher's side --------------------------------------------------------------------

    def notices(self) -> Iterator[Notice]:
        """Every decision and batch's end in order, until the run ends (one reader)."""
        return iter(self._notices)

    def answer_gate(self, batch: int, answer: Answer) -> None:
        """A person's answer to the gate after ``batch``; the loop applies it at once."""
        self._gates.give(batch, answer)

    def gate_closed(self, batch: int) -> threading.Event:
        """Set once the gate after ``batch`` no longer waits (answered, ended by a request or its
        deadline, or the run ended): whoever asks a person stops asking then."""
        return self._gates.closed(batch)

    def evidence(self) -> dict[int, BatchEvidence]:
        """The analysis evidence the run holds now (the running batch's)."""
        current = self._analysis.current if self._analysis is not None else None
        return {current.batch: current} if current is not None else {}

    def status(self) -> dict[str, Any] | None:
        """The run as ``rollout status`` shows it, from the run's own view (no request): None while
        it has not taken its lock. A view the outage made stale is judged as of its last decision,
        and the outage is what it waits for."""
        lock = self._lock.info if self._lock is not None else None
        view = self._view
        if view is None:
            if lock is None:
                return None
            return starting_dict(self.name, lock, utcnow())
        data = status_dict(view.journal, view.observations, view.at, lock=lock, evidence=self.evidence())
        away = self._away
        if away is not None and data.get("waiting") is not None:
            since, until = away
            reason = (f"the API server has been out of reach since {timestamp(since)}: the run rides it out "
                      f"(apiOutageTolerance) and stops at {timestamp(until)} if it is not back")
            data["waiting"] = {"for": "the API server", "until": timestamp(until), "reason": reason, "command": None}
            data["reason"] = reason
        held_back = self._held_back
        if held_back is not None and away is None:
            data["waiting"] = {"for": "the disruption budget", "until": None, "reason": held_back.reason, "command": None}
            data["reason"] = held_back.reason
        return data

    # -- the run itself --------------------------------------------------------------------------

    def _main(self) -> None:
        try:
            self._ended.set_result(self._run())
        except BaseException as exc:  # noqa: BLE001 - the watchers raise it, where they can say it
            if not self._began.done():
                self._began.set_exception(exc)
            self._ended.set_exception(exc)
        finally:
            self._gates.close_all()
            self._notices.close()

    def _run(self) -> RunResult:
        request, tools = self.request, self.tools
        policy, gateway = request.policy, tools.gateway
        tolerance = policy.api_outage_tolerance.total_seconds()
        gateway.tolerate_outages(tolerance, stop=self._stop)
        gateway.limit_rate(policy.api_qps, policy.api_burst)
        began_at = utcnow()
        if request.expected_cluster is not None:  # a fleet's run on a miswired worker stops here, before any write
            check_cluster(request.expected_cluster, gateway.cluster_identity())
        with contextlib.ExitStack() as starting:
            starting.enter_context(quiet_start())  # no full collection walks what start-up builds
            with tools.hold_lock(gateway, this_process(request.name), tolerance) as lock:
                self._lock = lock
                self._holding.set()
                listing = gateway.listing()  # once: the live view watches on from it
                informer = gateway.informer(seed=listing)
                informer.start()
                try:
                    began, rv = self._prepare({o.name: o for o in listing.nodes}, began_at)
                    self._began.set_result(began)
                    if tools.metrics is not None and not request.is_rollback:
                        self._analysis = AnalysisRun(metrics=tools.metrics, evidence=gateway)
                    engine = Engine(cluster=gateway, journal=began.journal, journal_rv=rv, watcher=_Watcher(self),
                                    gates=self._gates, lock=lock, stop=self._stop, informer=informer,
                                    analysis=self._analysis, hand_off=tools.hand_off, deferrable=self._deferrable,
                                    budget=tools.budget)
                    starting.close()  # started: the loop freezes what start-up built
                    with frozen_while():
                        return engine.run()
                finally:
                    informer.stop()
        raise AssertionError("unreachable: the block returns or raises")  # for the type checker

    def _prepare(self, observations: Mapping[str, NodeObservation], began_at: datetime) -> tuple[Began, str | None]:
        request, gateway = self.request, self.tools.gateway
        if request.rollback_to is not None:
            journal, rv = start_rollback(gateway, name=request.name, to=request.rollback_to, policy=request.policy,
                                         observations=observations, now=utcnow())
            return Began(journal, True, None, began_at), rv
        prepared = prepare(gateway, name=request.name, policy=request.policy, observations=observations,
                           config=request.config, configmap=request.configmap, validate=not request.skip_validation)
        budget = self.tools.budget
        journal, rv, resumed = plan_or_resume(gateway, name=request.name, policy=request.policy, prepared=prepared,
                                              observations=observations, now=utcnow(),
                                              batch_limit=budget.limit if budget is not None else None)
        if resumed and request.retry:
            journal = retried(journal)
        return Began(journal, resumed, prepared, began_at), rv


class _Watcher:
    """What the loop tells the run (``rollout.loop.engine.RunWatcher``)."""

    def __init__(self, run: Run) -> None:
        self._run = run

    def decided(self, action: Action, journal: Journal, observations: Mapping[str, NodeObservation]) -> None:
        run = self._run
        run._view = _View(journal, observations, utcnow())
        run._held_back = action if isinstance(action, Wait) and action.on == BUDGET_WAIT else None
        run._gates.track(action)
        run._notices.put(Decided(action, journal, observations))
        run._decisions += 1  # the loop's thread alone counts: a second decision follows the first act
        if run._decisions > 1 or isinstance(action, (Wait, WaitForWindow, AwaitApproval)):
            run._under_way.set()

    def batch_finished(self, index: int, journal: Journal, observations: Mapping[str, NodeObservation]) -> None:
        self._run._notices.put(BatchFinished(index, journal, observations))

    def cluster_away(self, since: datetime | None, until: datetime | None) -> None:
        self._run._away = (since, until) if since is not None and until is not None else None


class _Gates:
    """The answers to the run's approval gates (``rollout.loop.engine.Gates``), and whether the one
    the loop waits at is still open."""

    def __init__(self) -> None:
        self.answered = threading.Event()
        self._mutex = threading.Lock()
        self._answers: dict[int, Answer] = {}
        self._open: tuple[int, threading.Event] | None = None

    def answer(self, gate: AwaitApproval) -> Answer | None:
        self.answered.clear()  # before the look: an answer given after it wakes the next wait
        with self._mutex:
            return self._answers.pop(gate.batch, None)

    def give(self, batch: int, answer: Answer) -> None:
        with self._mutex:
            self._answers[batch] = answer
        self.answered.set()

    def track(self, action: Action) -> None:
        """The loop decided ``action``: a gate opens, or the open one closes."""
        with self._mutex:
            waiting = action.batch if isinstance(action, AwaitApproval) else None
            if self._open is not None and self._open[0] != waiting:
                self._open[1].set()
                self._open = None
            if waiting is not None and self._open is None:
                self._open = (waiting, threading.Event())

    def closed(self, batch: int) -> threading.Event:
        with self._mutex:
            if self._open is not None and self._open[0] == batch:
                return self._open[1]
        done = threading.Event()
        done.set()
        return done

    def close_all(self) -> None:
        with self._mutex:
            if self._open is not None:
                self._open[1].set()
                self._open = None


__all__ = ["Began", "BatchFinished", "Decided", "HoldLock", "Notice", "Run", "RunTools", "retried"]
