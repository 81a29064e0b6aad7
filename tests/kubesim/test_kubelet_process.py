"""In-process tests of kubelet processes: cases that need a hand on the node itself.

These drive :class:`SimKubelet` directly against an in-process :class:`ApiServer` (same request
path as HTTP): kubelets that never start (E20), a ``systemctl restart`` (wiped store, Bootstrap
without the API - E2, a deleted ConfigMap across a restart), the node authorizer's lag (E12) and
the status loop's retry rules (E15).
"""

from __future__ import annotations

import asyncio
import json
import shutil
import time
from pathlib import Path
from typing import Any, Awaitable, Callable, Optional

import pytest

from kubesim.apiserver import ApiServer
from kubesim.apiserver.client import local_client
from kubesim.apiserver.errors import ApiError
from kubesim.clusterfile import ClusterFile, KubeletSetup, NodeSpec, Pool, expand
from kubesim.faults import Faults
from kubesim.kubelet import SimKubelet
from kubesim.kubelet.controller import Controller
from kubesim.kubelet.process import DKC_GATE_ERROR
from kubesim.kubelet.store import FsStore
from kubesim.lifecycle import NodeLifecycleController
from kubesim.timing import Timings
from tests.kubesim.kubelet_helpers import payload

SCALE = 40.0
DOWNLOAD = "failed to sync: failed to download config, see Kubelet log for details"


class Sim:
    """An API server, some kubelets and the lifecycle controller on the running loop."""

    def __init__(self, tmp: Path, specs: list[NodeSpec], *, authz_lag: float = 1.0):
        self.faults = Faults()
        self.timings = Timings().with_overrides(time_scale=SCALE, trial_period="160s", node_monitor_grace="120s")
        self.server = ApiServer(state_dir=tmp / "state", faults=self.faults, time_scale=SCALE, authz_lag=authz_lag)
        self.admin = local_client(self.server)
        self.kubelets = {
            s.name: SimKubelet(s, self.server, tmp / "nodes" / s.name, self.timings, self.faults) for s in specs
        }
        self.tasks = [asyncio.create_task(k.run()) for k in self.kubelets.values()]
        self.tasks.append(asyncio.create_task(NodeLifecycleController(self.server, self.timings).run()))

    async def close(self) -> None:
        for task in self.tasks:
            task.cancel()
        await asyncio.gather(*self.tasks, return_exceptions=True)

    async def node(self, name: str) -> Optional[dict[str, Any]]:
        try:
            return await self.admin.get(f"/api/v1/nodes/{name}")
        except ApiError:
            return None

    async def config(self, name: str) -> Any:
        return ((await self.node(name)) or {}).get("status", {}).get("config")

    async def make_cm(self, name: str, body: str) -> dict[str, Any]:
        cm = await self.admin.create(
            "/api/v1/namespaces/kube-system/configmaps", {"metadata": {"name": name}, "data": {"kubelet": body}}
        )
        meta = cm["metadata"]
        return {
            "configMap": {
                "kubeletConfigKey": "kubelet",
                "name": name,
                "namespace": "kube-system",
                "resourceVersion": meta["resourceVersion"],
                "uid": meta["uid"],
            }
        }

    async def assign(self, node: str, name: Optional[str]) -> None:
        source = (
            {"configMap": {"name": name, "namespace": "kube-system", "kubeletConfigKey": "kubelet"}} if name else None
        )
        await self.admin.patch(f"/api/v1/nodes/{node}", {"spec": {"configSource": source}}, patch_type="merge")


async def until(probe: Callable[[], Awaitable[Any]], timeout: float = 15.0, what: str = "condition") -> Any:
    deadline = time.monotonic() + timeout
    last: Any = None
    while time.monotonic() < deadline:
        last = await probe()
        if last:
            return last
        await asyncio.sleep(0.02)
    raise AssertionError(f"timed out waiting for {what}; last: {last!r}")


def specs(**kubelet: Any) -> list[NodeSpec]:
    return expand(ClusterFile(pools=(Pool(name="n", count=1, kubelet=KubeletSetup(**kubelet)),)))


def run(
    tmp_path: Path, body: Callable[[Sim], Awaitable[None]], nodes: Optional[list[NodeSpec]] = None, **kwargs: Any
) -> None:
    async def main() -> None:
        sim = Sim(tmp_path, nodes or specs(), **kwargs)
        try:
            await body(sim)
        finally:
            await sim.close()

    asyncio.run(main())


