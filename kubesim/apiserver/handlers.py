"""The REST verbs over the store: get, list, watch, create, update, patch, delete.

This is the part of the generic registry (``k8s.io/apiserver/pkg/registry/generic/registry``) that
kubesim needs: server-owned metadata, preconditions, admission, strategy, validation and no-op
detection, in the same order as the real request path. Everything here is synchronous, so a write
is atomic with respect to every other request on the event loop.
"""

from __future__ import annotations

import builtins
import copy
import random
import uuid
from dataclasses import dataclass, field
from typing import Any, Callable

from . import authz, errors, pods, schema, timefmt
from . import patch as patching
from .jsonutil import dumps, loads
from .paging import paginate
from .resources import NAMESPACES, NODES, PODS, RequestInfo, Resource, object_key, parse_bool
from .selectors import Selector
from .store import Store
from .strategy import Strategy
from .watch import StoredObject, Watcher

_GENERATE_CHARS = "bcdfghjklmnpqrstvwxz2456789"
PROTECTED_NAMESPACES = ("default", "kube-system", "kube-public")


@dataclass
class ObjectResult:
    code: int
    stored: StoredObject | None = None  # the object, as stored
    body: dict[str, Any] | str | None = None  # or a computed body (Status, proxy answer)
    warnings: list[str] = field(default_factory=list)


@dataclass
class ListResult:
    resource: Resource
    rv: int
    items: list[StoredObject]
    continue_token: str = ""
    remaining: int | None = None

    def list_metadata(self) -> dict[str, Any]:
        meta: dict[str, Any] = {"resourceVersion": str(self.rv)}
        if self.continue_token:
            meta["continue"] = self.continue_token
            if self.remaining is not None:
                meta["remainingItemCount"] = self.remaining
        return meta


@dataclass
class WatchResult:
    resource: Resource
    watcher: Watcher | None
    initial: list[tuple[str, Any]]
    bookmarks: bool
    timeout: float | None
    error: dict[str, Any] | None = None  # a Status to send as one ERROR event (410)


Result = ObjectResult | ListResult | WatchResult
NodeProxy = Callable[[str], tuple[int, "dict[str, Any] | str"]]


