"""Lifecycle commands, as Argo Rollouts users know them: list, pause, resume, abort, promote.

A running rollout is driven through the cluster, not through its process: each request is an
annotation on the rollout's journal ConfigMap (``kubelet-rollout.io/request``), which the engine
reads within a few seconds and applies once (``rollout.journal.Journal.with_request``):

- ``pause``: no new batch starts (the running one still converges and is still judged; the lock
  is kept); ``resume`` lifts it;
- ``abort``: stop now and apply the policy's failure action (halt, or revert);
- ``promote``: answer the current approval gate (approve), or end the current batch's soak.

:func:`register` adds them to the `rollout` app (``rollout_cli.main``).
"""

from __future__ import annotations

import os
import uuid
from typing import Any, Optional

import typer
from rich.table import Table

from rollout.timefmt import rfc3339_seconds
from rollout_cli.base import (
    EXIT_NOT_FOUND,
    ContextOpt,
    KubeconfigOpt,
    Output,
    OutputOpt,
    _emit,
    _fail,
    _gateway,
    _guard,
    out,
)

WHO = typer.Option(None, "--by", help="Who asks (default: $USER); recorded in the journal.")


def _request(name: str, action: str, by: Optional[str], kubeconfig: Optional[str], context: Optional[str],
             output: Output) -> None:
    def body() -> None:
        from rollout.status import load_journal

        gateway = _gateway(kubeconfig, context)
        loaded = load_journal(gateway, name)
        if loaded is None:
            _fail(EXIT_NOT_FOUND, f"no rollout named {name!r}")
        journal, _ = loaded
        if journal.finished:
            _fail(EXIT_NOT_FOUND, f"rollout {name} has already ended ({journal.shown_status}); nothing to {action}")
        who = by or os.environ.get("USER") or "cli"
        request_id = uuid.uuid4().hex
        gateway.post_request(name, action, by=who, request_id=request_id)
        _emit({"rollout": name, "request": action, "by": who, "id": request_id}, output,
              lambda: out.print(f"{action} requested for rollout {name} (by {who}); the running rollout applies it "
                                "within a few seconds", highlight=False))

    _guard(body)


def pause(name: str = typer.Argument(..., help="Rollout name."), by: Optional[str] = WHO,
          kubeconfig: Optional[str] = KubeconfigOpt, context: Optional[str] = ContextOpt,
          output: Output = OutputOpt) -> None:
    """No new batch starts until `rollout resume` (the running batch is still watched and judged)."""
    _request(name, "pause", by, kubeconfig, context, output)


def resume(name: str = typer.Argument(..., help="Rollout name."), by: Optional[str] = WHO,
           kubeconfig: Optional[str] = KubeconfigOpt, context: Optional[str] = ContextOpt,
           output: Output = OutputOpt) -> None:
    """Let a paused rollout start its next batch again."""
    _request(name, "resume", by, kubeconfig, context, output)


def abort(name: str = typer.Argument(..., help="Rollout name."), by: Optional[str] = WHO,
          kubeconfig: Optional[str] = KubeconfigOpt, context: Optional[str] = ContextOpt,
          output: Output = OutputOpt) -> None:
    """Stop the rollout and apply its policy's failure action (halt, revert-batch or revert-all)."""
    _request(name, "abort", by, kubeconfig, context, output)


def promote(name: str = typer.Argument(..., help="Rollout name."), by: Optional[str] = WHO,
            kubeconfig: Optional[str] = KubeconfigOpt, context: Optional[str] = ContextOpt,
            output: Output = OutputOpt) -> None:
    """Approve the rollout's waiting gate, or, when none waits, end the current batch's soak."""
    from flows.approval import answer_gate, pending_gates

    def gate_or_soak() -> None:
        gates = pending_gates(name)
        if not gates:
            _request(name, "promote", by, kubeconfig, context, output)
            return
        who = by or os.environ.get("USER") or "cli"
        answer_gate(gates[-1].flow_run_id, approved=True, approver=who, comment="promoted")
        _emit({"rollout": name, "request": "promote", "by": who, "gate": gates[-1].gate}, output,
              lambda: out.print(f"approved the gate of rollout {name} ({gates[-1].gate}) as {who}", highlight=False))

    _guard(gate_or_soak)


def list_rollouts(kubeconfig: Optional[str] = KubeconfigOpt, context: Optional[str] = ContextOpt,
                  output: Output = OutputOpt) -> None:
    """Every rollout the cluster has a journal of, newest first."""
    def body() -> None:
        from datetime import datetime, timezone

        from rollout.journal import BatchStatus, from_document
        from rollout.status import run_state

        rows: list[dict[str, Any]] = []
        gateway = _gateway(kubeconfig, context)
        journals, lock, now = gateway.list_journals(), gateway.read_lock(), datetime.now(timezone.utc)
        for document in journals:
            try:
                j = from_document(document)
            except (ValueError, KeyError):
                continue  # not readable as a journal: not ours to list
            done = sum(1 for b in j.batches if b.status is BatchStatus.DONE)
            rows.append({"name": j.rollout, "status": run_state(j, lock, now)[0], "policy": j.policy_name,
                         "target": f"{j.target.namespace}/{j.target.name}", "batches_done": done,
                         "batches": len(j.batches), "nodes": len(j.plan.nodes),
                         "created_at": rfc3339_seconds(j.created_at)})
        rows.sort(key=lambda r: r["created_at"], reverse=True)

        def table() -> None:
            t = Table("rollout", "status", "batches", "nodes", "policy", "target", "created")
            for r in rows:
                t.add_row(r["name"], r["status"], f"{r['batches_done']}/{r['batches']}", str(r["nodes"]),
                          r["policy"], r["target"], r["created_at"])
            out.print(t if rows else "no rollouts")

        _emit(rows, output, table)

    _guard(body)


def register(app: typer.Typer) -> None:
    """Add the lifecycle commands to ``app``, in the order `rollout --help` lists them."""
    for command in (pause, resume, abort, promote):
        app.command()(command)
    app.command("list")(list_rollouts)
