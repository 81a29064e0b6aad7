"""Lifecycle commands, as Argo Rollouts users know them: list, pause, resume, abort, promote.

A running rollout is driven through the cluster, not through its process: each request is an
annotation on the rollout's journal ConfigMap (``kubelet-rollout.io/request``), which the engine
reads within a few seconds and applies once, recording it and its effect as a decision of the
journal (``rollout.machine.requests``): `rollout status`, the log and the report show it.

Every request is answered with what it will do, by the same function the run applies it with:
applied now, at the next batch, or refused (exit 2) because the rollout is stopped (no process
would apply it) or has ended, with the command that does what was probably meant. The command
then waits a few seconds for the run to record it and prints what it recorded.

- ``pause``: no new batch starts (the running one still converges and is still judged; the lock
  is kept); ``resume`` lifts it;
- ``abort``: stop now and apply the policy's failure action (halt, or revert);
- ``promote``: answer the approval gate that waits (approve), or end the running batch's soak;
  never the soak of a batch that has not started.

:func:`register` adds them to the `rollout` app (``rollout_cli.main``).
"""

from __future__ import annotations

import os
import time
import uuid
from datetime import datetime, timezone
from typing import Any, Optional

import typer

from rollout import flags
from rollout.ports import JournalReader
from rollout.timefmt import rfc3339_seconds
from rollout_cli.base import (
    EXIT_INVALID,
    ContextOpt,
    KubeconfigOpt,
    NameArg,
    Output,
    OutputOpt,
    emit,
    open_cluster,
    checked,
)
from rollout_cli.console import fail, out, table

WHO = typer.Option(None, "--by", callback=checked(flags.person), help="Who asks (default: $USER); recorded in the journal.")
APPLIED_WITHIN_S = 8.0  # the engine reads requests every 2 s; an unresponsive one gets this long


def _who(by: Optional[str]) -> str:
    return by or os.environ.get("USER") or "cli"


def _request(name: str, action: str, by: Optional[str], kubeconfig: Optional[str], context: Optional[str],
             output: Output) -> None:
    def body() -> None:
        from rollout.errors import RolloutNotFoundError
        from rollout.machine import answer_request, gate_waiting
        from rollout.usecases.status import load_journal, run_state

        gateway = open_cluster(kubeconfig, context)
        loaded = load_journal(gateway, name)
        if loaded is None:
            raise RolloutNotFoundError(f"no rollout named {name!r}")
        journal, _ = loaded
        state, _why = run_state(journal, gateway.read_lock(), datetime.now(timezone.utc))
        who = _who(by)
        if action == "promote" and state != "stopped" and gate_waiting(journal) is not None:
            _approve_gate(name, who, output)
            return
        said = answer_request(journal, action, running=state != "stopped")
        if not said.applies:
            hint = f"\n  hint: {said.command}" if said.command else ""
            fail(EXIT_INVALID, f"{action} refused: {said.effect}{hint}")
        request_id = uuid.uuid4().hex
        gateway.post_request(name, action, by=who, request_id=request_id)
        recorded = _recorded(gateway, name, request_id)
        data = {"rollout": name, "request": action, "by": who, "id": request_id, "applied": recorded is not None,
                "when": said.when, "effect": recorded or said.effect}

        def table_() -> None:
            if recorded is not None:
                out.print(f"rollout {name}: {recorded}", highlight=False, soft_wrap=True)
            else:
                out.print(not_recorded_yet(name, action, who, state, said.effect), highlight=False, soft_wrap=True)

        emit(data, output, table_)

    body()


def not_recorded_yet(name: str, action: str, who: str, state: str, effect: str) -> str:
    """A request the run has not recorded within :data:`APPLIED_WITHIN_S`: what it does once read."""
    return (f"rollout {name}: {action} requested by {who}; its process ({state}) has not recorded it within "
            f"{APPLIED_WITHIN_S:.0f}s; once it reads it: {effect}; `rollout status {name}` shows when")


def _recorded(gateway: JournalReader, name: str, request_id: str) -> Optional[str]:
    """The decision the run recorded for this request (what it did), once it has read it."""
    from rollout.usecases.status import load_journal

    deadline = time.monotonic() + APPLIED_WITHIN_S
    while time.monotonic() < deadline:
        loaded = load_journal(gateway, name)
        if loaded is not None and loaded[0].last_request == request_id:
            requests = [d for d in loaded[0].decisions if d.kind == "Request"]
            return requests[-1].reason if requests else "applied"
        time.sleep(0.5)
    return None


