"""The rollout's decisions: (journal, observations, now) -> the one next action, with a reason.

Everything a rollout decides is decided here, and nothing here acts: the engine
(``rollout/loop/engine.py``) runs the loop, observe -> ``step`` -> save the journal -> carry out the
action, and the Prefect flows only add visibility (kopf's "purely computational function with no
side-effects", argo-rollouts' table-testable canary maths). Time is an input, so a test moves the
clock instead of sleeping.

``step(journal, observations, now=, watched_since=)`` is the engine's entry (``step_on(look(...))``:
the engine writes a batch's end between the two halves); it does three things:

- ``observe`` folds *facts* into the journal: writes seen landed, each assigned node's phase and
  since when, a batch meeting its done criteria, an approval gate whose time ran out.
- ``decide`` returns the next ``Action`` from the journal (which holds the plan). It observes
  first, so it is correct on a journal that was not folded, except that soak and grace clocks
  only run once the folded journal is kept.
- ``record`` folds the *intent* of the action in (who gets assigned with what previous source,
  which nodes are reverted, that approval was asked, that the rollout ended) and appends the
  decision to the log. The engine saves the journal *before* acting (write-ahead).

Rules, in the order they are applied:
1. A finished rollout repeats its final action (idempotent re-runs).
2. While reverting: re-issue reverts that did not land, wait for convergence, then halt. A
   rollback walks every batch back the same way, the last first (``reverts``).
3. A node whose kubelet rejected the config (failed to load / validate) triggers the policy's
   failure action at once, regardless of the failure budget: the config is bad. A person's
   ``rollout abort`` triggers it too (``failures``).
4. More budget failures (sync errors past their grace, crash loops, timeouts) in a batch than its
   failure budget trigger the failure action (halt / revert-batch / revert-all). Done batches are
   watched too: a node that goes down after its batch was done counts against that batch.
5. Assignments recorded but not landed (no acknowledgment, the node does not carry them) are
   re-issued for those nodes only; a node whose spec another actor changed halts the rollout.
   Nodes already carrying this rollout's assignment (journal rebuilt) are never re-written.
6. Before a batch starts: the approval gate after the previous batch, a pause, the maintenance
   window, ``maxUnavailable`` counting nodes already unavailable, and nodes already down
   (``onUnhealthyNode``). Then ``AssignBatch`` (``batches``).
7. Otherwise ``Wait`` until the next moment something can change (soak end, deadline, recheck).

One job per module: ``situation`` (what one decision reads), ``verdicts`` (each node's phase,
budget failures, a batch done), ``facts`` (folding them into the journal), ``failures`` (rules
3-4 and the failure action), ``reverts`` (rule 2 and rollbacks), ``batches`` (rules 5-7),
``decision`` (the entry points and the order of the rules), ``requests`` (a person's lifecycle
request: what it does, said once, and recorded as a decision), ``changes`` (what changed since the
last decision: the verdicts, the unacknowledged writes and each batch's walk are kept per rollout
and brought up to date from it, so a decision costs what changed, not the plan's size). Pure: no
I/O, no logging, no clock; the same inputs give the same decision, whatever was kept.
"""

from rollout.machine.decision import decide, look, observe, record, step, step_on
from rollout.machine.facts import landed_writes
from rollout.machine.requests import answer_request, apply_request, gate_waiting
from rollout.machine.verdicts import node_verdict, verdicts

__all__ = ["answer_request", "apply_request", "decide", "gate_waiting", "landed_writes", "look", "node_verdict",
           "observe", "record", "step", "step_on", "verdicts"]
