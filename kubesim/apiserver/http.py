"""The HTTPS front end (aiohttp): authentication, content negotiation, Tables, watch streaming.

It only translates between the wire and :meth:`ApiServer.execute`; every decision about objects
is made there, so HTTP clients and in-process kubelets get identical behaviour. Loopback only,
TLS with the per-state-dir CA, HTTP/1.1 (ALPN), ``TCP_NODELAY`` on the listening socket (accepted
sockets inherit it on Linux) so small watch events are not delayed by Nagle.

The ``blackhole`` fault lives here, because it is about connections, not requests: a silenced
connection is never answered and never closed by the server (the client must notice by itself).
"""

from __future__ import annotations

import asyncio
import logging
import socket
import ssl
from typing import Any

import yaml
from aiohttp import web

from kubesim.pki import Pki

from . import authz, discovery, errors, openapi, protobuf, tables
from .authz import User
from .handlers import ListResult, ObjectResult, WatchResult
from .jsonutil import JSONDecodeError, dumps, loads
from .patch import ACCEPTED as PATCH_ACCEPTED
from .patch import JSON_PATCH, MERGE_PATCH, STRATEGIC_PATCH
from .resources import parse_path
from .server import ApiRequest, ApiServer
from .watch import StoredObject

log = logging.getLogger("kubesim.apiserver")
JSON = "application/json"
# the /version field only kubesim serves: its time scale (docs/kubesim.md, "Telling kubesim apart")
SIMULATOR_MARKER = "kubesimTimeScale"
_PUBLIC = {"/version", "/healthz", "/livez", "/readyz"}
_BODY_TYPES = "application/json, application/yaml, application/vnd.kubernetes.protobuf"


def _json(
    body: Any, status: int = 200, content_type: str = JSON, headers: dict[str, str] | None = None
) -> web.Response:
    data = body if isinstance(body, bytes) else dumps(body)
    response = web.Response(body=data, status=status, headers=headers)
    response.headers["Content-Type"] = content_type
    return response


def _text_or_json(body: Any, status: int) -> web.Response:
    if isinstance(body, str):
        return web.Response(text=body, status=status)
    return _json(body, status)


def _error(exc: errors.ApiError) -> web.Response:
    return _json(exc.status, exc.code, headers=exc.headers)


