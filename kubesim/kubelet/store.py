"""The DKC checkpoint store on disk, in the real kubelet's layout (``fsstore.go``, ``files.go``).

Layout under ``<dynamic-config-dir>/store``::

    meta/assigned          SerializedNodeConfigSource YAML, or an empty file = local config
    meta/last-known-good   same
    checkpoints/<uid>/<resourceVersion>/<key>   one file per ConfigMap ``data`` key

Why it must be real files: operators (and tests) inspect and wipe this directory, the trial clock
is the *mtime* of ``meta/assigned`` (every rewrite restarts the 10-minute soak, E5/E6), checkpoints
are never garbage-collected (E9), and a node must boot from it with the API server down (E2).
Meta writes are atomic (temp file + fsync + rename); checkpoints are written into a temp dir that
is renamed into place, so a crash never leaves a half-written record.
"""

from __future__ import annotations

import os
import shutil
import tempfile
import time
from pathlib import Path
from typing import Any, Mapping, Optional

import yaml

META_KIND = "SerializedNodeConfigSource"
META_API_VERSION = "kubelet.config.k8s.io/v1beta1"
ALL_NIL_ERROR = "invalid NodeConfigSource, exactly one subfield must be non-nil, but all were nil"

Source = dict[str, Any]  # {"configMap": {namespace, name, uid, resourceVersion, kubeletConfigKey}}


class StoreError(Exception):
    """A filesystem or record error of the store."""


def source_path(source: Source) -> str:
    cm = source["configMap"]
    return f"/api/v1/namespaces/{cm['namespace']}/configmaps/{cm['name']}"


def describe(source: Source) -> str:
    """``<path>, UID: <uid>, ResourceVersion: <rv>`` as the controller logs it."""
    cm = source["configMap"]
    return f"{source_path(source)}, UID: {cm.get('uid', '')}, ResourceVersion: {cm.get('resourceVersion', '')}"


def same_source(a: Optional[Source], b: Optional[Source]) -> bool:
    """Semantic deep-equal over the five ConfigMap reference fields."""
    if a is None or b is None:
        return a is None and b is None
    keys = ("namespace", "name", "uid", "resourceVersion", "kubeletConfigKey")
    ca, cb = a.get("configMap") or {}, b.get("configMap") or {}
    return all((ca.get(k) or "") == (cb.get(k) or "") for k in keys) and ("configMap" in a) == ("configMap" in b)


def _fsync_dir(path: Path) -> None:
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


