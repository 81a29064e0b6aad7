"""A real Prometheus on loopback, scraping every kubelet of a cluster through the API server's
node proxy: what ``rollout prometheus`` (``prometheus_command``), ``rollout demo`` and the tests
start, and the HTTP service-discovery endpoint ``rollout prometheus sd`` serves on its own.

Debian's ``prometheus`` (2.42, installed by ``make system-deps``) is built without
``kubernetes_sd_configs``, so the nodes are discovered through ``http_sd_configs`` from
:class:`NodeTargets`, a small HTTP service-discovery endpoint of ours that lists the cluster's
nodes through the API server and labels each target as ``kubernetes_sd_configs`` (role ``node``)
would. The configuration is ``deployments/prometheus/prometheus-http-sd.yml`` with this machine's
values put in (:func:`scrape_config`; tests/flows/test_analysis.py proves it equal to the shipped
file for the shipped values): ``__address__`` becomes the API server, ``__metrics_path__``
``/api/v1/nodes/NODE/proxy/metrics``.

Both the discovery and the scrapes use the credentials of one kubeconfig (:class:`ClusterAccess`,
read by the ``kubernetes`` client, so a token, a token file or a client certificate all work):
the ServiceAccount of ``deployments/kubernetes/prometheus-rbac.yaml`` for least privilege (what
the demo and the tests use), or the user's own.

Prometheus runs as its own process in a session of its own (a terminal's Ctrl-C, sent to the whole
foreground process group, must not kill it from under a running rollout), with a temporary data
directory; it is stopped, and its directory removed, when the context ends, and by a watchdog
(``local_processes.start_helper``) when our process is gone however it ended.
"""

from __future__ import annotations

import json
import shutil
import socket
import subprocess
import tempfile
import threading
import time
import urllib.parse
import urllib.request
from datetime import timedelta
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, Callable
from urllib.parse import urlsplit

import yaml

from rollout.errors import FlagError, GatewayError
from rollout.policy.analysis import prometheus_duration
from rollout_cli.local.processes import free_port, remove_when_gone, start_helper

NODE_NAME_LABEL = "__meta_kubernetes_node_name"
JOB = "kubelet"
# deployments/prometheus/prometheus-http-sd.yml's values (tests/flows/test_analysis.py holds them equal)
SHIPPED_SCRAPE_INTERVAL = timedelta(seconds=15)
SHIPPED_SCRAPE_TIMEOUT = timedelta(seconds=10)
SHIPPED_SD_HOST, SHIPPED_SD_PORT = "127.0.0.1", 9101
SD_PATH = "/targets"
SCRAPER = ("kubelet-rollout-prometheus", "kubelet-rollout")  # ServiceAccount, namespace
# deployments/kubernetes/prometheus-rbac.yaml as data (the demo runs from an installed package;
# tests/flows/test_analysis.py keeps the two equal)
SCRAPER_RBAC: list[dict[str, Any]] = [
    {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "kubelet-rollout"}},
    {"apiVersion": "v1", "kind": "ServiceAccount",
     "metadata": {"name": "kubelet-rollout-prometheus", "namespace": "kubelet-rollout"}},
    {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
     "metadata": {"name": "kubelet-rollout-prometheus"},
     "rules": [{"apiGroups": [""], "resources": ["nodes"], "verbs": ["list", "watch"]},
               {"apiGroups": [""], "resources": ["nodes/proxy"], "verbs": ["get"]}]},
    {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
     "metadata": {"name": "kubelet-rollout-prometheus"},
     "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "kubelet-rollout-prometheus"},
     "subjects": [{"kind": "ServiceAccount", "name": "kubelet-rollout-prometheus", "namespace": "kubelet-rollout"}]},
]
READY_TIMEOUT_S = 60.0
STOP_TIMEOUT_S = 10.0


class LocalPrometheusError(RuntimeError):
    """Prometheus could not be started here (not installed, its port taken, it exited)."""


def grant_scraper(admin_kubeconfig: Path) -> None:
    """Create the scraping ServiceAccount and its RBAC (what ``kubectl apply -f`` of the manifest does)."""
    from kubernetes import client, config, utils
    from kubernetes.utils import FailToCreateError

    api = config.new_client_from_config(str(admin_kubeconfig))  # type: ignore[no-untyped-call]
    for doc in SCRAPER_RBAC:
        try:
            utils.create_from_dict(api, doc)  # type: ignore[no-untyped-call]
        except FailToCreateError as exc:  # already there: the same objects
            if not all(getattr(e, "status", 0) == 409 for e in exc.api_exceptions):
                raise
    client.CoreV1Api(api).api_client.close()