def test_122_kubelet_with_dynamic_config_dir_but_no_explicit_gate_never_starts_E20(tmp_path: Path) -> None:
    async def body(sim: Sim) -> None:
        kubelet = sim.kubelets["n-1"]
        await until(lambda: asyncio.sleep(0, len(kubelet.exit_codes) >= 3), what="three failed starts")
        assert set(kubelet.exit_codes) == {1}
        assert await sim.node("n-1") is None  # dies before registering
        assert any(DKC_GATE_ERROR in line for line in kubelet.logs())
        assert not (tmp_path / "nodes" / "n-1" / "dynamic-config").exists()

    run(tmp_path, body, specs(version="v1.22.17", featureGates={}))


def test_121_kubelet_has_the_gate_on_by_default(tmp_path: Path) -> None:
    async def body(sim: Sim) -> None:
        await until(lambda: sim.node("n-1"), what="registration")
        assert (tmp_path / "nodes" / "n-1" / "dynamic-config" / "store" / "meta" / "assigned").exists()
        assert sim.kubelets["n-1"].exit_codes == []

    run(tmp_path, body, specs(version="v1.21.14", featureGates={}))


def test_wiped_dynamic_config_dir_boots_local_then_redownloads(tmp_path: Path) -> None:
    """Row 16: after a wipe and a restart the kubelet runs the local config, the first pass
    re-downloads the spec'd ConfigMap and restarts onto it; LKG is gone."""

    async def body(sim: Sim) -> None:
        kubelet = sim.kubelets["n-1"]
        await until(lambda: sim.node("n-1"), what="registration")
        a = await sim.make_cm("wipe-a", payload(eventRecordQPS=2))
        await sim.assign("n-1", "wipe-a")
        await until(lambda: sim.config("n-1"), what="status")
        await until(
            lambda: _eq(sim.config("n-1"), {"active": a, "assigned": a, "lastKnownGood": a}),
            timeout=20,
            what="graduated",
        )
        shutil.rmtree(tmp_path / "nodes" / "n-1" / "dynamic-config")
        starts = kubelet.starts
        kubelet.restart()
        await until(lambda: asyncio.sleep(0, kubelet.starts >= starts + 2), what="boot local, then restart onto A")
        await until(lambda: _eq(sim.config("n-1"), {"active": a, "assigned": a}), what="active A again, LKG gone")
        assert FsStore(tmp_path / "nodes" / "n-1" / "dynamic-config").last_known_good() is None

    run(tmp_path, body)


def test_bootstrap_needs_no_api_and_a_deleted_configmap_keeps_failing_after_restart(tmp_path: Path) -> None:
    """E2 + row 6 (second half): a partitioned kubelet restarts onto its checkpoint; once healed
    it reports, and with the ConfigMap gone it keeps the download error across restarts."""

    async def body(sim: Sim) -> None:
        kubelet = sim.kubelets["n-1"]
        await until(lambda: sim.node("n-1"), what="registration")
        a = await sim.make_cm("e2-a", payload(eventRecordQPS=3))
        await sim.assign("n-1", "e2-a")
        await until(lambda: _eq(sim.config("n-1"), {"active": a, "assigned": a}), what="active A")
        await sim.admin.delete("/api/v1/namespaces/kube-system/configmaps/e2-a")
        await until(lambda: _eq(sim.config("n-1"), {"active": a, "assigned": a, "error": DOWNLOAD}), what="error")
        sim.faults.apply({"nodes": {"n-1": {"partitioned": True}}})
        starts = kubelet.starts
        kubelet.restart()
        await until(
            lambda: asyncio.sleep(
                0,
                kubelet.starts > starts
                and kubelet.state == "running"
                and kubelet.configz().get("kubeletconfig", {}).get("eventRecordQPS") == 3,
            ),
            what="restarted onto the checkpoint without the API",
        )
        sim.faults.apply({"nodes": {"n-1": None}})
        await until(
            lambda: _eq(sim.config("n-1"), {"active": a, "assigned": a, "error": DOWNLOAD}),
            what="same error after the restart",
        )

    run(tmp_path, body)


def test_transient_403_right_after_assignment_is_retried_E12(tmp_path: Path) -> None:
    """The authorizer's configmap->node edge lags the spec write; the kubelet reports a download
    error, retries every sync period and succeeds once the edge exists."""

    async def body(sim: Sim) -> None:
        await until(lambda: sim.node("n-1"), what="registration")
        a = await sim.make_cm("e12-a", payload(eventRecordQPS=2))
        await sim.assign("n-1", "e12-a")
        await until(lambda: _eq(sim.config("n-1"), {"error": DOWNLOAD}), what="the transient 403 in status")
        assert any("403" in line and "e12-a" in line for line in sim.kubelets["n-1"].logs())
        await until(lambda: _eq(sim.config("n-1"), {"active": a, "assigned": a}), timeout=20, what="eventual success")

    run(tmp_path, body, authz_lag=2.0 * SCALE)  # 2 real seconds of authorizer lag


