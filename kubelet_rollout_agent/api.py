"""The agent's way in to the API server: its own Node, one ConfigMap, events, configz.

Why not ``rollout.gateway.KubeGateway``: that is the orchestrator's gateway (admin verbs over
the whole fleet); the agent needs five calls about one node. It follows the same contracts and
reuses the gateway's values: requests are sent raw and read as JSON (no SDK models are built),
every attempt takes a token from a :class:`~rollout.gateway.TokenBucket` (5,000 agents must not
stampede the API server after a control-plane blip), errors are translated once into
:mod:`rollout.errors` and transient ones retried by :func:`~rollout.gateway.default_retrying`.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Iterator, Mapping
from datetime import datetime, timezone
from typing import Any

import tenacity
from kubernetes import client as k8s
from kubernetes import config as k8s_config
from kubernetes.client.exceptions import ApiException
from kubernetes.config.config_exception import ConfigException
from kubernetes.watch.watch import iter_resp_lines
from rollout.errors import GatewayError, NotFoundError
from rollout.gateway import TokenBucket, default_retrying, translated

from kubelet_rollout_agent import __version__, names

logger = logging.getLogger("kubelet_rollout_agent.api")

MERGE_PATCH = "application/merge-patch+json"
COMPONENT = "kubelet-rollout-agent"
USER_AGENT = f"{COMPONENT}/{__version__}"


def client_from_kubeconfig(path: str | None, *, pool_size: int | None = None) -> k8s.ApiClient:
    """An API client from a kubeconfig, or the pod's service account when ``path`` is empty.

    It names itself in User-Agent, so audit logs tell the agents' requests from the
    orchestrator's even when both run with the same credentials. ``pool_size``: connections kept
    open (urllib3 discards any beyond it after use, so many threads sharing one client need more
    than the default, or most requests pay a new TLS handshake).
    """
    try:
        configuration = k8s.Configuration()
        if pool_size is not None:
            configuration.connection_pool_maxsize = pool_size
        if not path:
            k8s_config.load_incluster_config(client_configuration=configuration)  # type: ignore[no-untyped-call]
        else:
            k8s_config.load_kube_config(config_file=path, client_configuration=configuration)  # type: ignore[no-untyped-call]
        client = k8s.ApiClient(configuration)
        client.user_agent = USER_AGENT
        return client
    except (ConfigException, OSError) as exc:
        where = f"kubeconfig {path}" if path else "the in-cluster service account (no --kubeconfig given)"
        raise GatewayError(f"cannot load {where}: {exc}") from exc


class RawApi:
    """One raw JSON request at a time: rate-limited, translated, retried."""

    def __init__(self, api_client: k8s.ApiClient, *, retrying: tenacity.Retrying | None = None,
                 rate_limiter: TokenBucket | None = None, timeout_s: float = 30.0) -> None:
        self.api_client = api_client
        self.retrying = retrying or default_retrying()
        self.rate_limiter = rate_limiter or TokenBucket(qps=5.0, burst=10)
        self.timeout = (10.0, timeout_s)

    def _send(self, method: str, path: str, *, query: Mapping[str, str] | None, body: Any,
              content_type: str, timeout: Any) -> Any:
        """Send once; the raw urllib3 response (non-2xx raised as ApiException)."""
        headers = {"Accept": "application/json", "Content-Type": content_type}
        request = self.api_client.param_serialize(
            method, path, query_params=list((query or {}).items()), header_params=headers,
            body=body, auth_settings=["BearerToken"])
        response = self.api_client.call_api(*request, _request_timeout=timeout)
        if not 200 <= response.status <= 299:
            response.read()  # type: ignore[no-untyped-call]
            raise ApiException.from_response(http_resp=response, body=None, data=None)
        return response.response

    def request(self, method: str, path: str, *, query: Mapping[str, str] | None = None,
                body: Any = None, content_type: str = "application/json", retry: bool = True) -> Any:
        """The decoded JSON answer (a string when the server answered plain text).

        ``retry=False`` for probes whose failure *is* the answer (a 503 healthz).
        """
        what = f"{method.lower()} {path}"

        def attempt() -> Any:
            self.rate_limiter.acquire()
            with translated(what):
                resp = self._send(method, path, query=query, body=body, content_type=content_type,
                                  timeout=self.timeout)
                try:
                    data = bytes(resp.data)
                finally:
                    resp.release_conn()
            try:
                return json.loads(data) if data else {}
            except ValueError:
                return data.decode("utf-8", "replace")

        return self.retrying.copy()(attempt) if retry else attempt()

    def stream(self, path: str, *, query: Mapping[str, str], timeout_s: float) -> Iterator[dict[str, Any]]:
        """A watch stream's events (opening is retried; a broken stream just ends)."""
        what = f"watch {path}"

        def attempt() -> Any:
            self.rate_limiter.acquire()
            with translated(what):
                return self._send("GET", path, query=query, body=None, content_type="application/json",
                                  timeout=(10.0, timeout_s + 30.0))

        resp = self.retrying.copy()(attempt)
        try:
            with translated(what):
                for line in iter_resp_lines(resp):  # type: ignore[no-untyped-call]
                    if line:
                        yield json.loads(line)
        except GatewayError as exc:
            logger.info("%s: stream ended: %s", what, exc)
        finally:
            resp.release_conn()