# ----------------------------------------------------------------------------- the configuration


def relabel_configs(api_server: str = "API_SERVER", path_prefix: str = "") -> list[dict[str, Any]]:
    """The relabelling of ``deployments/prometheus/*.yml``: scrape each node through the node proxy
    of ``api_server`` (``host:port``; an API server behind a path, as some proxies serve it, gives
    that path as ``path_prefix``)."""
    return [
        {"source_labels": [NODE_NAME_LABEL], "target_label": "node"},
        {"source_labels": [NODE_NAME_LABEL], "target_label": "instance"},
        {"target_label": "__address__", "replacement": api_server},
        {"source_labels": [NODE_NAME_LABEL], "regex": "(.+)", "target_label": "__metrics_path__",
         "replacement": f"{path_prefix}/api/v1/nodes/${{1}}/proxy/metrics"},
    ]


def scrape_config(*, server: str, credentials: dict[str, Any], sd_url: str,
                  interval: timedelta = SHIPPED_SCRAPE_INTERVAL) -> dict[str, Any]:
    """``deployments/prometheus/prometheus-http-sd.yml`` for one cluster: its API server (a URL),
    the scrapes' ``tls_config``/``authorization`` (``credentials``), the discovery endpoint, and how
    often to scrape (the targets are asked for again every two scrapes)."""
    parts = urlsplit(server)
    return {
        "global": {"scrape_interval": prometheus_duration(interval),
                   "scrape_timeout": prometheus_duration(min(interval, SHIPPED_SCRAPE_TIMEOUT))},
        "scrape_configs": [{
            "job_name": JOB,
            "scheme": parts.scheme or "https",
            **credentials,
            "http_sd_configs": [{"url": sd_url, "refresh_interval": prometheus_duration(interval * 2)}],
            "relabel_configs": relabel_configs(parts.netloc or server, parts.path.rstrip("/")),
        }],
    }


# ------------------------------------------------------------------------ the cluster's credentials


class ClusterAccess:
    """A kubeconfig's API server and credentials, whatever kind it holds, as the ``kubernetes``
    client reads them: what the discovery lists the nodes with and Prometheus scrapes with."""

    def __init__(self, kubeconfig: str | Path | None = None, context: str | None = None) -> None:
        from kubernetes import client, config
        from kubernetes.config.config_exception import ConfigException

        self.configuration = client.Configuration()
        try:
            config.load_kube_config(  # type: ignore[no-untyped-call]
                config_file=str(kubeconfig) if kubeconfig else None, context=context or None,
                client_configuration=self.configuration, persist_config=False)
        except ConfigException as exc:
            raise FlagError(f"cannot use this kubeconfig: {exc}", source="--kubeconfig",
                            advice="give --kubeconfig (or $KUBECONFIG) a kubeconfig of the cluster") from None
        self.server = str(self.configuration.host)
        self._api = client.ApiClient(self.configuration)

    def list_nodes(self) -> list[dict[str, Any]]:
        """GET /api/v1/nodes (the raw items)."""
        from kubernetes import client

        # the raw answer (not preloaded into models): the targets need only names and labels
        response: Any = client.CoreV1Api(self._api).list_node(_preload_content=False, _request_timeout=(5, 10))
        return list(json.loads(response.data).get("items") or [])

    def check(self) -> int:
        """How many nodes these credentials list; ``GatewayError`` (exit 3) naming why they cannot."""
        from kubernetes.client.exceptions import ApiException

        try:
            return len(self.list_nodes())
        except ApiException as exc:
            raise GatewayError(
                f"the kubeconfig's credentials cannot list the nodes of {self.server} ({exc.status} {exc.reason})",
                advice="give a kubeconfig that may list nodes and get nodes/proxy: the ServiceAccount of "
                       "deployments/kubernetes/prometheus-rbac.yaml (on kubesim: `kubesim token "
                       "kubelet-rollout-prometheus -n kubelet-rollout`), or your own") from None
        except Exception as exc:  # noqa: BLE001 - urllib3's and the socket's: the server is out of reach
            raise GatewayError(f"the API server at {self.server} is out of reach: {type(exc).__name__}: {exc}",
                               advice="check that the cluster is up and that --kubeconfig/--context point at it") from None

    def scrape_credentials(self, directory: Path) -> dict[str, Any]:
        """The ``tls_config`` and ``authorization`` of a scrape with these credentials, their
        files written into ``directory`` (mode 0600)."""
        cfg = self.configuration

        def copy(source: str, name: str) -> str:
            target = directory / name
            target.write_bytes(Path(source).read_bytes())
            target.chmod(0o600)
            return str(target)

        tls: dict[str, Any] = {}
        if cfg.ssl_ca_cert:
            tls["ca_file"] = copy(cfg.ssl_ca_cert, "ca.crt")
        if cfg.cert_file and cfg.key_file:
            tls["cert_file"], tls["key_file"] = copy(cfg.cert_file, "client.crt"), copy(cfg.key_file, "client.key")
        if not cfg.verify_ssl:
            tls["insecure_skip_verify"] = True
        if cfg.tls_server_name:
            tls["server_name"] = cfg.tls_server_name
        out: dict[str, Any] = {"tls_config": tls} if tls else {}
        token = str(cfg.api_key.get("BearerToken") or cfg.api_key.get("authorization") or "")
        if token:
            token_file = directory / "token"
            token_file.write_text(token.removeprefix("Bearer ").strip())
            token_file.chmod(0o600)
            out["authorization"] = {"credentials_file": str(token_file)}
        return out

    def close(self) -> None:
        self._api.close()  # type: ignore[no-untyped-call]


