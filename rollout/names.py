"""Every name this product writes into a cluster, in one place.

Annotations, labels, Event reasons, the journal and lock objects and the namespaces they live in
are an interface: people select on them (``kubectl get nodes -l ...``), dashboards alert on them,
and a resumed run finds its journal by them. So each is spelled once, here.
"""

from __future__ import annotations

import re

PREFIX = "kubelet-rollout.io/"

# Annotations written on a node in the same PATCH that assigns its config (the journal on the node).
ANN_ROLLOUT = PREFIX + "rollout"
ANN_BATCH = PREFIX + "batch"
ANN_PREVIOUS_SOURCE = PREFIX + "previous-source"  # JSON ConfigRef or "local"
ANN_ASSIGNED_AT = PREFIX + "assigned-at"
LOCAL_SOURCE = "local"

# The seam with the node agent on 1.24+ clusters (kubelet_rollout_agent; docs/agent.md): the
# orchestrator writes desired-config, the agent answers in the shape of Node.status.config.
ANN_DESIRED_CONFIG = PREFIX + "desired-config"  # JSON {namespace, name, uid, resourceVersion, key}
ANN_CONFIG_ASSIGNED = PREFIX + "config-assigned"  # same JSON shape; absent = nothing assigned
ANN_CONFIG_ACTIVE = PREFIX + "config-active"  # absent = the node's base config
ANN_CONFIG_LAST_KNOWN_GOOD = PREFIX + "config-last-known-good"  # absent = the base config
ANN_CONFIG_ERROR = PREFIX + "config-error"  # text; absent = no error
ANN_AGENT = PREFIX + "agent"  # JSON {version, backend: "drop-in", configDir, seconds, timeScale, dropinsAfter}
# A change whose kubelet refuses to start over a checkpoint written under the old value (the
# disruption catalogue's state-reset class): the orchestrator cordons and drains the node, then asks
# the agent to delete those files between stopping and starting the kubelet (docs/agent.md;
# rollout.machine.drains: the rollout uncordons only the nodes it cordoned).
ANN_CORDONED_BY = PREFIX + "cordoned-by"  # the rollout whose cordon this is (with spec.unschedulable)
# JSON {rollout, files: [host paths], desired: the desired-config JSON it applies to, or null = the base}
ANN_STATE_RESET = PREFIX + "state-reset"

# On the journal ConfigMap: a person's pending lifecycle request (pause, resume, abort, promote)
ANN_REQUEST = PREFIX + "request"

# On the lock Lease (besides ANN_ROLLOUT): the holding process's details (JSON; rollout.lock.Holder)
ANN_LOCK_HOLDER = PREFIX + "holder"

LABEL_ROLLOUT = PREFIX + "rollout"
LABEL_MANAGED_BY = "app.kubernetes.io/managed-by"
COMPONENT = "kubelet-rollout"  # the value of LABEL_MANAGED_BY, and the Events' reporting component

# On a published config ConfigMap (rollout.publish): where it came from and what it holds
LABEL_CONFIG_HASH = PREFIX + "config-hash"  # kubectl's --append-hash suffix of its name
LABEL_BASE_NAME = PREFIX + "base-name"
ANN_CONTENT_SHA256 = PREFIX + "content-sha256"
# On a published config ConfigMap, "true": a drop-in that takes precedence. On each node the agent
# sets aside the drop-ins read after ours that override a field of ours (`rollout drift --fix`)
ANN_SET_ASIDE_OVERRIDES = PREFIX + "set-aside-overrides"
CONFIG_KEY = "kubelet"  # its data key: the kubeletConfigKey of every config source we write

SYSTEM_NAMESPACE = "kube-system"  # published configs, journals and the lock
LEASE_NAMESPACE = "kube-node-lease"  # the kubelets' own Leases
EVENT_NAMESPACE = "default"  # node Events, where the kubelet puts its own
JOURNAL_PREFIX = "kubelet-rollout-journal-"
ANALYSIS_PREFIX = "kubelet-rollout-analysis-"  # a batch's analysis evidence (rollout.analysis.evidence)
# a journal's part (rollout.journal.parts) is kept in two slots, written in turn ("a", "b"); the
# label marks every part's ConfigMap, so a list of journals can leave them out
LABEL_JOURNAL_PART = PREFIX + "journal-part"
JOURNAL_SLOTS = ("a", "b")
LOCK_NAME = "kubelet-rollout-lock"
CONFIG_BASE_NAME = "kubelet-config"

# A field of GET /version that only kubesim serves (its clock's speed-up): a rehearsal
# (`rollout start --time-scale F`) runs only where it is (docs/kubesim.md, "Telling kubesim apart")
SIMULATOR_MARKER = "kubesimTimeScale"

# Event reasons (CamelCase, like the kubelet's own KubeletConfigChanged)
EVENT_ASSIGNED = "KubeletConfigAssigned"
EVENT_REVERTED = "KubeletConfigReverted"
EVENT_FAILED = "KubeletConfigFailed"
EVENT_HALTED = "KubeletRolloutHalted"
EVENT_CORDONED = "KubeletRolloutCordoned"  # a drain began: the node takes no new pod
EVENT_DRAIN_BLOCKED = "KubeletRolloutDrainBlocked"  # a pod (and its budget) holds the drain
EVENT_UNCORDONED = "KubeletRolloutUncordoned"  # the node is given back
EVENT_DRIFT = "KubeletConfigDrift"  # `rollout drift`: a node no longer runs what its last rollout proved
EVENT_STATE_RESET = "KubeletStateReset"  # the agent deleted a kubelet checkpoint between stop and start
EVENT_STATE_RESET_REFUSED = "KubeletStateResetRefused"


# A rollout name is a node label value (kubelet-rollout.io/rollout) and names the journal
# ConfigMap: it must be both, so a DNS subdomain (lower case) of at most a label value's length.
ROLLOUT_NAME_MAX = 63
_ROLLOUT_NAME = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")


def rollout_name_problem(name: str) -> str | None:
    """Why ``name`` cannot name a rollout; None when it can."""
    if not name:
        return "a rollout name cannot be empty"
    if len(name) > ROLLOUT_NAME_MAX:
        return f"a rollout name has at most {ROLLOUT_NAME_MAX} characters (it is a node label value)"
    if _ROLLOUT_NAME.fullmatch(name) is None:
        return ("a rollout name may hold only lower-case letters, digits, '-' and '.', and starts and ends with "
                "a letter or digit (it names a ConfigMap and is a node label value), e.g. maxpods-80")
    return None


def journal_configmap_name(rollout: str) -> str:
    """The rollout's journal ConfigMap: ``kubelet-rollout-journal-<rollout>``."""
    return JOURNAL_PREFIX + rollout


def analysis_configmap_name(rollout: str, batch: int) -> str:
    """A batch's analysis evidence: ``kubelet-rollout-analysis-<rollout>-<batch>``."""
    return f"{ANALYSIS_PREFIX}{rollout}-{batch}"


def journal_part_name(rollout: str, part: str, slot: str) -> str:
    """One slot of a journal part: ``kubelet-rollout-journal-<rollout>.<part><slot>`` (``.p0a``)."""
    return f"{journal_configmap_name(rollout)}.{part}{slot}"


def label_value(name: str) -> str:
    """A rollout name as a valid label value (63 characters, alphanumerics and -_.)."""
    clean = "".join(c if (c.isalnum() or c in "-_.") else "-" for c in name)[:63].strip("-_.")
    return clean or "rollout"
