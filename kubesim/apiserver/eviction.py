"""The Eviction subresource: ``POST /api/v1/namespaces/NS/pods/NAME/eviction``.

As ``pkg/registry/core/pod/storage/eviction.go`` does it: a pod that is Pending, finished or
already being deleted is deleted without looking at budgets; otherwise the one
PodDisruptionBudget covering it must allow a disruption, and the eviction spends it at once
(``status.disruptionsAllowed`` is decremented and the pod recorded in ``status.disruptedPods``
in the same request), so two evictions in a row cannot both pass a budget of 1. Refusals are the
real ones: 429 naming the budget, 500 for a pod covered by more than one budget.

The whole request runs synchronously on the event loop, so the check and the decrement are
atomic without the real handler's conflict retries. The deletion is the pod registry's, graceful
as a DELETE is (:mod:`.pods`): a pod a node has stays Terminating until its kubelet removes it,
with the Eviction's ``deleteOptions.gracePeriodSeconds`` if it names one.

Each eviction's audit event carries what the budget looked like when it was decided
(:data:`AUDIT_PREFIX` annotations), so a benchmark can prove from the audit log alone that no
eviction went beyond ``disruptionsAllowed``.
"""

from __future__ import annotations

from typing import Any

from . import authz, disruption, errors, timefmt
from .resources import EVICTION_API_VERSIONS, POD_DISRUPTION_BUDGETS, PODS, RequestInfo
from .selectors import label_selector_is_empty

AUDIT_PREFIX = "eviction.kubesim.kubelet-rollout.io/"
VIOLATION_MESSAGE = "Cannot evict pod as it would violate the pod's disruption budget."
MULTIPLE_BUDGETS_MESSAGE = (
    "This pod has more than one PodDisruptionBudget, which the eviction subresource does not support."
)
# policyv1.DisruptionBudgetCause
DISRUPTION_BUDGET_CAUSE = "DisruptionBudget"
_IGNORES_BUDGETS = ("Succeeded", "Failed", "Pending")


