"""Building blocks of the flow scenarios: kubesim clusters with "general" hosts (which have the
/system.slice cgroup) and "legacy" hosts (which do not), short policies, configs derived from the
nodes' own running config, and readers of the cluster state the assertions look at."""

from __future__ import annotations

import copy
from collections import Counter
from datetime import datetime, timezone
import contextlib
import threading
import time
from pathlib import Path
from typing import Any, Callable, Iterator

import yaml

from rollout_cli.demo import DEMO_CLUSTER

CLUSTER = DEMO_CLUSTER  # the demo's fleet: general hosts have /system.slice, legacy hosts do not

TIME_SCALE = 40.0
# the 10-minute lastKnownGood trial becomes 1.5 s real time
TIMINGS = {"trial_period": "60s"}


def policy(**overrides: Any) -> str:
    """A short policy for kubesim's fast clock (YAML text, passed inline to the flow)."""
    body: dict[str, Any] = {
        "name": "test",
        "steps": [1, "50%", "100%"],
        "maxUnavailable": 2,
        # longer than the grace + notReadyFor above, so a crash loop shows before a batch is done
        "done": {"until": "active", "requireReady": True, "soak": "3s"},
        "progressDeadline": "60s",
        "syncErrorGrace": "5s",
        "leaseStaleAfter": "30s",
        # kubesim runs 40x: its 40 s node-monitor grace is 1 s here, so judge NotReady as fast
        "notReadyFor": "1s",
        "failureBudget": 0,
        "failureAction": "revert-batch",
        "revertTarget": "previous",
        "recheckEvery": "1s",
    }
    for key, value in overrides.items():
        if isinstance(value, dict) and isinstance(body.get(key), dict):
            body[key] = {**body[key], **value}
        else:
            body[key] = value
    return yaml.safe_dump(body, sort_keys=False)


@contextlib.contextmanager
def cluster(tmp_path: Path, *, general: int = 3, legacy: int = 0, text: str = CLUSTER,
            **timings: Any) -> Iterator[Any]:
    """A kubesim cluster of ``text`` (a cluster file with ``{general}``/``{legacy}`` counts)."""
    from kubesim.cluster import Cluster

    path = tmp_path / "cluster.yaml"
    path.write_text(text.format(general=general, legacy=legacy))
    with Cluster(cluster_file=path, state_dir=tmp_path / "kubesim", time_scale=TIME_SCALE,
                 **{**TIMINGS, **timings}) as c:
        wait_for_dkc(c)
        yield c


def scraper_kubeconfig(c: Any) -> Path:
    """A kubeconfig of the ServiceAccount of deployments/kubernetes/prometheus-rbac.yaml (the
    manifest applied with kubectl): what Prometheus scrapes the kubelets as."""
    import subprocess

    manifest = Path(__file__).resolve().parents[2] / "deployments/kubernetes/prometheus-rbac.yaml"
    applied = subprocess.run(["kubectl", "--kubeconfig", str(c.kubeconfig), "apply", "-f", str(manifest)],
                             capture_output=True, text=True, timeout=60)
    assert applied.returncode == 0, applied.stderr
    return Path(c.service_account_kubeconfig("kubelet-rollout-prometheus", "kubelet-rollout"))


@contextlib.contextmanager
def prometheus(c: Any, *, scrape_interval_s: float = 1.0) -> Iterator[Any]:
    """A real Prometheus (Debian's) scraping every node of ``c`` through the node proxy, as the
    ServiceAccount of deployments/kubernetes/prometheus-rbac.yaml; waits until every node is up."""
    from rollout_cli.local.prometheus import LocalPrometheus

    with LocalPrometheus(scraper_kubeconfig(c), scrape_interval_s=scrape_interval_s) as prom:
        expected = len(nodes(gateway(c)))
        deadline = time.monotonic() + 180  # 60 s was short for a loaded CI machine (ci-30)
        while len(prom.query('up{job="kubelet"} == 1')) < expected:
            assert time.monotonic() < deadline, "Prometheus did not scrape every node within 180 s"
            time.sleep(0.3)
        yield prom