class HttpFrontend:
    def __init__(self, server: ApiServer, pki: Pki, host: str = "127.0.0.1", port: int = 0):
        self.server = server
        self.pki = pki
        self.host = host
        self.port = port
        self._runner: web.AppRunner | None = None
        # blackholed connections, by id; the handler is held so its id cannot be reused
        self._silenced: dict[int, Any] = {}
        self._stopping = asyncio.Event()

    @property
    def url(self) -> str:
        return f"https://{self.host}:{self.port}"

    async def start(self) -> str:
        app = web.Application(client_max_size=4 * 1024 * 1024)
        app.router.add_route("*", "/{tail:.*}", self.handle)
        self._runner = web.AppRunner(app, handler_cancellation=True, access_log=None)
        await self._runner.setup()
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        sock.bind((self.host, self.port))
        self.port = sock.getsockname()[1]
        site = web.SockSite(self._runner, sock, ssl_context=self._ssl_context(), backlog=1024)
        await site.start()
        return self.url

    def _ssl_context(self) -> ssl.SSLContext:
        context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        context.load_cert_chain(self.pki.server_cert, self.pki.server_key)
        context.set_alpn_protocols(["http/1.1"])
        return context

    async def stop(self) -> None:
        self._stopping.set()  # silenced requests give up, so shutting down does not wait for them
        # as a real API server going down: every watch ends now (its client re-lists elsewhere or
        # later); an open stream would otherwise hold the shutdown for aiohttp's 60 s grace
        self.server.store.hub.close_all()
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None

    # --- dispatch --------------------------------------------------------------------------

    def _user(self, request: web.Request) -> User | None:
        header = request.headers.get("Authorization", "")
        if not header.lower().startswith("bearer "):
            return None
        return self.server.authenticate(header[7:].strip())

    async def handle(self, request: web.Request) -> web.StreamResponse:
        path = request.path.rstrip("/") or "/"
        user = self._user(request)
        anonymous = User("system:anonymous", ("system:unauthenticated",))
        req = ApiRequest(
            request.method,
            path,
            dict(request.query),
            user or anonymous,
            user_agent=request.headers.get("User-Agent", ""),
        )
        if not path.startswith("/kubesim/v1/faults") and self._silenced_connection(request, req.user):
            return await self._silence(request)
        if user is None and path not in _PUBLIC:
            self.server.audit_non_resource(req, 401)  # failed authentication is audited too
            return _error(errors.unauthorized())
        try:
            if user is not None and _is_non_resource(path):
                authz.authorize_path(req.user, request.method.lower(), path, self.server.rbac)
            response = self._non_resource(request, req)
            if response is not None:
                self.server.audit_non_resource(req, response.status)
                return response
            if path.startswith("/kubesim/v1/faults"):
                return await self._faults(request, req)
            if path.startswith("/kubesim/v1/hosts/"):
                return await self._hosts(request, req)
            return await self._resource(request, req)
        except errors.ApiError as exc:
            if req.info is None:
                self.server.audit_non_resource(req, exc.code)
            return _error(exc)
        except Exception as exc:  # noqa: BLE001 - the server must answer with a Status, not hang up
            log.exception("internal error serving %s %s", request.method, request.path_qs)
            return _error(errors.internal_error(str(exc)))

    def _non_resource(self, request: web.Request, req: ApiRequest) -> web.Response | None:
        path = req.path
        if path in ("/healthz", "/livez", "/readyz"):
            return web.Response(text="ok")
        if path == "/version":
            # one field a real API server never serves: how a client tells it talks to kubesim,
            # and how fast its clock runs (rollout's rehearsal mode reads it)
            return _json({**self.server.version.version_info(), SIMULATOR_MARKER: f"{self.server.time_scale:g}"})
        if path == "/api":
            return _json(discovery.api_versions(f"{self.host}:{self.port}"))
        if path == "/apis":
            return _json(discovery.api_groups())
        if path == "/api/v1":
            return _json(discovery.resource_list("", "v1"))
        if path.startswith("/apis/") and path.count("/") <= 3:
            return self._group_discovery(path)
        if path.startswith("/openapi/") or path.startswith("/swagger"):
            return self._openapi(request, path)
        if not (path.startswith("/api/") or path.startswith("/apis/") or path.startswith("/kubesim/")):
            raise errors.path_not_found()
        return None

    def _group_discovery(self, path: str) -> web.Response:
        parts = path.strip("/").split("/")
        doc = discovery.api_group(parts[1]) if len(parts) == 2 else discovery.resource_list(parts[1], parts[2])
        if doc is None:
            raise errors.path_not_found()
        return _json(doc)

    def _openapi(self, request: web.Request, path: str) -> web.Response:
        if path == "/openapi/v3":
            return _json(openapi.v3_root())
        if path.startswith("/openapi/v3/"):
            doc = openapi.V3_DOCS.get(path[len("/openapi/v3/") :])
            if doc is None:
                raise errors.path_not_found()
            return _json(doc)
        if path == "/openapi/v2":
            if "protobuf" in request.headers.get("Accept", ""):
                return web.Response(body=openapi.v2_protobuf(), headers={"Content-Type": openapi.V2_CONTENT_TYPE})
            return _json({"swagger": "2.0", "info": {"title": "Kubernetes", "version": "v1.23.17"}, "paths": {}})
        raise errors.path_not_found()

    async def _faults(self, request: web.Request, req: ApiRequest) -> web.Response:
        if not req.user.privileged:
            raise errors.forbidden("faults", "kubesim", "", f'User "{req.user.name}" cannot access kubesim faults')
        if request.method == "GET":
            body = self.server.faults.to_dict()
        elif request.method in ("PUT", "POST", "PATCH"):
            was_silent = self.server.faults.api.blackhole
            try:
                body = self.server.apply_faults(loads(await request.read()))
            except (ValueError, TypeError, AttributeError) as exc:
                raise errors.bad_request(f"invalid fault change: {exc}") from None
            self._blackhole_switched(request, was_silent)
        else:
            raise errors.method_not_allowed()
        self.server.audit_non_resource(req, 200)
        return _json(body)

    async def _hosts(self, request: web.Request, req: ApiRequest) -> web.Response:
        """Modern mode: a node's host (``systemctl``, journal, the kubelet's local ports).

        The admin may reach every host; a node's own credentials only its own host (an agent on
        the node runs with them), so one compromised node cannot restart another's kubelet.
        """
        parts = req.path.split("/")[4:]  # /kubesim/v1/hosts/NODE/...
        node, action = parts[0], "/".join(parts[1:])
        user = req.user
        if user.name == "system:anonymous" or (user.node_name is not None and user.node_name != node):
            raise errors.forbidden(
                "hosts", "kubesim", node, f'User "{user.name}" cannot access the host of node "{node}"'
            )
        host = self.server.hosts.get(node)
        if host is None:
            raise errors.not_found("hosts", "kubesim", node)
        response = await self._host_action(request, host, action)
        self.server.audit_non_resource(req, response.status)
        return response

    async def _host_action(self, request: web.Request, host: Any, action: str) -> web.Response:
        if action == "systemctl" and request.method == "POST":
            try:
                args = loads(await request.read()).get("args")
            except (ValueError, AttributeError) as exc:
                raise errors.bad_request(f"invalid systemctl request: {exc}") from None
            if not isinstance(args, list) or not all(isinstance(a, str) for a in args):
                raise errors.bad_request('systemctl wants {"args": ["verb", "unit", ...]}')
            return _json((await host.systemctl(args)).to_dict())
        if request.method != "GET":
            raise errors.method_not_allowed()
        if action == "journal":
            unit = request.query.get("unit", "kubelet")
            try:
                lines = int(request.query.get("lines", "50"))
                since = float(request.query.get("since", "0"))
            except ValueError:
                raise errors.bad_request("lines must be an integer and since unix seconds") from None
            return _json({"unit": unit, "lines": host.journal_tail(unit, lines, since)})
        if action in ("kubelet/healthz", "kubelet/configz"):
            code, body = host.kubelet(action.split("/", 1)[1])
            return _text_or_json(body, code)
        if action == "":
            return _json(host.info())
        raise errors.path_not_found()

    # --- blackhole -------------------------------------------------------------------------

    def _blackhole_switched(self, request: web.Request, was_on: bool) -> None:
        """Switched on: every connection open now goes silent (but the one asking, so it hears
        back). Either way, forget silenced connections that are gone."""
        server = self._runner.server if self._runner is not None else None
        connections = server.connections if server is not None else []
        if self.server.faults.api.blackhole and not was_on:
            for conn in connections:
                if conn is not request.protocol:
                    self._silenced[id(conn)] = conn
        alive = {id(conn) for conn in connections}
        self._silenced = {key: conn for key, conn in self._silenced.items() if key in alive}

    def _silenced_connection(self, request: web.Request, user: User) -> bool:
        """Is this request's connection blackholed? Every connection that carries a request
        while the fault is on goes silent for good; kubelets are spared unless included."""
        if not self.server.faults_apply_to(user):
            return False
        conn = request.protocol
        if self.server.faults.api.blackhole:
            self._silenced[id(conn)] = conn
        return self._silenced.get(id(conn)) is conn

    async def _silence(self, request: web.Request) -> web.StreamResponse:
        """Answer nothing, close nothing: until the client hangs up (aiohttp then cancels this
        handler) or the server stops."""
        await self._stopping.wait()
        if request.transport is not None:
            request.transport.abort()
        return web.Response(status=503)

    # --- resources -------------------------------------------------------------------------

    async def _resource(self, request: web.Request, req: ApiRequest) -> web.StreamResponse:
        if request.method in ("POST", "PUT", "PATCH"):
            # an unknown resource is a 404 before its body is read, as on a real server (e.g.
            # ``kubectl auth whoami``'s SelfSubjectReview, which 1.23 does not serve, is not a 415)
            parse_path(request.method, req.path, req.query)
            req.body, req.content_type = _decode_body(
                request.method, request.headers.get("Content-Type", ""), await request.read()
            )
        elif request.method == "DELETE" and request.can_read_body:
            data = await request.read()  # DeleteOptions (kubectl's gracePeriodSeconds)
            if data.strip():
                req.body, req.content_type = _decode_body(request.method, request.headers.get("Content-Type", ""), data)
        result = await self.server.execute(req)
        table = (
            tables.wants_table(request.headers.get("Accept", ""))
            and req.info is not None
            and req.info.resource.name in tables.PRINTERS
            and req.info.subresource != "proxy"
        )
        include = req.query.get("includeObject", "Metadata")
        if isinstance(result, WatchResult):
            return await self._watch(request, req, result, table, include)
        if isinstance(result, ListResult):
            return self._list(result, table, include)
        return self._object(result, req, table, include)

    def _object(self, result: ObjectResult, req: ApiRequest, table: bool, include: str) -> web.Response:
        headers = {"Warning": ", ".join(f'299 - "{w}"' for w in result.warnings)} if result.warnings else None
        if result.stored is None:
            if isinstance(result.body, str):  # a kubelet's plain-text answer (healthz)
                return web.Response(text=result.body, status=result.code, headers=headers)
            return _json(result.body or {}, result.code, headers=headers)
        if table and req.info is not None:
            body = tables.table(req.info.resource.name, [result.stored.obj], result.stored.rv, include)
            return _json(body, result.code, tables.TABLE_CONTENT_TYPE, headers)
        return _json(result.stored.raw, result.code, headers=headers)

    def _list(self, result: ListResult, table: bool, include: str) -> web.Response:
        if table:
            objects = (s.obj for s in result.items)
            body = tables.table(result.resource.name, objects, result.rv, include, result.list_metadata())
            return _json(body, content_type=tables.TABLE_CONTENT_TYPE)
        resource = result.resource
        head = b'{"kind":"%s","apiVersion":"%s","metadata":%s,"items":[' % (
            resource.list_kind.encode(),
            resource.api_version.encode(),
            dumps(result.list_metadata()),
        )
        return _json(head + b",".join(s.raw for s in result.items) + b"]}")

    async def _watch(
        self, request: web.Request, req: ApiRequest, result: WatchResult, table: bool, include: str
    ) -> web.StreamResponse:
        response = web.StreamResponse(status=200)
        response.headers["Content-Type"] = tables.TABLE_CONTENT_TYPE if table else JSON
        response.enable_chunked_encoding()
        await response.prepare(request)
        if self._stopping.is_set() and result.watcher is not None:
            result.watcher.close()  # opened while shutting down: ends after its initial events
        events = self.server.stream(result, req)
        try:
            async for kind, payload in events:
                if self._silenced_connection(request, req.user):
                    break
                await response.write(_event_line(kind, payload, result, table, include))
            if self._silenced_connection(request, req.user):
                await events.aclose()
                await self._silence(request)  # not even the end of the stream gets through
                return response
            await response.write_eof()
        except (ConnectionResetError, RuntimeError):
            pass  # the client went away; stream() cleaned up the watcher
        finally:
            await events.aclose()
        return response


