"""Durability: an append-only log of writes plus a periodic snapshot (kill -9 safe).

Every write is appended and flushed to the OS before the API answers, so a ``kill -9`` of kubesim
loses nothing it acknowledged (the page cache survives the process; power loss is out of scope,
which is why there is no fsync per write). When the log outgrows the snapshot, the whole store is
written to ``snapshot.json.tmp``, fsynced and renamed over ``snapshot.json``, then the log is
truncated. Replay skips log records at or below the snapshot's resourceVersion, so a crash between
rename and truncate is harmless; a torn last line (killed mid-write) is ignored.
"""

from __future__ import annotations

import fcntl
import os
from pathlib import Path
from typing import Any, BinaryIO, Iterable

from .jsonutil import JSONDecodeError, dumps, loads


class StateDirBusy(RuntimeError):
    """Another kubesim process serves this state dir (two writers would corrupt the log)."""


class Wal:
    def __init__(self, directory: Path, *, min_compact_bytes: int = 64 * 1024 * 1024):
        self.directory = Path(directory)
        self.directory.mkdir(parents=True, exist_ok=True)
        self._lock = open(self.directory / "lock", "w")
        try:  # released by the kernel when the process dies, even on kill -9
            fcntl.flock(self._lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            self._lock.close()
            raise StateDirBusy(f"{self.directory.parent} is in use by another kubesim") from None
        self.snapshot_path = self.directory / "snapshot.json"
        self.log_path = self.directory / "wal.log"
        self.min_compact_bytes = min_compact_bytes
        self._snapshot_bytes = 0
        self._log: BinaryIO | None = None

    def load(self) -> tuple[int, dict[str, bytes]]:
        """Rebuild ``(resourceVersion, {key: object bytes})`` from snapshot + log."""
        rv, objects = 0, {}
        if self.snapshot_path.exists():
            data = self.snapshot_path.read_bytes()
            self._snapshot_bytes = len(data)
            snap = loads(data)
            rv = int(snap["rv"])
            objects = {key: dumps(obj) for key, obj in snap["objects"].items()}
        snapshot_rv = rv
        for record in self._read_log():
            rec_rv = int(record["rv"])
            if rec_rv <= snapshot_rv:
                continue
            rv = max(rv, rec_rv)
            if record["op"] == "put":
                objects[record["key"]] = dumps(record["obj"])
            else:
                objects.pop(record["key"], None)
        self._log = open(self.log_path, "ab")
        return rv, objects

    def _read_log(self) -> Iterable[dict[str, Any]]:
        if not self.log_path.exists():
            return
        with open(self.log_path, "rb") as handle:
            for line in handle:
                try:
                    yield loads(line)
                except JSONDecodeError:
                    return  # torn tail from a kill mid-write: nothing after it was acknowledged

    def put(self, rv: int, key: str, raw: bytes) -> None:
        self._append(b'{"rv":%d,"op":"put","key":%s,"obj":%s}\n' % (rv, dumps(key), raw))

    def delete(self, rv: int, key: str) -> None:
        self._append(b'{"rv":%d,"op":"delete","key":%s}\n' % (rv, dumps(key)))

    def _append(self, line: bytes) -> None:
        assert self._log is not None, "Wal.load() must run first"
        self._log.write(line)
        self._log.flush()

    def needs_compaction(self) -> bool:
        assert self._log is not None
        return self._log.tell() > max(self.min_compact_bytes, 2 * self._snapshot_bytes)

    def compact(self, rv: int, objects: Iterable[tuple[str, bytes]]) -> None:
        assert self._log is not None
        tmp = self.snapshot_path.with_suffix(".json.tmp")
        with open(tmp, "wb") as handle:
            handle.write(b'{"rv":%d,"objects":{' % rv)
            first = True
            for key, raw in objects:
                handle.write((b"" if first else b",") + dumps(key) + b":" + raw)
                first = False
            handle.write(b"}}")
            handle.flush()
            os.fsync(handle.fileno())
            self._snapshot_bytes = handle.tell()
        os.replace(tmp, self.snapshot_path)
        self._log.close()
        self._log = open(self.log_path, "wb")

    def close(self) -> None:
        if self._log is not None:
            self._log.close()
            self._log = None
        if not self._lock.closed:
            self._lock.close()
