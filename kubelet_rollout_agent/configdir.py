"""The drop-in directory as the kubelet reads it, so the agent can check what the kubelet will run.

The rules (which files, in which order, how they merge) are the core's
(``rollout.kubeletconfig.dropin``), shared with the orchestrator's review; this module only reads
the directory. The kubelet (``mergeKubeletConfigurations`` in cmd/kubelet/app/server.go) walks
``--config-dir`` with ``filepath.WalkDir``: subdirectories are entered, symlinks are not (a
symlink named ``*.conf`` is read as a file), and every ``*.conf`` file must load as a
``KubeletConfiguration`` of ``kubelet.config.k8s.io/v1beta1`` or the kubelet does not start.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

from rollout.kubeletconfig.decode import check_type_meta
from rollout.kubeletconfig.dropin import DropinFile, is_dropin_name, kubelet_order

from kubelet_rollout_agent.merge import load_document

__all__ = ["dropin_files", "read_dropins", "read_dropins_after"]


def _walk(directory: Path) -> Iterator[Path]:
    """``*.conf`` paths below ``directory``; entering a subdirectory that cannot be listed raises
    (the kubelet fails its start on it too)."""
    with os.scandir(directory) as entries:
        found = list(entries)
    for entry in found:
        if entry.is_dir(follow_symlinks=False):
            yield from _walk(Path(entry.path))
        elif is_dropin_name(entry.name):
            yield Path(entry.path)


def dropin_files(config_dir: Path) -> list[Path]:
    """The files a kubelet reads from ``--config-dir``, in the order it applies them."""
    if not config_dir.is_dir():
        return []
    return sorted(_walk(config_dir), key=lambda p: kubelet_order(p.relative_to(config_dir).as_posix()))


def _read(path: Path, relative: str) -> DropinFile:
    try:
        doc = load_document(path.read_text())
    except (OSError, UnicodeDecodeError, ValueError) as exc:
        return DropinFile(relative, {}, f"cannot be loaded: {exc}")
    problems = check_type_meta(doc)
    if problems:
        return DropinFile(relative, {}, "cannot be loaded: " + "; ".join(str(p) for p in problems))
    return DropinFile(relative, doc)


def _listed(config_dir: Path) -> list[tuple[Path, str]] | DropinFile:
    """The drop-ins with their paths relative to the directory, or the problem listing them."""
    try:
        paths = dropin_files(config_dir)
    except OSError as exc:
        where = os.path.relpath(exc.filename, config_dir) if exc.filename else "."
        return DropinFile(where, {}, f"cannot be listed: {exc.strerror or exc}")
    return [(p, p.relative_to(config_dir).as_posix()) for p in paths]


def read_dropins(config_dir: Path, *, skip: Path | None = None) -> list[DropinFile]:
    """Every drop-in of ``config_dir`` but ``skip``, in the kubelet's order, with paths relative
    to the directory; a file (or a subdirectory) that cannot be read carries its ``problem``."""
    listed = _listed(config_dir)
    if isinstance(listed, DropinFile):
        return [listed]
    return [_read(path, relative) for path, relative in listed if path != skip]


def read_dropins_after(config_dir: Path, ours: Path) -> list[DropinFile]:
    """The drop-ins the kubelet applies after ``ours`` (they win over it), read; only those."""
    listed = _listed(config_dir)
    if isinstance(listed, DropinFile):
        return [listed]
    key = kubelet_order(ours.relative_to(config_dir).as_posix())
    return [_read(path, relative) for path, relative in listed if kubelet_order(relative) > key]
