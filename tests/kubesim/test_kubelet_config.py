"""Unit tests: KubeletConfiguration decode/default/flags/validate and host runtime checks (1.23)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from kubesim.clusterfile import HostFacts
from kubesim.kubelet import nodeobject
from kubesim.kubelet.gates import FeatureGates, GateError
from kubesim.kubelet.kubeletconfig import (
    FlagError,
    LoadError,
    apply_flags,
    decode_payload,
    parse_flags,
    resolve_relative_paths,
)
from kubesim.kubelet.runtime_checks import runtime_failure
from kubesim.kubelet.units import format_go_duration, parse_go_duration, parse_quantity
from kubesim.kubelet.validation import ValidationError, validate

HEAD = {"kind": "KubeletConfiguration", "apiVersion": "kubelet.config.k8s.io/v1beta1"}


def payload(**fields: object) -> str:
    return json.dumps({**HEAD, **fields})


def decode(**fields: object) -> dict:
    return decode_payload(payload(**fields))[0]


# ------------------------------------------------------------------------------------ decoding
@pytest.mark.parametrize(
    "text, expected",
    [
        ('{\n"maxPods": 3}', "failed to decode: Object 'Kind' is missing in '{\n\"maxPods\": 3}'"),
        ('{"kind": "KubeletConfiguration"}', "Object 'apiVersion' is missing"),
        (
            '{"kind": "KubeletConfiguration", "apiVersion": "kubelet.config.k8s.io/v1alpha1"}',
            'no kind "KubeletConfiguration" is registered for version "kubelet.config.k8s.io/v1alpha1"',
        ),
        (
            "kind: KubeletConfiguration\napiVersion: kubelet.config.k8s.io/v1beta1\nmaxPods: '50'\n",
            "cannot unmarshal string into Go struct field KubeletConfiguration.maxPods of type int32",
        ),
        (
            payload(failSwapOn="yes"),
            "cannot unmarshal string into Go struct field KubeletConfiguration.failSwapOn of type bool",
        ),
        (payload(syncFrequency="ten"), 'time: invalid duration "ten"'),
        (payload(maxPods=2**40), "cannot unmarshal number 1099511627776"),
        (
            payload(authentication={"webhook": {"enabled": "true"}}),
            "KubeletConfiguration.authentication.webhook.enabled of type bool",
        ),
        ("kind: [", "error converting YAML to JSON"),
    ],
    ids=[
        "no-kind",
        "no-apiVersion",
        "wrong-version",
        "yaml-wrong-type",
        "bool-type",
        "bad-duration",
        "int32-overflow",
        "nested-type",
        "bad-yaml",
    ],
)
def test_undecodable_payloads_are_load_errors(text: str, expected: str) -> None:
    with pytest.raises(LoadError) as err:
        decode_payload(text)
    assert expected in str(err.value)


def test_unknown_and_duplicate_fields_are_lenient_with_a_warning_E17() -> None:
    cfg, warnings = decode_payload(
        '{"kind":"KubeletConfiguration","apiVersion":"kubelet.config.k8s.io/v1beta1",'
        '"maxPods": 5, "maxPods": 7, "futureField": true}'
    )
    assert cfg["maxPods"] == 7
    assert warnings and "using lenient decoding as strict decoding failed" in warnings[0]
    assert 'unknown field "futureField"' in warnings[0] and 'duplicate field "maxPods"' in warnings[0]


def test_omitted_fields_get_v1beta1_defaults_not_previous_values() -> None:
    cfg = decode(eventRecordQPS=0)
    assert cfg["eventRecordQPS"] == 0  # pointer: explicit 0 kept
    assert cfg["maxPods"] == 110 and cfg["readOnlyPort"] == 0
    assert cfg["authentication"]["anonymous"]["enabled"] is False
    assert cfg["authentication"]["webhook"] == {"enabled": True, "cacheTTL": "2m0s"}
    assert cfg["authorization"]["mode"] == "Webhook"
    assert cfg["evictionHard"] == {
        "memory.available": "100Mi",
        "nodefs.available": "10%",
        "nodefs.inodesFree": "5%",
        "imagefs.available": "15%",
    }
    assert cfg["syncFrequency"] == "1m0s" and cfg["streamingConnectionIdleTimeout"] == "4h0m0s"


def test_zero_means_default_fields_cannot_be_zeroed() -> None:
    cfg = decode(maxPods=0, registryBurst=0, cgroupDriver="", nodeStatusUpdateFrequency="0s")
    assert (cfg["maxPods"], cfg["registryBurst"], cfg["cgroupDriver"]) == (110, 10, "cgroupfs")
    assert cfg["nodeStatusUpdateFrequency"] == "10s"


def test_report_frequency_follows_explicit_update_frequency() -> None:
    assert decode(nodeStatusUpdateFrequency="20s")["nodeStatusReportFrequency"] == "20s"
    assert decode()["nodeStatusReportFrequency"] == "5m0s"


def test_configz_round_trip_is_stable() -> None:
    """configz -> add kind/apiVersion -> decode gives the same config (the tutorial's workflow)."""
    cfg = decode(maxPods=50, systemReserved={"cpu": "500m"})
    rendered = nodeobject.render(cfg)
    assert "kind" not in rendered and rendered["maxPods"] == 50
    assert rendered["authentication"]["x509"] == {} and "readOnlyPort" not in rendered
    again, warnings = decode_payload(json.dumps({**rendered, **HEAD}))
    assert again == cfg and warnings == []


# -------------------------------------------------------------------------------------- flags
def test_flags_win_and_gates_merge_E18() -> None:
    flags = parse_flags({"--max-pods": "50", "--eviction-hard": "memory.available<200Mi"})
    cfg = apply_flags(
        decode(maxPods=200, featureGates={"NodeSwap": True, "MemoryQoS": True}), flags, {"MemoryQoS": False}
    )
    assert cfg["maxPods"] == 50
    assert cfg["evictionHard"] == {"memory.available": "200Mi"}
    assert cfg["featureGates"] == {"NodeSwap": True, "MemoryQoS": False}


@pytest.mark.parametrize(
    "flags, message",
    [
        ({"--max-pods": "many"}, 'invalid argument "many" for "--max-pods" flag'),
        ({"--no-such-flag": "1"}, "unknown flag: --no-such-flag"),
    ],
)
def test_bad_flags_fail(flags: dict, message: str) -> None:
    with pytest.raises(FlagError, match=message):
        parse_flags(flags)


# --------------------------------------------------------------------------------- validation
def check(**fields: object) -> None:
    validate(decode(**fields), FeatureGates({"DynamicKubeletConfig": True}))


@pytest.mark.parametrize(
    "fields, message",
    [
        ({"featureGates": {"NoSuchGate": True}}, "unrecognized feature gate: NoSuchGate"),
        (
            {"featureGates": {"IPv6DualStack": False}},
            "cannot set feature gate IPv6DualStack to false, feature is locked to true",
        ),
        ({"eventRecordQPS": -1}, "eventRecordQPS (--event-qps) -1 must not be a negative number"),
        ({"imageGCLowThresholdPercent": 90}, "must be less than imageGCHighThresholdPercent"),
        ({"oomScoreAdj": 1001}, "oomScoreAdj (--oom-score-adj) 1001 must be between -1000 and 1000"),
        ({"port": 70000}, "port (--port) 70000 must be between 1 and 65535"),
        ({"iptablesDropBit": 32}, "iptablesDropBit (--iptables-drop-bit) 32 must be between 0 and 31"),
        (
            {"enforceNodeAllocatable": ["pods", "system-reserved"]},
            "systemReservedCgroup (--system-reserved-cgroup) must be specified",
        ),
        ({"enforceNodeAllocatable": ["none", "pods"]}, 'may not contain additional enforcements when "none"'),
        ({"cgroupsPerQOS": False}, "is not supported unless cgroupsPerQOS (--cgroups-per-qos) is set to true"),
        ({"cpuCFSQuotaPeriod": "50ms"}, "requires feature gate CustomCPUCFSQuotaPeriod"),
        (
            {"topologyManagerPolicy": "best-effort", "featureGates": {"TopologyManager": False}},
            "topologyManagerPolicy best-effort requires feature gate TopologyManager",
        ),
        ({"hairpinMode": "bogus"}, 'option "bogus" specified for hairpinMode'),
        ({"shutdownGracePeriod": "500ms"}, "must be either zero or otherwise >= 1 sec"),
        (
            {"shutdownGracePeriodByPodPriority": [{"priority": 1, "shutdownGracePeriodSeconds": 5}]},
            "requires feature gate GracefulNodeShutdownBasedOnPodPriority",
        ),
        ({"memorySwap": {"swapBehavior": "LimitedSwap"}}, "memorySwap.swapBehavior cannot be set when NodeSwap"),
        ({"memoryThrottlingFactor": 1.5}, "memoryThrottlingFactor 1.5 must be greater than 0"),
        ({"reservedSystemCPUs": "0-1", "systemReservedCgroup": "/system.slice"}, "can't use reservedSystemCPUs"),
        ({"nodeLeaseDurationSeconds": -5}, "nodeLeaseDurationSeconds must be greater than 0"),
        ({"showHiddenMetricsForVersion": "1.20"}, "must be omitted or have the value '1.22'"),
    ],
)
def test_validation_rules(fields: dict, message: str) -> None:
    with pytest.raises(ValidationError) as err:
        check(**fields)
    assert message in str(err.value)


def test_gate_dependent_rules_use_the_merged_gates() -> None:
    check(cpuCFSQuotaPeriod="50ms", featureGates={"CustomCPUCFSQuotaPeriod": True})
    check(memorySwap={"swapBehavior": "LimitedSwap"}, featureGates={"NodeSwap": True})
    check()  # defaults are valid


def test_multiple_errors_are_aggregated() -> None:
    with pytest.raises(ValidationError, match=r"^\[invalid configuration: .*, invalid configuration: .*\]$"):
        check(eventRecordQPS=-1, maxPods=-3)


def test_unknown_gate_in_process_gates() -> None:
    with pytest.raises(GateError):
        FeatureGates({"Bogus": True})


# ------------------------------------------------------------------------------ runtime checks
@pytest.mark.parametrize(
    "fields, host, message",
    [
        (
            {"cgroupDriver": "systemd"},
            {},
            'kubelet cgroup driver: "systemd" is different from container runtime cgroup driver: "cgroupfs"',
        ),
        (
            {
                "cgroupDriver": "systemd",
                "enforceNodeAllocatable": ["pods", "system-reserved"],
                "systemReservedCgroup": "/system.slice",
            },
            {"cgroupDriver": "systemd", "cgroups": ["/", "/kubepods.slice"]},
            'Failed to start ContainerManager Failed to enforce System Reserved Cgroup Limits on "/system.slice": ["system"] cgroup does not exist',
        ),
        ({}, {"swap": True}, "running with swap on is not supported"),
        ({"evictionHard": {"memory.avail": "100Mi"}}, {}, "unsupported eviction signal memory.avail"),
        ({"evictionHard": {"memory.available": "-1Mi"}}, {}, "eviction threshold memory.available must be positive"),
        ({"systemReserved": {"gpu": "1"}}, {}, 'cannot reserve "gpu" resource'),
        ({"kubeReserved": {"memory": "lots"}}, {}, "quantities must match the regular expression"),
        ({"tlsCipherSuites": ["TLS_FAKE"]}, {}, "Cipher suite TLS_FAKE not supported or doesn't exist"),
        ({"tlsMinVersion": "VersionTLS9"}, {}, 'unknown tls version "VersionTLS9"'),
        ({"cpuManagerPolicy": "dynamic"}, {}, 'unknown policy: "dynamic"'),
        ({"cpuManagerPolicy": "static"}, {}, "unable to determine reserved CPU resources for static policy"),
    ],
)
def test_runtime_failures_of_valid_configs(tmp_path: Path, fields: dict, host: dict, message: str) -> None:
    cfg = decode(**fields)
    check(**fields)  # each of these passes validation: DKC cannot roll it back
    failure = runtime_failure(cfg, HostFacts.model_validate(host), tmp_path)
    assert failure is not None and message in failure


def test_default_config_runs_on_default_host(tmp_path: Path) -> None:
    assert runtime_failure(decode(), HostFacts(), tmp_path) is None
    assert runtime_failure(decode(failSwapOn=False), HostFacts(swap=True), tmp_path) is None


# ---------------------------------------------------------------------------------------- units
@pytest.mark.parametrize(
    "text, nanos, shown",
    [
        ("1m", 60 * 10**9, "1m0s"),
        ("100ms", 10**8, "100ms"),
        ("1h30m", 5400 * 10**9, "1h30m0s"),
        ("2.5s", 2500 * 10**6, "2.5s"),
        ("0", 0, "0s"),
        ("1us", 1000, "1µs"),
    ],
)
def test_go_durations(text: str, nanos: int, shown: str) -> None:
    assert parse_go_duration(text) == nanos and format_go_duration(nanos) == shown


def test_quantities() -> None:
    assert parse_quantity("1Gi") == 2**30 and parse_quantity("500m") * 1000 == 500


def test_relative_paths_resolve_against_the_checkpoint_dir() -> None:
    cfg = resolve_relative_paths(
        decode(
            staticPodPath="manifests",
            tlsCertFile="/etc/abs.crt",
            resolvConf="",
            authentication={"x509": {"clientCAFile": "ca.crt"}},
        ),
        "/store/cp/u/7",
    )
    assert cfg["staticPodPath"] == "/store/cp/u/7/manifests" and cfg["tlsCertFile"] == "/etc/abs.crt"
    assert cfg["authentication"]["x509"]["clientCAFile"] == "/store/cp/u/7/ca.crt" and cfg["resolvConf"] == ""


def test_node_capacity_and_allocatable_follow_the_running_config() -> None:
    from kubesim.clusterfile import default_cluster, expand

    spec = expand(default_cluster(1))[1]
    cfg = decode(maxPods=60, podsPerCore=10, systemReserved={"cpu": "500m", "memory": "1Gi"})
    assert nodeobject.capacity(spec, cfg)["pods"] == "40"  # 4 cores x 10 < maxPods
    alloc = nodeobject.allocatable(spec, cfg)
    assert alloc["cpu"] == "3500m"
    assert alloc["memory"] == f"{(16 * 2**30 - 2**30 - 100 * 2**20) // 1024}Ki"  # minus evictionHard 100Mi
    assert alloc["ephemeral-storage"] == str(100 * 2**30 * 9 // 10)  # minus nodefs.available 10%
