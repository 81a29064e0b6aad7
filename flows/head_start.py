"""A local rollout (or rollback) that starts before its Prefect flow run can.

Without a Prefect profile, ``rollout start`` talks to a temporary Prefect server it starts itself,
and that server takes seconds to come up (about 5 s on a quiet machine). The rollout does not wait
for it: the CLI starts the server and, beside it, a :class:`HeadStart`, which does at once what
the flow run would do first (take the lock, list the nodes, prepare and publish the config, plan
or resume) and then runs the engine. Until the flow run exists the engine's shell is a
:class:`RelayShell`: its calls wait in a queue, and an approval gate, which only the flow run can
ask, waits for it. When the server is up the CLI runs ``kubelet-config-rollout`` for the head
start (``flows.rollout_flow.attach``): the flow run reports what was prepared and planned, then
answers the queued calls in order and everything after, in its own thread, until the engine
ends; its state is the run's outcome, as for any run. This module (like ``flows.stop``) does not
import Prefect: the CLI begins the rollout before it imports Prefect (a few seconds).

``rollout rollback`` begins the same way (:func:`start_rollback_ahead`, attached by
``flows.rollback_flow.attach_rollback``): a person rolling back is the one least willing to wait.

Nothing the flow run would decide is decided here: the same core functions, the same engine, the
same shell, only earlier.
"""

from __future__ import annotations

import os
import queue
import threading
import uuid
from collections.abc import Callable, Mapping
from concurrent.futures import FIRST_COMPLETED, Future, wait
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Generic, TypeVar

from flows.cluster import gateway_and_lock, rollback_policy
from flows.event_handoff import hand_off_to_process
from flows.heap import frozen_while
from flows.stop import STOP
from rollout.actions import Action, AwaitApproval, WaitForWindow
from rollout.analysis_run import AnalysisRun
from rollout.engine import Answer, Engine, RunResult, Shell, utcnow
from rollout.journal import ApprovalOutcome, Journal
from rollout.model import NodeObservation
from rollout import flags
from rollout.policy import RolloutPolicy
from rollout.ports import EvidenceReader, Gateway, Informer, Lock, MetricsSource
from rollout.prometheus import metrics_source
from rollout.prepare import Prepared, plan_or_resume, prepare, rollout_name_for
from rollout.rollback import start_rollback
from rollout.usecases import selected_policy

RELAY_POLL_S = 0.1  # how soon the flow run sees that the engine ended


class RelayShell:
    """The engine's shell for a run whose flow run attaches later: every call is queued, in order,
    for :meth:`serve` to make on the real shell; ``approve`` and ``defer`` wait for its answer, or
    for ``stop`` (then the gate stays unanswered, as a stopped run leaves it, and nothing is
    deferred: the engine sees the stop)."""

    def __init__(self, stop: threading.Event) -> None:
        self._calls: queue.Queue[tuple[Callable[[Shell], Any], Future[Any]]] = queue.Queue()
        self._stop = stop
        self._seen: tuple[Journal, Mapping[str, NodeObservation]] | None = None

    def latest(self) -> tuple[Journal, Mapping[str, NodeObservation]] | None:
        """The journal and view of the nodes of the engine's latest decision (None before one)."""
        return self._seen

    def _relay(self, call: Callable[[Shell], Any]) -> Future[Any]:
        answer: Future[Any] = Future()
        self._calls.put((call, answer))
        return answer

    def decided(self, action: Action, journal: Journal, observations: Mapping[str, NodeObservation]) -> None:
        self._seen = (journal, observations)
        self._relay(lambda shell: shell.decided(action, journal, observations))

    def batch_finished(self, index: int, journal: Journal, observations: Mapping[str, NodeObservation]) -> None:
        self._relay(lambda shell: shell.batch_finished(index, journal, observations))

    def approve(self, gate: AwaitApproval, journal: Journal) -> Answer:
        answer: Answer | None = self._answer(self._relay(lambda shell: shell.approve(gate, journal)))
        return answer or Answer(ApprovalOutcome.TIMED_OUT, by="timeout")

    def defer(self, wait: WaitForWindow, journal: Journal) -> bool:
        deferred: bool | None = self._answer(self._relay(lambda shell: shell.defer(wait, journal)))
        return bool(deferred)

    def _answer(self, answer: Future[Any]) -> Any:
        """The flow run's answer; None when the run was stopped before the flow run took the call."""
        while True:
            try:
                return answer.result(timeout=RELAY_POLL_S)
            except TimeoutError:
                if self._stop.is_set() and answer.cancel():
                    return None

    def serve(self, shell: Shell, ended: Future[RunResult]) -> RunResult:
        """Make the queued calls on ``shell``, and every later one, until the engine has ended;
        its result (or its error, raised here)."""
        while True:
            try:
                call, answer = self._calls.get(timeout=RELAY_POLL_S)
            except queue.Empty:
                if ended.done() and self._calls.empty():  # the engine's last calls came before its end
                    return ended.result()
                continue
            if not answer.set_running_or_notify_cancel():
                continue  # the engine stopped waiting for it
            try:
                answer.set_result(call(shell))
            except BaseException as exc:  # noqa: BLE001 - the engine's thread raises it
                answer.set_exception(exc)