# -------------------------------------------------------------------------------- the discovery


class NodeTargets:
    """``http_sd_configs`` for Prometheus: every node of the cluster, listed when asked
    (``GET /targets``), on ``host:port`` (port 0: a free one)."""

    def __init__(self, list_nodes: Callable[[], list[dict[str, Any]]], *, host: str = "127.0.0.1",
                 port: int = 0) -> None:
        self.list_nodes = list_nodes
        server = ThreadingHTTPServer
        if ":" in host:  # an IPv6 address

            class server(ThreadingHTTPServer):  # type: ignore[no-redef]
                address_family = socket.AF_INET6

        self.server = server((host, port), self._handler())
        self.host, self.port = host, int(self.server.server_address[1])
        self.thread = threading.Thread(target=self.server.serve_forever, name="node-targets", daemon=True)

    @property
    def url(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{host}:{self.port}{SD_PATH}"

    def groups(self) -> list[dict[str, Any]]:
        """One target group per node, labelled as kubernetes_sd_configs' role node labels it."""
        out = []
        for node in self.list_nodes():
            meta = node.get("metadata") or {}
            labels = {NODE_NAME_LABEL: meta.get("name", "")}
            for key, value in (meta.get("labels") or {}).items():
                clean = "".join(c if c.isalnum() else "_" for c in key)
                labels[f"__meta_kubernetes_node_label_{clean}"] = value
            out.append({"targets": [meta.get("name", "")], "labels": labels})
        return out

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        targets = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:  # noqa: N802 - http.server's name
                if urlsplit(self.path).path != SD_PATH:
                    status, body = 404, f"not found: the targets are at {SD_PATH}\n".encode()
                else:
                    try:
                        status, body = 200, json.dumps(targets.groups()).encode()
                    except Exception as exc:  # noqa: BLE001 - Prometheus keeps its last targets on an error
                        status, body = 503, str(exc).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json" if status == 200 else "text/plain")
                self.end_headers()
                try:
                    self.wfile.write(body)
                except OSError:
                    pass  # Prometheus gave up on this refresh (or is stopping): it asks again

            def log_message(self, format: str, *args: Any) -> None:
                return None

        return Handler

    def start(self) -> NodeTargets:
        self.thread.start()
        return self

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()


# ------------------------------------------------------------------------------- the Prometheus


class LocalPrometheus:
    """``with LocalPrometheus(kubeconfig) as prom: prom.url`` - Prometheus scraping every node.

    ``kubeconfig`` (and ``context``): whose credentials list and scrape the nodes (the scraping
    ServiceAccount ``kubelet-rollout-prometheus``, or any that may list nodes and get
    nodes/proxy). ``port`` 0: a free one.
    """

    def __init__(self, kubeconfig: str | Path | None, *, context: str | None = None, scrape_interval_s: float = 1.0,
                 port: int = 0, binary: str = "prometheus") -> None:
        self.kubeconfig = kubeconfig
        self.context = context
        self.interval = timedelta(seconds=scrape_interval_s)
        self.binary = shutil.which(binary) or binary
        self.dir = Path(tempfile.mkdtemp(prefix="kubelet-rollout-prometheus-"))
        self.port = port
        self.process: subprocess.Popen[bytes] | None = None
        self.targets: NodeTargets | None = None
        self.access: ClusterAccess | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> LocalPrometheus:
        try:
            self.access = ClusterAccess(self.kubeconfig, self.context)
            credentials = self.access.scrape_credentials(self.dir)
            self.targets = NodeTargets(self.access.list_nodes).start()
            config = scrape_config(server=self.access.server, credentials=credentials, sd_url=self.targets.url,
                                   interval=self.interval)
            (self.dir / "prometheus.yml").write_text(yaml.safe_dump(config, sort_keys=False))
            remove_when_gone(self.dir)
            self.launch()
        except BaseException:
            self.stop()
            raise
        return self

    def launch(self, port: int | None = None) -> None:
        """Start the process (again, after :meth:`kill`: same data, same port)."""
        if shutil.which(self.binary) is None:
            raise LocalPrometheusError(f"{self.binary} is not installed (Debian's: `make system-deps`, or "
                                       "`apt-get install prometheus`)")
        self.port = port or self.port or free_port()
        log = open(self.dir / "prometheus.log", "ab")  # noqa: SIM115 - the child keeps it
        self.process = start_helper(
            [self.binary, f"--config.file={self.dir / 'prometheus.yml'}", f"--storage.tsdb.path={self.dir / 'data'}",
             f"--web.listen-address=127.0.0.1:{self.port}", "--storage.tsdb.retention.time=2h", "--log.level=warn"],
            stdin=subprocess.DEVNULL, stdout=log, stderr=log)
        log.close()
        deadline = time.monotonic() + READY_TIMEOUT_S
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise LocalPrometheusError(f"prometheus exited at start ({self.process.returncode}): "
                                           f"{self.log_tail()}")
            try:
                with urllib.request.urlopen(f"{self.url}/-/ready", timeout=2) as response:
                    if response.status == 200:
                        return
            except OSError:
                time.sleep(0.2)
        raise LocalPrometheusError(f"prometheus not ready within {READY_TIMEOUT_S:g}s: {self.log_tail()}")

    def log_tail(self) -> str:
        try:
            return (self.dir / "prometheus.log").read_text(errors="replace")[-2000:].strip()
        except OSError:
            return ""

    def kill(self) -> None:
        """``kill -9`` the Prometheus process (the tests' outage)."""
        if self.process is not None and self.process.poll() is None:
            self.process.kill()
            self.process.wait(10)

    def query(self, promql: str) -> list[dict[str, Any]]:
        url = f"{self.url}/api/v1/query?" + urllib.parse.urlencode({"query": promql})
        with urllib.request.urlopen(url, timeout=10) as response:
            return list(json.loads(response.read())["data"]["result"])

    def target_health(self) -> dict[str, tuple[str, str]]:
        """Each scraped node's target: its health (up, down, unknown) and its last error."""
        with urllib.request.urlopen(f"{self.url}/api/v1/targets?state=active", timeout=10) as response:
            active = json.loads(response.read())["data"]["activeTargets"]
        return {t["labels"]["node"]: (t.get("health", "unknown"), t.get("lastError", ""))
                for t in active if t.get("labels", {}).get("job") == JOB and t["labels"].get("node")}

    def wait_scraped(self, nodes: int, timeout_s: float = READY_TIMEOUT_S,
                     stop: threading.Event | None = None) -> dict[str, tuple[str, str]]:
        """Until ``nodes`` targets were scraped once (up or down), ``timeout_s`` passed or
        ``stop`` is set; the targets' health then."""
        deadline = time.monotonic() + timeout_s
        health: dict[str, tuple[str, str]] = {}
        while time.monotonic() < deadline and not (stop is not None and stop.is_set()):
            if self.process is not None and self.process.poll() is not None:
                raise LocalPrometheusError(f"prometheus exited ({self.process.returncode}): {self.log_tail()}")
            try:
                health = self.target_health()
            except OSError:
                health = {}
            if len([h for h, _ in health.values() if h != "unknown"]) >= nodes:
                break
            time.sleep(0.25)
        return health

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(STOP_TIMEOUT_S)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(STOP_TIMEOUT_S)
        if self.targets is not None:
            self.targets.stop()
            self.targets = None
        if self.access is not None:
            self.access.close()
            self.access = None
        shutil.rmtree(self.dir, ignore_errors=True)

    def __enter__(self) -> LocalPrometheus:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


if __name__ == "__main__":  # a library of the command, not a command: say which one to run
    import sys

    sys.stderr.write("this module is the library behind `rollout prometheus` (a Prometheus on loopback) and "
                     "`rollout prometheus sd` (its node discovery): run those; `rollout prometheus --help` tells more\n")
    raise SystemExit(2)
