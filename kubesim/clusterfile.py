"""The cluster file: which nodes a simulated cluster has and what their hosts are like.

Host facts decide whether a kubelet config that *validates* can actually *run* on a node (cgroup
driver, existing cgroups, swap), and the kubelet's command line decides which config fields are
overridden by flags (edge case E18). That is how kubesim reproduces failures that DKC cannot roll
back (crash loops) on some hosts and not others.

Example (``kubesim up --cluster fleet.yaml``)::

    apiVersion: kubesim.kubelet-rollout.io/v1
    kind: Cluster
    pools:
      - name: cp
        count: 1
        controlPlane: true
      - name: general
        count: 6
        zones: [zone-a, zone-b, zone-c]
        capacity: {cpu: "8", memory: 32Gi}
        host: {cgroupDriver: systemd, cgroups: ["/kubepods.slice", "/system.slice"]}
        kubelet:
          flags: {"--max-pods": "50"}
          config: {cgroupDriver: systemd}
      - name: legacy
        count: 2
        host: {swap: true}

A ``noise:`` section (top level, with a per-pool override) makes the nodes differ and wander as a
fleet's do, reproducibly from its ``seed`` (``noise: {preset: fleet, seed: 7}``), and declares
fleet-wide ``shifts``; see ``kubesim.noise`` and docs/kubesim.md ("Fleet noise").

Modern mode (``kubernetesVersion: "1.31"``, any of 1.24-1.33) adds per pool the initial
``--config-dir`` drop-ins (``kubelet.dropins: {"40-nodeadm.conf": {maxPods: 58}}``) and the
kubelet's systemd unit (``kubelet.unit: {restart: always, restartSec: 10s, environment:
{KUBELET_CONFIG_DROPIN_DIR_ALPHA: "on"}}``); ``flags``/``featureGates`` go to the host's
``kubeadm-flags.env`` and ``config`` to its ``/var/lib/kubelet/config.yaml``. ``--config-dir`` is
passed as the version has it unless ``kubelet.configDir`` says: from 1.30, and on 1.28-1.29 where
the unit's environment has ``KUBELET_CONFIG_DROPIN_DIR_ALPHA`` (so one 1.29 cluster mixes pools
with and without a drop-in directory); a 1.24-1.27 kubelet given the flag does not start.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from kubesim.noise import Noise, NoiseSpec, resolve
from kubesim.versions import KubernetesVersion

CONTROL_PLANE_LABEL = "node-role.kubernetes.io/control-plane"
ZONE_LABEL = "topology.kubernetes.io/zone"
DEFAULT_ZONES = ("zone-a", "zone-b", "zone-c")
DEFAULT_KUBELET_VERSION = "v1.23.17"


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", populate_by_name=True, frozen=True)


class HostFacts(_Strict):
    """What the node's machine and container runtime are like."""

    cgroup_driver: str = Field(default="cgroupfs", alias="cgroupDriver")  # the container runtime's driver
    cgroups: tuple[str, ...] = ("/", "/kubepods")  # cgroups that exist on the host
    swap: bool = False  # swap enabled on the host
    cpus: int = 4  # for cpuManager/reservedSystemCPUs checks
    os_image: str = Field(default="kubesim Linux", alias="osImage")
    kernel_version: str = Field(default="5.15.0-kubesim", alias="kernelVersion")
    container_runtime: str = Field(default="containerd://1.6.8", alias="containerRuntime")
    # modern mode: systemd's version decides whether OnFailure= runs on every crash of a
    # Restart=always unit (254+, RestartMode=normal) or only once it gives up (older)
    systemd_version: int = Field(default=255, alias="systemdVersion", ge=200)
    # what the simulated workload runs into (docs/kubesim.md, "Workloads and metrics"): memory
    # the system daemons use, the image filesystem's size and what other images fill of it, and
    # how long a pull takes (a registry round trip, plus the layers when the image is not cached)
    system_memory: str = Field(default="1Gi", alias="systemMemory")
    image_disk: str = Field(default="100Gi", alias="imageDisk")
    image_disk_used: str = Field(default="30Gi", alias="imageDiskUsed")
    pull_latency: str = Field(default="1s", alias="pullLatency")
    pull_bandwidth: str = Field(default="200Mi", alias="pullBandwidth")  # per second