def _approve_gate(name: str, who: str, output: Output) -> None:
    """``promote`` at an approval gate approves it (through the Prefect API, as `rollout approve`)."""
    from rollout_cli.local.prefect_home import prefect_api

    with prefect_api():
        _approve_gate_here(name, who, output)


def _approve_gate_here(name: str, who: str, output: Output) -> None:
    from flows.approval import answer_gate, pending_gates

    gates = pending_gates(name)
    if not gates:
        fail(EXIT_INVALID, f"promote refused: the journal of {name} shows an approval gate waiting, but no flow run "
                            "of it waits on this Prefect API (PREFECT_API_URL)\n  hint: point PREFECT_API_URL at the "
                            "Prefect server the run uses, or answer it in its UI")
    gate = gates[-1]
    answer_gate(gate.flow_run_id, approved=True, approver=who, comment="promoted")
    effect = f"approved the gate {gate.gate} as {who}: the next batch starts now"
    emit({"rollout": name, "request": "promote", "by": who, "id": str(gate.flow_run_id), "applied": True,
           "when": "now", "effect": effect}, output,
          lambda: out.print(f"rollout {name}: {effect}", highlight=False, soft_wrap=True))


def pause(name: str = NameArg, by: Optional[str] = WHO,
          kubeconfig: Optional[str] = KubeconfigOpt, context: Optional[str] = ContextOpt,
          output: Output = OutputOpt) -> None:
    """No new batch starts until `rollout resume` (the running batch is still watched and judged)."""
    _request(name, "pause", by, kubeconfig, context, output)


def resume(name: str = NameArg, by: Optional[str] = WHO,
           kubeconfig: Optional[str] = KubeconfigOpt, context: Optional[str] = ContextOpt,
           output: Output = OutputOpt) -> None:
    """Let a paused rollout start its next batch again (a stopped one runs again with `rollout start --name NAME`)."""
    _request(name, "resume", by, kubeconfig, context, output)


def abort(name: str = NameArg, by: Optional[str] = WHO,
          kubeconfig: Optional[str] = KubeconfigOpt, context: Optional[str] = ContextOpt,
          output: Output = OutputOpt) -> None:
    """Stop the rollout and apply its policy's failure action (halt, revert-batch or revert-all)."""
    _request(name, "abort", by, kubeconfig, context, output)


def promote(name: str = NameArg, by: Optional[str] = WHO,
            kubeconfig: Optional[str] = KubeconfigOpt, context: Optional[str] = ContextOpt,
            output: Output = OutputOpt) -> None:
    """Approve the rollout's waiting gate, or end the running batch's soak (never a batch not started)."""
    _request(name, "promote", by, kubeconfig, context, output)


def list_rollouts(kubeconfig: Optional[str] = KubeconfigOpt, context: Optional[str] = ContextOpt,
                  output: Output = OutputOpt) -> None:
    """Every rollout the cluster has a journal of, newest first (the state as `rollout status` says it)."""
    def body() -> None:
        from rollout.journal import BatchStatus, from_document
        from rollout.usecases.status import run_state

        rows: list[dict[str, Any]] = []
        gateway = open_cluster(kubeconfig, context)
        journals, lock, now = gateway.list_journals(), gateway.read_lock(), datetime.now(timezone.utc)
        for document in journals:
            try:
                j = from_document(document)
            except (ValueError, KeyError):
                continue  # not readable as a journal: not ours to list
            done = sum(1 for b in j.batches if b.status is BatchStatus.DONE)
            rows.append({"name": j.rollout, "state": run_state(j, lock, now)[0], "policy": j.policy_name,
                         "target": f"{j.target.namespace}/{j.target.name}", "batches_done": done,
                         "batches": len(j.batches), "nodes": len(j.plan.nodes),
                         "created_at": rfc3339_seconds(j.created_at)})
        rows.sort(key=lambda r: r["created_at"], reverse=True)

        def table_() -> None:
            t = table("rollout", "state", "batches", "nodes", "policy", "target", "created")
            for r in rows:
                t.add_row(r["name"], r["state"], f"{r['batches_done']}/{r['batches']}", str(r["nodes"]),
                          r["policy"], r["target"], r["created_at"])
            out.print(t if rows else "no rollouts")

        emit(rows, output, table_)

    body()


def register(app: typer.Typer) -> None:
    """Add the lifecycle commands to ``app``, in the order `rollout --help` lists them."""
    for command in (pause, resume, abort, promote):
        app.command()(command)
    app.command("list")(list_rollouts)
