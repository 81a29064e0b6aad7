"""Registration, node-status updates and Lease renewal of a running kubelet (1.23 behaviour).

Why it matters for the orchestrator: "healthy" means the node stays Ready and renews its Lease.
A 1.23 kubelet with node leases renews the Lease every 10 s (PUT carrying the last
resourceVersion) but PATCHes its status only when something changed or every
``nodeStatusReportFrequency`` (5 min) - so the Lease, not ``lastHeartbeatTime``, is the fresh
signal, and the lifecycle controller must look at both.
"""

from __future__ import annotations

import asyncio
import logging
import random
import time
from typing import Any, Callable, Optional

from kubesim.apiserver.errors import ApiError
from kubesim.clusterfile import NodeSpec
from kubesim.kubelet import nodeobject
from kubesim.kubelet.apiclient import NodeClient
from kubesim.kubelet.kubeletconfig import Config
from kubesim.timing import Timings

Logger = Callable[[int, str], None]
NodeSource = Callable[[], Optional[dict[str, Any]]]


class Heartbeat:
    """One process's registration + status loop + lease loop."""

    def __init__(
        self, *, spec: NodeSpec, client: NodeClient, cfg: Config, timings: Timings, log: Logger, cached_node: NodeSource,
        memory_pressure: Callable[[], bool] = lambda: False,
    ):
        self.spec = spec
        self.client = client
        self.cfg = cfg
        self.timings = timings
        self.log = log
        self.cached_node = cached_node
        self.memory_pressure = memory_pressure  # the eviction manager's view (the workload)
        self.node_uid = ""
        self.registered = asyncio.Event()
        self._last_report = 0.0
        self._lease: Optional[dict[str, Any]] = None
        # what this process reports never changes except the conditions' times: compute it once
        # (5,000 kubelets re-deriving quantities and ids every 10 s is measurable idle CPU)
        self._static = nodeobject.static_status(spec, cfg)

    @property
    def node_path(self) -> str:
        return f"/api/v1/nodes/{self.spec.name}"

    # -------------------------------------------------------------------------- registration
    async def register(self) -> None:
        """``registerWithAPIServer``: create, or adopt the existing Node; retry with backoff."""
        delay = 0.1
        while True:
            try:
                await self._try_register()
                self.registered.set()
                return
            except Exception as exc:  # noqa: BLE001 - keep trying like the kubelet does
                self.log(
                    logging.WARNING, f'Unable to register node with API server, err: {exc}, node "{self.spec.name}"'
                )
            await asyncio.sleep(delay)
            delay = min(delay * 2, 7.0)

    async def _try_register(self) -> None:
        try:
            node = await self.client.create("/api/v1/nodes", nodeobject.registration(self.spec, self.cfg))
            self.log(logging.INFO, f'Successfully registered node, node "{self.spec.name}"')
        except ApiError as exc:
            if exc.code != 409:
                raise
            node = await self.client.get(self.node_path)
            node = await self._reconcile_labels(node)
        self.node_uid = str((node.get("metadata") or {}).get("uid", ""))
        self._last_report = 0.0  # force a status update right after (re)registration

    async def _reconcile_labels(self, node: dict[str, Any]) -> dict[str, Any]:
        """``updateDefaultLabels``: the kubelet owns its default labels on an existing Node."""
        labels = (node.get("metadata") or {}).get("labels") or {}
        missing = {k: v for k, v in self.spec.labels.items() if labels.get(k) != v and _default_label(k)}
        if not missing:
            return node
        return await self.client.patch(self.node_path, {"metadata": {"labels": missing}}, patch_type="strategic")

    # ------------------------------------------------------------------------------ status
    async def status_loop(self) -> None:
        await self.registered.wait()
        period = self.timings.scaled("node_status_update")
        while True:
            try:
                await self.update_status()
            except Exception as exc:  # noqa: BLE001 - next period retries
                self.log(logging.DEBUG, f"Error updating node status, will retry, err: {exc}")
            await asyncio.sleep(_jittered(period))

    async def update_status(self) -> None:
        """``tryUpdateNodeStatus``: PATCH only on change or when the report period is due."""
        node = self.cached_node() or await self.client.get(self.node_path)
        current = node.get("status") or {}
        report_due = time.monotonic() - self._last_report >= self.timings.scaled("node_status_report")
        pressure = self.memory_pressure()
        if not report_due and nodeobject.up_to_date(current, self._static, memory_pressure=pressure):
            return
        now = nodeobject.now_rfc3339()
        conditions = nodeobject.conditions(now, current.get("conditions"), memory_pressure=pressure)
        desired = dict(self._static, conditions=conditions)
        await self.client.patch(self.node_path + "/status", {"status": desired}, patch_type="strategic")
        self._last_report = time.monotonic()

    # ------------------------------------------------------------------------------- lease
    async def lease_loop(self) -> None:
        await self.registered.wait()
        period = self.timings.scaled("lease_renew_interval")
        while True:
            try:
                await self.renew_lease()
            except Exception as exc:  # noqa: BLE001 - the controller backs off and retries
                self.log(logging.DEBUG, f"failed to update lease, error: {exc}")
                self._lease = None
            await asyncio.sleep(_jittered(period))

    async def renew_lease(self) -> None:
        path = f"/apis/coordination.k8s.io/v1/namespaces/{nodeobject.LEASE_NAMESPACE}/leases/{self.spec.name}"
        duration = int(self.cfg.get("nodeLeaseDurationSeconds") or 40)
        # on a slowed clock (time scale < 1) the renewals come time_scale times slower in wall
        # seconds, so the Lease says so too: a real kubelet renews at a quarter of its duration,
        # and a 40 s Lease renewed every 20 s would read as stale after one late renewal. A faster
        # clock keeps the configured duration (what the orchestrator's own threshold is set against).
        duration = max(duration, round(duration / self.timings.time_scale))
        if self._lease is None:
            try:
                self._lease = await self.client.get(path)
            except ApiError as exc:
                if exc.code != 404:
                    raise
                body = nodeobject.lease(self.spec, self.node_uid, duration)
                self._lease = await self.client.create(
                    f"/apis/coordination.k8s.io/v1/namespaces/{nodeobject.LEASE_NAMESPACE}/leases", body
                )
                return
        body = dict(self._lease)
        body["spec"] = dict(
            body.get("spec") or {},
            holderIdentity=self.spec.name,
            leaseDurationSeconds=duration,
            renewTime=nodeobject.now_micro(),
        )
        if self.node_uid and not (body.get("metadata") or {}).get("ownerReferences"):
            body["metadata"] = dict(
                body.get("metadata") or {},
                ownerReferences=nodeobject.lease(self.spec, self.node_uid, duration)["metadata"]["ownerReferences"],
            )
        try:
            self._lease = await self.client.update(path, body)
        except ApiError as exc:
            if exc.code in (404, 409):
                self._lease = None  # re-read (or re-create) on the next renewal
            raise


def _jittered(period: float) -> float:
    """``wait.JitterUntil(..., 0.04, ...)``: keeps thousands of kubelets started together from
    renewing in lock-step bursts, as real kubelets (started at different times) never do."""
    return period * (1.0 + random.random() * 0.04)


def _default_label(key: str) -> bool:
    return (
        key.startswith("kubernetes.io/")
        or key.startswith("beta.kubernetes.io/")
        or key.startswith("topology.kubernetes.io/")
        or key.startswith("node-role.kubernetes.io/")
        or key.startswith("kubesim.")
    )
