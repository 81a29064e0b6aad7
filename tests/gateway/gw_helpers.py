"""Helpers shared by the gateway tests (imported by name: conftest modules are not importable reliably)."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone
from typing import Any

from kubernetes import client as k8s

from rollout.gateway import KubeGateway, TokenBucket, default_retrying
from rollout.journal import JournalDocument

T0 = datetime(2026, 11, 22, 10, 0, 0, tzinfo=timezone.utc)


def doc(head: dict[str, str], parts: dict[str, dict[str, str]] | None = None) -> JournalDocument:
    """A journal document with this head (and parts): what ``save_journal`` takes and ``load_journal`` gives."""
    return JournalDocument(head=head, parts=parts or {})


class FakeClock:
    """Wall clock for lock expiry; tests move it instead of sleeping."""

    def __init__(self, start: datetime = T0) -> None:
        self.now = start

    def __call__(self) -> datetime:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += timedelta(seconds=seconds)


class SleepRecorder:
    def __init__(self) -> None:
        self.calls: list[float] = []

    def __call__(self, seconds: float) -> None:
        self.calls.append(seconds)


def make_gateway(url: str, *, clock: Any = None, sleeps: SleepRecorder | None = None,
                 attempts: int = 6, **options: Any) -> KubeGateway:
    configuration = k8s.Configuration(host=url)
    sleeps = sleeps if sleeps is not None else SleepRecorder()
    options.setdefault("rate_limiter", TokenBucket(qps=0))
    return KubeGateway(
        k8s.ApiClient(configuration),
        retrying=default_retrying(attempts=attempts, sleep=sleeps),
        now=clock or FakeClock(),
        **options,
    )


_EMPTY_CONFIG: dict[str, Any] = {}


def node_obj(name: str, *, config: dict[str, Any] | None = _EMPTY_CONFIG, ready: str = "True",
             labels: dict[str, str] | None = None, source: dict[str, Any] | None = None
             ) -> dict[str, Any]:
    status: dict[str, Any] = {"conditions": [
        {"type": "MemoryPressure", "status": "False"},
        {"type": "Ready", "status": ready, "lastHeartbeatTime": "2026-11-22T09:59:50Z",
         "lastTransitionTime": "2026-11-22T09:00:00Z"}]}
    if config is not None:
        status["config"] = dict(config)
    spec: dict[str, Any] = {"podCIDR": "10.0.0.0/24"}
    if source is not None:
        spec["configSource"] = {"configMap": source}
    return {"metadata": {"name": name, "labels": labels or {"kubernetes.io/hostname": name}},
            "spec": spec, "status": status}


def lease_obj(name: str, renew: str = "2026-11-22T09:59:55.000000Z", duration: int = 40) -> dict[str, Any]:
    return {"metadata": {"name": name},
            "spec": {"holderIdentity": name, "leaseDurationSeconds": duration, "renewTime": renew}}


