"""The 1.23 Dynamic Kubelet Config controller (reference section 6), one per kubelet process.

Why it is shaped like the Go controller: the orchestrator's correctness depends on DKC's quirks,
not on an idealised version - assigned/active change only through a restart (6.4), every
successful pass rewrites ``meta/assigned`` and so restarts the trial clock (E6), a reset with
nothing assigned keeps a stale error (E14), a failed status PATCH waits for the next change
(E15), and rollback happens only at Bootstrap (6.8). Each of those is a branch below with the
Go log line it prints (prefix ``kubelet config controller: ``).
"""

from __future__ import annotations

import asyncio
import copy
import logging
import math
import time
from datetime import datetime, timezone
from typing import Any, Callable, Coroutine, Optional

from kubesim.kubelet import status as st
from kubesim.kubelet.apiclient import NodeClient
from kubesim.kubelet.informer import Informer
from kubesim.kubelet.kubeletconfig import Config
from kubesim.kubelet.store import FsStore, Source, StoreError, describe, same_source, source_path
from kubesim.kubelet.ticker import JitterTicker
from kubesim.timing import Timings

PREFIX = "kubelet config controller: "


class ConfigFailure(Exception):
    """Loading a checkpoint failed at one stage; ``reason`` is the status.config.error text."""

    def __init__(self, reason: str, detail: str):
        super().__init__(f"{reason}, error: {detail}")
        self.reason = reason
        self.detail = detail


class BootstrapError(Exception):
    """Bootstrap could not determine a valid config: the kubelet exits non-zero (E7)."""


class SyncFailure(Exception):
    def __init__(self, reason: str, detail: str):
        super().__init__(detail)
        self.reason = reason
        self.detail = detail


Loader = Callable[[Source], Config]
Logger = Callable[[int, str], None]


def _config_source(node: Optional[dict[str, Any]]) -> Any:
    return ((node or {}).get("spec") or {}).get("configSource")


def merge_patch(old: Any, new: Any) -> Any:
    """Two-way strategic/merge patch of plain maps: changed keys, removed keys as ``None``."""
    if not isinstance(old, dict) or not isinstance(new, dict):
        return copy.deepcopy(new)
    patch: dict[str, Any] = {}
    for key in old:
        if key not in new:
            patch[key] = None
    for key, value in new.items():
        if key not in old:
            patch[key] = copy.deepcopy(value)
        elif old[key] != value:
            patch[key] = merge_patch(old[key], value)
    return patch


