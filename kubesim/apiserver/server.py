"""``ApiServer``: the one request path shared by HTTP and in-process clients.

Every request - from kubectl over HTTPS or from a simulated kubelet through :class:`LocalClient` -
goes through :meth:`ApiServer.execute`: faults, authorization (node authorizer), admission
(NodeRestriction), strategy, validation, the store (resourceVersion, WAL, watch fan-out) and the
audit log, in that order. Nothing about a kubelet's request is special-cased.
"""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import random
import secrets
import time
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any, AsyncGenerator, AsyncIterator
from urllib.parse import urlencode

from kubesim.faults import Faults
from kubesim.versions import DEFAULT_VERSION, KubernetesVersion

from . import authz, errors, reviews, timefmt
from .audit import AuditLog
from .eviction import AUDIT_PREFIX, Evictions
from .handlers import ListResult, NodeProxy, ObjectResult, Registry, Result, WatchResult
from .rbac import RbacAuthorizer, bootstrap_objects
from .resources import POD_DISRUPTION_BUDGETS, SERVICE_ACCOUNTS, RequestInfo, object_key, parse_path
from .selectors import Selector
from .store import Store
from .strategy import STRATEGIES, NodeStrategy
from .wal import Wal


# what each subresource serves (token is checked where it is served)
_SUBRESOURCE_VERBS = {
    "status": ("get", "update", "patch"), "proxy": ("get",), "eviction": ("create",), "binding": ("create",),
}
SEED_NAMESPACES = ("default", "kube-system", "kube-public", "kube-node-lease")
ADMIN_USER = "admin"
_NODE_TOKEN_PREFIX = "kubesim-node."
_SA_TOKEN_PREFIX = "kubesim-sa."


def node_token(secret: bytes, node_name: str) -> str:
    """The bearer token of ``system:node:<name>``: an HMAC of the name under the state dir's secret."""
    digest = hmac.new(secret, node_name.encode(), hashlib.sha256).hexdigest()[:32]
    return f"{_NODE_TOKEN_PREFIX}{node_name}.{digest}"


def service_account_token(secret: bytes, namespace: str, name: str) -> str:
    """A ServiceAccount's bearer token: an HMAC of ``namespace/name`` under the state dir's secret.

    Like a 1.23 legacy token it does not expire and stops working once the ServiceAccount is
    deleted (the authenticator looks the account up on every request).
    """
    digest = hmac.new(secret, f"serviceaccount:{namespace}/{name}".encode(), hashlib.sha256).hexdigest()[:32]
    return f"{_SA_TOKEN_PREFIX}{namespace}.{name}.{digest}"


class _StoreSource:
    """RBAC reads roles and bindings straight from the store at request time."""

    def __init__(self, store: Store):
        self.store = store

    def objects(self, resource: str, namespace: str = "") -> list[dict[str, Any]]:
        return [s.obj for s in self.store.list(resource, namespace)]

    def object(self, resource: str, namespace: str, name: str) -> dict[str, Any] | None:
        stored = self.store.get(resource, f"{resource}/{namespace}/{name}")
        return stored.obj if stored is not None else None


def read_secrets(state_dir: Path) -> tuple[bytes, str] | None:
    """``(node-token secret, admin token)`` of a state dir, if it has any yet."""
    path = state_dir / "pki" / "tokens"
    if not path.exists():
        return None
    secret_hex, admin = path.read_text().split()
    return bytes.fromhex(secret_hex), admin


@dataclass
class ApiRequest:
    method: str  # GET POST PUT PATCH DELETE
    path: str
    query: dict[str, str]
    user: authz.User
    body: Any = None  # decoded JSON (or protobuf-decoded) body
    content_type: str = ""
    user_agent: str = ""
    received: datetime = field(default_factory=timefmt.now)
    info: RequestInfo | None = None  # set by ApiServer.execute once the path is parsed
    # the audit event's ``annotations`` (what an eviction decided, and on which budget)
    audit_annotations: dict[str, str] = field(default_factory=dict)

    @property
    def request_uri(self) -> str:
        return self.path + ("?" + urlencode(self.query) if self.query else "")


