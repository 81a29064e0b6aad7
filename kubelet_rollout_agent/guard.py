#!/usr/bin/env python3
"""kubelet-rollout host guard: rescues a kubelet that crash-loops on a drop-in in trial.

Why on the host: while the kubelet is down no pod can (re)start, so an agent pod that dies
during a crash loop stays dead. This program runs as ``ExecStartPre=`` of ``kubelet.service``,
before *every* kubelet start, and needs neither the API server nor the agent:

- no trial file in the agent's state dir (or the trial is over): do nothing;
- otherwise count this start; once ``threshold`` starts have failed (the first start of a trial
  is the agent's own restart), put the last-known-good drop-in back from the state dir (or
  remove ours if the base config was last-known-good), write a record of why (with the kubelet's
  last error line from the journal when one is available) and end the trial. The kubelet then
  starts on the restored config in this very start.

The trial's window (``windowSeconds``) opens at the first kubelet start the guard sees after the
agent staged the drop-in, however late that is: an agent that died between writing the drop-in
and restarting the kubelet leaves the first start to the next reboot, maybe hours later, and that
crash loop must still be counted.

It never blocks the kubelet: every failure is printed (to the kubelet's journal) and it exits 0.
The file in trial is the trial file's ``file`` (a drop-in, or with the main-file backend the
kubelet's whole ``--config`` file, whose base is put back from ``baseFile`` in the state dir);
``--config-dir``/``--dropin`` only for a trial file without it (an older agent's).

Standard library only (it runs with the host's python3). Every absolute path is prefixed with
``$HOST_ROOT`` (unset on a real host), so it runs unchanged on a simulated host.

This file is copied verbatim to the host by ``kubelet-rollout-agent``; the file names below must
match ``kubelet_rollout_agent/names.py`` (a test checks it).
"""

from __future__ import annotations

import argparse
import contextlib
import errno
import hashlib
import json
import os
import secrets
import shutil
import subprocess
import sys
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

TRIAL_FILE = "guard-trial.json"
COUNT_FILE = "guard-starts.json"
RECORD_FILE = "guard-record.json"
TEMP_MARK = ".kubelet-rollout-tmp-"
# Lines of the kubelet's own log that say the config is at fault (modern-kubelet.md).
ERROR_MARKERS = ("failed to load kubelet", "failed to merge kubelet", "failed to validate kubelet",
                 "command failed", "failed to run kubelet")  # compared lower-cased


def host_path(path: str) -> Path:
    """A host-absolute path under ``$HOST_ROOT``."""
    root = os.environ.get("HOST_ROOT") or "/"
    return Path(root) / path.lstrip("/")


def say(message: str) -> None:
    print(f"kubelet-rollout-guard: {message}", flush=True)


def read_json(path: Path) -> dict[str, Any] | None:
    try:
        data = json.loads(path.read_text())
    except FileNotFoundError:
        return None
    return data if isinstance(data, dict) else None


def atomic_write(target: Path, data: bytes, mode: int = 0o644) -> None:
    """Temp file beside the target (never named *.conf), every byte written (``os.write`` may
    write a part: on a full disk a truncated drop-in must never be renamed into place), fsync,
    rename, fsync the directory."""
    temp = target.with_name(f".{target.name}{TEMP_MARK}{secrets.token_hex(4)}")
    fd = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, mode)
    try:
        view = memoryview(data)
        while view:
            written = os.write(fd, view)
            if written <= 0:
                raise OSError(errno.EIO, f"write made no progress with {len(view)} bytes left")
            view = view[written:]
        os.fchmod(fd, mode)
        os.fsync(fd)
    except BaseException:
        os.close(fd)
        with contextlib.suppress(OSError):
            temp.unlink()
        raise
    os.close(fd)
    os.replace(temp, target)
    sync_dir(target.parent)


def sync_dir(directory: Path) -> None:
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def sha_of(path: Path) -> str | None:
    try:
        return hashlib.sha256(path.read_bytes()).hexdigest()
    except FileNotFoundError:
        return None