class Controller:
    """Bootstrap + StartSync of one kubelet process."""

    def __init__(
        self,
        *,
        node: str,
        store: FsStore,
        timings: Timings,
        loader: Loader,
        log: Logger,
        request_exit: Callable[[int, str], None],
        on_status_push: Optional[Callable[[dict[str, Any]], None]] = None,
    ):
        self.node = node
        # the status push updates the node_config_* metrics before its PATCH (section 7, step 3)
        self._on_status_push = on_status_push
        self.store = store
        self.timings = timings
        self.loader = loader
        self._log = log
        self._request_exit = request_exit
        self.status = st.ConfigStatus()
        self.trial_enabled = False
        self.poke_event = asyncio.Event()
        self.node_informer: Optional[Informer] = None
        self.cm_informer: Optional[Informer] = None
        self.client: Optional[NodeClient] = None
        self.restarting = False

    @property
    def _api(self) -> NodeClient:
        """The process's client: ``start_sync`` gives it before any loop runs."""
        if self.client is None:
            raise RuntimeError("the controller has no API client before start_sync()")
        return self.client

    def log(self, level: int, msg: str) -> None:
        self._log(level, PREFIX + msg)

    # --------------------------------------------------------------------------- Bootstrap (6.1)
    def bootstrap(self) -> Optional[Config]:
        """Return the dynamic config to run, None for the local config; raise BootstrapError."""
        self.log(logging.INFO, "starting controller")
        self.log(logging.INFO, "ensuring filesystem is set up correctly")
        self.log(logging.INFO, f'initializing config checkpoints directory "{self.store.dir}"')
        try:
            self.store.initialize()
            assigned, lkg = self.store.assigned(), self.store.last_known_good()
        except StoreError as exc:
            raise BootstrapError(str(exc)) from exc
        if assigned is not None:
            self.status.set_assigned(assigned)
        if lkg is not None:
            self.status.set_last_known_good(lkg)
        if assigned is None:
            return None
        try:
            cfg = self.loader(assigned)
        except ConfigFailure as failure:
            return self._fall_back(failure, lkg)
        self.status.set_active(assigned)
        self.trial_enabled = True
        return cfg

    def _fall_back(self, failure: ConfigFailure, lkg: Optional[Source]) -> Optional[Config]:
        self.log(logging.ERROR, f"{failure.reason}, error: {failure.detail}")
        self.status.set_error(failure.reason)
        if lkg is None:
            return None
        try:
            cfg = self.loader(lkg)
        except ConfigFailure as lkg_failure:
            raise BootstrapError(f"{lkg_failure.reason}, error: {lkg_failure.detail}") from lkg_failure
        self.status.set_active(lkg)
        return cfg

    # ----------------------------------------------------------------------- StartSync (6.2)
    def start_sync(self, client: NodeClient) -> list[Callable[[], Coroutine[Any, Any, None]]]:
        """The loops to run for this process (the caller owns the tasks)."""
        self.client = client
        loops: list[Callable[[], Coroutine[Any, Any, None]]] = [self._status_loop]
        assigned = self.status.assigned
        if assigned is None:
            self.log(logging.INFO, "local source is assigned, will not start remote config source informer")
        else:
            cm = assigned["configMap"]
            self.cm_informer = Informer(
                client,
                f"/api/v1/namespaces/{cm['namespace']}/configmaps",
                {"fieldSelector": f"metadata.name={cm['name']}"},
                on_add=self._cm_add,
                on_update=self._cm_update,
                on_delete=self._cm_delete,
                retry_delay=min(1.0, self.timings.scaled("sync_period") / 5),
            )
            loops.append(self.cm_informer.run)
        self.node_informer = Informer(
            client,
            "/api/v1/nodes",
            {"fieldSelector": f"metadata.name={self.node}"},
            on_add=self._node_add,
            on_update=self._node_update,
            on_delete=self._node_delete,
            retry_delay=min(1.0, self.timings.scaled("sync_period") / 5),
        )
        loops += [self.node_informer.run, self._sync_loop]
        return loops

    def poke(self) -> None:
        self.poke_event.set()

    # -------------------------------------------------------------------------- watch.go (6.3)
    def _node_add(self, obj: dict[str, Any]) -> None:
        self.log(logging.INFO, "initial Node watch event")
        self.poke()

    def _node_update(self, old: dict[str, Any], new: dict[str, Any]) -> None:
        if _config_source(old) != _config_source(new):
            self.log(logging.INFO, "Node.Spec.ConfigSource was updated")
            self.poke()

    def _node_delete(self, obj: dict[str, Any]) -> None:
        self.log(logging.INFO, "Node was deleted")

    def _cm_add(self, obj: dict[str, Any]) -> None:
        self.log(logging.INFO, "initial ConfigMap watch event")
        self.poke()

    def _cm_update(self, old: dict[str, Any], new: dict[str, Any]) -> None:
        if old != new:
            self.log(logging.INFO, "assigned ConfigMap was updated")
            self.poke()

    def _cm_delete(self, obj: dict[str, Any]) -> None:
        self.log(logging.INFO, "assigned ConfigMap was deleted")
        self.poke()

    # ------------------------------------------------------------------------ sync pass (6.4)
    async def _sync_loop(self) -> None:
        ticker = JitterTicker(self.timings.scaled("sync_period"))
        while not self.restarting:
            await ticker.wait_for_work(self.poke_event)
            try:
                await self.sync_config_source()
            except SyncFailure as failure:
                self.status.set_error_override(st.SYNC_ERROR_FMT.format(failure.reason))
                self.log(logging.ERROR, f"{failure.reason}, error: {failure.detail}")
                self.poke()
            ticker.work_done()

    async def sync_config_source(self) -> None:
        node = self.node_informer.get(self.node) if self.node_informer else None
        if node is None:
            raise SyncFailure(st.INTERNAL_ERROR, f"failed to get Node {self.node!r} from informer's store")
        source = copy.deepcopy(_config_source(node))
        if not source:
            await self._reset()
            return
        self.log(
            logging.INFO, "Node.Spec.ConfigSource is non-empty, will checkpoint source and update config if necessary"
        )
        if not isinstance(source.get("configMap"), dict):
            raise SyncFailure(st.ALL_NIL_SUBFIELDS_ERROR, st.ALL_NIL_SUBFIELDS_ERROR)
        resolved, data = await self._download(source)
        await self._checkpoint(resolved, data)
        try:
            old = self.store.assigned()
            await asyncio.to_thread(self.store.set_assigned, resolved)
        except StoreError as exc:
            raise SyncFailure(st.INTERNAL_ERROR, str(exc)) from exc
        if not same_source(old, resolved):
            await self.restart_for_new_config(resolved)
            return
        self.status.set_error_override("")

    async def _reset(self) -> None:
        self.log(logging.INFO, "Node.Spec.ConfigSource is empty, will reset assigned and last-known-good to defaults")
        try:
            updated = await asyncio.to_thread(self.store.reset)
        except StoreError as exc:
            raise SyncFailure(st.INTERNAL_ERROR, str(exc)) from exc
        if updated:
            await self.restart_for_new_config(None)
        # otherwise return WITHOUT clearing the error override (E14)

    async def _download(self, source: Source) -> tuple[Source, dict[str, str]]:
        """``DownloadConfigSource``: informer cache first (if any), else a direct GET (E10)."""
        cm = source["configMap"]
        ns, name = cm.get("namespace", ""), cm.get("name", "")
        path = f"/api/v1/namespaces/{ns}/configmaps/{name}"
        obj = self._from_cache(path, f"{ns}/{name}")
        if obj is None:
            obj = await self._get(path)
        meta = obj.get("metadata") or {}
        uid, rv = str(meta.get("uid") or ""), str(meta.get("resourceVersion") or "")
        if not uid or not rv:
            raise SyncFailure(st.INTERNAL_ERROR, f"invalid ConfigMap {path}: empty UID or ResourceVersion")
        resolved = {
            "configMap": {
                "namespace": ns,
                "name": name,
                "uid": uid,
                "resourceVersion": rv,
                "kubeletConfigKey": cm.get("kubeletConfigKey", ""),
            }
        }
        return resolved, {str(k): str(v) for k, v in (obj.get("data") or {}).items()}

    async def _get(self, path: str) -> dict[str, Any]:
        self.log(logging.INFO, f"attempting to download {path}")
        try:
            obj = await self._api.get(path)
        except Exception as exc:  # noqa: BLE001 - 403/404/network: all are download errors
            raise SyncFailure(st.DOWNLOAD_ERROR, f"failed to download {path}, error: {exc}") from exc
        meta = obj.get("metadata") or {}
        self.log(
            logging.INFO,
            f"successfully downloaded {path}, UID: {meta.get('uid')}, ResourceVersion: {meta.get('resourceVersion')}",
        )
        return obj

    def _from_cache(self, path: str, key: str) -> Optional[dict[str, Any]]:
        if self.cm_informer is None:
            return None
        self.log(logging.INFO, f"checking in-memory store for {path}")
        obj = self.cm_informer.get(key)
        if obj is None:
            self.log(logging.INFO, f"did not find {path} in in-memory store")
            return None
        meta = obj.get("metadata") or {}
        self.log(
            logging.INFO,
            f"found {path} in in-memory store, UID: {meta.get('uid')}, ResourceVersion: {meta.get('resourceVersion')}",
        )
        return obj

    async def _checkpoint(self, resolved: Source, data: dict[str, str]) -> None:
        cm = resolved["configMap"]
        try:
            if self.store.exists(resolved):
                self.log(logging.INFO, f"checkpoint already exists for {describe(resolved)}")
                return
            await asyncio.to_thread(self.store.save, cm["uid"], cm["resourceVersion"], data)
        except StoreError as exc:
            raise SyncFailure(st.INTERNAL_ERROR, str(exc)) from exc

    # -------------------------------------------------------------------------- restart (6.6)
    async def restart_for_new_config(self, source: Optional[Source]) -> None:
        if source is None:
            message = "Kubelet restarting to use local config"
        else:
            cm = source["configMap"]
            message = (
                f"Kubelet restarting to use {source_path(source)}, UID: {cm['uid']}, "
                f"ResourceVersion: {cm['resourceVersion']}, KubeletConfigKey: {cm['kubeletConfigKey']}"
            )
        self.restarting = True
        try:
            await self._api.create("/api/v1/namespaces/default/events", self._event(message))
        except Exception as exc:  # noqa: BLE001 - the kubelet exits anyway
            self.log(logging.ERROR, f"failed to send event, error: {exc}")
        self.log(logging.INFO, message)
        self._request_exit(0, message)

    def _event(self, message: str) -> dict[str, Any]:
        now = datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
        return {
            "apiVersion": "v1",
            "kind": "Event",
            "metadata": {"name": f"{self.node}.{time.time_ns():x}", "namespace": "default"},
            "involvedObject": {"kind": "Node", "name": self.node, "uid": self.node, "namespace": ""},
            "reason": "KubeletConfigChanged",
            "message": message,
            "type": "Normal",
            "count": 1,
            "firstTimestamp": now,
            "lastTimestamp": now,
            "source": {"component": "kubelet", "host": self.node},
        }

    # ---------------------------------------------------------------------------- status (7)
    async def _status_loop(self) -> None:
        ticker = JitterTicker(self.timings.scaled("status_period"))
        while True:
            await ticker.wait_for_work(self.status.dirty)
            await self.sync_status()
            ticker.work_done()

    async def sync_status(self) -> None:
        self.log(logging.DEBUG, "updating Node.Status.Config")
        path = f"/api/v1/nodes/{self.node}"
        try:
            node = await self._api.get(path)
        except Exception as exc:  # noqa: BLE001 - a GET failure is retried (re-mark dirty)
            self.log(logging.ERROR, f'could not get Node "{self.node}", will not sync status, error: {exc}')
            self.status.dirty.set()
            return
        old = (node.get("status") or {}).get("config")
        new = self.status.to_api()
        if self._on_status_push is not None:
            self._on_status_push(new)
        patch = {} if old == new else {"status": {"config": merge_patch(old, new) if old is not None else new}}
        try:
            await self._api.patch(path + "/status", patch, patch_type="strategic")
        except Exception as exc:  # noqa: BLE001 - not retried until the next change (E15)
            self.log(logging.ERROR, f"failed to patch node status, error: {exc}")

    # ----------------------------------------------------------------------- trial (6.7)
    async def trial_loop(self) -> None:
        """Promote assigned to last-known-good once ``meta/assigned`` is older than the trial."""
        if not self.trial_enabled:
            return
        period, trial = self.timings.scaled("trial_check_period"), self.timings.scaled("trial_period")
        started = time.time()
        while True:
            try:
                modified = self.store.assigned_modified()
                if time.time() - modified > trial:
                    if self._graduate():
                        return
                    due = time.time()
                else:
                    due = modified + trial
            except StoreError as exc:
                self.log(logging.ERROR, f"failed to check trial period for assigned config, error: {exc}")
                due = time.time() + period
            # the checker runs every `period` from its start: wake at the first tick after `due`
            ticks = max(1, math.ceil((due - started) / period + 1e-9))
            await asyncio.sleep(max(0.0, started + ticks * period - time.time()))

    def _graduate(self) -> bool:
        try:
            assigned, lkg = self.store.assigned(), self.store.last_known_good()
            if same_source(assigned, lkg):
                return True
            self.store.set_last_known_good(assigned)
        except StoreError as exc:
            self.log(logging.ERROR, f"failed to set last-known-good to assigned config, error: {exc}")
            return False
        self.status.set_last_known_good(assigned)
        if assigned is not None:
            self.log(logging.INFO, f"updated last-known-good config to {describe(assigned)}")
        return True
