"""Every kubelet and controller period of the simulated cluster, in one place.

Each value keeps its Kubernetes 1.23 default (see the comments for where it comes from) and can be
overridden one by one; ``time_scale`` then divides all of them, so a test can run the 10-minute
last-known-good trial in a few seconds without changing the *shape* of the timeline.

Nothing here reads a clock: components get a ``Timings`` value and sleep on their own event loop.
"""

from __future__ import annotations

import dataclasses
import re
from dataclasses import dataclass

_DURATION_PART = re.compile(r"(\d+(?:\.\d+)?)(ms|h|m|s)")
_UNIT_SECONDS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0}


def parse_duration(text: str) -> float:
    """Parse a Go-style duration (``10m``, ``1m30s``, ``500ms``, ``2.5s``) into seconds.

    A bare number is taken as seconds. Raises ``ValueError`` naming the bad input.
    """
    text = text.strip()
    try:
        return float(text)
    except ValueError:
        pass
    pos, total = 0, 0.0
    for match in _DURATION_PART.finditer(text):
        if match.start() != pos:
            break
        total += float(match.group(1)) * _UNIT_SECONDS[match.group(2)]
        pos = match.end()
    if pos != len(text) or not text:
        raise ValueError(f"invalid duration {text!r} (expected e.g. 10m, 5s, 1m30s, 500ms)")
    return total


@dataclass(frozen=True)
class Timings:
    """Simulated periods in *unscaled* seconds; read them through :meth:`scaled`."""

    # kubeletconfig controller: config sync loop JitterUntil(10s, 0.2, sliding)
    sync_period: float = 10.0
    # kubeletconfig status loop: JitterUntil(10s, 0.2, sliding), pushes only when dirty
    status_period: float = 10.0
    # babysitter (systemd RestartSec=10 as in kubeadm's unit) between kubelet exit and start
    restart_delay: float = 10.0
    # configTrialDuration: last-known-good promotion after 10 minutes
    trial_period: float = 600.0
    # trial checker period
    trial_check_period: float = 10.0
    # node-lifecycle-controller --node-monitor-grace-period
    node_monitor_grace: float = 40.0
    # node-lifecycle-controller --node-monitor-period
    node_monitor_period: float = 5.0
    # kubelet nodeLeaseDurationSeconds; renewal every 25% of it (10 s)
    lease_duration: float = 40.0
    lease_renew_interval: float = 10.0
    # kubelet nodeStatusUpdateFrequency / nodeStatusReportFrequency
    node_status_update: float = 10.0
    node_status_report: float = 300.0
    # how long a kubelet whose config validates but cannot run on its host stays up after
    # StartSync before the fatal error (long enough for one sync pass: a rescue is possible)
    crash_window: float = 15.0
    # process start -> StartSync (flag parsing, Bootstrap, client setup)
    startup_delay: float = 1.0
    # the simulated workload advances in steps of this long (evictions, pod starts, image GC)
    workload_period: float = 10.0
    time_scale: float = 1.0

    def scaled(self, name: str) -> float:
        """The period ``name`` in real seconds after applying ``time_scale``."""
        return float(getattr(self, name)) / self.time_scale

    def with_overrides(self, **values: float | str | None) -> "Timings":
        """A copy with the given fields replaced; strings are parsed as durations."""
        known = {f.name for f in dataclasses.fields(self)}
        changes: dict[str, float] = {}
        for key, value in values.items():
            if value is None:
                continue
            if key not in known:
                raise ValueError(f"unknown timing {key!r}; known: {', '.join(sorted(known))}")
            changes[key] = parse_duration(value) if isinstance(value, str) else float(value)
        if changes.get("time_scale", self.time_scale) <= 0:
            raise ValueError("time_scale must be > 0")
        return dataclasses.replace(self, **changes)

    @staticmethod
    def flag_names() -> list[str]:
        """CLI flag names (``--trial-period`` ...) for every period."""
        return [f.name.replace("_", "-") for f in dataclasses.fields(Timings) if f.name != "time_scale"]
