"""A tiny in-memory Kubernetes API server for protocol-level gateway tests.

Not a simulator (that is kubesim): it serves just enough of core/v1 nodes, configmaps, events and
coordination/v1 leases over real HTTP for the real ``kubernetes`` client, and lets a test script
the protocol corners precisely: a queue of failures with Retry-After, 410 on watch (HTTP or event
form), streams the server closes, streams that go silent without closing, an API server that
drops new ``spec.configSource`` (gate off), and an audit log of every request.
"""

from __future__ import annotations

import copy
import json
import re
import threading
import uuid
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlparse

from kubesim.apiserver.patch import merge_patch  # the same RFC 7386 merge the real server applies

_PATHS = [
    (re.compile(r"^/api/v1/nodes(?:/(?P<name>[^/]+))?(?P<sub>/proxy/configz|/status)?$"), "nodes", None),
    (re.compile(r"^/api/v1/namespaces/(?P<ns>[^/]+)/configmaps(?:/(?P<name>[^/]+))?$"), "configmaps", None),
    (re.compile(r"^/api/v1/namespaces/(?P<ns>[^/]+)/events(?:/(?P<name>[^/]+))?$"), "events", None),
    (re.compile(r"^/apis/coordination.k8s.io/v1/namespaces/(?P<ns>[^/]+)/leases(?:/(?P<name>[^/]+))?$"),
     "leases", None),
]
KINDS = {"nodes": ("v1", "Node"), "configmaps": ("v1", "ConfigMap"), "events": ("v1", "Event"),
         "leases": ("coordination.k8s.io/v1", "Lease")}


@dataclass
class FakeState:
    objects: dict[tuple[str, str, str], dict[str, Any]] = field(default_factory=dict)
    history: list[tuple[int, str, str, dict[str, Any]]] = field(default_factory=list)
    rv: int = 100
    audit: list[tuple[str, str, str]] = field(default_factory=list)  # (method, path, query)
    failures: list[tuple[int, str | None]] = field(default_factory=list)  # (code, Retry-After)
    list_failures: list[tuple[int, str | None]] = field(default_factory=list)  # the same, lists only
    watch_gone_http: int = 0  # next N watch requests get HTTP 410
    watch_gone_only: str = ""  # ...of this resource only ("" = any: the node and Lease watches race for it)
    watch_gone_event: int = 0  # next N watch requests get a 200 stream with one 410 ERROR event
    watch_error_event: int = 0  # next N watch requests get one 500 ERROR event, then end
    close_watch_after: int | None = None  # end each watch stream after N events
    end_watches: str = ""  # open watch streams of this resource send a BOOKMARK and end, once
    replay: list[int] = field(default_factory=list)  # the next watch first resends these RVs' events
    closed: bool = False  # the server is shutting down: open streams end
    streams: int = 0  # watch streams opened so far
    silent_up_to: dict[str, int] = field(default_factory=dict)  # resource -> its streams up to this one send nothing
    expire_continue: int = 0  # the next N list requests with a continue token get 410
    lost_responses: int = 0  # the next N writes are applied, then answered 500 (answer lost)
    gate_off: bool = False  # drop a new spec.configSource on node updates (1.22+ default)
    version: str = "v1.23.17"
    configz: dict[str, Any] = field(default_factory=lambda: {"kubeletconfig": {"maxPods": 110}})
    cond: threading.Condition = field(default_factory=threading.Condition)


class FakeApi:
    def __init__(self) -> None:
        self.state = FakeState()
        state = self.state

        class Handler(_Handler):
            st = state

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.thread = threading.Thread(target=self.server.serve_forever, args=(0.05,), daemon=True)
        self.thread.start()
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"

    def close(self) -> None:
        with self.state.cond:
            self.state.closed = True
            self.state.cond.notify_all()
        self.server.shutdown()
        self.server.server_close()

    # -- direct store access for tests --------------------------------------------------

    def put(self, resource: str, obj: dict[str, Any], *, ns: str = "") -> dict[str, Any]:
        with self.state.cond:
            return _store(self.state, resource, ns, obj, "ADDED" if
                          (resource, ns, obj["metadata"]["name"]) not in self.state.objects else "MODIFIED")

    def get(self, resource: str, name: str, *, ns: str = "") -> dict[str, Any] | None:
        with self.state.cond:
            obj = self.state.objects.get((resource, ns, name))
            return copy.deepcopy(obj) if obj else None

    def delete(self, resource: str, name: str, *, ns: str = "") -> None:
        with self.state.cond:
            obj = self.state.objects.pop((resource, ns, name))
            self.state.rv += 1
            obj["metadata"]["resourceVersion"] = str(self.state.rv)
            self.state.history.append((self.state.rv, resource, "DELETED", copy.deepcopy(obj)))
            self.state.cond.notify_all()

    def silence_open_watches(self, resource: str) -> None:
        """Every open watch stream of ``resource`` stops sending, and never closes (a dead
        connection); streams opened later are served."""
        with self.state.cond:
            self.state.silent_up_to[resource] = self.state.streams

    def writes(self, resource: str) -> list[tuple[str, str, str]]:
        """Audited non-GET requests on a resource path."""
        return [a for a in self.state.audit if a[0] != "GET" and f"/{resource}" in a[1]]