class NodeApi:
    """The calls one node's agent makes. ``node`` is the node's name."""

    def __init__(self, raw: RawApi, node: str, *, event_namespace: str = names.EVENT_NAMESPACE) -> None:
        self.raw = raw
        self.node = node
        self.event_namespace = event_namespace

    @property
    def _path(self) -> str:
        return f"/api/v1/nodes/{self.node}"

    def get_node(self) -> dict[str, Any]:
        return dict(self.raw.request("GET", self._path))

    def wait_for_change(self, resource_version: str, timeout_s: float) -> bool:
        """Block until the Node changes after ``resource_version`` or the timeout; True on a change."""
        if timeout_s < 1:
            time.sleep(max(0.0, timeout_s))
            return False
        query = {"watch": "true", "fieldSelector": f"metadata.name={self.node}",
                 "resourceVersion": resource_version, "timeoutSeconds": str(int(timeout_s)),
                 "allowWatchBookmarks": "true"}
        for event in self.raw.stream("/api/v1/nodes", query=query, timeout_s=timeout_s):
            if event.get("type") in ("ADDED", "MODIFIED", "DELETED"):
                return True
            if event.get("type") == "ERROR":
                return True  # 410 and friends: re-read the node
        return False

    def get_configmap(self, namespace: str, name: str) -> dict[str, Any]:
        return dict(self.raw.request("GET", f"/api/v1/namespaces/{namespace}/configmaps/{name}"))

    def patch_annotations(self, annotations: Mapping[str, str | None]) -> dict[str, Any]:
        """One JSON merge patch of the Node's annotations (None deletes a key)."""
        body = {"metadata": {"annotations": dict(annotations)}}
        return dict(self.raw.request("PATCH", self._path, body=body, content_type=MERGE_PATCH))

    def configz(self) -> dict[str, Any] | None:
        """The kubelet's running config through the API server's node proxy; None when down."""
        try:
            answer = self.raw.request("GET", f"{self._path}/proxy/configz", retry=False)
        except NotFoundError:
            return None
        except GatewayError as exc:
            logger.info("node %s: configz unavailable: %s", self.node, exc)
            return None
        return answer if isinstance(answer, dict) else None

    def record_event(self, reason: str, message: str, type_: str = "Normal", *,
                     now: datetime | None = None) -> bool:
        """A core/v1 Event on the Node (``kubectl describe node``); best effort."""
        stamp = (now or datetime.now(timezone.utc)).strftime("%Y-%m-%dT%H:%M:%SZ")
        body = {
            "apiVersion": "v1", "kind": "Event",
            "metadata": {"name": f"{self.node}.{time.time_ns():x}", "namespace": self.event_namespace},
            # uid = the node name, as the kubelet does: describe node finds events by it
            "involvedObject": {"kind": "Node", "name": self.node, "uid": self.node, "apiVersion": "v1"},
            "reason": reason, "message": message[:1024], "type": type_,
            "source": {"component": COMPONENT, "host": self.node},
            "reportingComponent": COMPONENT, "reportingInstance": self.node,
            "firstTimestamp": stamp, "lastTimestamp": stamp, "count": 1,
        }
        try:
            self.raw.request("POST", f"/api/v1/namespaces/{self.event_namespace}/events", body=body)
        except GatewayError as exc:
            logger.warning("node %s: could not record event %s: %s", self.node, reason, exc)
            return False
        return True
