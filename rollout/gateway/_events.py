"""Node Events: what the rollout did to a node, shown by ``kubectl describe node``.

Events inform people and must never stop or slow a rollout: each goes out below every other
request (it takes only a token no other request waits for, :meth:`TokenBucket.acquire_spare`),
gets a few quick tries, none once the run's or the thread's stop is set, and a failure is logged
and answered with False, never raised.
"""

from __future__ import annotations

import logging
from datetime import datetime, timezone
from typing import Any, Callable

from rollout.errors import ConflictError, ForbiddenError, GatewayError
from rollout.names import COMPONENT
from rollout.timefmt import rfc3339_seconds

from ._client import ClusterClient, own_stop
from ._errors import translated
from ._retry import default_retrying

logger = logging.getLogger("rollout.gateway")

# a node Event is information: a few quick tries, each given this long, never an outage ridden out
EVENT_ATTEMPTS = 3
EVENT_TIMEOUT_S = 5.0
EPOCH = datetime(1970, 1, 1, tzinfo=timezone.utc)


def event_reason(reason: str) -> str:
    """Our reasons read ``KubeletRollout...`` in ``kubectl describe node``; ``Kubelet...`` ones are kept."""
    return reason if reason.startswith("Kubelet") else "KubeletRollout" + reason[:1].upper() + reason[1:]


def event_body(node: str, namespace: str, reason: str, message: str, type: str, *, at: datetime) -> dict[str, Any]:
    """A core/v1 Event on ``node``, dated ``at``, named after what it reports (the node, the reason
    and the microsecond of ``at``): sent again (a retry whose first answer was lost, or by the
    process a run hands its last Events to) it is refused as existing, never recorded twice."""
    stamp = rfc3339_seconds(at)
    since = at - EPOCH
    micros = (since.days * 86_400 + since.seconds) * 1_000_000 + since.microseconds
    return {
        "apiVersion": "v1", "kind": "Event",
        "metadata": {"name": f"{node}.{reason.lower()}.{micros:x}", "namespace": namespace},
        # involvedObject.uid is the node *name*, as the kubelet itself does (kubectl
        # describe node finds node events by name and by uid=name)
        "involvedObject": {"kind": "Node", "name": node, "uid": node, "apiVersion": "v1"},
        "reason": reason, "message": message, "type": type,
        "source": {"component": COMPONENT},
        "reportingComponent": COMPONENT, "reportingInstance": COMPONENT,
        "firstTimestamp": stamp, "lastTimestamp": stamp, "count": 1,
    }


class NodeEventVerbs(ClusterClient):
    """Node Events, best effort (see the module doc)."""

    def _init_resource_state(self) -> None:
        super()._init_resource_state()
        self._events_refused = False

    def record_node_event(self, node: str, reason: str, message: str, type: str = "Normal", *,
                          at: datetime | None = None) -> bool:
        """Record a core/v1 Event on ``node`` (shown by ``kubectl describe node``). Best effort.

        ``reason`` should be one of the ``EVENT_*`` constants; anything not starting with
        ``Kubelet`` is prefixed ``KubeletRollout``. Source component ``kubelet-rollout``; ``at``:
        when it happened (default now: an Event sent late keeps the time of what it reports).
        Below every other request: it takes only a token no other request waits for
        (:meth:`TokenBucket.acquire_spare`), gets :data:`EVENT_ATTEMPTS` quick tries of
        :data:`EVENT_TIMEOUT_S` each, and none once the run's or the thread's stop is set.
        Returns False (after logging) when it was not recorded: events must never stop a rollout.
        """
        reason = event_reason(reason)
        body = event_body(node, self.event_namespace, reason, message, type, at=at or self._now())
        what = f"node {node}: create event {reason}"
        stop = own_stop() or self._stop
        create: Callable[..., Any] = self.core.create_namespaced_event

        def attempt() -> None:
            if not self.rate_limiter.acquire_spare(stop=stop):
                raise _NotSent()
            with translated(what):
                resp = create(self.event_namespace, body, _preload_content=False,
                              _request_timeout=(EVENT_TIMEOUT_S, EVENT_TIMEOUT_S))
                try:
                    resp.data  # read to the end: the connection goes back to the pool reusable
                finally:
                    resp.release_conn()

        retrying = default_retrying(attempts=EVENT_ATTEMPTS, cap_s=1.0, sleep=self.retrying.sleep, stop_event=stop)
        try:
            retrying(attempt)
        except _NotSent:
            logger.debug("node %s: event %s not sent: the run is ending", node, reason)
            return False
        except ConflictError as exc:
            if getattr(exc, "reason", None) != "AlreadyExists":
                logger.warning("node %s: could not record event %s: %s", node, reason, exc)
                return False
            logger.debug("node %s: event %s was recorded already", node, reason)  # see event_body
            return True
        except ForbiddenError as exc:
            # a missing permission refuses every event alike: say so once, not once per node
            level = logging.DEBUG if self._events_refused else logging.WARNING
            self._events_refused = True
            logger.log(level, "node %s: could not record event %s: %s", node, reason, exc)
            return False
        except GatewayError as exc:
            logger.warning("node %s: could not record event %s: %s", node, reason, exc)
            return False
        logger.info("node %s: event %s: %s", node, reason, message)
        return True


class _NotSent(Exception):
    """An Event given up before it was sent: the stop came while it waited for a spare token."""
