"""Prefect events a rollout emits, so automations can notify or chain deployments.

Resource ids: ``kubelet-rollout.rollout.<name>`` for rollout events,
``kubelet-rollout.fleet.<name>`` for fleet rollouts, ``kubelet-rollout.node.<node>`` for a node's
drift and
``kubelet-rollout.configmap.<namespace>.<name>`` for ``config.published``. Emitting is
best-effort: an unreachable events endpoint never fails a rollout.
"""

from __future__ import annotations

import logging
import os
from datetime import timedelta
from typing import Any

from prefect.events import emit_event

from rollout.fleet import PROGRESS_HEARTBEAT

BATCH_SUCCEEDED = "kubelet-rollout.batch.succeeded"
BATCH_FAILED = "kubelet-rollout.batch.failed"
ROLLOUT_HALTED = "kubelet-rollout.rollout.halted"
ROLLOUT_COMPLETED = "kubelet-rollout.rollout.completed"
CONFIG_PUBLISHED = "kubelet-rollout.config.published"
ROLLBACK_COMPLETED = "kubelet-rollout.rollback.completed"
# where a rollout stands (batch, nodes done/failed), whenever that changes and at least every
# heartbeat: what a fleet shows, and how it tells a live cluster run from a dead one
ROLLOUT_PROGRESS = "kubelet-rollout.rollout.progress"
# the heartbeat, shortened (as Prefect's worker heartbeat is) where everything runs on one machine
HEARTBEAT_SETTING = "KUBELET_ROLLOUT_PROGRESS_HEARTBEAT_SECONDS"
# a fleet rollout (resource kubelet-rollout.fleet.<name>): a stage started, how the fleet ended
FLEET_STAGE_STARTED = "kubelet-rollout.fleet.stage.started"
FLEET_COMPLETED = "kubelet-rollout.fleet.completed"
FLEET_HALTED = "kubelet-rollout.fleet.halted"
# the drift watch (flows.drift_flow): a node no longer runs what its last completed rollout proved
# (resource kubelet-rollout.node.<node>)
NODE_DRIFTED = "kubelet-rollout.node.drifted"

log = logging.getLogger(__name__)


def progress_heartbeat() -> timedelta:
    """How often a running rollout sends its progress at the least (``HEARTBEAT_SETTING``)."""
    try:
        seconds = float(os.environ.get(HEARTBEAT_SETTING, ""))
    except ValueError:
        return PROGRESS_HEARTBEAT
    return timedelta(seconds=seconds) if seconds > 0 else PROGRESS_HEARTBEAT


def rollout_resource(name: str) -> dict[str, str]:
    return {
        "prefect.resource.id": f"kubelet-rollout.rollout.{name}",
        "prefect.resource.name": name,
        "kubelet-rollout.rollout": name,
    }


def emit_rollout_event(event: str, rollout: str, payload: dict[str, Any] | None = None) -> None:
    try:
        emit_event(event=event, resource=rollout_resource(rollout), payload=payload or {})
    except Exception as exc:  # noqa: BLE001 - notifications must not break a rollout
        log.warning("could not emit %s for %s: %s", event, rollout, exc)


def emit_fleet_event(event: str, fleet: str, payload: dict[str, Any] | None = None) -> None:
    resource = {"prefect.resource.id": f"kubelet-rollout.fleet.{fleet}", "prefect.resource.name": fleet,
                "kubelet-rollout.fleet": fleet}
    try:
        emit_event(event=event, resource=resource, payload=payload or {})
    except Exception as exc:  # noqa: BLE001 - notifications must not break a rollout
        log.warning("could not emit %s for fleet %s: %s", event, fleet, exc)


def emit_node_drifted(node: str, *, rollout: str, configmap: str, fields: list[dict[str, Any]]) -> None:
    """``kubelet-rollout.node.drifted`` on ``kubelet-rollout.node.<node>``: the rollout that proved
    the node's config, its ConfigMap (resource labels an automation can match on) and each drifted
    field, expected and running (the payload)."""
    resource = {"prefect.resource.id": f"kubelet-rollout.node.{node}", "prefect.resource.name": node,
                "kubelet-rollout.node": node, "kubelet-rollout.rollout": rollout,
                "kubelet-rollout.configmap": configmap}
    try:
        emit_event(event=NODE_DRIFTED, resource=resource,
                   payload={"rollout": rollout, "configmap": configmap, "fields": fields})
    except Exception as exc:  # noqa: BLE001 - notifications must not break the watch
        log.warning("could not emit %s for node %s: %s", NODE_DRIFTED, node, exc)


def emit_config_published(
    *,
    namespace: str,
    name: str,
    rollout: str = "",
    policy: str = "",
    origin: str = "flow",
) -> None:
    """A config was published for the first time. ``origin`` is ``cli`` for `rollout publish`
    (the event-triggered deployment listens to those only) and ``flow`` when a rollout run
    publishes its own config. No credentials: the deployment's worker uses its own."""
    resource = {
        "prefect.resource.id": f"kubelet-rollout.configmap.{namespace}.{name}",
        "prefect.resource.name": f"{namespace}/{name}",
        "kubelet-rollout.namespace": namespace,
        "kubelet-rollout.name": name,
        "kubelet-rollout.rollout": rollout or name,
        "kubelet-rollout.policy": policy or "canary",
        "kubelet-rollout.origin": origin,
    }
    try:
        emit_event(event=CONFIG_PUBLISHED, resource=resource)
    except Exception as exc:  # noqa: BLE001
        log.warning("could not emit %s for %s/%s: %s", CONFIG_PUBLISHED, namespace, name, exc)