class WorkloadFacts(_Strict):
    """The pods a node runs (not API objects): how many, their memory, their images, and how
    often one is replaced (a rolling update somewhere, a finished job); every replacement is a
    pod start with an image pull (``imagePullPolicy: Always``, as ``:latest`` tags get)."""

    pods: int = Field(default=10, ge=0)
    pod_memory: str = Field(default="512Mi", alias="podMemory")  # what each pod uses
    pod_request: str = Field(default="256Mi", alias="podRequest")  # what the scheduler counts
    starts_per_minute: float = Field(default=12.0, alias="startsPerMinute", ge=0)
    images: int = Field(default=20, ge=1)  # distinct images the pods use
    image_size: str = Field(default="1Gi", alias="imageSize")
    # the CPU each pod uses (ten of them keep a 4-core node busy: the runtime then competes for
    # CPU) and what each writes to its container log per second (log rotation)
    pod_cpu: str = Field(default="400m", alias="podCpu")
    log_rate: str = Field(default="50Ki", alias="logRate")


class UnitSetup(_Strict):
    """The kubelet's systemd unit on a modern host (kubeadm's unit unless told otherwise)."""

    restart: str = "always"  # always | on-failure | no
    restart_sec: str = Field(default="10s", alias="restartSec")
    start_limit_burst: int = Field(default=5, alias="startLimitBurst", ge=0)
    # the unit's Environment= (the kubelet's environment), e.g. {KUBELET_CONFIG_DROPIN_DIR_ALPHA: "on"}:
    # 1.28-1.29 kubelets take --config-dir only with that variable set
    environment: dict[str, str] = Field(default_factory=dict)
    # kubeadm's unit sets StartLimitInterval=0: no start limit, a bad config crash-loops forever
    start_limit_interval_sec: str = Field(default="0", alias="startLimitIntervalSec")

    @field_validator("restart")
    @classmethod
    def _restart(cls, value: str) -> str:
        if value not in ("always", "on-failure", "no"):
            raise ValueError("restart must be always, on-failure or no")
        return value


class KubeletSetup(_Strict):
    """How the node's kubelet is started (systemd unit + --config file)."""

    version: str = DEFAULT_KUBELET_VERSION
    # --dynamic-config-dir given? (DKC runs only with it, section 1 of the reference)
    dynamic_config_dir: bool = Field(default=True, alias="dynamicConfigDir")
    # --feature-gates on the command line. 1.22/1.23 need DynamicKubeletConfig=true explicitly.
    feature_gates: dict[str, bool] = Field(
        default_factory=lambda: {"DynamicKubeletConfig": True}, alias="featureGates"
    )
    # other command-line flags, e.g. {"--max-pods": "50"}; they win over any config (E18)
    flags: dict[str, str] = Field(default_factory=dict)
    # the local --config file (a KubeletConfiguration body without apiVersion/kind)
    config: dict[str, Any] = Field(default_factory=dict)
    # systemd Restart=always (False simulates Restart=on-failure: exit 0 leaves the kubelet down, E1)
    restart_always: bool = Field(default=True, alias="restartAlways")
    # modern mode: initial drop-in files of --config-dir ({file name: body}; kind/apiVersion are
    # added unless the body has them), whether --config-dir is passed, and the systemd unit
    # --config-dir left out: the version's default (modern_setup): passed from 1.30, and on
    # 1.28-1.29 when the unit's environment has KUBELET_CONFIG_DROPIN_DIR_ALPHA; never before 1.28
    dropins: dict[str, Any] = Field(default_factory=dict)
    config_dir: bool = Field(default=True, alias="configDir")
    unit: UnitSetup = Field(default_factory=UnitSetup)


class Pool(_Strict):
    name: str
    count: int = Field(ge=0)
    control_plane: bool = Field(default=False, alias="controlPlane")
    zones: tuple[str, ...] = DEFAULT_ZONES
    labels: dict[str, str] = Field(default_factory=dict)
    capacity: dict[str, str] = Field(default_factory=lambda: {"cpu": "4", "memory": "16Gi"})
    host: HostFacts = Field(default_factory=HostFacts)
    workload: WorkloadFacts = Field(default_factory=WorkloadFacts)
    kubelet: KubeletSetup = Field(default_factory=KubeletSetup)
    # node names: "{pool}-{i}" unless a prefix is given
    name_prefix: str | None = Field(default=None, alias="namePrefix")
    # overrides the cluster's noise section key by key (kubesim.noise)
    noise: NoiseSpec | None = None

    @field_validator("noise")
    @classmethod
    def _no_pool_shifts(cls, noise: NoiseSpec | None) -> NoiseSpec | None:
        if noise is not None and noise.shifts:
            raise ValueError("shifts are fleet-wide: declare them in the cluster's noise section, not a pool's")
        return noise

    @field_validator("zones")
    @classmethod
    def _zones_not_empty(cls, zones: tuple[str, ...]) -> tuple[str, ...]:
        if not zones:
            raise ValueError("zones must name at least one zone")
        return zones


_DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
_PERCENT = re.compile(r"^[0-9]+%$")
POD_IMAGE = "registry.k8s.io/pause:3.9"


def _dns_label(value: str, what: str, longest: int = 63) -> str:
    if not _DNS_LABEL.match(value) or len(value) > longest:
        raise ValueError(
            f"{what} {value!r} must be lower-case letters, digits and '-', start and end with a letter or digit, "
            f"at most {longest} characters"
        )
    return value


class Budget(_Strict):
    """A workload's PodDisruptionBudget: one of ``minAvailable`` or ``maxUnavailable``, a number
    or a percentage (``"90%"``)."""

    min_available: int | str | None = Field(default=None, alias="minAvailable")
    max_unavailable: int | str | None = Field(default=None, alias="maxUnavailable")

    @field_validator("min_available", "max_unavailable")
    @classmethod
    def _amount(cls, value: int | str | None) -> int | str | None:
        if isinstance(value, int) and value < 0:
            raise ValueError("must be 0 or more")
        if isinstance(value, str) and not _PERCENT.match(value):
            raise ValueError(f"{value!r} is neither a number nor a percentage such as \"90%\"")
        return value

    @model_validator(mode="after")
    def _exactly_one(self) -> "Budget":
        if (self.min_available is None) == (self.max_unavailable is None):
            raise ValueError("a pdb needs exactly one of minAvailable and maxUnavailable")
        return self


class Workload(_Strict):
    """Pods the cluster runs from the start, as API objects: a ReplicaSet (``replicas`` pods,
    placed by the scheduler) or a DaemonSet (a pod on every node), with an optional budget."""

    name: str
    namespace: str = "default"
    kind: Literal["ReplicaSet", "DaemonSet"] = "ReplicaSet"
    replicas: int | None = Field(default=None, ge=0)
    labels: dict[str, str] = Field(default_factory=dict)
    pdb: Budget | None = None
    # a pod with an emptyDir volume has local data: kubectl drain refuses it without --delete-emptydir-data
    empty_dir: bool = Field(default=False, alias="emptyDir")
    termination_grace_period_seconds: int = Field(default=30, alias="terminationGracePeriodSeconds", ge=0)
    image: str = POD_IMAGE

    @field_validator("name")
    @classmethod
    def _name(cls, name: str) -> str:
        return _dns_label(name, "name", 57)  # room for the pods' generated suffix

    @field_validator("namespace")
    @classmethod
    def _namespace(cls, namespace: str) -> str:
        return _dns_label(namespace, "namespace")

    @model_validator(mode="after")
    def _kind_rules(self) -> "Workload":
        if self.kind == "DaemonSet" and self.replicas is not None:
            raise ValueError("a DaemonSet runs one pod per node: it takes no replicas")
        if self.kind == "DaemonSet" and self.pdb is not None:
            raise ValueError("a DaemonSet takes no pdb (kubectl drain leaves daemon pods alone)")
        return self


class ClusterFile(_Strict):
    api_version: str = Field(default="kubesim.kubelet-rollout.io/v1", alias="apiVersion")
    kind: str = "Cluster"
    # "1.23" (DKC) or a modern minor such as "1.31" (drop-ins on simulated hosts)
    kubernetes_version: str | None = Field(default=None, alias="kubernetesVersion")
    pools: tuple[Pool, ...]
    # fleet noise (kubesim.noise): how nodes differ and wander, fleet-wide shifts; absent: none
    noise: NoiseSpec | None = None
    # API pods from the start (kubesim.workloads); absent: none
    workloads: tuple[Workload, ...] = ()
    pods_per_node: int | None = Field(default=None, alias="podsPerNode", ge=0)

    @field_validator("workloads")
    @classmethod
    def _unique_workloads(cls, workloads: tuple[Workload, ...]) -> tuple[Workload, ...]:
        seen: set[tuple[str, str]] = set()
        for workload in workloads:
            if (workload.namespace, workload.name) in seen:
                raise ValueError(f"two workloads named {workload.name!r} in namespace {workload.namespace!r}")
            seen.add((workload.namespace, workload.name))
        return workloads

    @field_validator("kind")
    @classmethod
    def _kind(cls, kind: str) -> str:
        if kind != "Cluster":
            raise ValueError("kind must be Cluster")
        return kind


