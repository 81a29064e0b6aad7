"""KubeletConfiguration validation: every rule the 1.23 kubelet enforces, decode strictness, and
the runtime/defaulting warnings. Cases are named after the rule they pin."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from rollout.kubeletconfig import ConfigValidationError, Severity, load_config, validate_config

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "configs"
HEAD = "kind: KubeletConfiguration\napiVersion: kubelet.config.k8s.io/v1beta1\ncgroupDriver: systemd\n"


def check(body: str, **kwargs: object):  # type: ignore[no-untyped-def]
    head = HEAD.replace("cgroupDriver: systemd\n", "") if "cgroupDriver:" in body else HEAD
    return validate_config(head + body, **kwargs)  # type: ignore[arg-type]


def error_at(result, path: str, rule: str | None = None) -> bool:  # type: ignore[no-untyped-def]
    return any(p.path == path and (rule is None or p.rule == rule) for p in result.errors)


# (id, yaml body, error path, rule)
REJECTED = [
    (
        "unknown gate fails validation",
        "featureGates: {NoSuchGate: true}",
        "featureGates.NoSuchGate",
        "unknown-gate",
    ),
    (
        "locked gate cannot leave its default",
        "featureGates: {IPv6DualStack: false}",
        "featureGates.IPv6DualStack",
        "locked-gate",
    ),
    (
        "nodeLeaseDurationSeconds must be positive",
        "nodeLeaseDurationSeconds: -5",
        "nodeLeaseDurationSeconds",
        "node-lease-positive",
    ),
    (
        "enforceNodeAllocatable needs cgroupsPerQOS",
        "cgroupsPerQOS: false",
        "enforceNodeAllocatable",
        "enforce-needs-cgroups-per-qos",
    ),
    (
        "systemCgroups needs cgroupRoot",
        "systemCgroups: /system",
        "systemCgroups",
        "system-cgroups-need-cgroup-root",
    ),
    ("maxPods must not be negative", "maxPods: -1", "maxPods", "non-negative"),
    ("registryPullQPS must not be negative", "registryPullQPS: -1", "registryPullQPS", "non-negative"),
    ("kubeAPIQPS must not be negative", "kubeAPIQPS: -3", "kubeAPIQPS", "non-negative"),
    ("healthzPort in 1..65535 or 0", "healthzPort: 70000", "healthzPort", "port-range"),
    ("readOnlyPort in 1..65535 or 0", "readOnlyPort: -1", "readOnlyPort", "port-range"),
    ("port out of range crash-loops (not validated in 1.23)", "port: 70000", "port", "port-range"),
    (
        "cpuCFSQuotaPeriod other than 100ms needs the gate",
        "cpuCFSQuotaPeriod: 50ms",
        "cpuCFSQuotaPeriod",
        "cfs-period-needs-gate",
    ),
    (
        "cpuCFSQuotaPeriod with the gate is at most 1s",
        "cpuCFSQuotaPeriod: 2s\nfeatureGates: {CustomCPUCFSQuotaPeriod: true}",
        "cpuCFSQuotaPeriod",
        "cfs-period-range",
    ),
    (
        "imageGC low must be below high (defaults count)",
        "imageGCHighThresholdPercent: 70",
        "imageGCLowThresholdPercent",
        "image-gc-low-below-high",
    ),
    (
        "imageGC low equal to high is refused",
        "imageGCHighThresholdPercent: 80\nimageGCLowThresholdPercent: 80",
        "imageGCLowThresholdPercent",
        "image-gc-low-below-high",
    ),
    (
        "imageGC percent at most 100",
        "imageGCHighThresholdPercent: 101",
        "imageGCHighThresholdPercent",
        "image-gc-percent-range",
    ),
    ("iptablesDropBit in 0..31", "iptablesDropBit: 32", "iptablesDropBit", "iptablesDropBit-range"),
    ("oomScoreAdj in -1000..1000", "oomScoreAdj: -1001", "oomScoreAdj", "oomScoreAdj-range"),
    (
        "nodeStatusMaxImages at least -1",
        "nodeStatusMaxImages: -2",
        "nodeStatusMaxImages",
        "node-status-max-images-range",
    ),
    (
        "serverTLSBootstrap needs RotateKubeletServerCertificate",
        "serverTLSBootstrap: true\nfeatureGates: {RotateKubeletServerCertificate: false}",
        "serverTLSBootstrap",
        "server-tls-bootstrap-needs-gate",
    ),
    (
        "topologyManagerPolicy must be a known policy",
        "topologyManagerPolicy: numa",
        "topologyManagerPolicy",
        "topology-policy-enum",
    ),
    (
        "topologyManagerPolicy other than none needs the gate",
        "topologyManagerPolicy: restricted\nfeatureGates: {TopologyManager: false}",
        "topologyManagerPolicy",
        "topology-policy-needs-gate",
    ),
    (
        "topologyManagerScope must be container or pod",
        "topologyManagerScope: node",
        "topologyManagerScope",
        "topology-scope-enum",
    ),
    (
        "taints must be valid",
        "registerWithTaints: [{key: 'bad key!', effect: NoSchedule}]",
        "registerWithTaints[0]",
        "taint-valid",
    ),
    (
        "taint timeAdded must stay unset",
        "registerWithTaints: [{key: a, effect: NoSchedule, timeAdded: '2020-01-01T00:00:00Z'}]",
        "registerWithTaints[0].timeAdded",
        "taint-time-added",
    ),
    (
        "shutdown critical period within the total",
        "shutdownGracePeriod: 10s\nshutdownGracePeriodCriticalPods: 20s",
        "shutdownGracePeriodCriticalPods",
        "shutdown-critical-within-total",
    ),
    (
        "shutdown period zero or at least 1s",
        "shutdownGracePeriod: 500ms",
        "shutdownGracePeriod",
        "shutdown-period-min",
    ),
    (
        "shutdown periods need GracefulNodeShutdown",
        "shutdownGracePeriod: 30s\nfeatureGates: {GracefulNodeShutdown: false}",
        "shutdownGracePeriod",
        "shutdown-needs-gate",
    ),
    (
        "shutdown by priority needs its gate",
        "shutdownGracePeriodByPodPriority: [{priority: 0, shutdownGracePeriodSeconds: 10}]",
        "shutdownGracePeriodByPodPriority",
        "shutdown-by-priority-needs-gate",
    ),
    (
        "shutdown by priority excludes the plain periods",
        "shutdownGracePeriod: 30s\nshutdownGracePeriodByPodPriority: [{priority: 0, shutdownGracePeriodSeconds: 10}]\nfeatureGates: {GracefulNodeShutdownBasedOnPodPriority: true}",
        "shutdownGracePeriodByPodPriority",
        "shutdown-by-priority-exclusive",
    ),
    (
        "memorySwap needs NodeSwap",
        "memorySwap: {swapBehavior: LimitedSwap}",
        "memorySwap.swapBehavior",
        "swap-needs-gate",
    ),
    (
        "swapBehavior must be known with NodeSwap",
        "memorySwap: {swapBehavior: AllSwap}\nfailSwapOn: false\nfeatureGates: {NodeSwap: true}",
        "memorySwap.swapBehavior",
        "swap-behavior-enum",
    ),
    (
        "system-reserved enforcement needs systemReservedCgroup",
        "enforceNodeAllocatable: [pods, system-reserved]",
        "enforceNodeAllocatable[1]",
        "system-reserved-needs-cgroup",
    ),
    (
        "kube-reserved enforcement needs kubeReservedCgroup",
        "enforceNodeAllocatable: [kube-reserved]",
        "enforceNodeAllocatable[0]",
        "kube-reserved-needs-cgroup",
    ),
    (
        "none enforcement must be alone",
        "enforceNodeAllocatable: [none, pods]",
        "enforceNodeAllocatable[0]",
        "enforce-none-alone",
    ),
    (
        "enforcement items must be known",
        "enforceNodeAllocatable: [everything]",
        "enforceNodeAllocatable[0]",
        "enforce-enum",
    ),
    ("hairpinMode must be known", "hairpinMode: bridge", "hairpinMode", "hairpin-enum"),
    (
        "reservedSystemCPUs must be a cpuset",
        "reservedSystemCPUs: 3-1",
        "reservedSystemCPUs",
        "reserved-cpus-cpuset",
    ),
    (
        "reservedSystemCPUs excludes reserved cgroups",
        "reservedSystemCPUs: 0-1\nkubeReservedCgroup: /kube",
        "reservedSystemCPUs",
        "reserved-cpus-exclusive",
    ),
    (
        "reservedMemory has no duplicates",
        "reservedMemory: [{numaNode: 0, limits: {memory: 1Gi}}, {numaNode: 0, limits: {memory: 2Gi}}]",
        "reservedMemory[1].limits.memory",
        "reserved-memory-duplicate",
    ),
    (
        "reservedMemory only memory and hugepages",
        "reservedMemory: [{numaNode: 0, limits: {cpu: '1'}}]",
        "reservedMemory[0].limits.cpu",
        "reserved-memory-resource",
    ),
    (
        "reservedMemory limits must not be zero",
        "reservedMemory: [{numaNode: 1, limits: {hugepages-2Mi: '0'}}]",
        "reservedMemory[0].limits.hugepages-2Mi",
        "reserved-memory-nonzero",
    ),
    (
        "showHiddenMetricsForVersion only the previous minor",
        "showHiddenMetricsForVersion: '1.20'",
        "showHiddenMetricsForVersion",
        "hidden-metrics-previous-minor",
    ),
    ("logging format must be registered", "logging: {format: xml}", "logging.format", "logging-format"),
    (
        "memoryThrottlingFactor in (0, 1]",
        "memoryThrottlingFactor: 1.5",
        "memoryThrottlingFactor",
        "memory-throttling-range",
    ),
    # runtime: passes the kubelet's validation, crash-loops at start
    (
        "unknown eviction signal crash-loops",
        "evictionHard: {memory.availble: 100Mi}",
        "evictionHard.memory.availble",
        "eviction-signal",
    ),
    (
        "eviction percentage at most 100",
        "evictionHard: {memory.available: 150%}",
        "evictionHard.memory.available",
        "eviction-threshold",
    ),
    (
        "soft eviction needs a grace period",
        "evictionSoft: {memory.available: 300Mi}",
        "evictionSoft.memory.available",
        "eviction-soft-grace",
    ),
    (
        "unknown TLS cipher name crash-loops",
        "tlsCipherSuites: [TLS_FANCY]",
        "tlsCipherSuites[0]",
        "tls-cipher-name",
    ),
    ("unknown TLS min version crash-loops", "tlsMinVersion: TLS1.2", "tlsMinVersion", "tls-min-version"),
    (
        "unknown reserved resource crash-loops",
        "systemReserved: {gpu: '1'}",
        "systemReserved.gpu",
        "reserved-resource",
    ),
    ("cgroupDriver must be cgroupfs or systemd", "cgroupDriver: docker", "cgroupDriver", "runtime-enum"),
    ("cpuManagerPolicy must be none or static", "cpuManagerPolicy: None", "cpuManagerPolicy", "runtime-enum"),
    ("authorization mode must be known", "authorization: {mode: RBAC}", "authorization.mode", "runtime-enum"),
    # decode
    ("unknown field names the closest valid one", "evictionHardd: {}", "evictionHardd", "unknown-field"),
    (
        "unknown nested field",
        "authentication: {webhook: {enabeld: true}}",
        "authentication.webhook.enabeld",
        "unknown-field",
    ),
    ("durations must be Go duration strings", "syncFrequency: 1 minute", "syncFrequency", "wrong-type"),
    ("durations must be strings", "syncFrequency: 60", "syncFrequency", "wrong-type"),
    ("quantities must parse", "containerLogMaxSize: 10MB", "containerLogMaxSize", "wrong-type"),
    ("int fields reject strings", "maxPods: '110'", "maxPods", "wrong-type"),
    ("int32 fields reject out-of-range values", "maxPods: 3000000000", "maxPods", "wrong-type"),
    ("bool fields reject strings", "serializeImagePulls: 'false'", "serializeImagePulls", "wrong-type"),
    (
        "gate values must be booleans",
        "featureGates: {NodeSwap: 'true'}",
        "featureGates.NodeSwap",
        "wrong-type",
    ),
    ("duplicate fields are refused", "maxPods: 10\nmaxPods: 20", "maxPods", "duplicate-field"),
]


@pytest.mark.parametrize(("body", "path", "rule"), [c[1:] for c in REJECTED], ids=[c[0] for c in REJECTED])
def test_rejected(body: str, path: str, rule: str) -> None:
    result = check(body)
    assert not result.ok
    assert error_at(result, path, rule), [str(p) + " " + p.rule for p in result.errors]


ACCEPTED = [
    ("explicit zero stays for pointer fields", "registryPullQPS: 0\nhealthzPort: 0\nreadOnlyPort: 0"),
    ("imageGC low below high", "imageGCHighThresholdPercent: 90\nimageGCLowThresholdPercent: 50"),
    ("cpuCFSQuotaPeriod 100ms needs no gate", "cpuCFSQuotaPeriod: 100ms"),
    (
        "cpuCFSQuotaPeriod within range with the gate",
        "cpuCFSQuotaPeriod: 50ms\nfeatureGates: {CustomCPUCFSQuotaPeriod: true}",
    ),
    (
        "AllAlpha enables alpha-gated fields",
        "memorySwap: {swapBehavior: LimitedSwap}\nfailSwapOn: false\nfeatureGates: {AllAlpha: true}",
    ),
    ("none enforcement alone is fine", "enforceNodeAllocatable: [none]"),
    (
        "empty enforcement list is fine without cgroupsPerQOS",
        "enforceNodeAllocatable: []\ncgroupsPerQOS: false",
    ),
    (
        "eviction 0% disables a threshold",
        "evictionHard: {memory.available: 0%, nodefs.available: 10%, nodefs.inodesFree: 5%, imagefs.available: 15%}",
    ),
    ("null means default", "maxPods: null\nsyncFrequency: null"),
    ("cpuset ranges parse", "reservedSystemCPUs: 0-1,4"),
    ("previous minor for hidden metrics", "showHiddenMetricsForVersion: '1.22'"),
    ("json logging is registered", "logging: {format: json, flushFrequency: 5000000000}"),
]


@pytest.mark.parametrize("body", [c[1] for c in ACCEPTED], ids=[c[0] for c in ACCEPTED])
def test_accepted(body: str) -> None:
    result = check(body)
    assert result.ok, [str(p) for p in result.errors]
    assert result.config is not None


def test_flag_gates_win_over_the_file() -> None:
    body = "shutdownGracePeriod: 30s\nfeatureGates: {GracefulNodeShutdown: true}"
    assert check(body).ok
    assert error_at(
        check(body, flag_gates={"GracefulNodeShutdown": False}), "shutdownGracePeriod", "shutdown-needs-gate"
    )


FIXTURE_OUTCOMES = {
    "good.yaml": True,
    "good-kubeadm-1.23.yaml": True,
    "good.json": True,
    "bad-unknown-fields.yaml": False,
    "bad-types.yaml": False,
    "bad-missing-kind.yaml": False,
    "bad-api-version.yaml": False,
    "bad-validation.yaml": False,
    "bad-runtime.yaml": False,
}


@pytest.mark.parametrize(("name", "ok"), FIXTURE_OUTCOMES.items(), ids=list(FIXTURE_OUTCOMES))
def test_fixture_files(name: str, ok: bool) -> None:
    assert validate_config((FIXTURES / name).read_text()).ok is ok


def test_every_fixture_is_covered() -> None:
    on_disk = {p.name for p in FIXTURES.iterdir() if not p.name.startswith("configz")}
    assert on_disk == set(FIXTURE_OUTCOMES)


def test_every_error_reported_in_one_pass() -> None:
    result = validate_config((FIXTURES / "bad-validation.yaml").read_text())
    paths = {p.path for p in result.errors}
    assert {
        "featureGates.GracefulNodeShutdwn",
        "healthzPort",
        "imageGCLowThresholdPercent",
        "memorySwap.swapBehavior",
        "enforceNodeAllocatable[1]",
        "hairpinMode",
    } <= paths


def test_decode_errors_do_not_hide_semantic_errors() -> None:
    result = check("evictionHardd: {}\nimageGCHighThresholdPercent: 70")
    assert error_at(result, "evictionHardd", "unknown-field")
    assert error_at(result, "imageGCLowThresholdPercent", "image-gc-low-below-high")


def test_unknown_field_suggests_closest_name() -> None:
    (problem,) = [p for p in check("evictionHardd: {}").errors]
    assert problem.message == "unknown field; did you mean evictionHard?"
    assert str(problem) == "line 4: evictionHardd: unknown field; did you mean evictionHard?"


def test_unknown_gate_suggests_closest_gate() -> None:
    (problem,) = check("featureGates: {GracefulNodeShutdwn: true}").errors
    assert "did you mean GracefulNodeShutdown?" in problem.message


@pytest.mark.parametrize(
    ("text", "path", "rule"),
    [
        ("maxPods: 10\n", "kind", "kind-required"),
        ("kind: KubeletConfiguration\nmaxPods: 1\n", "apiVersion", "apiVersion-required"),
        ("kind: Pod\napiVersion: kubelet.config.k8s.io/v1beta1\n", "kind", "kind-wrong"),
        ("", "", "empty"),
        ("- a\n- b\n", "", "not-a-mapping"),
        ("a: [b\n", "", "syntax"),
    ],
    ids=[
        "kind required",
        "apiVersion required",
        "kind must be KubeletConfiguration",
        "empty payload",
        "top level must be a mapping",
        "syntax error",
    ],
)
def test_document_shape(text: str, path: str, rule: str) -> None:
    result = validate_config(text)
    assert any(p.path == path and p.rule == rule for p in result.errors), [str(p) for p in result.errors]


def test_load_config_raises_with_all_problems() -> None:
    with pytest.raises(ConfigValidationError) as info:
        load_config((FIXTURES / "bad-unknown-fields.yaml").read_text(), origin="bad-unknown-fields.yaml")
    assert {p.path for p in info.value.errors} == {
        "evictionHardd",
        "authentication.webhook.enabeld",
        "maxpods",
    }
    assert "bad-unknown-fields.yaml" in str(info.value) and "did you mean maxPods?" in str(info.value)


def test_load_config_returns_effective_values() -> None:
    config = load_config((FIXTURES / "good.yaml").read_text())
    assert config.effective["maxPods"] == 150
    assert config.effective["syncFrequency"] == "1m0s"  # omitted -> default, canonical Go form
    assert config.effective["authentication"]["webhook"]["cacheTTL"] == "2m0s"
    assert config.feature_gates["DynamicKubeletConfig"] is True
    assert config.document["maxPods"] == 150


WARNED = [
    ("legacy defaults: omitted readOnlyPort", "", "readOnlyPort", "legacy-default"),
    ("legacy defaults: omitted anonymous auth", "", "authentication.anonymous.enabled", "legacy-default"),
    ("legacy defaults: omitted authorization mode", "", "authorization.mode", "legacy-default"),
    ("omitted cgroupDriver defaults to cgroupfs", "__NO_DRIVER__", "cgroupDriver", "cgroup-driver-omitted"),
    (
        "enforcing reserved cgroups needs them on the node",
        "enforceNodeAllocatable: [pods, kube-reserved]\nkubeReservedCgroup: /kube",
        "enforceNodeAllocatable",
        "enforce-cgroup-exists",
    ),
    ("omitted failSwapOn means true", "", "failSwapOn", "fail-swap-on"),
    (
        "protectKernelDefaults depends on sysctls",
        "protectKernelDefaults: true",
        "protectKernelDefaults",
        "protect-kernel-defaults",
    ),
    ("zero means default", "maxPods: 0", "maxPods", "zero-means-default"),
    (
        "partial evictionHard drops other defaults",
        "evictionHard: {memory.available: 200Mi}",
        "evictionHard",
        "eviction-hard-replaces-defaults",
    ),
    (
        "relative paths resolve in the checkpoint dir",
        "tlsCertFile: certs/kubelet.crt",
        "tlsCertFile",
        "relative-path",
    ),
    ("clusterDNS must be IPs", "clusterDNS: [kube-dns]", "clusterDNS[0]", "cluster-dns-ip"),
    (
        "turning the DKC gate off",
        "featureGates: {DynamicKubeletConfig: false}",
        "featureGates.DynamicKubeletConfig",
        "dkc-gate-off",
    ),
]


@pytest.mark.parametrize(("body", "path", "rule"), [c[1:] for c in WARNED], ids=[c[0] for c in WARNED])
def test_warned(body: str, path: str, rule: str) -> None:
    text = HEAD.replace("cgroupDriver: systemd\n", "") if body == "__NO_DRIVER__" else HEAD + body
    result = validate_config(text)
    assert result.ok, [str(p) for p in result.errors]
    assert any(p.path == path and p.rule == rule and p.severity is Severity.WARNING for p in result.warnings)


def test_complete_config_has_no_legacy_warning() -> None:
    result = validate_config((FIXTURES / "good.yaml").read_text())
    assert not [p for p in result.warnings if p.rule == "legacy-default"]


def test_json_and_yaml_give_the_same_document() -> None:
    doc = yaml.safe_load((FIXTURES / "good.json").read_text())
    import json

    as_json = validate_config(json.dumps(doc))
    as_yaml = validate_config(yaml.safe_dump(doc))
    assert as_json.config is not None and as_yaml.config is not None
    assert as_json.config.effective == as_yaml.config.effective


def test_kubeadm_zero_durations_mean_defaults() -> None:
    result = validate_config((FIXTURES / "good-kubeadm-1.23.yaml").read_text())
    assert result.config is not None
    assert result.config.effective["syncFrequency"] == "1m0s"
    assert result.config.effective["nodeStatusReportFrequency"] == "5m0s"
    assert result.config.effective["logging"]["flushFrequency"] == 5_000_000_000
    assert not [p for p in result.warnings if p.rule == "zero-means-default"]
