"""The use cases: what a command asks of the cluster, each through the narrowest port it needs.
``prepare`` (probe, validate, review, publish, then plan or resume), ``rollback`` (a rollout's
journal put in the rolling-back state), ``status`` (a rollout as the cluster shows it, and the
one document every screen draws), ``commands`` (validate, export, diff, plan, publish), ``drift``
(every node against what its last completed rollout proved)."""

from rollout.usecases.commands import (
    config_verdict,
    diff_against_nodes,
    export_node_config,
    preview_plan,
    publish_config_text,
    refuse_invalid_config,
    selected_policy,
    validate_config_text,
)
from rollout.usecases.status import final_status, rollout_status

__all__ = ["config_verdict", "diff_against_nodes", "export_node_config", "final_status", "preview_plan",
           "publish_config_text", "refuse_invalid_config", "rollout_status", "selected_policy",
           "validate_config_text"]
