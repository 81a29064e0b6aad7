"""Rollout policy: how fast, how carefully, and what to do when a node says no.

Why a package: the policy has four jobs that change for different reasons, so each has its own
module; this one re-exports every name, so ``from rollout.policy import X`` keeps working.

- ``model``: ``RolloutPolicy`` and its sections, cross-field rules, the constants of the model
- ``selectors``: label selectors (which nodes)
- ``windows``: maintenance windows (when), weekday ranges and cron openings
- ``durations`` / ``amounts``: ``1h30m``-style durations, node counts and percentages
- ``analysis``: the ``analysis:`` section (PromQL checks, their conditions and templates)
- ``loading``: the boundary (text or file -> policy, or one ``PolicyError``)

Nothing here reads a clock: ``in_window(now)`` / ``next_window(now)`` take ``now``.
"""

from rollout.policy.amounts import CountOrPercent, is_percent, percent_of, resolve_amount
from rollout.policy.analysis import (
    Analysis,
    AnalysisCheck,
    Baseline,
    CheckWhen,
    Compare,
    Condition,
    NoData,
    OnInconclusive,
    PrometheusEndpoint,
    StatisticalTest,
)
from rollout.policy.base import FieldPath
from rollout.policy.durations import Duration, describe_duration, format_duration, format_whole_seconds, parse_duration
from rollout.policy.loading import (
    DEFAULT_POLICY_DIR,
    available_policies,
    load_policy,
    load_policy_ref,
    load_policy_text,
    resolve_policy,
)
from rollout.policy.model import (
    CONTROL_PLANE_LABELS,
    DEFAULT_POLICY,
    LKG_TRIAL,
    MIN_LKG_DEADLINE,
    Approval,
    ApprovalRejectAction,
    ApprovalTimeoutAction,
    DisruptionPolicy,
    DoneCriteria,
    DoneUntil,
    BlockedDrainAction,
    DrainMode,
    FailureAction,
    NodeSelection,
    RevertTarget,
    RolloutPolicy,
    UnhealthyNodeAction,
)
from rollout.policy.selectors import LabelSelector, Requirement, Selector
from rollout.policy.windows import HHMM, CronText, MaintenanceWindows, Weekday, Window

__all__ = [
    "Analysis",
    "AnalysisCheck",
    "Baseline",
    "CheckWhen",
    "Compare",
    "Condition",
    "NoData",
    "OnInconclusive",
    "PrometheusEndpoint",
    "StatisticalTest",
    "CONTROL_PLANE_LABELS",
    "DEFAULT_POLICY",
    "DEFAULT_POLICY_DIR",
    "HHMM",
    "LKG_TRIAL",
    "MIN_LKG_DEADLINE",
    "Approval",
    "ApprovalRejectAction",
    "ApprovalTimeoutAction",
    "CountOrPercent",
    "CronText",
    "DisruptionPolicy",
    "DoneCriteria",
    "DoneUntil",
    "BlockedDrainAction",
    "DrainMode",
    "Duration",
    "FailureAction",
    "FieldPath",
    "LabelSelector",
    "MaintenanceWindows",
    "NodeSelection",
    "Requirement",
    "RevertTarget",
    "RolloutPolicy",
    "UnhealthyNodeAction",
    "load_policy_ref",
    "Selector",
    "Weekday",
    "Window",
    "available_policies",
    "describe_duration",
    "format_duration",
    "format_whole_seconds",
    "is_percent",
    "load_policy",
    "load_policy_text",
    "parse_duration",
    "percent_of",
    "resolve_amount",
    "resolve_policy",
]