def _status(code: int, status: str, message: str = "") -> dict[str, Any]:
    body: dict[str, Any] = {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": status}
    if message:
        body["message"] = message
    body["code"] = code
    return body


def _budget_refusal(cause: str, retry_after: int) -> errors.ApiError:
    """``errors.NewTooManyRequests`` plus the DisruptionBudget cause (Retry-After only if > 0)."""
    details: dict[str, Any] = {"causes": [{"reason": DISRUPTION_BUDGET_CAUSE, "message": cause}]}
    if retry_after > 0:
        details["retryAfterSeconds"] = retry_after
    error = errors.ApiError(429, errors.status_dict(429, "TooManyRequests", VIOLATION_MESSAGE, details))
    if retry_after > 0:
        error.headers["Retry-After"] = str(retry_after)
    return error


class Evictions:
    """Evicts through the registry, so the budget's write and the pod's deletion are ordinary
    writes (resourceVersion, WAL, watch events)."""

    def __init__(self, registry: Any):
        self.registry = registry

    def evict(self, info: RequestInfo, user: authz.User, body: Any, audit: dict[str, str]) -> dict[str, Any]:
        """Returns the ``Status`` answered (its ``code`` is the HTTP status); raises refusals."""
        dry_run = self._check_body(info, body)
        options = body.get("deleteOptions") or {}
        pod_info = RequestInfo(PODS, "delete", info.namespace, info.name, "", "", info.query)
        pod = self.registry.get(pod_info).stored.obj  # 404 when the pod is gone
        phase = (pod.get("status") or {}).get("phase")
        if phase in _IGNORES_BUDGETS or pod["metadata"].get("deletionTimestamp"):
            audit[AUDIT_PREFIX + "budget"] = f"none (pod {phase or 'terminating'})"
            return self._delete(pod_info, user, dry_run, options)
        budgets = self._budgets_covering(pod)
        if len(budgets) > 1:
            audit[AUDIT_PREFIX + "budget"] = ",".join(b["metadata"]["name"] for b in budgets)
            return _status(500, "Failure", MULTIPLE_BUDGETS_MESSAGE)
        if not budgets:
            audit[AUDIT_PREFIX + "budget"] = "none"
            return self._delete(pod_info, user, dry_run, options)
        budget = budgets[0]
        status = budget.get("status") or {}
        allowed = int(status.get("disruptionsAllowed", 0))
        audit[AUDIT_PREFIX + "budget"] = budget["metadata"]["name"]
        audit[AUDIT_PREFIX + "disruptions-allowed"] = str(allowed)
        audit[AUDIT_PREFIX + "current-healthy"] = str(status.get("currentHealthy", 0))
        audit[AUDIT_PREFIX + "desired-healthy"] = str(status.get("desiredHealthy", 0))
        desired = int(status.get("desiredHealthy", 0))
        if not disruption.pod_ready(pod) and int(status.get("currentHealthy", 0)) >= desired > 0:
            return self._delete(pod_info, user, dry_run, options)  # an unready pod is no disruption to spend
        self._spend(budget, pod["metadata"]["name"], user, dry_run)
        return self._delete(pod_info, user, dry_run, options)

    def _check_body(self, info: RequestInfo, body: Any) -> bool:
        """The body must be a policy Eviction naming the pod of the URL; returns dry-run."""
        if not isinstance(body, dict):
            raise errors.bad_request("the body of the request could not be decoded as a Eviction object")
        kind, api_version = body.get("kind"), body.get("apiVersion")
        # a body without kind/apiVersion is read as the endpoint's kind, as the real decoder does
        if (kind and kind != "Eviction") or (api_version and api_version not in EVICTION_API_VERSIONS):
            raise errors.bad_request(
                f'{kind or "object"} in version "{api_version or ""}" cannot be handled as a Eviction: '
                f'no kind "{kind}" is registered for version "{api_version}"'
            )
        if (body.get("metadata") or {}).get("name") != info.name:
            raise errors.bad_request("name in URL does not match name in Eviction object")
        options = body.get("deleteOptions") or {}
        return info.query.get("dryRun") == "All" or "All" in (options.get("dryRun") or [])

    def _budgets_covering(self, pod: dict[str, Any]) -> list[dict[str, Any]]:
        """``getPodDisruptionBudgets``: a budget with an empty selector covers nothing here."""
        namespace = pod["metadata"]["namespace"]
        budgets = [s.obj for s in self.registry.store.list(POD_DISRUPTION_BUDGETS.name, namespace)]
        return [
            b
            for b in budgets
            if not label_selector_is_empty((b.get("spec") or {}).get("selector")) and disruption.budget_covers(b, pod)
        ]

    def _spend(self, budget: dict[str, Any], pod_name: str, user: authz.User, dry_run: bool) -> None:
        """``checkAndDecrement``."""
        name = budget["metadata"]["name"]
        status = dict(budget.get("status") or {})
        status["conditions"] = [dict(c) for c in status.get("conditions") or []]  # the stored object is shared
        if int(status.get("observedGeneration", 0)) < int(budget["metadata"].get("generation", 0)):
            raise _budget_refusal(f"The disruption budget {name} is still being processed by the server.", 10)
        allowed = int(status.get("disruptionsAllowed", 0))
        if allowed < 0:
            raise errors.forbidden("poddisruptionbudget", "policy", name, "pdb disruptions allowed is negative")
        if allowed == 0:
            raise _budget_refusal(
                f"The disruption budget {name} needs {status.get('desiredHealthy', 0)} healthy pods "
                f"and has {status.get('currentHealthy', 0)} currently",
                0,
            )
        if dry_run:
            return
        now = timefmt.now()
        status["disruptionsAllowed"] = allowed - 1
        if allowed - 1 == 0:
            disruption.set_allowed_condition(status, now)
        status["disruptedPods"] = {**(status.get("disruptedPods") or {}), pod_name: timefmt.fmt_time(now)}
        update = RequestInfo(POD_DISRUPTION_BUDGETS, "update", budget["metadata"]["namespace"], name, "status")
        self.registry.update(update, user, {**budget, "status": status})

    def _delete(
        self, pod_info: RequestInfo, user: authz.User, dry_run: bool, options: dict[str, Any]
    ) -> dict[str, Any]:
        if not dry_run:
            self.registry.delete(pod_info, user, options)
        return _status(201, "Success")
