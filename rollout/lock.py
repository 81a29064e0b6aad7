"""The rollout lock as values: who holds it, how long it lasts, and what a reader may conclude.

The lock is the Lease ``kube-system/kubelet-rollout-lock``; ``rollout.gateway`` reads and writes
it and its ``LockKeeper`` keeps it for the length of a run. Every rule about it is here.

**One process, one identity.** The lock is held by one process running one rollout (or its
rollback). ``spec.holderIdentity`` is ``<rollout>@<host>:<pid>/<run>``, ``run`` being random and
new for every process; the annotation ``kubelet-rollout.io/holder`` records where that pid names
this process (the kernel's boot id and the pid namespace) and when the process started. Every
renewal and the release compare the resourceVersion *and* the identity: a second process, even
of the same rollout, never renews or frees a lock it does not hold.

**Timing.** The keeper renews every :data:`RENEW_EVERY_S`. A run rides out API outages for the
policy's ``apiOutageTolerance`` without renewing, so it may act until :func:`act_window_s` after
its last renewal (the tolerance, plus the renewals it may have missed before the outage showed);
then its writes are refused and the run stops. The lease lasts :data:`LEASE_GRACE_S` longer (a
request already on the wire, clock skew between machines): :func:`lease_seconds`. Nobody can
take the lease while its holder may still act.

**Takeover.** A released or lapsed lease is anyone's. A holder that renews is never displaced.
A holder of the *same* rollout whose process is gone, as seen from its own machine (that pid no
longer runs that process), is taken over at once: a re-run after a crash needs no wait. From
another machine a silent holder cannot be told from one riding out an outage, so it is waited
out until its lease lapses; a different rollout always waits for that.
"""

from __future__ import annotations

import enum
import json
import os
import secrets
import socket
from dataclasses import dataclass
from datetime import datetime, timedelta
from pathlib import Path
from typing import Callable

from rollout.timefmt import human

RENEW_EVERY_S = 10.0
# a holder whose last renewal is older than this has missed its renewals (three of them)
LIVE_WITHIN_S = 3 * RENEW_EVERY_S
# one request already under way when the run stops (10 s connect + 30 s read) and clock skew
LEASE_GRACE_S = 60.0


def act_window_s(outage_tolerance_s: float) -> float:
    """How long after its last successful renewal a run may still write."""
    return outage_tolerance_s + LIVE_WITHIN_S


def lease_seconds(outage_tolerance_s: float) -> float:
    """The lease's duration: it outlasts the act window, so it never lapses under a run that acts."""
    return act_window_s(outage_tolerance_s) + LEASE_GRACE_S


@dataclass(frozen=True)
class Holder:
    """One process holding (or asking for) the lock for one rollout.

    A holder read from a Lease written by something else (an older version, a person) has only
    its ``identity`` and ``rollout``: it can never be proven gone, only waited out.
    """

    identity: str
    rollout: str
    host: str = ""
    pid: int = 0
    run: str = ""
    started: str = ""  # the process's start, in clock ticks since boot (/proc/PID/stat)
    machine: str = ""  # where ``pid`` names this process: kernel boot id + pid namespace

    def details(self) -> str:
        """The Lease annotation: everything but the rollout, with the identity it belongs to."""
        return json.dumps({"identity": self.identity, "host": self.host, "pid": self.pid, "run": self.run,
                           "started": self.started, "machine": self.machine}, sort_keys=True)

    @classmethod
    def from_lease(cls, identity: str, rollout: str, details: str | None) -> "Holder":
        try:
            data = json.loads(details) if details else None
        except ValueError:
            data = None
        if not isinstance(data, dict) or data.get("identity") != identity:
            return cls(identity=identity, rollout=rollout)  # details of an earlier holder, or none
        return cls(identity=identity, rollout=rollout, host=str(data.get("host", "")),
                   pid=_int(data.get("pid")), run=str(data.get("run", "")),
                   started=str(data.get("started", "")), machine=str(data.get("machine", "")))

    def __str__(self) -> str:
        if self.pid:
            return f"rollout {self.rollout} (pid {self.pid} on host {self.host}, run {self.run})"
        return f"{self.identity} (rollout {self.rollout or '?'})"


def as_holder(holder: "Holder | str", rollout: str = "") -> Holder:
    """A plain identity string (tests, other tools) as a holder without process details."""
    return holder if isinstance(holder, Holder) else Holder(identity=holder, rollout=rollout)


@dataclass(frozen=True)
class LockInfo:
    """The rollout lock as last read or written."""

    holder: str  # spec.holderIdentity; "" once released
    rollout: str  # the rollout of the holder (of the last one once released)
    acquired: datetime | None
    renewed: datetime | None
    duration_s: float
    resource_version: str
    transitions: int = 0
    held_by: Holder | None = None  # None once released

    @property
    def expires(self) -> datetime | None:
        return self.renewed + timedelta(seconds=self.duration_s) if self.renewed else None

    def expired(self, now: datetime) -> bool:
        """Free to take: released (no holder), never renewed, or renewal older than its duration."""
        return not self.holder or self.expires is None or self.expires <= now


