"""How the core writes a time down, and reads one back: each format spelled once.

- :func:`human`: ``2026-11-23 10:00:00 UTC``, the form people read in reasons, the decision log and
  the lock's description: UTC, to the second.
- :func:`rfc3339`: ``2026-11-23T10:00:00.250000Z``, the ``assigned-at`` annotation: as precise as
  the moment it stamps (an acknowledgment lost with its process is timed from it on resume).
- :func:`rfc3339_seconds`: ``2026-11-23T10:00:00Z``, every time ``status -o json`` shows.
- :func:`parse_rfc3339`: any of the RFC 3339 forms above (or Python's ``+00:00``) back to a datetime.

Pure: nothing here reads a clock.
"""

from __future__ import annotations

from datetime import datetime, timezone

HUMAN = "%Y-%m-%d %H:%M:%S UTC"
RFC3339_SECONDS = "%Y-%m-%dT%H:%M:%SZ"


def human(at: datetime) -> str:
    return at.astimezone(timezone.utc).strftime(HUMAN)


def rfc3339(at: datetime) -> str:
    return at.astimezone(timezone.utc).isoformat().replace("+00:00", "Z")


def rfc3339_seconds(at: datetime) -> str:
    return at.astimezone(timezone.utc).strftime(RFC3339_SECONDS)


def parse_rfc3339(text: str) -> datetime:
    """The moment ``text`` names; ``ValueError`` when it names none."""
    return datetime.fromisoformat(text.replace("Z", "+00:00"))
