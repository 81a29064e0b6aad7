"""``Node.status.config`` as the kubelet keeps it in memory (``kubeletconfig/status/status.go``).

Why a separate object: the base error (set at Bootstrap, lives for the process) and the sync
error *override* (set/cleared by sync passes) interact in ways tests depend on (E8, E14), and
every setter marks the status dirty so the status loop pushes only when something changed (E2).
"""

from __future__ import annotations

import asyncio
import copy
from typing import Any, Optional

from kubesim.kubelet.store import Source

LOAD_ERROR = "failed to load config, see Kubelet log for details"
VALIDATE_ERROR = "failed to validate config, see Kubelet log for details"
ALL_NIL_SUBFIELDS_ERROR = "invalid NodeConfigSource, exactly one subfield must be non-nil, but all were nil"
DOWNLOAD_ERROR = "failed to download config, see Kubelet log for details"
INTERNAL_ERROR = "internal failure, see Kubelet log for details"
SYNC_ERROR_FMT = "failed to sync: {}"


class ConfigStatus:
    """assigned / active / lastKnownGood / error, plus the error override and a dirty flag."""

    def __init__(self) -> None:
        self.assigned: Optional[Source] = None
        self.active: Optional[Source] = None
        self.last_known_good: Optional[Source] = None
        self.error = ""
        self.override = ""
        # pre-set: the first status-loop run always pushes (E2)
        self.dirty = asyncio.Event()
        self.dirty.set()

    def set_assigned(self, source: Optional[Source]) -> None:
        self.assigned = copy.deepcopy(source)
        self.dirty.set()

    def set_active(self, source: Optional[Source]) -> None:
        self.active = copy.deepcopy(source)
        self.dirty.set()

    def set_last_known_good(self, source: Optional[Source]) -> None:
        self.last_known_good = copy.deepcopy(source)
        self.dirty.set()

    def set_error(self, text: str) -> None:
        self.error = text
        self.dirty.set()

    def set_error_override(self, text: str) -> None:
        self.override = text
        self.dirty.set()

    def reported_error(self) -> str:
        return self.override or self.error

    def to_api(self) -> dict[str, Any]:
        """The ``NodeConfigStatus`` dict; ``{}`` when nothing is set (E3), active absent on local (E4)."""
        out: dict[str, Any] = {}
        for key, value in (
            ("active", self.active),
            ("assigned", self.assigned),
            ("lastKnownGood", self.last_known_good),
        ):
            if value is not None:
                out[key] = copy.deepcopy(value)
        if self.reported_error():
            out["error"] = self.reported_error()
        return out
