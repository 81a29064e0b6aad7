"""Every name the agent shares with the orchestrator, the kubelet, systemd or its guard.

One home per spelling: the orchestrator reads these annotations, the guard program reads the
state files, and a typo in either place would silently break the other side.
"""

from __future__ import annotations

# Shared with the orchestrator: spelled once, in rollout.names.
from rollout import names as _shared

ANN_DESIRED = _shared.ANN_DESIRED_CONFIG
ANN_ASSIGNED = _shared.ANN_CONFIG_ASSIGNED
ANN_ACTIVE = _shared.ANN_CONFIG_ACTIVE
ANN_LAST_KNOWN_GOOD = _shared.ANN_CONFIG_LAST_KNOWN_GOOD
ANN_ERROR = _shared.ANN_CONFIG_ERROR
ANN_AGENT = _shared.ANN_AGENT
EVENT_ASSIGNED = _shared.EVENT_ASSIGNED
EVENT_FAILED = _shared.EVENT_FAILED
EVENT_NAMESPACE = _shared.EVENT_NAMESPACE
ANN_CORDONED_BY = _shared.ANN_CORDONED_BY
ANN_STATE_RESET = _shared.ANN_STATE_RESET
EVENT_STATE_RESET = _shared.EVENT_STATE_RESET
EVENT_STATE_RESET_REFUSED = _shared.EVENT_STATE_RESET_REFUSED

# Written by the orchestrator: ANN_DESIRED, which ConfigMap this node should run. Written by the
# agent, mirroring Node.status.config of Dynamic Kubelet Config: ANN_ASSIGNED, ANN_ACTIVE,
# ANN_LAST_KNOWN_GOOD, ANN_ERROR, and ANN_AGENT, its advertisement.
STATUS_ANNOTATIONS = (ANN_ASSIGNED, ANN_ACTIVE, ANN_LAST_KNOWN_GOOD, ANN_ERROR)

# How the agent changes a node's kubelet config (backend.py chooses per node): a drop-in in
# --config-dir, or the whole --config file where the kubelet reads no drop-in directory.
BACKEND_DROPIN = "drop-in"
BACKEND_MAIN_FILE = "main-file"
BACKEND = BACKEND_DROPIN
BACKEND_AUTO = "auto"  # the agent's --backend default: chosen from the kubelet's unit and version

# Host paths (absolute on the host; a Host maps them under its root).
DEFAULT_CONFIG_DIR = "/etc/kubernetes/kubelet.conf.d"
DEFAULT_BASE_CONFIG = "/var/lib/kubelet/config.yaml"
DEFAULT_STATE_DIR = "/var/lib/kubelet-rollout"
UNIT_DROPIN_DIR = "/etc/systemd/system/kubelet.service.d"
GUARD_UNIT_DROPIN = UNIT_DROPIN_DIR + "/90-kubelet-rollout-guard.conf"
GUARD_PROGRAM = "/usr/local/lib/kubelet-rollout/guard.py"
GUARD_PYTHON = "/usr/bin/python3"

# Our slot in --config-dir: high, so it wins over distro slots such as EKS's 40-nodeadm.conf.
DROPIN_NAME = "90-kubelet-rollout.conf"

# Files in the agent's state dir (outside --config-dir: the kubelet walks subdirectories).
STATE_FILE = "state.json"
STAGED_FILE = "staged.dropin"  # the validated payload, before it is moved into --config-dir
LKG_FILE = "last-known-good.dropin"  # the promoted drop-in; absent = the base config is LKG
GUARD_TRIAL_FILE = "guard-trial.json"  # written by the agent: a trial the guard must watch
GUARD_COUNT_FILE = "guard-starts.json"  # written by the guard: kubelet starts in that trial
GUARD_RECORD_FILE = "guard-record.json"  # written by the guard: why it restored last-known-good
# main-file backend: the --config file as it was before the agent first wrote it (the base config)
ORIGINAL_FILE = "original-config.yaml"
# drop-ins a ConfigMap that takes precedence moved out of --config-dir (their paths kept beneath)
SET_ASIDE_DIR = "set-aside"

KUBELET_UNIT = "kubelet"

# The only files a state reset (ANN_STATE_RESET) may delete: the resource managers' checkpoints,
# directly in the kubelet's root directory, spelled exactly so (no other spelling of the same path).
# A kubelet started under a different policy refuses such a file; nothing else there is ours to touch.
KUBELET_ROOT_DIR = "/var/lib/kubelet"
RESETTABLE_STATE_FILES = tuple(f"{KUBELET_ROOT_DIR}/{name}" for name in (
    "cpu_manager_state", "memory_manager_state", "dra_manager_state"))

# Event reasons, one per transition (CamelCase like the kubelet's KubeletConfigChanged);
# Assigned and Failed are the orchestrator's own words for the same transitions.
EVENT_REFUSED = "KubeletConfigRefused"
EVENT_ACTIVE = "KubeletConfigActive"
EVENT_PROMOTED = "KubeletConfigPromoted"
EVENT_REMOVED = "KubeletConfigRemoved"
