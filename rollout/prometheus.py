"""The ``MetricsSource`` port over Prometheus' HTTP API (``/api/v1/query``): the analysis adapter.

Beside the gateway and like it: it implements a port and knows nothing of its callers; unlike it,
it talks to Prometheus, not to the API server, with its own address and credentials. Where they
come from, the first that says: ``rollout start --prometheus URL`` (and
``--prometheus-token-file``/``--prometheus-ca-file``), the environment
(``KUBELET_ROLLOUT_PROMETHEUS_URL``, ``..._TOKEN_FILE``, ``..._CA_FILE``), the policy
(``analysis.prometheus``). Nothing is hard-coded.

Errors are two, so the run can tell them apart: out of reach (a refused or silent connection, a
5xx, a 429: ``MetricsUnreachableError``, ridden out like an API outage) and a query Prometheus
refused (``MetricsQueryError``). The standard library's HTTP client suffices (one GET per
measurement); a timeout bounds every request, so a silent Prometheus is noticed, not waited on.
"""

from __future__ import annotations

import json
import os
import ssl
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

from rollout.analysis import Sample
from rollout.errors import MetricsQueryError, MetricsUnreachableError, PolicyError
from rollout.policy import PrometheusEndpoint, RolloutPolicy

ENV_URL = "KUBELET_ROLLOUT_PROMETHEUS_URL"
ENV_TOKEN_FILE = "KUBELET_ROLLOUT_PROMETHEUS_TOKEN_FILE"
ENV_CA_FILE = "KUBELET_ROLLOUT_PROMETHEUS_CA_FILE"
REQUEST_TIMEOUT_S = 10.0


@dataclass(frozen=True)
class PrometheusSettings:
    """Where and as whom to query; empty ``address``: no Prometheus was given."""

    address: str = ""
    token_file: str = ""
    ca_file: str = ""


def resolve_settings(*, address: str = "", token_file: str = "", ca_file: str = "",
                     environment: Mapping[str, str] | None = None,
                     policy: PrometheusEndpoint | None = None) -> PrometheusSettings:
    """The flag, else the environment, else the policy, for each of the three."""
    env = os.environ if environment is None else environment
    pol = policy or PrometheusEndpoint()
    return PrometheusSettings(
        address=(address or env.get(ENV_URL, "") or pol.address).rstrip("/"),
        token_file=token_file or env.get(ENV_TOKEN_FILE, "") or pol.bearer_token_file,
        ca_file=ca_file or env.get(ENV_CA_FILE, "") or pol.ca_file,
    )


def metrics_source(policy: RolloutPolicy, *, address: str | None = None, token_file: str | None = None,
                   ca_file: str | None = None) -> PrometheusClient | None:
    """The Prometheus the policy's analysis asks (the flag, the environment, the policy); None
    without checks. Refused before anything is touched when there are checks and nothing says
    where to ask."""
    if not policy.analysis.enabled:
        return None
    settings = resolve_settings(address=address or "", token_file=token_file or "", ca_file=ca_file or "",
                                policy=policy.analysis.prometheus)
    if not settings.address:
        raise PolicyError(f"policy {policy.name or '(inline)'} has analysis checks but no Prometheus to ask: pass "
                          "--prometheus URL, set KUBELET_ROLLOUT_PROMETHEUS_URL or analysis.prometheus.address, "
                          "or choose a policy without analysis checks (fast, or your own)")
    return PrometheusClient(settings)


class PrometheusClient:
    """Instant queries against one Prometheus."""

    def __init__(self, settings: PrometheusSettings, *, timeout_s: float = REQUEST_TIMEOUT_S) -> None:
        if not settings.address:
            raise ValueError("no Prometheus address")
        self.settings = settings
        self.timeout_s = timeout_s
        self._context = ssl.create_default_context(cafile=settings.ca_file or None)

    @property
    def address(self) -> str:
        return self.settings.address

    def _headers(self) -> dict[str, str]:
        if not self.settings.token_file:
            return {}
        try:  # read at every query: a projected ServiceAccount token is rotated under us
            token = Path(self.settings.token_file).read_text(encoding="utf-8").strip()
        except OSError as exc:
            raise MetricsQueryError(f"cannot read the Prometheus token file {self.settings.token_file}: {exc}") from exc
        return {"Authorization": f"Bearer {token}"}

    def instant(self, promql: str, *, at: datetime) -> list[Sample]:
        query = urllib.parse.urlencode({"query": promql, "time": f"{at.timestamp():.3f}"})
        request = urllib.request.Request(f"{self.address}/api/v1/query?{query}", headers=self._headers())
        try:
            with urllib.request.urlopen(request, timeout=self.timeout_s, context=self._context) as response:
                body = json.loads(response.read())
        except urllib.error.HTTPError as exc:
            if exc.code >= 500 or exc.code == 429:
                raise MetricsUnreachableError(f"Prometheus at {self.address} answered {exc.code}") from exc
            raise MetricsQueryError(f"Prometheus refused the query ({exc.code}): {_error_of(exc)}") from exc
        except (urllib.error.URLError, OSError, ValueError) as exc:
            reason = getattr(exc, "reason", exc)
            raise MetricsUnreachableError(f"Prometheus at {self.address} is out of reach: {reason}") from exc
        return _samples(body)


def _error_of(exc: urllib.error.HTTPError) -> str:
    try:
        return str(json.loads(exc.read()).get("error", ""))[:300]
    except (ValueError, OSError):
        return exc.reason if isinstance(exc.reason, str) else ""


def _samples(body: Mapping[str, object]) -> list[Sample]:
    if body.get("status") != "success":
        raise MetricsQueryError(f"Prometheus: {body.get('error', body.get('status'))}")
    data = body.get("data")
    if not isinstance(data, dict):
        raise MetricsQueryError("Prometheus answered without data")
    kind, result = data.get("resultType"), data.get("result")
    if kind == "scalar" and isinstance(result, list):
        return [Sample({}, float(result[1]))]
    if kind != "vector" or not isinstance(result, list):
        raise MetricsQueryError(f"the query must give an instant vector or a scalar, not a {kind}")
    return [Sample(dict(item.get("metric") or {}), float(item["value"][1])) for item in result]
