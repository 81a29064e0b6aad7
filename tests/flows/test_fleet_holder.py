"""The one process that drives a fleet: a slot of a Prefect global concurrency limit held as a
lease (``flows.fleet.store.FleetKeeper``), against the session's real Prefect server."""

from __future__ import annotations

import os
import subprocess
import sys
from datetime import datetime, timezone

import pytest

from flows.fleet.store import FleetKeeper, holder_limit, read_journal
from flows.leases import limit_in_use
from rollout.errors import LockHeldError
from rollout.fleet import FleetJournal

pytestmark = [pytest.mark.usefixtures("prefect_api")]


def start(rollout: str):  # noqa: ANN201 - the journal of a fleet rollout this name never had
    return lambda now: FleetJournal(rollout=rollout, digest="d", created_at=now)


def test_a_second_process_is_refused_while_the_holder_lives_and_takes_the_fleet_after_it() -> None:
    with FleetKeeper("held", start=start("held")) as first:
        with pytest.raises(LockHeldError) as refused:
            FleetKeeper("held", start=start("held")).__enter__()
        assert f"run {first.holder.run}" in str(refused.value) and "live" in str(refused.value)
        assert limit_in_use(holder_limit("held")) == (1, 1)  # one slot, the first's
    assert limit_in_use(holder_limit("held")) == (0, 1)
    with FleetKeeper("held", start=start("held")) as second:
        loaded = read_journal("held")
        assert loaded is not None and loaded[1] is not None and loaded[1].holder == second.holder.identity


def test_a_holder_killed_on_this_machine_is_taken_over_at_once(prefect_api: str) -> None:
    """kill -9 of the fleet's process, then the same command: it need not wait for the lease to lapse."""
    script = ("import sys, time\n"
              "from flows.fleet.store import FleetKeeper\n"
              "from rollout.fleet import FleetJournal\n"
              "with FleetKeeper('killed', start=lambda now: FleetJournal(rollout='killed', digest='d', created_at=now)):\n"
              "    print('held', flush=True)\n"
              "    time.sleep(600)\n")
    proc = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True,
                            env={**os.environ, "PREFECT_API_URL": prefect_api})
    try:
        assert proc.stdout is not None and proc.stdout.readline().strip() == "held"
        with pytest.raises(LockHeldError):  # it lives: refused
            FleetKeeper("killed", start=start("killed")).__enter__()
    finally:
        proc.kill()
        proc.wait()
    began = datetime.now(timezone.utc)
    with FleetKeeper("killed", start=start("killed")) as keeper:  # at once: its process is gone
        assert (datetime.now(timezone.utc) - began).total_seconds() < 30
        assert limit_in_use(holder_limit("killed")) == (1, 1)
        loaded = read_journal("killed")
        assert loaded is not None and loaded[1] is not None and loaded[1].holder == keeper.holder.identity