async def _eq(value: Awaitable[Any], expected: Any) -> bool:
    return (await value) == expected


# ------------------------------------------------------------------------------ status loop
class _FakeClient:
    def __init__(self, get_fails: bool = False, patch_fails: bool = False):
        self.get_fails, self.patch_fails, self.patches = get_fails, patch_fails, []

    async def get(self, path: str) -> dict[str, Any]:
        if self.get_fails:
            raise ConnectionError("connection refused")
        return {"status": {}}

    async def patch(self, path: str, body: Any, patch_type: str = "strategic") -> dict[str, Any]:
        self.patches.append(body)
        if self.patch_fails:
            raise ApiError(500, {"message": "boom"})
        return {}


@pytest.mark.parametrize(
    "get_fails, patch_fails, dirty_after",
    [
        (False, True, False),  # a failed PATCH is not retried until the next change (E15)
        (True, False, True),  # a failed GET re-marks the status dirty: retried next tick
        (False, False, False),
    ],
)
def test_status_sync_retry_rules_E15(tmp_path: Path, get_fails: bool, patch_fails: bool, dirty_after: bool) -> None:
    async def body() -> None:
        controller = Controller(
            node="n",
            store=FsStore(tmp_path),
            timings=Timings(),
            loader=lambda s: {},
            log=lambda level, msg: None,
            request_exit=lambda code, why: None,
        )
        fake = _FakeClient(get_fails, patch_fails)
        controller.client = fake  # type: ignore[assignment]
        controller.status.dirty.clear()
        await controller.sync_status()
        assert controller.status.dirty.is_set() is dirty_after
        if not get_fails:
            assert fake.patches == [{"status": {"config": {}}}]  # E3: {} is pushed, not omitted

    asyncio.run(body())


def test_configz_is_served_through_the_node_proxy(tmp_path: Path) -> None:
    async def body(sim: Sim) -> None:
        await until(lambda: sim.node("n-1"), what="registration")
        cfg = await sim.admin.get("/api/v1/nodes/n-1/proxy/configz")
        assert cfg["kubeletconfig"]["maxPods"] == 50 and "kind" not in cfg["kubeletconfig"]
        json.dumps(cfg)

    run(tmp_path, body, specs(flags={"--max-pods": "50"}))


# ------------------------------------------------------------------------- informer cache lag
class _Cache:
    def __init__(self, objects: dict[str, dict[str, Any]]):
        self.objects = objects

    def get(self, key: str) -> Optional[dict[str, Any]]:
        return self.objects.get(key)


class _EventSink:
    def __init__(self) -> None:
        self.events: list[dict[str, Any]] = []

    async def create(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
        self.events.append(body)
        return body

    async def get(self, path: str) -> dict[str, Any]:
        raise AssertionError("the informer cache must be used before a GET")


def test_resolved_rv_is_the_informer_caches_and_a_newer_one_restarts_again_E11(tmp_path: Path) -> None:
    """The kubelet resolves the ConfigMap from its informer cache, which may lag the API: it
    records (and restarts for) the cached rv; when the cache catches up, it restarts again."""

    def cm(rv: str) -> dict[str, Any]:
        return {
            "metadata": {"name": "a", "namespace": "kube-system", "uid": "u-a", "resourceVersion": rv},
            "data": {"kubelet": payload(eventRecordQPS=1)},
        }

    async def body() -> None:
        exits: list[int] = []
        store = FsStore(tmp_path)
        store.initialize()
        controller = Controller(
            node="n",
            store=store,
            timings=Timings(),
            loader=lambda s: {},
            log=lambda level, msg: None,
            request_exit=lambda code, why: exits.append(code),
        )
        sink = _EventSink()
        controller.client = sink  # type: ignore[assignment]
        spec = {"configSource": {"configMap": {"name": "a", "namespace": "kube-system", "kubeletConfigKey": "kubelet"}}}
        controller.node_informer = _Cache({"n": {"spec": spec}})  # type: ignore[assignment]
        controller.cm_informer = _Cache({"kube-system/a": cm("5")})  # type: ignore[assignment]  # API is at rv 6
        await controller.sync_config_source()
        assert store.assigned()["configMap"]["resourceVersion"] == "5" and exits == [0]  # type: ignore[index]
        controller.restarting = False
        controller.cm_informer.objects["kube-system/a"] = cm("6")  # type: ignore[union-attr]
        await controller.sync_config_source()
        assert store.assigned()["configMap"]["resourceVersion"] == "6" and exits == [0, 0]  # type: ignore[index]
        assert [e["message"].split("ResourceVersion: ")[1][0] for e in sink.events] == ["5", "6"]
        assert {p.name for p in (store.checkpoints / "u-a").iterdir()} == {"5", "6"}

    asyncio.run(body())
