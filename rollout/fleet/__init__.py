"""Fleet rollouts: one kubelet config across many clusters, a canary cluster first, then stages.

Each cluster's rollout is an ordinary rollout of its own cluster (its journal, its lock, its
policy), run by a Prefect worker that holds only that cluster's credentials; the fleet decides
which cluster goes when and what a failure does, from what Prefect shows of those runs. This
package is the fleet's values and rules, pure like ``rollout.machine`` (no I/O but reading the
fleet file and its policies, no clock, no Prefect); ``flows/fleet/flow.py`` composes them.

One job per module:

- ``model`` / ``stages``: the fleet file and its rules; which clusters each stage holds
- ``loading``: the boundary (file -> plan, or one ``FleetError`` naming file, line and field)
- ``plan``: the stages with their clusters, pools and policies; each cluster's rollout name
- ``runs``: what the fleet sees of a cluster's runs (values read from Prefect by the flows)
- ``journal``: what only the fleet knows (gates, failure, abort, holder), and where it lives
- ``actions`` / ``decide``: the next action, rule by rule
- ``table``: the clusters as people read them (status, artifact, gate evidence)
"""

from rollout.fleet.actions import (
    AskApproval,
    Finish,
    FleetAction,
    RestartRuns,
    StartClusters,
    StartRollbacks,
    StopRuns,
    Wait,
)
from rollout.fleet.decide import LOCKED_RETRY, failed_clusters, step
from rollout.fleet.journal import (
    AbortRequest,
    FleetJournal,
    FleetStatus,
    Gate,
    from_data,
    holder_from_data,
    holder_to_data,
    to_data,
)
from rollout.fleet.loading import load_fleet, load_fleet_text, portable_fleet_text
from rollout.fleet.model import FleetFailureAction, FleetFile
from rollout.fleet.plan import ClusterPlan, FleetPlan, StagePlan, check_rollout_name, cluster_rollout
from rollout.fleet.runs import (
    MAX_ATTEMPTS,
    PROGRESS_HEARTBEAT,
    ClusterRun,
    ClusterRuns,
    Observed,
    Progress,
    RunKind,
    RunPhase,
)
from rollout.fleet.table import cluster_phase, evidence, rows, table_rows

__all__ = [
    "LOCKED_RETRY",
    "MAX_ATTEMPTS",
    "PROGRESS_HEARTBEAT",
    "AbortRequest",
    "AskApproval",
    "ClusterPlan",
    "ClusterRun",
    "ClusterRuns",
    "Finish",
    "FleetAction",
    "FleetFailureAction",
    "FleetFile",
    "FleetJournal",
    "FleetPlan",
    "FleetStatus",
    "Gate",
    "Observed",
    "Progress",
    "RestartRuns",
    "RunKind",
    "RunPhase",
    "StagePlan",
    "StartClusters",
    "StartRollbacks",
    "StopRuns",
    "Wait",
    "check_rollout_name",
    "cluster_phase",
    "cluster_rollout",
    "evidence",
    "failed_clusters",
    "from_data",
    "holder_from_data",
    "holder_to_data",
    "load_fleet",
    "load_fleet_text",
    "portable_fleet_text",
    "rows",
    "step",
    "table_rows",
    "to_data",
]
