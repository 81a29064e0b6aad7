"""What the pod registry does beyond the generic verbs: graceful deletion and binding.

As ``pkg/registry/core/pod/strategy.go`` (``CheckGracefulDelete``) and ``storage.go``
(``BindingREST``): a pod bound to a node and not finished is not removed by a DELETE but marked
``deletionTimestamp`` + ``deletionGracePeriodSeconds`` (it is Terminating); its kubelet removes it
once its containers are stopped (a DELETE with grace 0). A pod no node took, a finished one, and a
DELETE with ``gracePeriodSeconds: 0`` (``kubectl delete --force --grace-period=0``) go at once. A
second DELETE may shorten the grace, never lengthen it. ``/binding`` sets ``spec.nodeName`` once.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from . import errors, timefmt

DEFAULT_GRACE_SECONDS = 30
_FINISHED = ("Succeeded", "Failed")


def requested_grace(query: dict[str, str], options: Any) -> int | None:
    """``DeleteOptions.gracePeriodSeconds`` from the query, else from the body (kubectl sends it there)."""
    value: Any = query.get("gracePeriodSeconds")
    if value in (None, "") and isinstance(options, dict):
        value = options.get("gracePeriodSeconds")
    if value in (None, ""):
        return None
    try:
        return int(value)
    except (TypeError, ValueError):
        raise errors.bad_request(f'strconv.ParseInt: parsing "{value}": invalid syntax') from None


def deletion_grace(pod: dict[str, Any], requested: int | None) -> int:
    """How long the pod may take to stop: 0 deletes it at once."""
    spec, status = pod.get("spec") or {}, pod.get("status") or {}
    if not spec.get("nodeName") or status.get("phase") in _FINISHED:
        return 0  # no kubelet has it, or nothing left to stop
    grace = requested if requested is not None else spec.get("terminationGracePeriodSeconds", DEFAULT_GRACE_SECONDS)
    return 1 if int(grace) < 0 else int(grace)


def mark_terminating(pod: dict[str, Any], grace: int) -> bool:
    """Set the deletion marks on ``pod``; False when it already ends as soon or sooner."""
    meta = pod["metadata"]
    current = meta.get("deletionGracePeriodSeconds")
    if meta.get("deletionTimestamp") and current is not None and int(current) <= grace:
        return False
    meta["deletionTimestamp"] = timefmt.fmt_time(timefmt.now() + timedelta(seconds=grace))
    meta["deletionGracePeriodSeconds"] = grace
    return True


def bind(pod: dict[str, Any], body: Any) -> dict[str, Any]:
    """``assignPod``: the pod with ``spec.nodeName`` set from a Binding, or the real refusals."""
    name = pod["metadata"]["name"]
    if not isinstance(body, dict):
        raise errors.bad_request("the body of the request could not be decoded as a Binding object")
    target = body.get("target") or {}
    node = target.get("name") or ""
    if target.get("kind", "Node") != "Node" or not node:
        raise errors.bad_request(f"binding of pod {name} needs a target of kind Node with a name")
    if pod["metadata"].get("deletionTimestamp"):
        raise _conflict(name, f"pod {name} is being deleted, cannot be assigned to a host")
    assigned = (pod.get("spec") or {}).get("nodeName")
    if assigned:
        raise _conflict(name, f'pod {name} is already assigned to node "{assigned}"')
    pod.setdefault("spec", {})["nodeName"] = node
    status = pod.setdefault("status", {})
    conditions = [c for c in status.get("conditions") or [] if c.get("type") != "PodScheduled"]
    now = timefmt.fmt_time(timefmt.now())
    status["conditions"] = conditions + [{"type": "PodScheduled", "status": "True", "lastTransitionTime": now}]
    return pod


def _conflict(name: str, why: str) -> errors.ApiError:
    message = f'Operation cannot be fulfilled on pods/binding "{name}": {why}'
    return errors.ApiError(409, errors.status_dict(409, "Conflict", message, {"name": name, "kind": "pods/binding"}))