def last_error_line() -> str:
    """The kubelet's last error line from journald; "" on a simulated host or without journalctl."""
    if (os.environ.get("HOST_ROOT") or "/") != "/" or shutil.which("journalctl") is None:
        return ""
    with contextlib.suppress(OSError, subprocess.SubprocessError):
        out = subprocess.run(["journalctl", "-u", "kubelet", "-n", "200", "-o", "cat", "--no-pager"],
                             capture_output=True, text=True, timeout=10, check=False).stdout
        for line in reversed(out.splitlines()):
            if any(marker in line.lower() for marker in ERROR_MARKERS):  # klog says "Kubelet"
                return line.strip()
    return ""


def count_start(state_dir: Path, trial: dict[str, Any], first_start: datetime, starts: int) -> int:
    """Record this start; its number within the trial (1 = the first start onto the drop-in)."""
    starts += 1
    atomic_write(state_dir / COUNT_FILE, json.dumps(
        {"trial": trial["trial"], "starts": starts, "firstStart": first_start.isoformat()}).encode())
    return starts


def starts_so_far(state_dir: Path, trial: dict[str, Any], now: datetime) -> tuple[datetime, int]:
    """When this trial's first start was (``now`` if this is it) and how many were counted."""
    counter = read_json(state_dir / COUNT_FILE) or {}
    if counter.get("trial") != trial["trial"] or not counter.get("firstStart"):
        return now, 0
    return datetime.fromisoformat(counter["firstStart"]), int(counter.get("starts", 0))


def restore(state_dir: Path, dropin: Path, trial: dict[str, Any]) -> str:
    """Put last-known-good back (or remove ours, or with the main-file backend put the base
    config back); returns what was restored."""
    lkg_name = trial.get("lastKnownGood")
    if not lkg_name and trial.get("baseFile"):
        atomic_write(dropin, (state_dir / trial["baseFile"]).read_bytes())
        return "base"
    if not lkg_name:
        with contextlib.suppress(FileNotFoundError):
            dropin.unlink()
            sync_dir(dropin.parent)
        return "base"
    data = (state_dir / lkg_name).read_bytes()
    if trial.get("lastKnownGoodSha") and hashlib.sha256(data).hexdigest() != trial["lastKnownGoodSha"]:
        raise RuntimeError(f"{state_dir / lkg_name} does not match the recorded last-known-good")
    atomic_write(dropin, data)
    return "last-known-good"


def guard(state_dir: Path, dropin: Path, now: datetime) -> str:
    """One kubelet start: the guard's whole decision. Returns what it did (for the journal)."""
    trial = read_json(state_dir / TRIAL_FILE)
    if not trial:
        return "no trial in progress"
    if trial.get("file"):  # the file in trial, as the agent names it (a drop-in or the --config file)
        dropin = host_path(str(trial["file"]))
    first_start, counted = starts_so_far(state_dir, trial, now)
    if now >= first_start + timedelta(seconds=float(trial["windowSeconds"])):
        return f"trial {trial['trial']} is over (its first start was {first_start.isoformat()}); not counting"
    starts = count_start(state_dir, trial, first_start, counted)
    failed = starts - 1
    threshold = int(trial.get("threshold", 3))
    if failed < threshold:
        return f"kubelet start {starts} in trial {trial['trial']} ({failed}/{threshold} failed)"
    if sha_of(dropin) != trial["dropinSha"]:
        return f"{failed} failed starts, but {dropin} is no longer the drop-in in trial; leaving it"
    restored = restore(state_dir, dropin, trial)
    record = {"at": now.isoformat(), "trial": trial["trial"], "dropinSha": trial["dropinSha"],
              "starts": starts, "restored": restored, "journalLine": last_error_line()}
    atomic_write(state_dir / RECORD_FILE, json.dumps(record).encode())
    for name in (TRIAL_FILE, COUNT_FILE):
        with contextlib.suppress(FileNotFoundError):
            (state_dir / name).unlink()
    return f"{failed} failed kubelet starts in trial {trial['trial']}: restored {restored}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--state-dir", default="/var/lib/kubelet-rollout")
    parser.add_argument("--config-dir", default="/etc/kubernetes/kubelet.conf.d")
    parser.add_argument("--dropin", default="90-kubelet-rollout.conf")
    args = parser.parse_args(argv)
    try:
        dropin = host_path(args.config_dir) / args.dropin
        say(guard(host_path(args.state_dir), dropin, datetime.now(timezone.utc)))
    except Exception as exc:  # never keep the kubelet from starting
        say(f"error (kubelet starts anyway): {type(exc).__name__}: {exc}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
