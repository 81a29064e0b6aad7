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

Before a run writes anything, :func:`probe` asks the Prometheus whether it can measure the policy's
checks at all: it answers as a Prometheus, it scrapes kubelets (targets with a ``node`` label), one
of them is up, and every gating check's shortest window holds two of its scrapes (the scrape
interval is the Prometheus' own, from ``/api/v1/targets``). :func:`ready_metrics_source` refuses
a run on any of these, naming the flag that fixes it.
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
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

from rollout.analysis import Sample
from rollout.errors import FlagError, MetricsError, MetricsQueryError, MetricsUnreachableError
from rollout.policy import PrometheusEndpoint, RolloutPolicy, format_duration, parse_duration
from rollout.policy.analysis import MIN_SCRAPES_PER_WINDOW

ENV_URL = "KUBELET_ROLLOUT_PROMETHEUS_URL"
ENV_TOKEN_FILE = "KUBELET_ROLLOUT_PROMETHEUS_TOKEN_FILE"
ENV_CA_FILE = "KUBELET_ROLLOUT_PROMETHEUS_CA_FILE"
REQUEST_TIMEOUT_S = 10.0
UP_LATELY = "5m"  # a kubelet target up within this long is scraped, if its last scrape failed
PROBE_TIMEOUT_S = 5.0  # a Prometheus that takes longer to say it exists will not measure in time either
FLAG = "--prometheus"
# how a refused Prometheus is fixed: the flag (or its variable), and the command that starts one
NAME_ONE = (f"name a Prometheus that scrapes the kubelets: {FLAG} URL or export {ENV_URL}=URL (`rollout prometheus "
            "--kubeconfig KUBECONFIG` starts one on this machine and prints its URL)")
NOTHING_STARTED = f"{NAME_ONE}; nothing was started"


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
        raise FlagError(f"policy {policy.name or '(inline)'} has analysis checks but no Prometheus to ask: pass "
                        f"{FLAG} URL, set {ENV_URL} or analysis.prometheus.address, or choose a policy without "
                        "analysis checks (fast, or your own)", source=FLAG, advice=NOTHING_STARTED)
    try:
        return PrometheusClient(settings)
    except (ssl.SSLError, OSError) as exc:  # a CA file that is missing, unreadable or holds no certificate
        raise FlagError(f"the Prometheus CA file {settings.ca_file} cannot be used: "
                        f"{getattr(exc, 'reason', None) or exc.strerror or exc}: give a PEM file of CA certificates "
                        f"(--prometheus-ca-file, {ENV_CA_FILE} or analysis.prometheus.caFile)",
                        source="--prometheus-ca-file", advice=NOTHING_STARTED) from None


def ready_metrics_source(policy: RolloutPolicy, *, address: str | None = None, token_file: str | None = None,
                         ca_file: str | None = None, probed: bool = True) -> PrometheusClient | None:
    """:func:`metrics_source`, refused (``FlagError``, exit 2) when :func:`probe` finds that it
    cannot measure the policy's checks (``probed=False``: not asked, e.g. from another network)."""
    source = metrics_source(policy, address=address, token_file=token_file, ca_file=ca_file)
    if source is None or not probed:
        return source
    problems = probe(source, policy)
    if problems:
        raise FlagError(f"the Prometheus at {source.address} cannot measure the analysis checks of policy "
                        f"{policy.name or '(inline)'}", source=FLAG, problems=problems, advice=NOTHING_STARTED)
    return source


def refusal(policy: RolloutPolicy, *, address: str | None = None, token_file: str | None = None,
            ca_file: str | None = None, probed: bool = True) -> FlagError | None:
    """Why ``rollout start`` would refuse to run the policy's analysis with this Prometheus (None:
    it would not): what ``validate`` and ``plan`` say of it, as start would."""
    try:
        ready_metrics_source(policy, address=address, token_file=token_file, ca_file=ca_file, probed=probed)
    except FlagError as exc:
        return exc
    return None


def _kubelet_up_lately(source: PrometheusClient) -> bool:
    """Whether a kubelet target answered a scrape within :data:`UP_LATELY`: the targets' health is
    their last scrape's, and a loaded machine times out every scrape of a fast rehearsal at once
    (the demo was refused so). Never up lately is a Prometheus that cannot reach them."""
    try:
        data = source.api("/api/v1/query", {"query": f'max_over_time(up{{node!=""}}[{UP_LATELY}]) == 1'},
                          timeout_s=PROBE_TIMEOUT_S)
    except MetricsError:  # out of reach too: refused with the targets' own error
        return False
    return bool(data.get("result"))


