"""PodDisruptionBudget rules: which pods a budget covers, which count as healthy, what it allows.

One place for the rules that both the Eviction subresource (:mod:`.eviction`) and the disruption
controller (``kubesim.controllers``) apply, following the real disruption controller
(``pkg/controller/disruption/disruption.go``: ``getExpectedPodCount``, ``countHealthyPods``,
``buildDisruptedPodMap``, ``updatePdbStatus``) and ``UpdateDisruptionAllowedCondition``
(``k8s.io/component-helpers/apps/poddisruptionbudget``):

* a budget covers the pods of its namespace that its ``spec.selector`` matches;
* a pod is healthy when it is Running and its ``Ready`` condition is True, is not being deleted,
  and was not just evicted (``status.disruptedPods``); the real controller asks only for the
  Ready condition (``IsPodReady``), which a kubelet sets only on a running pod;
* ``minAvailable`` as a number: ``desiredHealthy`` is that number and ``expectedPods`` the number
  of covered pods; ``maxUnavailable`` or a percentage: ``expectedPods`` is the sum of the
  ``spec.replicas`` of the covered pods' controllers (ReplicaSets), a pod without a controller
  counts for nothing, and a controller kubesim does not serve makes the sync fail (the
  controller then sets ``disruptionsAllowed`` to 0, its fail-safe);
* ``disruptionsAllowed = currentHealthy - desiredHealthy``, never below 0, and 0 while
  ``expectedPods`` is 0.
"""

from __future__ import annotations

import math
import re
from datetime import datetime
from typing import Any, Callable, Optional

from . import timefmt
from .selectors import label_selector_matches

# disruption.go's DeletionTimeout: an evicted pod still present after this counts again
DELETION_TIMEOUT_SECONDS = 120.0
DISRUPTION_ALLOWED = "DisruptionAllowed"
_PERCENT = re.compile(r"^[0-9]+%$")

# (namespace, controller ownerReference) -> the controller's spec.replicas, None if not found
ScaleOf = Callable[[str, dict[str, Any]], Optional[int]]


class BudgetSyncError(Exception):
    """The controller cannot compute a budget's status (its fail-safe then allows nothing)."""


def pod_ready(pod: dict[str, Any]) -> bool:
    """``podutil.IsPodReady``: the Ready condition is True."""
    conditions: list[dict[str, Any]] = (pod.get("status") or {}).get("conditions") or []
    return any(c.get("type") == "Ready" and c.get("status") == "True" for c in conditions)


def pod_healthy(pod: dict[str, Any]) -> bool:
    running = (pod.get("status") or {}).get("phase") == "Running"
    return running and pod_ready(pod) and not (pod.get("metadata") or {}).get("deletionTimestamp")


def budget_covers(pdb: dict[str, Any], pod: dict[str, Any]) -> bool:
    pod_meta, pdb_meta = pod.get("metadata") or {}, pdb.get("metadata") or {}
    if pod_meta.get("namespace") != pdb_meta.get("namespace"):
        return False
    return label_selector_matches((pdb.get("spec") or {}).get("selector"), pod_meta.get("labels") or {})


def scaled_value(value: Any, total: int, round_up: bool) -> int:
    """``intstr.GetScaledValueFromIntOrPercent``: a number as is, ``N%`` of ``total``."""
    if isinstance(value, int):
        return value
    text = str(value)
    if not _PERCENT.match(text):
        raise BudgetSyncError(f"invalid value for IntOrString: invalid value {text!r}")
    share = int(text[:-1]) * total / 100
    return math.ceil(share) if round_up else math.floor(share)


def controller_ref(pod: dict[str, Any]) -> dict[str, Any] | None:
    refs: list[dict[str, Any]] = (pod.get("metadata") or {}).get("ownerReferences") or []
    return next((r for r in refs if r.get("controller")), None)


def expected_and_desired(pdb: dict[str, Any], pods: list[dict[str, Any]], scale_of: ScaleOf) -> tuple[int, int]:
    """``getExpectedPodCount``: ``(expectedPods, desiredHealthy)``."""
    spec = pdb.get("spec") or {}
    max_unavailable, min_available = spec.get("maxUnavailable"), spec.get("minAvailable")
    if max_unavailable is not None:
        expected = _expected_scale(pods, scale_of)
        return expected, max(0, expected - scaled_value(max_unavailable, expected, True))
    if isinstance(min_available, int):
        return len(pods), min_available
    if min_available is not None:
        expected = _expected_scale(pods, scale_of)
        return expected, scaled_value(min_available, expected, True)
    return 0, 0