@dataclass(frozen=True)
class Started:
    """What the head start did before its first decision: the flow run reports it."""

    prepared: Prepared
    journal: Journal
    resumed: bool
    evidence: EvidenceReader  # the batches' analysis evidence, for the flow run's artifacts and gates
    metrics: MetricsSource | None  # where the analysis asks, when the policy has checks


@dataclass(frozen=True)
class RollbackStarted:
    """What a rollback's head start did before its first decision: the rollout's journal in the
    rolling-back state, under the policy the rollback runs with."""

    journal: Journal
    policy: RolloutPolicy
    began: datetime  # the rollback's report counts its own run, from here


S = TypeVar("S", Started, RollbackStarted)


class HeadStart(Generic[S]):
    """A rollout begun in a thread of its own (see the module doc): ``run`` does the work, the
    flow run attaches with :meth:`started` and :attr:`relay`, and :attr:`ended` holds the end."""

    def __init__(self, run: Callable[["HeadStart[S]"], RunResult], *, stop: threading.Event) -> None:
        self.relay = RelayShell(stop)
        self.ended: Future[RunResult] = Future()
        self._started: Future[S] = Future()
        self._thread = threading.Thread(target=self._run, args=(run,), name="head-start", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def prepared(self, started: S) -> None:
        """Called by ``run`` once the config is prepared and the journal planned or resumed."""
        self._started.set_result(started)

    def wait_prepared(self, stop: threading.Event) -> None:
        """Until the config is prepared and the journal planned or resumed, the run ended, or a
        stop was asked for; raises nothing (:meth:`started` says what happened)."""
        while not (self._started.done() or self.ended.done() or stop.is_set()):
            either: list[Future[Any]] = [self._started, self.ended]
            wait(either, timeout=RELAY_POLL_S, return_when=FIRST_COMPLETED)

    def started(self) -> S:
        """Wait for the prepared config and the journal; raises what ended the run before them."""
        self.wait_prepared(threading.Event())
        if not self._started.done():
            self.ended.result()  # raises its error
            raise RuntimeError("the head start ended before preparing the rollout")
        return self._started.result()

    def _run(self, run: Callable[["HeadStart[S]"], RunResult]) -> None:
        try:
            self.ended.set_result(run(self))
        except BaseException as exc:  # noqa: BLE001 - the flow run raises it, in its outcome's state
            self.ended.set_exception(exc)


# the head starts of this process, by token: the CLI starts one, the flow run it starts finds it
HEAD_STARTS: dict[str, HeadStart[Any]] = {}


def start_ahead(*, name: str, config: str | None = None, configmap: str | None = None, policy: str = "canary",
                node_selector: str | None = None, kubeconfig: str | None = None, context: str | None = None,
                skip_validation: bool = False, prometheus: str | None = None,
                prometheus_token_file: str | None = None, prometheus_ca_file: str | None = None,
                time_scale: float | None = None, retry: bool = False) -> str:
    """Begin a rollout in this process before its flow run exists: the token
    ``flows.rollout_flow.attach`` takes. The flow's steps, in the same order."""
    name, pol = run_inputs(name=name, config=config, configmap=configmap, policy=policy,
                           node_selector=node_selector, time_scale=time_scale)
    metrics = metrics_source(pol, address=prometheus, token_file=prometheus_token_file, ca_file=prometheus_ca_file)

    def run(head: HeadStart[Started]) -> RunResult:
        with gateway_and_lock(name, pol, kubeconfig=kubeconfig, context=context, stop=STOP) as (gateway, lock):
            listing = gateway.listing()  # once: the live view watches on from it
            informer = gateway.informer(seed=listing)
            informer.start()
            try:
                observations = {o.name: o for o in listing.nodes}
                prepared = prepare(gateway, name=name, policy=pol, observations=observations, config=config,
                                   configmap=configmap, validate=not skip_validation)
                journal, rv, resumed = plan_or_resume(gateway, name=name, policy=pol, prepared=prepared,
                                                      observations=observations, now=utcnow())
                if resumed and retry:
                    journal = retried(journal)
                head.prepared(Started(prepared, journal, resumed, evidence=gateway, metrics=metrics))
                return run_engine(engine_for(gateway, lock, informer, journal=journal, journal_rv=rv, shell=head.relay,
                                             policy=pol, metrics=metrics, kubeconfig=kubeconfig, context=context))
            finally:
                informer.stop()

    return _begun(HeadStart(run, stop=STOP))


def start_rollback_ahead(*, name: str, to: str = "previous", policy: str | None = None,
                         kubeconfig: str | None = None, context: str | None = None) -> str:
    """Begin rollout ``name``'s rollback in this process before its flow run exists: the token
    ``flows.rollback_flow.attach_rollback`` takes. The rollback flow's steps, in the same order."""
    flags.rollout_name(name, flag="name")
    began = utcnow()

    def run(head: HeadStart[RollbackStarted]) -> RunResult:
        pol = rollback_policy(name, policy, kubeconfig=kubeconfig, context=context)
        return run_rollback(name=name, to=to, policy=pol, kubeconfig=kubeconfig, context=context, shell=head.relay,
                            started=lambda journal: head.prepared(RollbackStarted(journal, pol, began)))

    return _begun(HeadStart(run, stop=STOP))


def _begun(head: HeadStart[Any]) -> str:
    token = uuid.uuid4().hex
    HEAD_STARTS[token] = head
    head.start()
    return token


def engine_for(gateway: Gateway, lock: Lock, informer: Informer, *, journal: Journal, journal_rv: str | None,
               shell: Shell, policy: RolloutPolicy, metrics: MetricsSource | None, kubeconfig: str | None,
               context: str | None) -> Engine:
    """The engine of a rollout run, whichever way it began (a flow run, or a head start): its
    live view, its analysis and where its last node Events go."""
    return Engine(cluster=gateway, journal=journal, journal_rv=journal_rv, shell=shell, lock=lock, stop=STOP,
                  informer=informer, analysis=AnalysisRun(metrics=metrics, evidence=gateway) if metrics else None,
                  hand_off=hand_off_to_process(kubeconfig, context, qps=policy.api_qps, burst=policy.api_burst))


def run_engine(engine: Engine) -> RunResult:
    """Run the loop; start-up is over, so what it built is frozen for the loop's length (``flows.heap``)."""
    with frozen_while():
        return engine.run()


def run_rollback(*, name: str, to: str, policy: RolloutPolicy, kubeconfig: str | None, context: str | None,
                 shell: Shell, started: Callable[[Journal], None] = lambda journal: None) -> RunResult:
    """A rollback run, whichever way it began (its flow run, or a head start): the lock, the nodes
    listed once (the live view watches on from that list), the rollout's journal put in the
    rolling-back state (``started`` is told), then the same engine walks it back."""
    with gateway_and_lock(name, policy, kubeconfig=kubeconfig, context=context, stop=STOP) as (gateway, lock):
        listing = gateway.listing()
        informer = gateway.informer(seed=listing)
        informer.start()
        try:
            journal, rv = start_rollback(gateway, name=name, to=to, policy=policy,
                                         observations={o.name: o for o in listing.nodes}, now=utcnow())
            started(journal)
            return run_engine(Engine(cluster=gateway, journal=journal, journal_rv=rv, shell=shell, lock=lock,
                                     stop=STOP, informer=informer,
                                     hand_off=hand_off_to_process(kubeconfig, context, qps=policy.api_qps,
                                                                  burst=policy.api_burst)))
        finally:
            informer.stop()


def retried(journal: Journal) -> Journal:
    """A halted rollout's failed batches to run again (``rollout retry``), asked by this user."""
    return journal.with_retry(at=utcnow(), by=os.environ.get("USER") or "someone")


def run_inputs(*, name: str | None, config: str | None, configmap: str | None, policy: str | None,
               node_selector: str | None, time_scale: float | None) -> tuple[str, RolloutPolicy]:
    """The run's name and policy, through the input boundary the CLI's flags pass: a deployment
    run, which no CLI checked, gets the same answers."""
    name = flags.rollout_name(name or rollout_name_for(config=config, configmap=configmap), flag="name")
    if configmap:
        flags.configmap_ref(configmap, flag="configmap")
    return name, selected_policy(policy, node_selector, time_scale=time_scale)


__all__ = ["HEAD_STARTS", "HeadStart", "RelayShell", "RollbackStarted", "Started", "engine_for", "retried",
           "run_inputs", "run_rollback", "start_ahead", "start_rollback_ahead"]