class ApiServer:
    """The simulated kube-apiserver (storage, authz, admission, watch, audit)."""

    def __init__(
        self,
        *,
        state_dir: str | Path | None = None,
        gate_enabled: bool = True,
        faults: Faults | None = None,
        time_scale: float = 1.0,
        audit_log: str | Path | None = None,
        authz_lag: float = 1.0,
        authz_loses_race: bool = False,
        bookmark_interval: float = 60.0,
        history_capacity: int = 4096,
        watch_timeout: float = 1800.0,
        event_ttl: float = 3600.0,
        kubernetes_version: str = DEFAULT_VERSION,
    ):
        self.state_dir = Path(state_dir) if state_dir else None
        self.version = KubernetesVersion.parse(kubernetes_version)
        # 1.24+: no kubelet runs DKC; 1.24-1.25 keep the fields behind the API server's gate, off by
        # default (dropped on write unless in use), 1.26+ have none: no configmap -> node edges either
        gate_enabled = gate_enabled and not self.version.modern
        self.gate_enabled = gate_enabled
        # kubesim-only host endpoints (modern mode): node name -> its simulated host
        self.hosts: dict[str, Any] = {}
        self.faults = faults or Faults()
        self.time_scale = time_scale
        self.bookmark_interval = bookmark_interval / time_scale
        self.watch_timeout = watch_timeout
        self.event_ttl = event_ttl
        self._next_event_gc = 0.0
        wal = Wal(self.state_dir / "apiserver") if self.state_dir else None
        self.store = Store(wal, history_capacity)
        self.graph = authz.NodeGraph(authz_lag / time_scale, gate_enabled, loses_race=authz_loses_race)
        self.node_proxy: dict[str, NodeProxy] = {}
        strategies = {name: make(gate_enabled) for name, make in STRATEGIES.items()}
        strategies["nodes"] = nodes = NodeStrategy(gate_enabled)
        nodes.config_source_gone = self.version.config_source_gone
        self.registry = Registry(self.store, strategies, self.graph, self.node_proxy)
        self.evictions = Evictions(self.registry)
        self.rbac = RbacAuthorizer(_StoreSource(self.store))
        self.audit = AuditLog(audit_log)
        self._secret, self.admin_token = self._load_secrets()
        self._seed()

    # --- set-up ----------------------------------------------------------------------------

    def _load_secrets(self) -> tuple[bytes, str]:
        """A per-state-dir secret (node tokens are HMACs of the node name) and the admin token."""
        if self.state_dir is None:
            return secrets.token_bytes(32), secrets.token_urlsafe(32)
        existing = read_secrets(self.state_dir)
        if existing is not None:
            return existing
        path = self.state_dir / "pki" / "tokens"
        path.parent.mkdir(parents=True, exist_ok=True)
        secret, admin = secrets.token_bytes(32), secrets.token_urlsafe(32)
        path.write_text(f"{secret.hex()} {admin}\n")
        path.chmod(0o600)
        return secret, admin

    def _seed(self) -> None:
        admin = authz.User.of(ADMIN_USER)
        for name in SEED_NAMESPACES:
            if self.store.get("namespaces", f"namespaces//{name}") is None:
                info = parse_path("POST", "/api/v1/namespaces", {})
                self.registry.create(info, admin, {"metadata": {"name": name}})
        for resource, obj in bootstrap_objects():  # the 1.23 bootstrap policy, as the server reconciles it
            if self.store.get(resource, f"{resource}//{obj['metadata']['name']}") is None:
                info = parse_path("POST", f"/apis/rbac.authorization.k8s.io/v1/{resource}", {})
                self.registry.create(info, admin, obj)
        for stored in self.store.list("nodes"):  # the authorizer's informer starts from a list
            self.graph.observe(stored.name, stored.obj, immediate=True)

    # --- identities ------------------------------------------------------------------------

    def node_token(self, node_name: str) -> str:
        return node_token(self._secret, node_name)

    def service_account_token(self, namespace: str, name: str) -> str:
        return service_account_token(self._secret, namespace, name)

    def authenticate(self, token: str) -> authz.User | None:
        if hmac.compare_digest(token, self.admin_token):
            return authz.User.of(ADMIN_USER)
        if token.startswith(_NODE_TOKEN_PREFIX):
            name = token[len(_NODE_TOKEN_PREFIX) :].rsplit(".", 1)[0]
            if hmac.compare_digest(token, self.node_token(name)):
                return authz.User.of(authz.NODE_PREFIX + name)
        if token.startswith(_SA_TOKEN_PREFIX):
            return self._authenticate_service_account(token)
        return None

    def _authenticate_service_account(self, token: str) -> authz.User | None:
        """``<namespace>.<name>.<digest>``: namespaces have no dots, names may."""
        namespace, _, rest = token[len(_SA_TOKEN_PREFIX) :].partition(".")
        name = rest.rsplit(".", 1)[0]
        if not hmac.compare_digest(token, self.service_account_token(namespace, name)):
            return None
        if self.store.get("serviceaccounts", object_key(SERVICE_ACCOUNTS, namespace, name)) is None:
            return None  # deleted: its token no longer authenticates
        return authz.User.service_account(namespace, name)

    # --- faults ----------------------------------------------------------------------------

    def apply_faults(self, change: dict[str, Any]) -> dict[str, Any]:
        """``Faults.apply`` plus the immediate effects (dropping open watches)."""
        self.faults.apply(change)
        if self.faults.api.drop_watches:
            for watcher in self.store.hub.all():
                if watcher.owner is None or self.faults_apply_to(watcher.owner):
                    watcher.close()
        return self.faults.to_dict()

    def faults_apply_to(self, user: authz.User) -> bool:
        """API faults hit API clients; kubesim's kubelets and controllers only when asked."""
        if user.node_name is not None:
            return self.faults.api.include_nodes
        if user.name in authz.CONTROL_PLANE_USERS:
            return self.faults.api.include_control_plane
        return True

    async def _inject_faults(self, user: authz.User) -> None:
        if not self.faults_apply_to(user):
            return
        if self.faults.api.latency > 0:
            await asyncio.sleep(self.faults.api.latency)
        code = self.faults.pick_api_error(is_node=user.node_name is not None)
        if code == 429:
            raise errors.too_many_requests(self.faults.api.retry_after)
        if code is not None:
            reason = errors.reason_phrase(code)
            raise errors.ApiError(code, errors.status_dict(code, reason, f"kubesim injected fault: {reason}", {}))

    # --- the request path ------------------------------------------------------------------

    async def execute(self, req: ApiRequest) -> Result:
        """Run one request; raises :class:`ApiError`. A watch is audited when its stream ends."""
        info: RequestInfo | None = None
        code = 500
        try:
            info = req.info = parse_path(req.method, req.path, req.query)
            await self._inject_faults(req.user)  # after request-info parsing, as APF: audit names the object
            result = self._run(info, req)
            if isinstance(result, WatchResult) and result.watcher is not None:
                result.watcher.owner = req.user
            if info.verb == "create" and info.resource.name == "events":
                self._maybe_expire_events()
            code = 200 if isinstance(result, (ListResult, WatchResult)) else result.code
            return result
        except errors.ApiError as exc:
            code = exc.code
            raise
        finally:
            if info is None or info.verb != "watch" or code != 200:
                self._audit(req, info, code)

    def _run(self, info: RequestInfo, req: ApiRequest) -> Result:
        selector = None
        if info.verb in ("list", "watch"):
            selector = Selector.parse(info.resource.name, req.query)
        authz.authorize(req.user, info, self.graph, selector.name if selector else None, self.rbac)
        if info.subresource == "token":
            return self._token_request(info, req)
        if info.verb not in info.resource.verbs and info.subresource != "proxy":
            raise errors.method_not_allowed()
        if info.subresource in _SUBRESOURCE_VERBS and info.verb not in _SUBRESOURCE_VERBS[info.subresource]:
            raise errors.method_not_allowed()
        if info.subresource == "eviction":
            status = self.evictions.evict(info, req.user, req.body, req.audit_annotations)
            return ObjectResult(status["code"], body=status)
        if info.subresource == "binding":
            return self.registry.bind(info, req.body)
        if info.resource.virtual:
            return ObjectResult(201, body=reviews.answer(info.resource, req.body, req.user, self.graph, self.rbac))
        verb = info.verb
        if verb == "get":
            return self.registry.get(info)
        if verb == "list" and selector is not None:  # parsed above for list and watch
            return self.registry.list(info, selector)
        if verb == "watch" and selector is not None:
            return self.registry.watch(info, selector, self._watch_timeout(req.query))
        if verb == "create":
            return self.registry.create(info, req.user, req.body)
        if verb == "update":
            result = self.registry.update(info, req.user, req.body)
            if info.resource is POD_DISRUPTION_BUDGETS and info.subresource == "status":
                # what the budget allows from now on, as an eviction's audit event says what it found
                stored = result.stored.obj if result.stored is not None else result.body
                allowed = ((stored if isinstance(stored, dict) else {}).get("status") or {}).get("disruptionsAllowed", 0)
                req.audit_annotations[AUDIT_PREFIX + "disruptions-allowed"] = str(allowed)
            return result
        if verb == "patch":
            return self.registry.patch(info, req.user, req.body, req.content_type)
        if verb == "delete":
            return self.registry.delete(info, req.user, req.body)
        raise errors.method_not_allowed()

    def _token_request(self, info: RequestInfo, req: ApiRequest) -> ObjectResult:
        """``POST .../serviceaccounts/NAME/token`` (TokenRequest): the account's token."""
        if info.verb != "create":
            raise errors.method_not_allowed()
        self.registry.get(RequestInfo(SERVICE_ACCOUNTS, "get", info.namespace, info.name))  # 404 if missing
        token = self.service_account_token(info.namespace, info.name)
        return ObjectResult(201, body=reviews.token_request(info.namespace, info.name, req.body, token))

    def _maybe_expire_events(self) -> None:
        """At most once a minute (real time), on an event write: cheap enough at 5,000 nodes."""
        now = time.monotonic()
        if now >= self._next_event_gc:
            self._next_event_gc = now + 60.0
            self.registry.expire_events(self.event_ttl)

    def _watch_timeout(self, query: dict[str, str]) -> float:
        value = query.get("timeoutSeconds")
        if value:
            try:
                return max(0.0, float(value))
            except ValueError:
                raise errors.bad_request(f"invalid timeoutSeconds: {value}") from None
        return self.watch_timeout * (1 + random.random())  # the real server: 30-60 min

    def _audit(self, req: ApiRequest, info: RequestInfo | None, code: int) -> None:
        object_ref = None
        verb = req.method.lower()
        if info is not None:
            verb = info.verb
            object_ref = {"resource": info.resource.name}
            if info.namespace:
                object_ref["namespace"] = info.namespace
            if info.name:
                object_ref["name"] = info.name
            if info.subresource:
                object_ref["subresource"] = info.subresource
            object_ref["apiGroup"] = info.resource.group
            object_ref["apiVersion"] = info.resource.version
        self.audit.record(
            verb=verb,
            request_uri=req.request_uri,
            username=req.user.name,
            groups=req.user.groups,
            object_ref=object_ref,
            code=code,
            received=req.received,
            completed=timefmt.now(),
            user_agent=req.user_agent,
            annotations=req.audit_annotations,
        )

    def audit_non_resource(self, req: ApiRequest, code: int) -> None:
        self._audit(req, None, code)

    # --- watch streams ---------------------------------------------------------------------

    async def stream(self, result: WatchResult, req: ApiRequest) -> AsyncGenerator[tuple[str, Any], None]:
        """Yield ``(type, StoredObject | dict)`` until timeout, close or client disconnect."""
        watcher = result.watcher
        try:
            if result.error is not None or watcher is None:
                yield "ERROR", result.error
                return
            for item in result.initial:
                yield item
            if self.faults.api.drop_watches and self.faults_apply_to(req.user):
                asyncio.get_running_loop().call_later(0.5 + random.random(), watcher.close)
            async for item in self._live(result):
                yield item
        finally:
            if watcher is not None:
                self.store.hub.remove(watcher)
            self._audit(req, req.info, 200)

    async def _live(self, result: WatchResult) -> AsyncIterator[tuple[str, Any]]:
        watcher = result.watcher
        assert watcher is not None
        loop = asyncio.get_running_loop()
        deadline = loop.time() + (result.timeout if result.timeout is not None else self.watch_timeout)
        next_bookmark = loop.time() + self.bookmark_interval
        while True:
            while watcher.queue:
                yield watcher.queue.popleft()
            if watcher.closed or loop.time() >= deadline:
                return
            wait = deadline - loop.time()
            if result.bookmarks:
                wait = min(wait, max(0.0, next_bookmark - loop.time()))
            await watcher.wait(wait)
            if result.bookmarks and not watcher.queue and loop.time() >= next_bookmark:
                next_bookmark = loop.time() + self.bookmark_interval
                yield "BOOKMARK", self.bookmark(result)

    def bookmark(self, result: WatchResult) -> dict[str, Any]:
        resource = result.resource
        return {
            "kind": resource.kind,
            "apiVersion": resource.api_version,
            "metadata": {"resourceVersion": str(self.store.rv)},
        }

    def close(self) -> None:
        self.store.hub.close_all()
        self.store.close()
        self.audit.close()
