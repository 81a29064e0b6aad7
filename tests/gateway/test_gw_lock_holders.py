"""The lock belongs to one process (``rollout.lock``): against the scripted fake API, with real
processes standing for the holders (a holder's liveness is read from /proc).

Aspects: a second process of the same rollout never takes, renews or frees the lock of a live
one, and the refusal names it; a re-run takes over at once from its own rollout's process once
that process is gone, a different rollout waits for the lease to lapse; a silent holder on
another machine is waited out; the keeper stops the run (and fences its writes) before its
lease could lapse, however long renewals fail.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Iterator

import pytest

from rollout.errors import GatewayError, LockHeldError
from rollout.gateway import LOCK_NAME, LockKeeper
from rollout.lock import LEASE_GRACE_S, LIVE_WITHIN_S, Holder, act_window_s, this_process
from rollout.model import ConfigRef

ROOT = Path(__file__).resolve().parents[2]
PRINT_HOLDER = "from rollout.lock import this_process; print(this_process('x').details(), flush=True)"


def _holder_of(proc: subprocess.Popen[str]) -> Holder:
    """The identity another process of rollout ``x`` would hold the lock with."""
    assert proc.stdout is not None
    details = proc.stdout.readline()
    return Holder.from_lease(json.loads(details)["identity"], "x", details)


@pytest.fixture
def other_process() -> Iterator[subprocess.Popen[str]]:
    proc = subprocess.Popen([sys.executable, "-c", PRINT_HOLDER + "; import time; time.sleep(600)"],
                            cwd=ROOT, stdout=subprocess.PIPE, text=True)
    yield proc
    proc.kill()
    proc.wait(timeout=10)


def test_a_second_process_of_the_same_rollout_never_takes_renews_or_frees_a_live_lock(gw, fake, other_process):
    first = _holder_of(other_process)
    gw.acquire_lock(first, duration_s=390)
    second = this_process("x")
    with pytest.raises(LockHeldError) as refused:
        gw.acquire_lock(second, duration_s=390)
    message = str(refused.value)
    assert f"rollout x (pid {other_process.pid} on host {first.host}, run {first.run})" in message, message
    assert "live" in message and "''" not in message
    with pytest.raises(LockHeldError, match=f"pid {other_process.pid}"):
        gw.renew_lock(second, duration_s=390)
    assert gw.release_lock(second) is False
    lease = fake.get("leases", LOCK_NAME, ns="kube-system")
    assert lease["spec"]["holderIdentity"] == first.identity


def test_a_rerun_takes_over_at_once_from_its_own_rollouts_gone_process(gw, fake, clock, other_process):
    gone = _holder_of(other_process)
    gw.acquire_lock(gone, duration_s=390)
    other_process.kill()
    other_process.wait(timeout=10)
    with pytest.raises(LockHeldError, match="its process no longer runs"):
        gw.acquire_lock(this_process("y"), duration_s=390)  # another rollout waits for the lease
    taken = gw.acquire_lock(this_process("x"), duration_s=390)  # no clock moved: at once
    assert taken.rollout == "x" and taken.transitions == 1 and taken.holder != gone.identity
    clock.advance(391)
    assert gw.acquire_lock(this_process("y"), duration_s=390).rollout == "y"  # lapsed: anyone's


def test_a_silent_holder_on_another_machine_is_waited_out(gw, clock):
    elsewhere = Holder(identity="x@far:4711/abc", rollout="x", host="far", pid=4711, run="abc",
                       started="1234", machine="another-boot/pid:[1]")
    gw.acquire_lock(elsewhere, duration_s=390)
    clock.advance(LIVE_WITHIN_S + 1)
    with pytest.raises(LockHeldError) as refused:
        gw.acquire_lock(this_process("x"), duration_s=390)
    assert "silent" in str(refused.value) and "pid 4711 on host far" in str(refused.value)
    clock.advance(390 - LIVE_WITHIN_S)
    assert gw.acquire_lock(this_process("x"), duration_s=390).rollout == "x"  # lapsed


class Monotonic:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_the_keeper_stops_the_run_before_its_lease_could_lapse(gw, fake, clock):
    """Renewals fail (an outage) for as long as the run rides outages out: up to the last moment
    the run may act, nobody else can take the lease; from then on, no write leaves the gateway."""
    mono = Monotonic()
    fake.put("nodes", {"apiVersion": "v1", "kind": "Node", "metadata": {"name": "node-a"}, "spec": {}})
    with LockKeeper(gw, this_process("x"), outage_tolerance_s=300, renew_every_s=3600, clock=mono) as keeper:
        assert keeper.duration_s >= act_window_s(300) + LEASE_GRACE_S
        for _ in range(2):
            step = act_window_s(300) / 2 - 1
            clock.advance(step)
            mono.now += step
            fake.state.failures = [(503, None)] * 6  # every attempt of this renewal
            keeper.renew_now()
            assert keeper.last_failure is not None
            keeper.check()  # still within its window
            assert not gw.read_lock().expired(clock())
            with pytest.raises(LockHeldError):
                gw.acquire_lock(this_process("y"), duration_s=390)
        clock.advance(2)
        mono.now += 2
        with pytest.raises(GatewayError, match="could not be renewed for 330s"):
            keeper.check()
        lease = gw.read_lock()
        assert not lease.expired(clock()) and (lease.expires - clock()).total_seconds() >= LEASE_GRACE_S - 2
        patches = len(fake.writes("nodes"))
        with pytest.raises(GatewayError, match="could not be renewed"):
            gw.assign("node-a", ConfigRef("kube-system", "kc-1", "kubelet"), annotations={})
        assert len(fake.writes("nodes")) == patches  # fenced: nothing sent
    assert fake.get("leases", LOCK_NAME, ns="kube-system")["spec"]["holderIdentity"]  # not released: lost


def test_a_renewal_after_a_person_released_the_lease_names_what_happened(gw, fake):
    me = this_process("x")
    with LockKeeper(gw, me, renew_every_s=3600) as keeper:
        other = this_process("x")
        assert gw.release_lock(other) is False
        lease = fake.get("leases", LOCK_NAME, ns="kube-system")
        lease["spec"]["holderIdentity"] = None
        fake.put("leases", lease, ns="kube-system")
        keeper.renew_now()
        with pytest.raises(LockHeldError, match=r"nobody: the lease was released while rollout x \(pid"):
            keeper.check()
