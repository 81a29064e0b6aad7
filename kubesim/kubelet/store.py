"""The DKC checkpoint store on disk, in the real kubelet's layout (``fsstore.go``, ``files.go``).

Layout under ``<dynamic-config-dir>/store``::

    meta/assigned          SerializedNodeConfigSource YAML, or an empty file = local config
    meta/last-known-good   same
    checkpoints/<uid>/<resourceVersion>/<key>   one file per ConfigMap ``data`` key

Why it must be real files: operators (and tests) inspect and wipe this directory, the trial clock
is the *mtime* of ``meta/assigned`` (every rewrite restarts the 10-minute soak, E5/E6), checkpoints
are never garbage-collected (E9), and a node must boot from it with the API server down (E2).
Meta writes are atomic (temp file + rename); checkpoints are written into a temp dir that is
renamed into place, so a crash never leaves a half-written record. Unlike the real kubelet's, the
simulator's writes are not fsynced: a simulated node must survive its process being killed (the
rename sees to that), not the host losing power, and 2,500 kubelets restarting at once spent a
sixth of kubesim's event loop in fsync.
"""

from __future__ import annotations

import functools
import os
import shutil
import tempfile
import time
from pathlib import Path
from typing import Any, Mapping, Optional

import yaml

SAFE_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)  # libyaml's, when PyYAML was built with it
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


@functools.lru_cache(maxsize=256)
def _meta_source(data: str) -> tuple[tuple[str, str], ...]:
    """A meta record's ConfigMap reference, decoded once per text: every node assigned the same
    ConfigMap holds the same record, and decoding it took a tenth of kubesim's event loop while
    thousands of kubelets restarted."""
    obj = yaml.load(data, Loader=SAFE_LOADER)  # noqa: S506 - a safe loader
    source = (obj or {}).get("source") if isinstance(obj, dict) else None
    if not isinstance(source, dict) or not isinstance(source.get("configMap"), dict):
        raise StoreError(ALL_NIL_ERROR)  # decode is non-strict; no known subfield
    return tuple((k, str(v)) for k, v in source["configMap"].items())


@functools.lru_cache(maxsize=256)
def _meta_text(config_map: tuple[tuple[str, Any], ...]) -> str:
    """The meta record of a ConfigMap reference, encoded once (as :func:`_meta_source` decodes)."""
    record = {"kind": META_KIND, "apiVersion": META_API_VERSION, "source": {"configMap": dict(config_map)}}
    return yaml.safe_dump(record, default_flow_style=False, sort_keys=True)


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
            return {"configMap": dict(_meta_source(data))}
        except yaml.YAMLError as exc:
            raise StoreError(f"failed to decode {path}: {exc}") from exc

    def _write_meta(self, path: Path, source: Optional[Source]) -> None:
        data = b""
        if source is not None:
            cm = source["configMap"]
            if not cm.get("uid"):
                raise StoreError("failed to write RemoteConfigSource, empty UID is ambiguous")
            if not cm.get("resourceVersion"):
                raise StoreError("failed to write RemoteConfigSource, empty ResourceVersion is ambiguous")
            data = _meta_text(tuple(sorted(cm.items()))).encode()
        self._replace_file(path, data)

    @staticmethod
    def _replace_file(path: Path, data: bytes) -> None:
        """``files.ReplaceFile``: tmp_<base>* in the same dir, write, rename (new mtime)."""
        fd, tmp = tempfile.mkstemp(prefix=f"tmp_{path.name}", dir=path.parent)
        try:
            with os.fdopen(fd, "wb") as fh:
                fh.write(data)
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
        """Write all ``data`` keys to a temp dir, rename it to ``<rv>``."""
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
                (tmp / key).write_bytes(value.encode())
            os.rename(tmp, parent / rv)
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
