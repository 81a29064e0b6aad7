"""KubeletConfiguration (v1beta1, Kubernetes 1.23): validation, DKC-danger review, export, diff.

Why this package exists: a rollout must refuse a bad kubelet config *before* it touches a
cluster, explain every change it will make to each node (including the silent ones caused by
defaulting), and refuse changes Dynamic Kubelet Config cannot make safely. Everything here is
pure: text or dicts in, frozen values out; no I/O besides reading the bundled catalog data, no
logging, no clock, and no import of ``kubernetes`` or ``prefect``.

Public API::

    validate_config(text, *, flag_gates=None) -> ValidationResult     # never raises on bad input
    load_config(text, *, origin="", flag_gates=None) -> ValidatedConfig  # raises ConfigValidationError
    effective_config(doc) -> dict                                     # v1beta1 defaults applied
    diff_configs(new, active) -> list[FieldChange]
    review_changes(new, active, *, allowed_fields) -> DkcReview        # refusals / caveats / warnings
    review_nodes(new, actives_by_node, *, allowed_fields) -> dict[str, DkcReview]
    dkc_refusals(document, *, allow_fields, running=None, drain=None) -> tuple[Refusal, ...]  # THE rule for every command
    node_disruption(old, new, *, drain="auto") -> Disruption          # restart / drain / state-reset / reboot, and how long
    export_from_configz(configz_json_or_text) -> dict                  # raises ConfigzError
    parse_configz(text_or_bytes, *, source="configz") -> dict          # the input boundary, for configz
"""

from rollout.kubeletconfig.catalog import API_VERSION, KIND, Catalog, FieldSpec, load_catalog
from rollout.kubeletconfig.check import ValidatedConfig, ValidationResult, load_config, validate_config
from rollout.kubeletconfig.defaults import effective_config
from rollout.kubeletconfig.diff import FieldChange, diff_configs
from rollout.kubeletconfig.disruption import Disruption, node_disruption
from rollout.kubeletconfig.dkc import (
    Caveat,
    DkcReview,
    Refusal,
    dangerous_fields,
    dkc_refusals,
    review_changes,
    review_nodes,
)
from rollout.kubeletconfig.export import ConfigzError, dropped_keys, export_from_configz, parse_configz
from rollout.kubeletconfig.gates import default_gates, merge_gates
from rollout.kubeletconfig.model import kubelet_configuration_model
from rollout.kubeletconfig.problems import ConfigValidationError, Problem, Severity

__all__ = [
    "API_VERSION",
    "KIND",
    "Catalog",
    "Caveat",
    "ConfigValidationError",
    "ConfigzError",
    "Disruption",
    "DkcReview",
    "FieldChange",
    "FieldSpec",
    "Problem",
    "Refusal",
    "Severity",
    "ValidatedConfig",
    "ValidationResult",
    "dangerous_fields",
    "default_gates",
    "diff_configs",
    "dkc_refusals",
    "dropped_keys",
    "effective_config",
    "export_from_configz",
    "kubelet_configuration_model",
    "load_catalog",
    "load_config",
    "merge_gates",
    "node_disruption",
    "parse_configz",
    "review_changes",
    "review_nodes",
    "validate_config",
]