class NodeSpec(_Strict):
    """One node of the simulated cluster, fully resolved."""

    name: str
    pool: str
    labels: dict[str, str]
    capacity: dict[str, str]
    host: HostFacts
    kubelet: KubeletSetup
    workload: WorkloadFacts = Field(default_factory=WorkloadFacts)
    noise: Noise = Field(default_factory=Noise)


class ClusterFileError(ValueError):
    """A cluster file that cannot be used; the message names the file and the field."""


DROPIN_ALPHA_ENV = "KUBELET_CONFIG_DROPIN_DIR_ALPHA"
CONFIG_DIR_SINCE = 28  # --config-dir: an unknown flag before 1.28 (KEP-3983)
CONFIG_DIR_BETA = 30  # 1.28-1.29 (alpha) also need DROPIN_ALPHA_ENV in the kubelet's environment


def config_dir_by_default(minor: int, environment: dict[str, str]) -> bool:
    """Whether a pool that does not say is provisioned with ``--config-dir``: as an operator of
    that version would run it (the flag would stop a 1.24-1.27 kubelet, and a 1.28-1.29 one
    without the variable)."""
    return minor >= CONFIG_DIR_BETA or (minor >= CONFIG_DIR_SINCE and DROPIN_ALPHA_ENV in environment)


def modern_setup(setup: KubeletSetup, version: KubernetesVersion) -> KubeletSetup:
    """A pool's kubelet in a modern cluster: the cluster's version and no DKC gate, unless set;
    ``--config-dir`` as the version has it, unless set."""
    changes: dict[str, Any] = {}
    if "config_dir" not in setup.model_fields_set:
        changes["config_dir"] = config_dir_by_default(version.minor, setup.unit.environment)
    if "version" not in setup.model_fields_set:
        changes["version"] = version.git_version
    if "feature_gates" not in setup.model_fields_set:
        changes["feature_gates"] = {}  # the DynamicKubeletConfig gate no longer exists
    return setup.model_copy(update=changes)


def expand(cluster: ClusterFile, version: KubernetesVersion | None = None) -> list[NodeSpec]:
    """Resolve pools into nodes: names, zone spread (round robin), role and standard labels."""
    nodes: list[NodeSpec] = []
    seen: set[str] = set()
    for pool in cluster.pools:
        kubelet = modern_setup(pool.kubelet, version) if version and version.modern else pool.kubelet
        prefix = pool.name_prefix if pool.name_prefix is not None else f"{pool.name}-"
        noise = resolve(cluster.noise, pool.noise)
        for i in range(1, pool.count + 1):
            name = f"{prefix}{i}"
            if name in seen:
                raise ClusterFileError(f"duplicate node name {name!r} (pool {pool.name!r})")
            seen.add(name)
            zone = pool.zones[(i - 1) % len(pool.zones)]
            labels = {
                "kubernetes.io/hostname": name,
                "kubernetes.io/os": "linux",
                "kubernetes.io/arch": "amd64",
                "beta.kubernetes.io/os": "linux",
                "beta.kubernetes.io/arch": "amd64",
                ZONE_LABEL: zone,
                "kubesim.kubelet-rollout.io/pool": pool.name,
            }
            if pool.control_plane:
                labels[CONTROL_PLANE_LABEL] = ""
            labels.update(pool.labels)
            nodes.append(
                NodeSpec(
                    name=name,
                    pool=pool.name,
                    labels=labels,
                    capacity=dict(pool.capacity),
                    host=pool.host,
                    kubelet=kubelet,
                    workload=pool.workload,
                    noise=noise,
                )
            )
    return nodes


def default_cluster(workers: int) -> ClusterFile:
    """One control-plane node and ``workers`` workers over three zones, all DKC-enabled."""
    return ClusterFile(
        pools=(
            Pool(name="control-plane", count=1, controlPlane=True, zones=("zone-a",)),
            Pool(name="node", count=workers),
        )
    )


def load_cluster_file(path: str | Path) -> ClusterFile:
    """Read and validate a cluster file; errors name the file and the offending field."""
    path = Path(path)
    try:
        raw = yaml.safe_load(path.read_text())
    except (OSError, yaml.YAMLError) as exc:
        raise ClusterFileError(f"{path}: cannot read cluster file: {exc}") from exc
    if not isinstance(raw, dict):
        raise ClusterFileError(f"{path}: a cluster file must be a YAML mapping")
    try:
        return ClusterFile.model_validate(raw)
    except ValidationError as exc:
        problems = "; ".join(
            f"{'.'.join(str(p) for p in err['loc'])}: {err['msg']}" for err in exc.errors()
        )
        raise ClusterFileError(f"{path}: {problems}") from exc