def wait_until_scraping(c: Any, prom: Any, timeout: float = 60.0) -> None:
    """Until Prometheus' own targets say every node of ``c`` is up (its series may be older: those
    of a Prometheus killed and started again, or of scrapes that a loaded machine timed out)."""
    import json
    import urllib.request

    expected = set(nodes(gateway(c)))
    deadline = time.monotonic() + timeout
    while True:
        with urllib.request.urlopen(f"{prom.url}/api/v1/targets?state=active", timeout=5) as answer:
            targets = json.load(answer)["data"]["activeTargets"]
        up = {t["labels"].get("node") for t in targets if t.get("health") == "up"}
        if up >= expected:
            return
        assert time.monotonic() < deadline, f"Prometheus did not scrape {sorted(expected - up)} within {timeout:.0f} s"
        time.sleep(0.5)


def run_measured(c: Any, prom: Any, **run_args: Any) -> Any:
    """``run`` with ``prom`` measuring. (It ran up to five times: a loaded machine timed out every
    short scrape at once just as `start` asked, and `start` refused, "cannot measure"; the probe
    now asks whether a kubelet was up in the last minutes, not at the last scrape.)"""
    return run(prometheus=prom.url, kubeconfig=str(c.kubeconfig), **run_args)


def wait_for_dkc(c: Any, timeout: float = 30.0) -> None:
    """Ready is not enough: a kubelet reports status.config a status period after it starts."""
    gw = gateway(c)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if all(n.has_config_status for n in nodes(gw).values()):
            return
        time.sleep(0.1)
    raise AssertionError("kubesim nodes never reported status.config")


def gateway(c: Any) -> Any:
    from rollout.gateway import open_gateway

    return open_gateway(str(c.kubeconfig))


def nodes(gw: Any) -> dict[str, Any]:
    found, _ = gw.list_nodes()
    return {n.name: n for n in found}


def workers(gw: Any) -> list[str]:
    return sorted(n for n, o in nodes(gw).items() if "node-role.kubernetes.io/control-plane" not in o.labels)


def base_config(gw: Any) -> dict[str, Any]:
    """A worker's running config as a KubeletConfiguration (the `rollout export` step)."""
    from rollout.kubeletconfig import export_from_configz

    return export_from_configz(gw.configz(workers(gw)[0]))


def config_text(gw: Any, **changes: Any) -> str:
    doc = copy.deepcopy(base_config(gw))
    doc.update(changes)
    return yaml.safe_dump(doc, sort_keys=False)


CRASHLOOP_ON_LEGACY = {
    "systemReserved": {"cpu": "500m", "memory": "512Mi"},
    "systemReservedCgroup": "/system.slice",
    "enforceNodeAllocatable": ["pods", "system-reserved"],
}


def run(**params: Any) -> Any:
    """Run the rollout flow in-process; returns a RunOutcome."""
    from flows.outcome import RunOutcome
    from flows.rollout_flow import kubelet_config_rollout

    return RunOutcome.from_state(kubelet_config_rollout(**params, return_state=True))


def run_rollback(**params: Any) -> Any:
    from flows.outcome import RunOutcome
    from flows.rollback_flow import kubelet_config_rollback

    return RunOutcome.from_state(kubelet_config_rollback(**params, return_state=True))


def journal(gw: Any, name: str) -> Any:
    from rollout.usecases.status import load_journal

    loaded = load_journal(gw, name)
    assert loaded is not None, f"no journal for {name}"
    return loaded[0]


def orchestrator_node_patches(c: Any) -> Iterator[tuple[str, datetime]]:
    """(node, when) of each PATCH of a node's spec by the orchestrator (not a kubelet, not kubesim's
    own components), in the order of the cluster's audit log."""
    for event in c.audit_log.events(verb="patch"):
        ref = event.get("objectRef") or {}
        if ref.get("resource") != "nodes" or ref.get("subresource"):
            continue
        if not str((event.get("user") or {}).get("username", "")).startswith("system:"):
            yield ref.get("name", ""), datetime.fromisoformat(event["requestReceivedTimestamp"].replace("Z", "+00:00"))


def assignment_patches(c: Any) -> dict[str, int]:
    """How many times each node's spec was PATCHed by the orchestrator (admin), from the audit log."""
    return dict(Counter(node for node, _ in orchestrator_node_patches(c)))


def first_assignments(c: Any) -> dict[str, datetime]:
    """Each node's first PATCH by the orchestrator, from the cluster's audit log."""
    first: dict[str, datetime] = {}
    for node, at in orchestrator_node_patches(c):
        first.setdefault(node, at)
    return first


