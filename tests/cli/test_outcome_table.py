"""One outcome table (``rollout.outcome``): every state name, exit code and JSON value derives from it.

The shipped JSON schemas that enumerate outcomes or exit codes must list exactly the table's, so a
value added to one and not the other fails here; the state a flow run ends in, the way a finished
run is read back, the CLI's exit codes and what `status --watch` stops at come from the same rows.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from prefect.states import Completed, Crashed

from flows.outcome import RunOutcome, ended, outcome_of_state
from rollout.errors import RolloutError
from rollout.outcome import ENDINGS, Outcome
from rollout_cli import base

SCHEMAS = Path(__file__).resolve().parents[2] / "rollout_cli" / "schemas"
# a property of these names that carries an enum enumerates the table's column
COLUMNS = {"outcome": lambda o: o.value, "exit_code": lambda o: o.exit_code}


def enums(node: Any, where: str) -> Iterator[tuple[str, str, list[Any]]]:
    """(where, property, enum) for every property named in COLUMNS that carries an enum."""
    if isinstance(node, dict):
        for key, value in node.items():
            if key in COLUMNS and isinstance(value, dict) and "enum" in value:
                yield f"{where}/{key}", key, value["enum"]
            yield from enums(value, f"{where}/{key}")
    elif isinstance(node, list):
        for index, value in enumerate(node):
            yield from enums(value, f"{where}/{index}")


def schema_enums() -> list[tuple[str, str, list[Any]]]:
    return [found for path in sorted(SCHEMAS.glob("*.json")) for found in enums(json.loads(path.read_text()), path.name)]


def test_every_outcome_has_one_row() -> None:
    assert list(ENDINGS) == list(Outcome)


def test_the_schema_walk_finds_the_run_contract() -> None:
    assert {(where, key) for where, key, _ in schema_enums()} >= {
        ("run.json/properties/outcome", "outcome"), ("run.json/properties/exit_code", "exit_code")}


@pytest.mark.parametrize(("where", "key", "values"), schema_enums(), ids=[w for w, _, _ in schema_enums()])
def test_each_schema_enum_is_the_tables_column(where: str, key: str, values: list[Any]) -> None:
    assert sorted(map(str, values)) == sorted({str(COLUMNS[key](o)) for o in Outcome})
    assert len(values) == len(set(values)), "listed twice"


@pytest.mark.parametrize("outcome", list(Outcome), ids=str)
def test_a_run_ends_in_the_state_of_its_row_and_reads_back_as_its_outcome(outcome: Outcome) -> None:
    returned = ended(outcome, f"{outcome}: why", nodes=["node-1"])
    # a flow that returns data ends in Prefect's own Completed state
    state = Completed(data=returned) if isinstance(returned, dict) else returned
    assert (state.type.value, state.name) == (outcome.state_type, outcome.state_name)
    read = RunOutcome.from_state(state)
    assert (read.outcome, read.message, read.ok) == (outcome, "why", outcome.exit_code == 0)
    # a deployment run whose result is not readable here: its state alone (the first row wins)
    first = next(o for o in Outcome if (o.state_type, o.state_name) == (outcome.state_type, outcome.state_name))
    assert outcome_of_state(state) is first


def test_a_run_whose_process_died_reads_as_crashed_with_the_hint_to_run_it_again() -> None:
    """Prefect's own Crashed state (a worker's process killed: SIGKILL, out of memory) carries no
    outcome of ours: it reads as `crashed` (exit 1), Prefect's words kept, and says what to do."""
    prefects = "Flow run infrastructure exited with non-zero status code -9 (this may be caused by the process exceeding memory)."
    read = RunOutcome.from_state(Crashed(message=prefects))
    assert read.outcome is Outcome.CRASHED and read.outcome.exit_code == 1 and not read.ok
    assert read.message.startswith("its process died before the run ended") and prefects in read.message
    assert "run the same command again" in read.hint


def test_states_outside_the_table_read_as_their_types_plain_row() -> None:
    assert Outcome.of_state("FAILED", "SomethingElse") is Outcome.FAILED
    assert Outcome.of_state("COMPLETED", "SomethingElse") is Outcome.COMPLETED
    assert Outcome.of_state("CANCELLED", "Cancelling") is Outcome.STOPPED
    assert Outcome.of_state("RUNNING", "Running") is Outcome.FAILED


def test_ok_is_exit_code_0_so_a_deferred_run_is_not_ok() -> None:
    assert {o for o in Outcome if o.ok} == {Outcome.COMPLETED, Outcome.ROLLED_BACK}
    assert Outcome.DEFERRED.exit_code == 6 and not Outcome.DEFERRED.ok


def test_the_clis_exit_codes_are_the_tables() -> None:
    assert {base.EXIT_OK, base.EXIT_FAILED, base.EXIT_INVALID, base.EXIT_CLUSTER, base.EXIT_LOCKED,
            base.EXIT_NOT_FOUND, base.EXIT_DEFERRED, base.EXIT_INTERRUPTED} == {o.exit_code for o in Outcome}


def _errors(cls: type[RolloutError] = RolloutError) -> Iterator[type[RolloutError]]:
    yield cls
    for sub in cls.__subclasses__():
        yield from _errors(sub)


@pytest.mark.parametrize("error", list(_errors()), ids=lambda cls: cls.__name__)
def test_every_error_names_a_row(error: type[RolloutError]) -> None:
    assert isinstance(error.outcome, Outcome)


def test_status_watch_stops_at_the_states_that_name_an_outcome() -> None:
    from rollout.journal import TERMINAL, RolloutStatus
    from rollout.usecases.status import NOT_RUNNING, STATE_NAMES, UNRESPONSIVE

    def shown(status: RolloutStatus) -> str:
        return STATE_NAMES.get(status.value, status.value)

    ended_states = {shown(s) for s in TERMINAL} | {"reverted", NOT_RUNNING}
    going_on = {shown(s) for s in RolloutStatus if s not in TERMINAL} | {"paused", UNRESPONSIVE}
    assert ended_states <= base.ENDED_STATES
    assert not going_on & base.ENDED_STATES
