"""The analysis' adapter: the MetricsSource port over Prometheus' HTTP API (beside the gateway in
the core's layers), where it is (the flag, the environment, the policy) and whether it can
measure a policy's checks (``probe``), asked before a run writes anything."""

from rollout.prometheus.client import (
    ENV_CA_FILE,
    ENV_TOKEN_FILE,
    ENV_URL,
    FLAG,
    NAME_ONE,
    NOTHING_STARTED,
    PrometheusClient,
    PrometheusSettings,
    metrics_source,
    probe,
    ready_metrics_source,
    refusal,
    resolve_settings,
)

__all__ = ["ENV_CA_FILE", "ENV_TOKEN_FILE", "ENV_URL", "FLAG", "NAME_ONE", "NOTHING_STARTED", "PrometheusClient",
           "PrometheusSettings", "metrics_source", "probe", "ready_metrics_source", "refusal", "resolve_settings"]