def _expected_scale(pods: list[dict[str, Any]], scale_of: ScaleOf) -> int:
    """``getExpectedScale``: the sum of the scales of the pods' controllers, each counted once."""
    scales: dict[str, int] = {}
    for pod in pods:
        ref = controller_ref(pod)
        if ref is None or ref.get("uid", "") in scales:
            continue  # an unmanaged pod: the real controller logs it and counts nothing
        scale = scale_of(pod["metadata"].get("namespace", ""), ref)
        if scale is None:
            raise BudgetSyncError(f'found no controllers for pod "{pod["metadata"].get("name", "")}"')
        scales[ref.get("uid", "")] = scale
    return sum(scales.values())


def _recent_disruptions(pdb: dict[str, Any], pods: list[dict[str, Any]], now: datetime) -> dict[str, str]:
    """``buildDisruptedPodMap``: evictions of pods still there, younger than the deletion timeout."""
    disrupted: dict[str, str] = (pdb.get("status") or {}).get("disruptedPods") or {}
    kept = {}
    for pod in pods:
        name = pod["metadata"].get("name", "")
        if name not in disrupted or pod["metadata"].get("deletionTimestamp"):
            continue
        when = timefmt.parse(disrupted[name])
        if when is not None and (now - when).total_seconds() < DELETION_TIMEOUT_SECONDS:
            kept[name] = disrupted[name]
    return kept


def budget_status(
    pdb: dict[str, Any], pods: list[dict[str, Any]], scale_of: ScaleOf, now: datetime
) -> dict[str, Any]:
    """The status the disruption controller writes for ``pdb`` over the pods it covers."""
    covered = [p for p in pods if budget_covers(pdb, p)]
    expected, desired = expected_and_desired(pdb, covered, scale_of)
    disrupted = _recent_disruptions(pdb, covered, now)
    healthy = sum(1 for p in covered if pod_healthy(p) and p["metadata"].get("name") not in disrupted)
    allowed = healthy - desired if expected > 0 else 0
    status: dict[str, Any] = {
        "observedGeneration": (pdb.get("metadata") or {}).get("generation", 0),
        "disruptionsAllowed": max(0, allowed),
        "currentHealthy": healthy,
        "desiredHealthy": desired,
        "expectedPods": expected,
        "conditions": list((pdb.get("status") or {}).get("conditions") or []),
    }
    if disrupted:
        status["disruptedPods"] = disrupted
    set_allowed_condition(status, now)
    return status


def failed_status(pdb: dict[str, Any], error: str, now: datetime) -> dict[str, Any]:
    """``failSafe``: nothing allowed, and a condition saying why."""
    status = dict(pdb.get("status") or {})
    status["disruptionsAllowed"] = 0
    status["conditions"] = list(status.get("conditions") or [])
    _set_condition(status, "False", "SyncFailed", error, now)
    return status


def set_allowed_condition(status: dict[str, Any], now: datetime) -> None:
    """``UpdateDisruptionAllowedCondition``."""
    if status.get("disruptionsAllowed", 0) > 0:
        _set_condition(status, "True", "SufficientPods", "", now)
    else:
        _set_condition(status, "False", "InsufficientPods", "", now)


def _set_condition(status: dict[str, Any], value: str, reason: str, message: str, now: datetime) -> None:
    """``meta.SetStatusCondition``: the transition time moves only when the status does."""
    conditions: list[dict[str, Any]] = status.setdefault("conditions", [])
    old = next((c for c in conditions if c.get("type") == DISRUPTION_ALLOWED), None)
    changed = old is None or old.get("status") != value
    condition = {
        "type": DISRUPTION_ALLOWED,
        "status": value,
        "observedGeneration": status.get("observedGeneration", 0),
        "lastTransitionTime": timefmt.fmt_time(now) if changed else (old or {}).get("lastTransitionTime"),
        "reason": reason,
        "message": message,
    }
    if old is None:
        conditions.append(condition)
    else:
        conditions[conditions.index(old)] = condition
