"""The kubelet's view of the API server: the in-process client behind a network-partition switch.

Why: a partitioned node (``Faults.node(name).partitioned``) must lose *all* API access at once -
heartbeats, status pushes, downloads and informer events - while its process keeps running and its
trial clock keeps ticking. Every kubelet call goes through :class:`NodeClient`, which fails with
:class:`Unreachable` while the partition lasts, so each caller's normal error path runs.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, AsyncIterator, Optional

from kubesim.faults import Faults

if TYPE_CHECKING:
    from kubesim.apiserver.client import LocalClient


class Unreachable(ConnectionError):
    """The API server cannot be reached from this node."""


class NodeClient:
    """Thin wrapper over ``local_client(server, user=...)`` for one node."""

    def __init__(self, client: LocalClient, node: str, faults: Faults):
        self._client = client
        self.node = node
        self._faults = faults

    def blocked(self) -> bool:
        return self._faults.node(self.node).partitioned

    def _check(self, path: str) -> None:
        if self.blocked():
            raise Unreachable(f'Get "https://kubesim{path}": dial tcp: connect: no route to host')

    async def get(self, path: str, params: Optional[dict[str, str]] = None) -> dict[str, Any]:
        self._check(path)
        return await self._client.get(path, params)

    async def list(self, path: str, params: Optional[dict[str, str]] = None) -> dict[str, Any]:
        self._check(path)
        return await self._client.list(path, params or {})

    async def create(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
        self._check(path)
        return await self._client.create(path, body)

    async def update(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
        self._check(path)
        return await self._client.update(path, body)

    async def patch(self, path: str, body: Any, patch_type: str = "strategic") -> dict[str, Any]:
        self._check(path)
        return await self._client.patch(path, body, patch_type=patch_type)

    async def delete(self, path: str) -> Any:
        self._check(path)
        return await self._client.delete(path)

    def watch(self, path: str, params: dict[str, str]) -> AsyncIterator[dict[str, Any]]:
        self._check(path)
        return self._client.watch(path, params)
