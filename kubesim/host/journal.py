"""The host's journal: the last lines of each unit, formatted like ``journalctl -u UNIT``.

Why keep it: after a failed start the kubelet's own words (``"command failed" err="failed to
validate kubelet configuration, ..."``) are the only way to tell a bad config from a sick node,
and systemd's lines (``Main process exited``, ``restart counter is at N``) show the crash loop.
"""

from __future__ import annotations

import collections
import threading
import time
from datetime import datetime, timezone

MAX_LINES = 2000


class Journal:
    """Per-unit ring buffers of journal lines (``Nov 24 02:06:13 node-1 kubelet[1042]: msg``)."""

    def __init__(self, hostname: str, max_lines: int = MAX_LINES):
        self.hostname = hostname
        self._units: dict[str, collections.deque[tuple[float, str]]] = {}
        self._max = max_lines
        self._lock = threading.Lock()  # read from the HTTP side, written from the loop

    @staticmethod
    def unit_key(unit: str) -> str:
        return unit if "." in unit else f"{unit}.service"

    def append(self, unit: str, identifier: str, pid: int, message: str) -> None:
        now = time.time()
        stamp = datetime.fromtimestamp(now, timezone.utc).strftime("%b %d %H:%M:%S")
        line = f"{stamp} {self.hostname} {identifier}[{pid}]: {message}"
        with self._lock:
            self._units.setdefault(self.unit_key(unit), collections.deque(maxlen=self._max)).append((now, line))

    def systemd(self, unit: str, message: str) -> None:
        """A line systemd itself logs about the unit (shown by ``journalctl -u`` too)."""
        self.append(unit, "systemd", 1, message)

    def tail(self, unit: str, lines: int = 50, since: float = 0.0) -> list[str]:
        """The last ``lines`` lines (all if <= 0), only those logged at or after ``since`` (unix
        seconds, like ``journalctl --since``: e.g. a restart's time, to read only its lines)."""
        with self._lock:
            entries = [line for stamp, line in self._units.get(self.unit_key(unit), ()) if stamp >= since]
        return entries[-lines:] if lines > 0 else entries