def _store(st: FakeState, resource: str, ns: str, obj: dict[str, Any], event: str) -> dict[str, Any]:
    st.rv += 1
    obj = copy.deepcopy(obj)
    meta = obj.setdefault("metadata", {})
    meta["resourceVersion"] = str(st.rv)
    meta.setdefault("uid", str(uuid.uuid4()))
    if ns:
        meta["namespace"] = ns
    api_version, kind = KINDS[resource]
    obj["apiVersion"], obj["kind"] = api_version, kind
    st.objects[(resource, ns, meta["name"])] = obj
    st.history.append((st.rv, resource, event, copy.deepcopy(obj)))
    st.cond.notify_all()
    return copy.deepcopy(obj)


def _status(code: int, reason: str, message: str) -> dict[str, Any]:
    return {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
            "message": message, "reason": reason, "code": code}


class _Handler(BaseHTTPRequestHandler):
    st: FakeState
    protocol_version = "HTTP/1.1"
    disable_nagle_algorithm = True

    def log_message(self, *args: Any) -> None:  # quiet
        pass

    def _send(self, code: int, body: Any, headers: dict[str, str] | None = None) -> None:
        data = json.dumps(body).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        for k, v in (headers or {}).items():
            self.send_header(k, v)
        self.end_headers()
        self.wfile.write(data)

    def _body(self) -> Any:
        length = int(self.headers.get("Content-Length") or 0)
        return json.loads(self.rfile.read(length)) if length else None

    def do_GET(self) -> None:
        self._handle("GET")

    def do_POST(self) -> None:
        self._handle("POST")

    def do_PUT(self) -> None:
        self._handle("PUT")

    def do_PATCH(self) -> None:
        self._handle("PATCH")

    def do_DELETE(self) -> None:
        self._handle("DELETE")

    def _handle(self, method: str) -> None:
        url = urlparse(self.path)
        query = {k: v[-1] for k, v in parse_qs(url.query).items()}
        st = self.st
        body = self._body() if method in ("POST", "PUT", "PATCH") else None
        with st.cond:
            st.audit.append((method, url.path, url.query))
            if st.failures:
                code, retry_after = st.failures.pop(0)
                headers = {"Retry-After": retry_after} if retry_after else {}
                return self._send(code, _status(code, "TooManyRequests" if code == 429 else
                                                "InternalError", "injected"), headers)
        if url.path in ("/version", "/version/"):
            return self._send(200, {"major": "1", "minor": "23", "gitVersion": st.version})
        for pattern, resource, _ in _PATHS:  # noqa: B007 - the match's resource is used below
            m = pattern.match(url.path)
            if m:
                break
        else:
            return self._send(404, _status(404, "NotFound",
                                           "the server could not find the requested resource"))
        ns, name = m.groupdict().get("ns") or "", m.group("name")
        sub = m.groupdict().get("sub")
        if sub == "/proxy/configz":
            return self._send(200, st.configz)
        if method == "GET" and not name and query.get("watch") in ("true", "True", "1"):
            return self._watch(resource, ns, query)
        with st.cond:
            if method == "GET" and not name and st.list_failures:
                code, retry_after = st.list_failures.pop(0)
                headers = {"Retry-After": retry_after} if retry_after else {}
                return self._send(code, _status(code, "InternalError", "injected"), headers)
        with st.cond:
            if method != "GET" and st.lost_responses:
                st.lost_responses -= 1
                self._send = self._applied_but_lost  # type: ignore[method-assign]
            self._serve(method, resource, ns, name, query, body)

    def _applied_but_lost(self, code: int, body: Any, headers: dict[str, str] | None = None) -> None:
        del self._send  # back to the class method for the next request on this connection
        self._send(500, _status(500, "InternalError", f"injected after the write (was {code})"))

    def _serve(self, method: str, resource: str, ns: str, name: str | None, query: dict[str, str],
               body: Any) -> None:
        st = self.st
        key = (resource, ns, name or "")
        current = st.objects.get(key)
        plural = resource
        if method == "GET" and not name:
            items = [copy.deepcopy(o) for (r, n, _), o in sorted(st.objects.items())
                     if r == resource and (not ns or n == ns)
                     and _labels_match(o, query.get("labelSelector"))]
            meta: dict[str, Any] = {"resourceVersion": str(st.rv)}
            if query.get("continue") and st.expire_continue:
                st.expire_continue -= 1
                return self._send(410, _status(410, "Expired", "continue token expired"))
            if query.get("limit"):
                start = int(query.get("continue") or 0)
                end = start + int(query["limit"])
                if end < len(items):
                    meta["continue"] = str(end)
                items = items[start:end]
            return self._send(200, {"kind": KINDS[resource][1] + "List", "apiVersion": KINDS[resource][0],
                                    "metadata": meta, "items": items})
        if method == "POST":
            name = body["metadata"]["name"]
            if (resource, ns, name) in st.objects:
                return self._send(409, _status(409, "AlreadyExists", f'{plural} "{name}" already exists'))
            return self._send(201, _store(st, resource, ns, body, "ADDED"))
        if current is None:
            return self._send(404, _status(404, "NotFound", f'{plural} "{name}" not found'))
        if method == "GET":
            return self._send(200, copy.deepcopy(current))
        if method == "DELETE":
            del st.objects[key]
            st.rv += 1
            return self._send(200, _status(200, "", "deleted") | {"status": "Success"})
        if method == "PUT":
            want = (body.get("metadata") or {}).get("resourceVersion")
            if want and want != current["metadata"]["resourceVersion"]:
                return self._send(409, _status(
                    409, "Conflict", f'Operation cannot be fulfilled on {plural} "{name}": the object '
                    "has been modified; please apply your changes to the latest version and try again"))
            body["metadata"]["uid"] = current["metadata"]["uid"]
            return self._send(200, _store(st, resource, ns, body, "MODIFIED"))
        if method == "PATCH":
            ctype = self.headers.get("Content-Type", "")
            if "merge-patch" not in ctype and "strategic" not in ctype:
                return self._send(415, _status(415, "UnsupportedMediaType", ctype))
            new = merge_patch(current, body)
            if resource == "nodes":
                new["status"] = current.get("status", {})
                if st.gate_off and not (current.get("spec") or {}).get("configSource"):
                    (new.get("spec") or {}).pop("configSource", None)
            return self._send(200, _store(st, resource, ns, new, "MODIFIED"))
        return self._send(405, _status(405, "MethodNotAllowed", method))

    def _watch(self, resource: str, ns: str, query: dict[str, str]) -> None:
        st = self.st
        with st.cond:
            if st.watch_gone_http and st.watch_gone_only in ("", resource):
                st.watch_gone_http -= 1
                return self._send(410, _status(410, "Expired", "too old resource version"))
            gone_event = st.watch_gone_event > 0
            if gone_event:
                st.watch_gone_event -= 1
            error_event = st.watch_error_event > 0
            if error_event:
                st.watch_error_event -= 1
            replayed = [h for h in st.history if h[0] in st.replay and h[1] == resource]
            if replayed:
                st.replay = []
            st.streams += 1
            stream = st.streams
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()

        def chunk(obj: Any) -> None:
            data = json.dumps(obj).encode() + b"\n"
            self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
            self.wfile.flush()

        try:
            if gone_event:
                chunk({"type": "ERROR", "object": _status(410, "Expired", "too old resource version")})
                return
            if error_event:
                chunk({"type": "ERROR", "object": _status(500, "InternalError", "etcd hiccup")})
                return
            since = int(query.get("resourceVersion") or 0)
            timeout = float(query.get("timeoutSeconds") or 5)
            sent = 0
            import time as _t
            end = _t.monotonic() + timeout
            for _, _, event, obj in replayed:
                chunk({"type": event, "object": obj})
            while True:
                with st.cond:
                    if st.closed:
                        return
                    if stream <= st.silent_up_to.get(resource, 0):
                        st.cond.wait(0.2)
                        continue
                    if st.end_watches == resource:
                        st.end_watches = ""
                        break
                    pending = [h for h in st.history if h[0] > since and h[1] == resource
                               and (not ns or h[3]["metadata"].get("namespace") == ns)
                               and _labels_match(h[3], query.get("labelSelector"))]
                    if not pending:
                        remaining = end - _t.monotonic()
                        if remaining <= 0:
                            break
                        st.cond.wait(min(remaining, 0.2))
                        continue
                for rv, _, event, obj in pending:
                    chunk({"type": event, "object": obj})
                    since = rv
                    sent += 1
                    if st.close_watch_after is not None and sent >= st.close_watch_after:
                        return
                if _t.monotonic() >= end:
                    break
            if query.get("allowWatchBookmarks") in ("true", "True"):
                chunk({"type": "BOOKMARK", "object": {"kind": KINDS[resource][1], "apiVersion": "v1",
                                                      "metadata": {"resourceVersion": str(st.rv)}}})
        except (BrokenPipeError, ConnectionResetError):
            return
        finally:
            try:
                self.wfile.write(b"0\r\n\r\n")
                self.wfile.flush()
            except OSError:
                pass


def _labels_match(obj: dict[str, Any], selector: str | None) -> bool:
    if not selector:
        return True
    labels = (obj.get("metadata") or {}).get("labels") or {}
    for term in selector.split(","):
        k, _, v = term.partition("=")
        if labels.get(k) != v:
            return False
    return True
