"""Atomic file writes: a reader sees the old file or the new one, never half of either.

Why it matters here: the kubelet reads every ``*.conf`` below ``--config-dir`` and refuses to
start on an empty or unparsable one. If the agent (or the node) dies while writing, a truncated
``90-kubelet-rollout.conf`` would crash-loop the kubelet with nobody left to fix it. So the
bytes go to a temporary file in the *same directory* (``rename`` is atomic only within one
filesystem) whose name does not end in ``.conf`` (the kubelet ignores it), are fsynced, renamed
over the target, and the directory is fsynced so the rename itself survives a power cut.

``os.write`` may write fewer bytes than asked (a full disk, a file size limit): the bytes are
written in a loop until all are down, or the write raises and the temp file is removed, so a
truncated drop-in is never renamed into place.
"""

from __future__ import annotations

import contextlib
import errno
import os
import secrets
from collections.abc import Callable
from pathlib import Path

TEMP_MARK = ".kubelet-rollout-tmp-"


def temp_path_for(target: Path) -> Path:
    """A sibling temp name: hidden, unique, and never ending in ``.conf``."""
    return target.with_name(f".{target.name}{TEMP_MARK}{secrets.token_hex(4)}")


def _fsync_dir(directory: Path) -> None:
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def write_all(fd: int, data: bytes) -> None:
    """Every byte of ``data`` to ``fd``, or an ``OSError``: ``os.write`` may write only a part."""
    view = memoryview(data)
    while view:
        written = os.write(fd, view)
        if written <= 0:  # no progress and no error: never loop forever on it
            raise OSError(errno.EIO, f"write made no progress with {len(view)} bytes left")
        view = view[written:]


def write_temp(target: Path, data: bytes, *, mode: int = 0o644) -> Path:
    """Step one of :func:`atomic_write`: the durable temp file (split out so tests can crash here)."""
    target.parent.mkdir(parents=True, exist_ok=True)
    temp = temp_path_for(target)
    fd = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, mode)
    try:
        write_all(fd, data)
        os.fchmod(fd, mode)  # the umask must not loosen or tighten what CIS 4.1.x asks for
        os.fsync(fd)
    except BaseException:
        os.close(fd)
        with contextlib.suppress(OSError):
            temp.unlink()
        raise
    os.close(fd)
    return temp


def atomic_write(target: Path, data: bytes | str, *, mode: int = 0o644,
                 before_rename: Callable[[], None] | None = None) -> None:
    """Replace ``target`` with ``data`` atomically and durably (``before_rename``: a fault hook)."""
    raw = data.encode() if isinstance(data, str) else data
    temp = write_temp(target, raw, mode=mode)
    if before_rename is not None:
        before_rename()
    try:
        os.replace(temp, target)
    except BaseException:
        with contextlib.suppress(OSError):
            temp.unlink()
        raise
    _fsync_dir(target.parent)


def atomic_remove(target: Path) -> bool:
    """Remove ``target`` durably; False when it was not there."""
    try:
        target.unlink()
    except FileNotFoundError:
        return False
    _fsync_dir(target.parent)
    return True


def remove_stale_temps(directory: Path) -> list[Path]:
    """Delete temp files a crash left behind (harmless to the kubelet, but clutter)."""
    if not directory.is_dir():
        return []
    stale = [p for p in directory.iterdir() if TEMP_MARK in p.name]
    for path in stale:
        with contextlib.suppress(OSError):
            path.unlink()
    return stale


def read_bytes(path: Path) -> bytes | None:
    """The file's bytes, or None when it does not exist."""
    try:
        return path.read_bytes()
    except FileNotFoundError:
        return None