class FsStore:
    """One node's store; every method is synchronous (call through a thread for big fleets)."""

    def __init__(self, dynamic_config_dir: Path):
        self.dir = Path(dynamic_config_dir) / "store"
        self.meta = self.dir / "meta"
        self.checkpoints = self.dir / "checkpoints"
        self.assigned_file = self.meta / "assigned"
        self.lkg_file = self.meta / "last-known-good"

    # ------------------------------------------------------------------------------- set-up
    def initialize(self) -> None:
        """``Initialize()``: ensure dirs and empty meta files (EnsureFile: no fsync, no rewrite)."""
        for d in (self.dir, self.meta, self.checkpoints):
            d.mkdir(mode=0o755, parents=True, exist_ok=True)
        for f in (self.assigned_file, self.lkg_file):
            if not f.exists():
                f.touch()

    # --------------------------------------------------------------------------------- meta
    def assigned(self) -> Optional[Source]:
        return self._read_meta(self.assigned_file)

    def last_known_good(self) -> Optional[Source]:
        return self._read_meta(self.lkg_file)

    def set_assigned(self, source: Optional[Source]) -> None:
        self._write_meta(self.assigned_file, source)

    def set_last_known_good(self, source: Optional[Source]) -> None:
        self._write_meta(self.lkg_file, source)

    def assigned_modified(self) -> float:
        """mtime of ``meta/assigned``: the trial clock."""
        try:
            return self.assigned_file.stat().st_mtime
        except OSError as exc:
            raise StoreError(f"failed to stat {self.assigned_file}: {exc}") from exc

    def reset(self) -> bool:
        """Empty both meta files; returns whether something was assigned before."""
        previous = self.assigned()
        self.set_last_known_good(None)
        self.set_assigned(None)
        return previous is not None

    def _read_meta(self, path: Path) -> Optional[Source]:
        try:
            data = path.read_text()
        except OSError as exc:
            raise StoreError(f"failed to read {path}: {exc}") from exc
        if not data:
            return None
        try:
            obj = yaml.safe_load(data)
        except yaml.YAMLError as exc:
            raise StoreError(f"failed to decode {path}: {exc}") from exc
        source = (obj or {}).get("source") if isinstance(obj, dict) else None
        if not isinstance(source, dict) or not isinstance(source.get("configMap"), dict):
            raise StoreError(ALL_NIL_ERROR)  # decode is non-strict; no known subfield
        return {"configMap": {k: str(v) for k, v in source["configMap"].items()}}

    def _write_meta(self, path: Path, source: Optional[Source]) -> None:
        data = b""
        if source is not None:
            cm = source["configMap"]
            if not cm.get("uid"):
                raise StoreError("failed to write RemoteConfigSource, empty UID is ambiguous")
            if not cm.get("resourceVersion"):
                raise StoreError("failed to write RemoteConfigSource, empty ResourceVersion is ambiguous")
            record = {"kind": META_KIND, "apiVersion": META_API_VERSION, "source": {"configMap": dict(cm)}}
            data = yaml.safe_dump(record, default_flow_style=False, sort_keys=True).encode()
        self._replace_file(path, data)

    @staticmethod
    def _replace_file(path: Path, data: bytes) -> None:
        """``files.ReplaceFile``: tmp_<base>* in the same dir, write, fsync, rename (new mtime)."""
        fd, tmp = tempfile.mkstemp(prefix=f"tmp_{path.name}", dir=path.parent)
        try:
            with os.fdopen(fd, "wb") as fh:
                fh.write(data)
                fh.flush()
                os.fsync(fh.fileno())
            os.replace(tmp, path)
            os.utime(path, (time.time(), time.time()))  # same-second rewrites still move the clock
        except OSError as exc:
            Path(tmp).unlink(missing_ok=True)
            raise StoreError(f"failed to write {path}: {exc}") from exc

    # ---------------------------------------------------------------------------- checkpoints
    def checkpoint_dir(self, uid: str, rv: str) -> Path:
        return self.checkpoints / uid / rv

    def exists(self, source: Source) -> bool:
        cm = source["configMap"]
        if not cm.get("uid"):
            raise StoreError(
                f"failed to check for existence of checkpoint for source {source_path(source)}, empty UID is ambiguous"
            )
        if not cm.get("resourceVersion"):
            raise StoreError(
                f"failed to check for existence of checkpoint for source {source_path(source)}, "
                "empty ResourceVersion is ambiguous"
            )
        return self.checkpoint_dir(cm["uid"], cm["resourceVersion"]).is_dir()

    def save(self, uid: str, rv: str, data: Mapping[str, str]) -> None:
        """Write all ``data`` keys to a temp dir, fsync each file, rename to ``<rv>``."""
        if not uid:
            raise StoreError("ConfigMap must have a non-empty UID")
        if not rv:
            raise StoreError("ConfigMap must have a non-empty ResourceVersion")
        parent = self.checkpoints / uid
        parent.mkdir(mode=0o755, parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(prefix=f"tmp_{rv}", dir=parent))
        try:
            for key, value in data.items():
                if not key or key in (".", "..") or "/" in key or len(key) > 255:
                    raise StoreError(f"invalid file name {key!r} in ConfigMap data")
                with open(tmp / key, "wb") as fh:
                    fh.write(value.encode())
                    fh.flush()
                    os.fsync(fh.fileno())
            os.rename(tmp, parent / rv)
            _fsync_dir(parent)
        except StoreError:
            shutil.rmtree(tmp, ignore_errors=True)
            raise
        except OSError as exc:
            shutil.rmtree(tmp, ignore_errors=True)
            raise StoreError(f"failed to save checkpoint: {exc}") from exc

    def load(self, source: Source) -> str:
        """The payload file of ``source``; errors use the controller's wording."""
        cm = source["configMap"]
        directory = self.checkpoint_dir(cm.get("uid", ""), cm.get("resourceVersion", ""))
        if not directory.is_dir():
            raise StoreError(f"no checkpoint for source {describe(source)}")
        path = directory / str(cm.get("kubeletConfigKey", ""))
        try:
            data = path.read_text()
        except OSError as exc:
            raise StoreError(
                f'failed to load checkpoint: failed to read kubelet config file "{path}", '
                f"error: open {path}: no such file or directory"
            ) from exc
        if not data:
            raise StoreError(f'kubelet config file "{path}" was empty')
        return data