def _is_non_resource(path: str) -> bool:
    """As requestinfo.go: discovery (``/api``, ``/api/v1``, ``/apis/<g>/<v>``) and anything outside
    ``/api``/``/apis`` is a non-resource URL; kubesim's own ``/kubesim`` endpoint checks itself."""
    parts = path.strip("/").split("/")
    if parts[0] == "api":
        return len(parts) < 3
    if parts[0] == "apis":
        return len(parts) < 4
    return parts[0] != "kubesim"


def _event_line(kind: str, payload: Any, result: WatchResult, table: bool, include: str) -> bytes:
    if isinstance(payload, StoredObject):
        if table:
            data = dumps(tables.table(result.resource.name, [payload.obj], payload.rv, include))
        else:
            data = payload.raw
    else:
        data = dumps(payload)
    return b'{"type":"' + kind.encode() + b'","object":' + data + b"}\n"


def _decode_body(method: str, content_type: str, data: bytes) -> tuple[Any, str]:
    media = content_type.split(";")[0].strip().lower()
    if method == "PATCH":
        if media not in (JSON_PATCH, MERGE_PATCH, STRATEGIC_PATCH):
            raise errors.unsupported_media_type(PATCH_ACCEPTED)
        return _parse_json(data), media
    if media == protobuf.PROTOBUF:
        return protobuf.decode(data), media
    if media in ("", JSON, "*/*", "application/json-patch+json"):
        return _parse_json(data), JSON
    if media in ("application/yaml", "application/x-yaml"):
        try:
            return yaml.safe_load(data), JSON
        except yaml.YAMLError as exc:
            raise errors.bad_request(f"error converting YAML to JSON: {exc}") from None
    raise errors.unsupported_media_type(_BODY_TYPES)


def _parse_json(data: bytes) -> Any:
    if not data.strip():
        raise errors.bad_request("the request body is empty")
    try:
        return loads(data)
    except JSONDecodeError as exc:
        raise errors.bad_request(f"error decoding request body: {exc}") from None
