"""Audit log in the ``audit.k8s.io/v1`` Event format, one JSON line per request.

Written for every request - HTTP and in-process alike - at stage ``ResponseComplete`` (for a watch:
when the stream ends), so tests and benchmarks can count and time API calls from the file alone.
Lines are flushed as they are written: readers (tests) look at the file while kubesim runs.
"""

from __future__ import annotations

import threading
import uuid
from datetime import datetime
from pathlib import Path
from typing import Any, BinaryIO

from .jsonutil import dumps
from .timefmt import fmt_micro


class AuditLog:
    def __init__(self, path: str | Path | None):
        self.path = Path(path) if path else None
        self._handle: BinaryIO | None = None
        self._lock = threading.Lock()
        if self.path is not None:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self._handle = open(self.path, "ab")

    def record(
        self,
        *,
        verb: str,
        request_uri: str,
        username: str,
        groups: tuple[str, ...],
        object_ref: dict[str, Any] | None,
        code: int,
        received: datetime,
        completed: datetime,
        user_agent: str = "",
        source_ip: str = "",
        annotations: dict[str, str] | None = None,
    ) -> None:
        if self._handle is None:
            return
        event: dict[str, Any] = {
            "kind": "Event",
            "apiVersion": "audit.k8s.io/v1",
            "level": "Metadata",
            "auditID": str(uuid.uuid4()),
            "stage": "ResponseComplete",
            "requestURI": request_uri,
            "verb": verb,
            "user": {"username": username, "groups": list(groups)},
            "sourceIPs": [source_ip or "127.0.0.1"],
        }
        if user_agent:
            event["userAgent"] = user_agent
        if object_ref is not None:
            event["objectRef"] = object_ref
        event["responseStatus"] = {"metadata": {}, "code": code}
        event["requestReceivedTimestamp"] = fmt_micro(received)
        event["stageTimestamp"] = fmt_micro(completed)
        if annotations:
            event["annotations"] = dict(annotations)
        line = dumps(event) + b"\n"
        with self._lock:
            if self._handle is not None:
                self._handle.write(line)
                self._handle.flush()

    def close(self) -> None:
        with self._lock:
            if self._handle is not None:
                self._handle.close()
                self._handle = None
