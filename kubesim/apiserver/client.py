"""``LocalClient``: in-process API access for simulated kubelets and controllers.

Simulated kubelets do not speak HTTP (5,000 TLS clients would dominate the CPU budget), but every
call goes through :meth:`ApiServer.execute` - the same authorization, admission, validation,
resourceVersion, watch, fault and audit path as an HTTP request. Results are fresh dicts (decoded
from the stored bytes), so callers may mutate them freely - unless the client is ``shared``: then
objects are the store's own parsed form, not copied (no decode per read, and one copy of each pod
in memory for the store and the shared informers together, not two), and must never be mutated.
kubesim's controllers read that way; they build every body they send afresh (``{**obj, ...}``), and
the registry copies what it keeps.
"""

from __future__ import annotations

import copy
from typing import Any, AsyncIterator, cast

from . import patch as patching
from .authz import User
from .errors import ApiError
from .handlers import ListResult, ObjectResult, WatchResult
from .server import ADMIN_USER, ApiRequest, ApiServer

__all__ = ["ApiError", "LocalClient", "local_client"]


def local_client(server: ApiServer, user: str = ADMIN_USER, *, shared: bool = False) -> "LocalClient":
    """A client of ``server`` acting as ``user`` (the server knows nothing of its clients);
    ``shared``: results are read-only views of the stored objects (the module docstring)."""
    return LocalClient(server, User.of(user), shared=shared)


def _params(params: dict[str, Any] | None) -> dict[str, str]:
    out: dict[str, str] = {}
    for key, value in (params or {}).items():
        if value is None:
            continue
        out[key] = ("true" if value else "false") if isinstance(value, bool) else str(value)
    return out


class LocalClient:
    def __init__(self, server: "ApiServer", user: User, *, shared: bool = False):
        self.server = server
        self.user = user
        self.shared = shared

    async def _call(
        self, method: str, path: str, params: dict[str, Any] | None, body: Any = None, content_type: str = ""
    ) -> dict[str, Any]:
        req = ApiRequest(method, path, _params(params), self.user, body, content_type, "kubesim-local")
        result = await self.server.execute(req)
        return _render(result, self.shared)

    async def get(self, path: str, params: dict[str, Any] | None = None) -> dict[str, Any]:
        return await self._call("GET", path, params)

    async def list(self, path: str, params: dict[str, Any] | None = None) -> dict[str, Any]:
        params = dict(params or {})
        params.pop("watch", None)
        return await self._call("GET", path, params)

    async def create(self, path: str, body: dict[str, Any], params: dict[str, Any] | None = None) -> dict[str, Any]:
        return await self._call("POST", path, params, body)  # the registry copies what it keeps

    async def update(self, path: str, body: dict[str, Any], params: dict[str, Any] | None = None) -> dict[str, Any]:
        return await self._call("PUT", path, params, body)

    async def patch(
        self, path: str, patch: Any, patch_type: str = "strategic", params: dict[str, Any] | None = None
    ) -> dict[str, Any]:
        if patch_type not in patching.PATCH_TYPES:
            raise ValueError(f"patch_type must be one of {sorted(patching.PATCH_TYPES)}")
        return await self._call("PATCH", path, params, patch, patching.PATCH_TYPES[patch_type])

    async def delete(self, path: str, params: dict[str, Any] | None = None) -> dict[str, Any]:
        return await self._call("DELETE", path, params)

    async def watch(self, path: str, params: dict[str, Any] | None = None) -> AsyncIterator[dict[str, Any]]:
        """Yield ``{"type": ..., "object": {...}}``; a 410 arrives as one ``ERROR`` event (as over HTTP).

        Authorization and selector errors raise :class:`ApiError` before the first event.
        """
        from .server import ApiRequest

        query = _params(params)
        query["watch"] = "true"
        req = ApiRequest("GET", path, query, self.user, None, "", "kubesim-local")
        result = await self.server.execute(req)
        assert isinstance(result, WatchResult)
        async for kind, payload in self.server.stream(result, req):
            obj: dict[str, Any]
            if hasattr(payload, "raw"):
                obj = payload.obj if self.shared else payload.copy()
            else:
                obj = copy.deepcopy(payload)
            yield {"type": kind, "object": obj}


def _render(result: Any, shared: bool = False) -> dict[str, Any]:
    if isinstance(result, ObjectResult):
        if result.stored is not None:
            return result.stored.obj if shared else result.stored.copy()
        # a node's plain-text answer (healthz) passes through as text: in-process callers ask for objects
        return cast(dict[str, Any], copy.deepcopy(result.body or {}))
    if isinstance(result, ListResult):
        return {
            "kind": result.resource.list_kind,
            "apiVersion": result.resource.api_version,
            "metadata": result.list_metadata(),
            "items": [s.obj for s in result.items] if shared else [s.copy() for s in result.items],
        }
    raise TypeError(f"unexpected result {type(result).__name__}")