def probe(source: PrometheusClient, policy: RolloutPolicy) -> list[str]:
    """What keeps ``source`` from measuring the policy's checks (nothing: ``[]``), asked before
    anything is written: out of reach, not a Prometheus, no kubelet among its targets (none with a
    ``node`` label), none of them up, or a gating check whose shortest window holds fewer than
    :data:`MIN_SCRAPES_PER_WINDOW` of its scrapes (they would have no data, and ``noData`` would
    decide without a measurement)."""
    if not policy.analysis.enabled:
        return []
    try:
        source._headers()  # a token file that cannot be read is ours to fix, not the Prometheus'
    except MetricsQueryError as exc:
        return [str(exc)]
    try:
        source.api("/api/v1/query", {"query": "vector(1)"}, timeout_s=PROBE_TIMEOUT_S)
        active = source.api("/api/v1/targets", {"state": "active"}, timeout_s=PROBE_TIMEOUT_S).get("activeTargets")
    except MetricsUnreachableError as exc:
        return [str(exc)]
    except MetricsQueryError as exc:
        return [f"{source.address} does not answer as a Prometheus does: {exc}"]
    kubelets = [t for t in active or [] if isinstance(t, dict) and (t.get("labels") or {}).get("node")]
    if not kubelets:
        return [f"the Prometheus at {source.address} scrapes no kubelet (no target with a `node` label, which the "
                "checks select by): scrape them as deployments/prometheus/ does"]
    down = [t for t in kubelets if t.get("health") == "down"]
    if len(down) == len(kubelets) and not _kubelet_up_lately(source):
        first = down[0]
        return [f"none of the {len(kubelets)} kubelet targets of the Prometheus at {source.address} is up, nor was "
                f"in the last {UP_LATELY} ({first['labels']['node']}: {first.get('lastError') or 'down'})"]
    intervals = [i for i in map(_scrape_interval, kubelets) if i is not None]
    if not intervals:
        return []
    scrape = max(intervals)
    rehearsal = f", x{policy.time_scale:g} rehearsal" if policy.time_scale != 1 else ""
    faster = (f" (`rollout prometheus --time-scale {policy.time_scale:g}` scrapes "
              f"{policy.time_scale:g} times faster)" if policy.time_scale != 1 else "")
    return [f"check {c.name} measures windows from {format_duration(c.interval)} (its interval{rehearsal}), shorter "
            f"than {MIN_SCRAPES_PER_WINDOW} scrapes of the kubelets every {format_duration(scrape)} "
            f"({format_duration(scrape * MIN_SCRAPES_PER_WINDOW)}): its queries would return no data (noData: "
            f"{c.no_data.value}); scrape at least every {format_duration(c.interval / MIN_SCRAPES_PER_WINDOW)}"
            f"{faster}, or give the check a longer interval" for c in policy.analysis.too_short_for(scrape)]


def _scrape_interval(target: dict[str, Any]) -> timedelta | None:
    """How often Prometheus scrapes the target, as it says (``scrapeInterval``, or the label it
    was discovered with)."""
    said = target.get("scrapeInterval") or (target.get("discoveredLabels") or {}).get("__scrape_interval__")
    try:
        return parse_duration(said) if said else None
    except ValueError:
        return None


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

    def _get(self, path: str, params: Mapping[str, str], *, timeout_s: float) -> bytes:
        """The body of a GET; ``MetricsUnreachableError`` when out of reach (no answer, a 5xx, a
        429); any other refusal as urllib's ``HTTPError``."""
        request = urllib.request.Request(f"{self.address}{path}?{urllib.parse.urlencode(params)}",
                                         headers=self._headers())
        try:
            with urllib.request.urlopen(request, timeout=timeout_s, context=self._context) as response:
                return bytes(response.read())
        except urllib.error.HTTPError as exc:
            if exc.code >= 500 or exc.code == 429:
                raise MetricsUnreachableError(f"Prometheus at {self.address} answered {exc.code}") from exc
            raise
        except (urllib.error.URLError, OSError, ValueError) as exc:
            reason = getattr(exc, "reason", exc)
            raise MetricsUnreachableError(f"Prometheus at {self.address} is out of reach: {reason}") from exc

    def instant(self, promql: str, *, at: datetime) -> list[Sample]:
        try:
            raw = self._get("/api/v1/query", {"query": promql, "time": f"{at.timestamp():.3f}"},
                            timeout_s=self.timeout_s)
        except urllib.error.HTTPError as exc:
            raise MetricsQueryError(f"Prometheus refused the query ({exc.code}): {_error_of(exc)}") from exc
        try:
            body = json.loads(raw)
        except ValueError as exc:
            raise MetricsUnreachableError(f"Prometheus at {self.address} is out of reach: {exc}") from exc
        return _samples(body)

    def api(self, path: str, params: Mapping[str, str], *, timeout_s: float | None = None) -> dict[str, Any]:
        """The ``data`` of a successful answer of Prometheus' HTTP API; ``MetricsUnreachableError``
        when out of reach, ``MetricsQueryError`` for any answer not in the API's form."""
        try:
            raw = self._get(path, params, timeout_s=self.timeout_s if timeout_s is None else timeout_s)
        except urllib.error.HTTPError as exc:
            refused = (" (our credentials: --prometheus-token-file, --prometheus-ca-file)"
                       if exc.code in (401, 403) else "")
            raise MetricsQueryError(f"GET {path} answered {exc.code} {exc.reason}{refused}") from exc
        try:
            body = json.loads(raw)
        except ValueError:
            raise MetricsQueryError(f"GET {path} answered with no JSON: {raw[:80]!r}") from None
        if not isinstance(body, dict) or body.get("status") != "success" or not isinstance(body.get("data"), dict):
            raise MetricsQueryError(f"GET {path} answered {str(body)[:120]}")
        return dict(body["data"])


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
