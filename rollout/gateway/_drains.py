"""A drain's verbs: cordon and uncordon a node, list the pods bound to it, evict one pod.

Evictions go through the Eviction subresource (policy/v1), never a delete, so the API server
applies every PodDisruptionBudget itself. A budget's refusal (429 with a ``DisruptionBudget``
cause) is an answer, not an outage: it is returned, never retried here, and never slows the
other requests (the rate limit is not told the server is busy). Each eviction is ONE attempt:
a retry whose first answer was lost would evict a pod that is already terminating, a second
eviction of the same pod in the audit log; the next round lists the pods again instead. So an
eviction the server never answered (timed out, connection lost) is ``busy``, not an error that
ends the run: whether it landed, the next round's list says (a pod it evicted is terminating).
"""

from __future__ import annotations

import json
import logging
from typing import Any

from kubernetes.client.exceptions import ApiException

from rollout.drain import Eviction, PodOnNode
from rollout.model import NodeObservation
from rollout.names import ANN_CORDONED_BY, ANN_STATE_RESET

from . import _wire
from ._errors import TRANSPORT_ERRORS, translated
from ._nodes import NodeVerbs

logger = logging.getLogger("rollout.gateway")

MIRROR_ANNOTATION = "kubernetes.io/config.mirror"
BUDGET_CAUSE = "DisruptionBudget"  # policyv1.DisruptionBudgetCause: the 429 is a budget's refusal


class DrainVerbs(NodeVerbs):
    """Cordon, pods, evictions (see the module doc)."""

    def cordon(self, node: str, *, rollout: str) -> NodeObservation:
        """``spec.unschedulable: true`` and who cordoned it (``ANN_CORDONED_BY``), in one PATCH."""
        body = {"metadata": {"annotations": {ANN_CORDONED_BY: rollout}}, "spec": {"unschedulable": True}}
        result = self._patch_once(node, body, lambda current: current.spec.unschedulable and
                                  current.metadata.annotations.get(ANN_CORDONED_BY) == rollout)
        logger.info("node %s: cordoned", node)
        return _wire.to_observation(result, lease=None, observed_at=self._now())

    def uncordon(self, node: str, *, rollout: str, cordoned_by_us: bool) -> NodeObservation:
        """Remove the drain's annotations, and uncordon the node where this rollout cordoned it."""
        annotations: dict[str, None] = {ANN_STATE_RESET: None}
        body: dict[str, Any] = {"metadata": {"annotations": annotations}}
        if cordoned_by_us:  # another's cordon (a person's, another tool's) is theirs to lift
            annotations[ANN_CORDONED_BY] = None
            body["spec"] = {"unschedulable": None}
        result = self._patch_once(node, body, lambda current: ANN_STATE_RESET not in current.metadata.annotations
                                  and not (cordoned_by_us and current.spec.unschedulable))
        logger.info("node %s: %s", node, "uncordoned" if cordoned_by_us else "drain annotations removed")
        return _wire.to_observation(result, lease=None, observed_at=self._now())

    def pods_on(self, node: str) -> list[PodOnNode]:
        """Every pod bound to ``node``, in every namespace (one list, ``spec.nodeName``)."""
        body = self._json(f"list pods on node/{node}", self.core.list_pod_for_all_namespaces,
                          field_selector=f"spec.nodeName={node}", timeout=self.list_timeout)
        return [_pod(item) for item in body.get("items") or []]

    def evict(self, pod: PodOnNode, *, grace_period_s: int | None) -> Eviction:
        """POST the pod's eviction once: ``evicted``, ``gone`` (404), or ``refused`` with the
        server's words (a budget's 429 names the budget); other errors raise, translated."""
        what = f"evict pod/{pod.ref}"
        body: dict[str, Any] = {"apiVersion": "policy/v1", "kind": "Eviction",
                                "metadata": {"name": pod.name, "namespace": pod.namespace}}
        if pod.uid:  # never evict a pod of the same name created since we looked
            body["deleteOptions"] = {"preconditions": {"uid": pod.uid}}
        if grace_period_s is not None:
            body.setdefault("deleteOptions", {})["gracePeriodSeconds"] = grace_period_s
        self._take_token(what)
        create = self._fenced(self.core.create_namespaced_pod_eviction)
        with translated(what):
            try:
                resp = create(pod.name, pod.namespace, body, _preload_content=False,
                              _request_timeout=self.request_timeout)
            except ApiException as exc:
                if exc.status in (404, 409, 429):
                    return _refusal(pod, exc)
                raise
            except TRANSPORT_ERRORS as exc:  # no answer: the next round's list tells whether it landed
                logger.warning("%s: no answer from the API server (%s); the next round looks again",
                               what, type(exc).__name__)
                return Eviction(pod.ref, "busy", f"no answer from the API server: {type(exc).__name__}")
            resp.release_conn()
        logger.info("pod %s on its way off its node (evicted)", pod.ref)
        return Eviction(pod.ref, "evicted")


def _refusal(pod: PodOnNode, exc: ApiException) -> Eviction:
    if exc.status in (404, 409):  # gone, or another pod of that name now: not ours to evict
        return Eviction(pod.ref, "gone")
    try:
        status = json.loads(exc.body or b"{}")
    except ValueError:
        status = {}
    details = (status.get("details") or {}) if isinstance(status, dict) else {}
    budgets = [str(c.get("message", "")) for c in details.get("causes") or [] if c.get("reason") == BUDGET_CAUSE]
    if not budgets:  # the server is busy (priority and fairness), not a budget: the next round tries again
        return Eviction(pod.ref, "busy", str(status.get("message") or exc.reason))
    return Eviction(pod.ref, "refused", "; ".join(budgets))


def _pod(item: dict[str, Any]) -> PodOnNode:
    meta, spec, status = item.get("metadata") or {}, item.get("spec") or {}, item.get("status") or {}
    owner: dict[str, Any] = next((o for o in meta.get("ownerReferences") or [] if o.get("controller")), {})
    return PodOnNode(
        namespace=meta.get("namespace", ""), name=meta.get("name", ""), uid=meta.get("uid", ""),
        phase=status.get("phase") or "Pending",
        owner_kind=owner.get("kind", ""), owner_name=owner.get("name", ""),
        mirror=MIRROR_ANNOTATION in (meta.get("annotations") or {}),
        local_storage=any("emptyDir" in (v or {}) for v in spec.get("volumes") or []),
        terminating=bool(meta.get("deletionTimestamp")),
    )