def most_nodes_changing_at_once(rollouts: list[tuple[Any, str]]) -> tuple[int, list[str]]:
    """The most nodes at once between their assignment (the audit log) and their batch's end (the
    journal) across ``(cluster, rollout)``s, and which they were."""
    spans: list[tuple[datetime, datetime, str]] = []
    for c, rollout in rollouts:
        j = journal(gateway(c), rollout)
        assigned = first_assignments(c)
        for batch, state in zip(j.plan.batches, j.batches):
            assert state.finished_at is not None, (rollout, batch.index, state.status)
            spans += [(assigned[node], state.finished_at, f"{rollout}/{node}") for node in batch.nodes]
    worst: list[str] = []
    for moment, _, _ in spans:
        changing = [who for start, end, who in spans if start <= moment < end]
        worst = max(worst, changing, key=len)
    return len(worst), worst


class Background:
    """Run ``fn`` in a thread until it returns True or the test ends (re-raising its errors)."""

    def __init__(self, fn: Callable[[], bool], *, every: float = 0.3, timeout: float = 120.0) -> None:
        self.fn, self.every, self.timeout = fn, every, timeout
        self.error: BaseException | None = None
        self.done = threading.Event()
        self.thread = threading.Thread(target=self._loop, daemon=True)

    def _loop(self) -> None:
        deadline = time.monotonic() + self.timeout
        try:
            while time.monotonic() < deadline and not self.done.is_set():
                if self.fn():
                    return
                time.sleep(self.every)
        except BaseException as exc:  # noqa: BLE001 - surfaced by join()
            self.error = exc
        finally:
            self.done.set()

    def __enter__(self) -> "Background":
        self.thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.done.set()
        # its last call may still be under way on a loaded machine: wait for it rather than read
        # what it records half-written (this did not explain test_modern's short count of answers)
        self.thread.join(timeout=60)
        if self.thread.is_alive() and exc[0] is None:
            raise AssertionError(f"{self.fn} still running 60 s after its block ended")
        if self.error is not None and exc[0] is None:
            raise self.error


def artifacts(key_prefix: str) -> dict[str, Any]:
    """Latest artifact per key starting with ``key_prefix`` (type and data), from the Prefect API."""
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import ArtifactFilter, ArtifactFilterKey

    with get_client(sync_client=True) as client:
        found = client.read_artifacts(artifact_filter=ArtifactFilter(key=ArtifactFilterKey(like_=f"{key_prefix}%")))
    out: dict[str, Any] = {}
    for a in sorted(found, key=lambda a: a.created):
        out[a.key] = a
    return out


def prefect_events(resource_id: str, *, expect: set[str], timeout: float = 15.0,
                   since: datetime | None = None) -> list[Any]:
    """Prefect events on a resource (polls: events reach the API asynchronously), since a moment
    (the Prefect API is shared by a worker's tests: another test may have run a rollout of the
    same name)."""
    from prefect.client.orchestration import get_client

    deadline = time.monotonic() + timeout
    while True:
        with get_client(sync_client=True) as client:
            response = client.request("POST", "/events/filter", json={
                "filter": {"any_resource": {"id": [resource_id]}, "occurred": {"since": (since or datetime(2000, 1, 1, tzinfo=timezone.utc)).isoformat()}},
                "limit": 50})
        events = response.json().get("events", [])
        if expect <= {e["event"] for e in events} or time.monotonic() > deadline:
            return events
        time.sleep(0.5)


def node_events(c: Any, reason: str) -> dict[str, int]:
    """Kubernetes Events (namespace default) per node name with this reason."""
    import json

    gw = gateway(c)
    body = json.loads(gw.core.list_namespaced_event("default", _preload_content=False).data)
    counts: dict[str, int] = {}
    for item in body.get("items", []):
        if item.get("reason") == reason and (item.get("involvedObject") or {}).get("kind") == "Node":
            name = item["involvedObject"]["name"]
            counts[name] = counts.get(name, 0) + 1
    return counts


def configz_field(gw: Any, node: str, field: str) -> Any:
    """One field of a node's running config (configz)."""
    return gw.configz(node).get("kubeletconfig", {}).get(field)