class Registry:
    """Executes one authorized request against the store."""

    def __init__(
        self, store: Store, strategies: dict[str, Strategy], graph: authz.NodeGraph, node_proxy: dict[str, NodeProxy]
    ):
        self.store = store
        self.strategies = strategies
        self.graph = graph
        self.node_proxy = node_proxy

    # --- reads -----------------------------------------------------------------------------

    def get(self, info: RequestInfo) -> ObjectResult:
        if info.subresource == "proxy":
            return self._proxy(info)
        stored = self._existing(info)
        return ObjectResult(200, stored)

    def _existing(self, info: RequestInfo) -> StoredObject:
        stored = self.store.get(info.resource.name, info.key)
        if stored is None:
            raise errors.not_found(info.resource.name, info.resource.group, info.name)
        return stored

    def _proxy(self, info: RequestInfo) -> ObjectResult:
        self._existing(info)
        handler = self.node_proxy.get(info.name)
        if handler is None:
            raise errors.ApiError(
                503,
                errors.status_dict(
                    503,
                    "ServiceUnavailable",
                    "error trying to reach service: dial tcp 127.0.0.1:10250: connect: connection refused",
                ),
            )
        code, body = handler(info.proxy_path)
        return ObjectResult(code, body=body)

    def list(self, info: RequestInfo, selector: Selector) -> ListResult:
        items = self._select(info, selector)
        page = paginate(
            items, info.query, self.store.rv, namespaced=info.resource.namespaced, filtered=not selector.empty
        )
        return ListResult(info.resource, page.rv, page.items, page.continue_token, page.remaining)

    def _select(self, info: RequestInfo, selector: Selector) -> builtins.list[StoredObject]:  # not Registry.list
        name = selector.name
        if name is not None and (info.namespace or not info.resource.namespaced):
            stored = self.store.get(info.resource.name, object_key(info.resource, info.namespace, name))
            candidates = [stored] if stored is not None else []
        elif (node := _node_name(selector)) is not None and info.resource.name == PODS.name:
            candidates = self.store.pods_on(node, info.namespace)  # then matched on the rest as any list
        else:
            candidates = self.store.list(info.resource.name, info.namespace)
        if selector.empty:
            return candidates
        return [s for s in candidates if selector.matches(s.obj)]

    def watch(self, info: RequestInfo, selector: Selector, timeout: float | None) -> WatchResult:
        watcher = Watcher(info.resource.name, info.namespace, selector)
        bookmarks = _flag(info.query.get("allowWatchBookmarks"))
        since = _watch_rv(info.query.get("resourceVersion"))
        key = None
        if selector.name is not None and (info.namespace or not info.resource.namespaced):
            key = object_key(info.resource, info.namespace, selector.name)
        try:
            initial = self.store.start_watch(watcher, since, key)
        except errors.ApiError as exc:
            return WatchResult(info.resource, None, [], bookmarks, timeout, error=exc.status)
        return WatchResult(info.resource, watcher, initial, bookmarks, timeout)

    # --- create ----------------------------------------------------------------------------

    def create(self, info: RequestInfo, user: authz.User, body: Any) -> ObjectResult:
        obj, key = self._prepare_create(info, user, body)
        strategy = self.strategies[info.resource.name]
        if _dry_run(info):
            obj["metadata"]["resourceVersion"] = ""
            return ObjectResult(201, body=obj, warnings=strategy.warnings(obj))
        stored = self.store.write(info.resource.name, key, obj)
        self._after_write(info.resource, stored)
        return ObjectResult(201, stored, warnings=strategy.warnings(obj))

    def _prepare_create(self, info: RequestInfo, user: authz.User, body: Any) -> tuple[dict[str, Any], str]:
        """The object a create would store, and its key: everything but the write."""
        obj = self._body(info, body)
        meta = obj["metadata"]
        if not meta.get("name") and meta.get("generateName"):
            meta["name"] = meta["generateName"] + "".join(random.choices(_GENERATE_CHARS, k=5))
        self._check_namespace(info, meta)
        if meta.get("resourceVersion"):
            raise errors.internal_error("resourceVersion should not be set on objects to be created")
        name = meta.get("name") or ""
        create_info = RequestInfo(info.resource, "create", info.namespace, name, "", "", info.query)
        authz.admit(user, create_info, obj, None)
        for key in (
            "uid",
            "selfLink",
            "generation",
            "deletionTimestamp",
            "deletionGracePeriodSeconds",
            "managedFields",
        ):
            meta.pop(key, None)
        meta["uid"] = str(uuid.uuid4())
        meta["creationTimestamp"] = timefmt.fmt_time(timefmt.now())
        strategy = self.strategies[info.resource.name]
        strategy.prepare_for_create(obj)
        timefmt.normalize(info.resource.kind, obj)
        _drop_nulls(obj)
        self._validate(info.resource, name, strategy.validate_create(obj))
        key = object_key(info.resource, info.namespace, name)
        if self.store.get(info.resource.name, key) is not None:
            raise errors.already_exists(info.resource.name, info.resource.group, name)
        return obj, key

    def create_started_pod(
        self,
        namespace: str,
        body: dict[str, Any],
        user: authz.User,
        node: str,
        status: Callable[[dict[str, Any]], dict[str, Any]] | None,
    ) -> StoredObject:
        """A pod created by ``user``, bound to ``node`` and - given the kubelet's ``status`` for it -
        started, in one write: the object the three requests (a controller's create, the
        scheduler's ``binding``, the node's status update) leave, each step checked as in its
        request (admission, defaults, validation), without the round trips and the two versions
        between. For kubesim's initial workloads at scale (150,000 pods); not an API verb."""
        info = RequestInfo(PODS, "create", namespace, "", "", "", {})
        obj, key = self._prepare_create(info, user, body)
        name = obj["metadata"]["name"]
        pods.bind(obj, {"target": {"kind": "Node", "name": node}})
        if status is None:
            return self.store.write(PODS.name, key, obj)
        status_info = RequestInfo(PODS, "update", namespace, name, "status", "", {})
        new = self._body(status_info, {**obj, "status": status(obj)})
        result = self._finish_update(status_info, authz.User.of(authz.NODE_PREFIX + node), _unstored(obj), new)
        assert result.stored is not None
        return result.stored

    def _body(self, info: RequestInfo, body: Any) -> dict[str, Any]:
        if not isinstance(body, dict):
            raise errors.bad_request(f"the body of the request could not be decoded as a {info.resource.kind} object")
        kind, api_version = body.get("kind"), body.get("apiVersion")
        resource = info.resource
        if (kind and kind != resource.kind) or (api_version and api_version != resource.api_version):
            raise errors.bad_request(
                f'{kind or "object"} in version "{api_version or ""}" cannot be handled as a {resource.kind}: '
                f'no kind "{kind}" is registered for version "{api_version}"'
            )
        obj = _json_copy(body)
        obj["kind"], obj["apiVersion"] = resource.kind, resource.api_version
        if not isinstance(obj.get("metadata"), dict):
            obj["metadata"] = {}
        obj = {"kind": obj.pop("kind"), "apiVersion": obj.pop("apiVersion"), **obj}
        schema.prune(resource.kind, obj)  # unknown fields vanish on decode into the Go type
        schema.drop_zero_values(resource.kind, obj)  # ... and omitempty zero values on encode
        return obj

    def _check_namespace(self, info: RequestInfo, meta: dict[str, Any]) -> None:
        if not info.resource.namespaced:
            meta.pop("namespace", None)
            return
        given = meta.get("namespace")
        if given and given != info.namespace:
            raise errors.bad_request(
                "the namespace of the provided object does not match the namespace sent on the request"
            )
        meta["namespace"] = info.namespace
        if self.store.get("namespaces", object_key(NAMESPACES, "", info.namespace)) is None:
            raise errors.not_found("namespaces", "", info.namespace)

    def _validate(self, resource: Resource, name: str, errs: builtins.list[errors.FieldError]) -> None:
        if errs:
            raise errors.invalid(resource.kind, resource.group, name, errs)

    def _after_write(self, resource: Resource, stored: StoredObject | None, name: str = "") -> None:
        if resource is NODES:
            self.graph.observe(stored.name if stored else name, stored.obj if stored else None)

    # --- update / patch --------------------------------------------------------------------

    def update(self, info: RequestInfo, user: authz.User, body: Any) -> ObjectResult:
        new = self._body(info, body)
        meta = new["metadata"]
        if meta.get("name") and meta["name"] != info.name:
            raise errors.bad_request(
                f"the name of the object ({meta['name']}) does not match the name on the URL ({info.name})"
            )
        if info.resource.namespaced and meta.get("namespace") and meta["namespace"] != info.namespace:
            raise errors.bad_request(
                "the namespace of the provided object does not match the namespace sent on the request"
            )
        old = self._existing(info)
        want_rv = meta.get("resourceVersion")
        if want_rv and want_rv != str(old.rv):
            raise errors.conflict(info.resource.name, info.resource.group, info.name)
        return self._finish_update(info, user, old, new)

    def patch(self, info: RequestInfo, user: authz.User, body: Any, content_type: str) -> ObjectResult:
        if content_type not in (patching.JSON_PATCH, patching.MERGE_PATCH, patching.STRATEGIC_PATCH):
            raise errors.unsupported_media_type(patching.ACCEPTED)
        old = self._existing(info)
        if isinstance(body, dict):
            want_rv = (body.get("metadata") or {}).get("resourceVersion")
            if want_rv and want_rv != str(old.rv):
                raise errors.conflict(info.resource.name, info.resource.group, info.name)
        new = patching.apply_patch(info.resource.kind, old.copy(), body, content_type)
        if not isinstance(new, dict):
            raise errors.bad_request("the patch did not produce an object")
        new = self._body(info, new)
        meta = new["metadata"]
        if meta.get("name") != info.name:
            raise errors.bad_request(
                f"the name of the object ({meta.get('name')}) does not match the name on the URL ({info.name})"
            )
        return self._finish_update(info, user, old, new)

    def _finish_update(
        self, info: RequestInfo, user: authz.User, old: StoredObject, new: dict[str, Any]
    ) -> ObjectResult:
        old_obj = old.obj
        authz.admit(user, info, new, old_obj)
        meta, old_meta = new["metadata"], old_obj["metadata"]
        # the deletion marks are the server's: an update can neither set nor clear them
        for key in (
            "uid", "creationTimestamp", "name", "namespace", "generateName", "selfLink", "managedFields",
            "deletionTimestamp", "deletionGracePeriodSeconds",
        ):
            if key in old_meta:
                meta[key] = old_meta[key]
            else:
                meta.pop(key, None)
        meta["resourceVersion"] = old_meta.get("resourceVersion", "")
        strategy = self.strategies[info.resource.name]
        strategy.prepare_for_update(new, old_obj, info.subresource)
        timefmt.normalize(info.resource.kind, new)
        _drop_nulls(new)
        self._validate(info.resource, info.name, strategy.validate_update(new, old_obj, info.subresource))
        warnings = strategy.warnings(new) if info.subresource != "status" else []
        if new == old_obj:
            return ObjectResult(200, old, warnings=warnings)  # no-op: no new resourceVersion
        if _dry_run(info):
            return ObjectResult(200, body=new, warnings=warnings)
        stored = self.store.write(info.resource.name, info.key, new)
        self._after_write(info.resource, stored)
        return ObjectResult(200, stored, warnings=warnings)

    # --- delete ----------------------------------------------------------------------------

    def delete(self, info: RequestInfo, user: authz.User, options: Any = None) -> ObjectResult:
        """Removes the object, but for a pod a node has: that one is marked Terminating
        (:mod:`.pods`) and its kubelet removes it once the grace period is over."""
        requested = pods.requested_grace(info.query, options)
        old = self._existing(info)
        authz.admit(user, info, None, old.obj)
        if info.resource is NAMESPACES and info.name in PROTECTED_NAMESPACES:
            raise errors.forbidden("namespaces", "", info.name, "this namespace may not be deleted")
        if info.resource is PODS:
            grace = pods.deletion_grace(old.obj, requested)
            if grace > 0:
                return self._terminate(info, old, grace)
        if _dry_run(info):
            return ObjectResult(200, old)
        if info.resource is NAMESPACES:
            self._delete_contents(info.name)
        gone = self.store.remove(info.resource.name, info.key)
        self._after_write(info.resource, None, info.name)
        if info.resource.return_deleted_object:
            return ObjectResult(200, gone)
        details = {"name": info.name, "kind": info.resource.name, "uid": old.obj["metadata"].get("uid", "")}
        if info.resource.group:
            details = {
                "name": info.name,
                "group": info.resource.group,
                "kind": info.resource.name,
                "uid": details["uid"],
            }
        status = {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success", "details": details}
        return ObjectResult(200, body=status)

    def _terminate(self, info: RequestInfo, old: StoredObject, grace: int) -> ObjectResult:
        pod = old.copy()
        if not pods.mark_terminating(pod, grace):
            return ObjectResult(200, old)  # already ending as soon or sooner
        if _dry_run(info):
            return ObjectResult(200, body=pod)
        return ObjectResult(200, self.store.write(info.resource.name, info.key, pod))

    def bind(self, info: RequestInfo, body: Any) -> ObjectResult:
        """``POST .../pods/NAME/binding``: the scheduler's one write of ``spec.nodeName``."""
        pod_info = RequestInfo(PODS, "create", info.namespace, info.name, "", "", info.query)
        pod = pods.bind(self._existing(pod_info).copy(), body)
        if not _dry_run(info):
            self.store.write(PODS.name, pod_info.key, pod)
        status = {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success", "code": 201}
        return ObjectResult(201, body=status)

    def expire_events(self, ttl: float) -> int:
        """Drop events last written more than ``ttl`` seconds ago (``--event-ttl``, 1 h by default).

        The real server stores events with an etcd lease, so they vanish (with a DELETED watch event)
        an hour after their last write; without this a long rehearsal would grow without bound.
        """
        now = timefmt.now()
        expired = 0
        for stored in self.store.list("events"):
            obj = stored.obj
            stamps = [obj.get("lastTimestamp"), obj.get("eventTime"), obj["metadata"].get("creationTimestamp")]
            moments = [m for m in (timefmt.parse(s) for s in stamps if s) if m is not None]
            if moments and (now - max(moments)).total_seconds() > ttl:
                self.store.remove("events", f"events/{stored.namespace}/{stored.name}")
                expired += 1
        return expired

    def _delete_contents(self, namespace: str) -> None:
        """What the namespace controller does eventually; kubesim does it at once."""
        for resource_name in (
            "configmaps",
            "events",
            "leases",
            "pods",
            "poddisruptionbudgets",
            "replicasets",
            "daemonsets",
            "serviceaccounts",
            "roles",
            "rolebindings",
        ):
            for stored in self.store.list(resource_name, namespace):
                self.store.remove(resource_name, f"{resource_name}/{namespace}/{stored.name}")


def _flag(value: str | None) -> bool:
    return parse_bool(value)


def _node_name(selector: Selector) -> str | None:
    """The node a ``spec.nodeName=X`` requirement pins (the store indexes pods by it)."""
    for req in selector.fields:
        if req.field == "spec.nodeName" and req.equal and req.value:  # "": the unbound pods, not indexed
            return req.value
    return None


def _unstored(obj: dict[str, Any]) -> StoredObject:
    """``obj`` as the "old" side of an update, never written (:meth:`Registry.create_started_pod`)."""
    meta = obj["metadata"]
    return StoredObject(obj, b"", 0, meta.get("name", ""), meta.get("namespace", "") or "")


def _json_copy(body: dict[str, Any]) -> dict[str, Any]:
    """A deep copy of a request body, as the decoded JSON it stands for: through orjson (several
    times faster than ``copy.deepcopy`` on a pod, and what the store keeps is that JSON anyway),
    else - a value JSON cannot hold - ``copy.deepcopy``."""
    try:
        obj = loads(dumps(body))
    except (TypeError, ValueError):
        return copy.deepcopy(body)
    return obj if isinstance(obj, dict) else copy.deepcopy(body)


def _dry_run(info: RequestInfo) -> bool:
    return info.query.get("dryRun") == "All"


def _watch_rv(value: str | None) -> int | None:
    if value in (None, "", "0"):
        return None
    try:
        return int(value)
    except ValueError:
        raise errors.bad_request(f"invalid resource version: {value}") from None


def _drop_nulls(obj: dict[str, Any]) -> None:
    """Go decoding turns ``null`` into a zero value that is omitted on output; do the same."""
    for key in [k for k, v in obj.items() if v is None]:
        del obj[key]
    for value in obj.values():
        if isinstance(value, dict):
            _drop_nulls(value)
        elif isinstance(value, list):
            for item in value:
                if isinstance(item, dict):
                    _drop_nulls(item)
