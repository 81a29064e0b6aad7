"""Atomic writes: a killed writer leaves the old drop-in or the new one, never a half ``.conf``.

The kill is real: a child process writes the temp file and SIGKILLs itself before the rename,
as an OOM kill or a node reset would.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from kubelet_rollout_agent import atomic
from kubelet_rollout_agent.atomic import atomic_write, remove_stale_temps, temp_path_for
from kubelet_rollout_agent.configdir import dropin_files


def _killed_mid_write(target: Path, data: str) -> int:
    code = textwrap.dedent(f"""
        import os, signal, pathlib
        from kubelet_rollout_agent.atomic import write_temp
        write_temp(pathlib.Path({str(target)!r}), {data!r}.encode())
        os.kill(os.getpid(), signal.SIGKILL)   # dies between the temp write and the rename
    """)
    return subprocess.run([sys.executable, "-c", code], check=False).returncode


@pytest.mark.parametrize("existed", [True, False], ids=["over an existing drop-in", "first drop-in"])
def test_a_kill_between_temp_write_and_rename_leaves_no_conf_stray(tmp_path: Path, existed: bool) -> None:
    target = tmp_path / "90-kubelet-rollout.conf"
    if existed:
        target.write_text("old: true\n")
    assert _killed_mid_write(target, "new: true\n") == -signal.SIGKILL
    leftovers = [p for p in tmp_path.iterdir() if p != target]
    assert leftovers, "the temp file should exist (the child died before renaming it)"
    assert all(not p.name.endswith(".conf") for p in leftovers)
    assert dropin_files(tmp_path) == ([target] if existed else [])
    if existed:
        assert target.read_text() == "old: true\n"
    assert remove_stale_temps(tmp_path) == leftovers
    assert [p.name for p in tmp_path.iterdir()] == ([target.name] if existed else [])


def test_a_failed_rename_removes_its_temp_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    target = tmp_path / "90-kubelet-rollout.conf"
    target.write_text("old")

    def refuse(*_: object) -> None:
        raise OSError("disk on fire")

    monkeypatch.setattr(atomic.os, "replace", refuse)
    with pytest.raises(OSError):
        atomic_write(target, "new")
    assert [p.name for p in tmp_path.iterdir()] == [target.name] and target.read_text() == "old"


def test_atomic_write_replaces_content_and_sets_the_mode(tmp_path: Path) -> None:
    target = tmp_path / "d" / "90-kubelet-rollout.conf"
    old_umask = os.umask(0o077)
    try:
        atomic_write(target, "a")
        atomic_write(target, "b", mode=0o644)
    finally:
        os.umask(old_umask)
    assert target.read_text() == "b" and (target.stat().st_mode & 0o777) == 0o644


def test_temp_names_never_end_in_conf() -> None:
    name = temp_path_for(Path("/x/90-kubelet-rollout.conf")).name
    assert name.startswith(".") and not name.endswith(".conf")


def _write_past_a_size_limit(module: str, target: Path, data: bytes, limit: int) -> subprocess.CompletedProcess[str]:
    """``module.atomic_write`` in a child process whose files may not grow past ``limit`` bytes
    (RLIMIT_FSIZE, as on a full disk): the kernel then writes a part and returns a short count,
    and the next write fails with EFBIG."""
    code = textwrap.dedent(f"""
        import pathlib, resource, signal, sys
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        resource.setrlimit(resource.RLIMIT_FSIZE, ({limit}, {limit}))
        from {module} import atomic_write
        try:
            atomic_write(pathlib.Path({str(target)!r}), {data!r})
        except OSError as exc:
            print(exc.errno)
            sys.exit(3)
    """)
    return subprocess.run([sys.executable, "-B", "-c", code], capture_output=True, text=True, check=False)


@pytest.mark.parametrize("module", ["kubelet_rollout_agent.atomic", "kubelet_rollout_agent.guard"],
                         ids=["the agent's write", "the guard's write"])
def test_a_short_write_is_never_renamed_into_place(tmp_path: Path, module: str) -> None:
    """A write cut short (the disk filled up half-way) raises; the old drop-in stays whole and no
    temp file is left behind. Before the fix the first 64 bytes were renamed into place."""
    import errno

    target = tmp_path / "90-kubelet-rollout.conf"
    target.write_text("old: true\n")
    new = b"apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\n" + b"# pad\n" * 200
    done = _write_past_a_size_limit(module, target, new, limit=64)
    assert done.returncode == 3, (done.returncode, done.stdout, done.stderr, target.read_bytes()[:80])
    assert done.stdout.strip() == str(errno.EFBIG)
    assert target.read_text() == "old: true\n"
    assert [p.name for p in tmp_path.iterdir()] == [target.name]
