"""One truth on every screen: a run's own status (what `rollout start` draws each second on a
terminal, ``rollout.run.Run.status``) says what `rollout status` says from the cluster, while the
run soaks a batch, waits at a gate or for a maintenance window; and during an outage it says the run
waits for the API server, until when, with the nodes as last seen, not dead.

Before: the run's own screen said "stopped ... not running: no process of this rollout holds its
lock (the lock is free)" the whole time (it was drawn without the lock the run holds), and during an
outage it showed nodes crash-looping that `rollout status` showed promoted."""

from __future__ import annotations

import time
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any, Callable

import scenario as sc

from flows.cluster import begin_run
from rollout.run import Run, rollout_request
from rollout.usecases import rollout_status


def _until(condition: Callable[[], bool], timeout: float = 90.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():
            return
        time.sleep(0.2)
    raise AssertionError("timed out")


def _phases(status: dict[str, Any]) -> dict[str, str]:
    return {n["name"]: n["phase"] for n in status["nodes"]}


def _begin(c: Any, name: str, policy: str, max_pods: int) -> Run:
    gw = sc.gateway(c)
    return begin_run(rollout_request(name=name, config=sc.config_text(gw, maxPods=max_pods), policy=policy,
                                     kubeconfig=str(c.kubeconfig)))


def _agree(run: Run, c: Any, waits_for: str) -> dict[str, Any]:
    """The run's own status and the cluster's agree on the state, the wait and every node's phase."""
    gw = sc.gateway(c)
    for _ in range(20):  # a node may move between the two reads: read again until both saw the same
        own, theirs = run.status(), rollout_status(gw, run.name)
        assert own is not None
        if _phases(own) == _phases(theirs) and own["waiting"] and theirs["waiting"]:
            break
        time.sleep(0.3)
    assert own["state"] == theirs["state"] != "stopped", (own["state"], own["reason"])
    assert own["waiting"]["for"] == theirs["waiting"]["for"] == waits_for, (own["waiting"], theirs["waiting"])
    assert own["waiting"]["until"] == theirs["waiting"]["until"]
    assert _phases(own) == _phases(theirs)
    assert own["lock"]["liveness"] == "live" and own["lock"]["rollout"] == run.name
    return own


def test_the_runs_own_status_agrees_with_rollout_status_at_a_gate_and_in_a_soak(tmp_path: Path) -> None:
    with sc.cluster(tmp_path, general=3) as c:
        gw = sc.gateway(c)
        run = _begin(c, "one-truth", sc.policy(steps=[1, "50%", "100%"], maxUnavailable=3, done={"soak": "1h"}),
                     max_pods=71)
        try:
            _until(lambda: (s := run.status()) is not None and (s.get("waiting") or {}).get("for") == "soak")
            _agree(run, c, "soak")
        finally:
            run.stop()
            run.wait_ended(30)
        assert sc.journal(gw, "one-truth").shown_status == "stopped"

        gated = _begin(c, "gated-truth", sc.policy(steps=[1, "100%"], maxUnavailable=3,
                                                   approval={"after": [0], "timeout": "1h"}), max_pods=72)
        try:
            _until(lambda: (s := gated.status()) is not None and (s.get("waiting") or {}).get("for") == "approval")
            own = _agree(gated, c, "approval")
            assert own["waiting"]["command"] == "rollout approve gated-truth"
        finally:
            gated.stop()
            gated.wait_ended(30)


def test_the_runs_own_status_says_it_waits_for_a_window_and_until_when(tmp_path: Path) -> None:
    opens = datetime.now(timezone.utc) + timedelta(days=2)
    window = {"timezone": "UTC", "windows": [{"days": [opens.strftime("%a").lower()], "start": "08:00",
                                              "end": "09:00"}]}
    with sc.cluster(tmp_path, general=2) as c:
        run = _begin(c, "windowed", sc.policy(maintenanceWindows=window), max_pods=73)
        try:
            _until(lambda: (s := run.status()) is not None and (s.get("waiting") or {}).get("for") == "window")
            own = _agree(run, c, "window")
            assert own["waiting"]["until"].startswith(opens.strftime("%Y-%m-%dT08:00"))
            # the estimate waits for the window too (it said minutes for a rollout a day away)
            assert own["estimate"]["window_wait_seconds"] > 24 * 3600
            assert own["estimate"]["ends_at"] > own["waiting"]["until"]
        finally:
            run.stop()
            run.wait_ended(30)


def test_during_an_outage_the_runs_own_status_waits_for_the_api_server_with_the_nodes_as_last_seen(
        tmp_path: Path) -> None:
    with sc.cluster(tmp_path, general=3) as c:
        run = _begin(c, "outage-truth", sc.policy(steps=[1, "100%"], maxUnavailable=3, done={"soak": "1h"},
                                                  apiOutageTolerance="5m", leaseStaleAfter="5s"), max_pods=74)
        try:
            _until(lambda: (s := run.status()) is not None and (s.get("waiting") or {}).get("for") == "soak")
            before = _phases(run.status() or {})
            c.faults.blackhole()  # every connection silent: the watches die, nothing answers
            try:
                _until(lambda: ((run.status() or {}).get("waiting") or {}).get("for") == "the API server",
                       timeout=120)
                time.sleep(8)  # longer than leaseStaleAfter: a frozen view judged now would call them dead
                during = run.status()
                assert during is not None and during["state"] != "stopped"
                assert during["waiting"]["until"] is not None
                assert _phases(during) == before, "the screen judged the frozen view as of now"
            finally:
                c.faults.blackhole(False)
        finally:
            run.stop()
            run.wait_ended(60)