class Liveness(str, enum.Enum):
    """What a reader of the Lease may conclude about its holder."""

    FREE = "free"  # released, or never taken
    LIVE = "live"  # renewed within LIVE_WITHIN_S
    SILENT = "silent"  # missed its renewals: riding out an API outage, or gone on another machine
    GONE = "gone"  # its process no longer runs, as seen from its own machine
    LAPSED = "lapsed"  # the lease ran out


def liveness(info: LockInfo, now: datetime, *, gone: Callable[[Holder], bool] | None = None) -> Liveness:
    if not info.holder:
        return Liveness.FREE
    if info.expired(now):
        return Liveness.LAPSED
    if info.held_by is not None and (gone or process_gone)(info.held_by):
        return Liveness.GONE
    if info.renewed is not None and (now - info.renewed).total_seconds() <= LIVE_WITHIN_S:
        return Liveness.LIVE
    return Liveness.SILENT


def takeover_reason(info: LockInfo, holder: Holder, now: datetime, *,
                    gone: Callable[[Holder], bool] | None = None) -> str | None:
    """Why ``holder`` may take the lock from its current holder now; None: it may not."""
    state = liveness(info, now, gone=gone)
    if state is Liveness.FREE:
        return "it was free"
    if state is Liveness.LAPSED:
        return f"its lease lapsed at {_when(info.expires)}"
    if state is Liveness.GONE and info.rollout == holder.rollout:
        return f"{info.held_by} is gone"
    return None


def describe(info: LockInfo, now: datetime, *, gone: Callable[[Holder], bool] | None = None) -> str:
    """The holder and what is known of it, for a refusal or a status line."""
    state = liveness(info, now, gone=gone)
    if state is Liveness.FREE:
        return "nobody (the lock is free)"
    who = info.held_by or as_holder(info.holder, info.rollout)
    since = f", since {_when(info.acquired)}" if info.acquired else ""
    age = (now - info.renewed).total_seconds() if info.renewed else None
    renewed = f", last renewed {_when(info.renewed)} ({age:.0f}s ago)" if age is not None else ""
    tail = {
        Liveness.LIVE: f"live: it renews every {RENEW_EVERY_S:.0f}s; its lease lapses at {_when(info.expires)} "
                       "unless renewed",
        Liveness.SILENT: f"silent: it renews every {RENEW_EVERY_S:.0f}s, so it is riding out an API outage or is "
                         f"gone; its lease lapses at {_when(info.expires)} unless renewed",
        Liveness.GONE: "its process no longer runs",
        Liveness.LAPSED: f"its lease lapsed at {_when(info.expires)}",
    }[state]
    return f"{who}{since}{renewed}: {tail}"


def _when(moment: datetime | None) -> str:
    return human(moment) if moment else "?"


def _int(value: object) -> int:
    try:
        return int(str(value))
    except ValueError:
        return 0


# -- this process and others on this machine -----------------------------------------------

# Identities this process holds right now (LockKeeper adds and removes them): another run in the
# same process sees its own pid alive and can only tell an ended run of its own this way.
_HELD_HERE: set[str] = set()


def mark_held(identity: str) -> None:
    _HELD_HERE.add(identity)


def mark_ended(identity: str) -> None:
    _HELD_HERE.discard(identity)


def this_process(rollout: str) -> Holder:
    """A new identity for this process running ``rollout`` (a new ``run`` on every call)."""
    pid, run, host = os.getpid(), secrets.token_hex(6), socket.gethostname()
    started = _start_ticks(pid) or ""
    return Holder(identity=f"{rollout}@{host}:{pid}/{run}", rollout=rollout, host=host, pid=pid, run=run,
                  started=started, machine=_machine() if started else "")


def process_gone(holder: Holder) -> bool:
    """The holder's process provably no longer runs: it was recorded on this machine (same boot,
    same pid namespace) and its pid is free, a zombie, or a later process. Anything less certain
    (another machine, no /proc, a process we may not inspect) is not gone."""
    if not holder.machine or holder.pid <= 0 or holder.machine != _machine():
        return False
    started = _start_ticks(holder.pid)
    if started is None:
        return True
    if holder.pid == os.getpid() and started == holder.started:
        return holder.identity not in _HELD_HERE
    return bool(started and holder.started) and started != holder.started


def _machine() -> str:
    """Kernel boot id + pid namespace: where a pid names one process ("" when unknown)."""
    try:
        boot = Path("/proc/sys/kernel/random/boot_id").read_text().strip()
        namespace = os.readlink("/proc/self/ns/pid")
    except OSError:
        return ""
    return f"{boot}/{namespace}" if boot and namespace else ""


def _start_ticks(pid: int) -> str | None:
    """When process ``pid`` started (clock ticks since boot, /proc/PID/stat field 22); None when no
    such process runs (absent, or a zombie); "" when it runs but its start cannot be read."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return "" if _exists(pid) else None  # /proc may hide other users' processes (hidepid)
    except OSError:
        return ""
    fields = text[text.rfind(")") + 1:].split()  # the command name may hold spaces and parentheses
    if not fields or fields[0] in ("Z", "X"):
        return None
    return fields[19] if len(fields) > 19 else ""


def _exists(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True
