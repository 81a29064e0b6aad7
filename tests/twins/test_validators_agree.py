"""The twin validators agree: kubesim's kubelet and the core's validator accept and reject the same
KubeletConfigurations, except where a difference is written down below on purpose.

Why: kubesim and the core each implement the 1.23 kubelet-config rules, deliberately separately
(the simulator must not share the validator's bugs). Nothing else checks that they agree, and
their feature-gate tables had already drifted apart on five gates. Every config here goes through
both: kubesim's ``decode_payload`` + ``validate`` (what the DKC controller does with a checkpoint)
and the core's ``validate_config``. Tests may import both packages; kubesim itself imports
nothing from the core.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kubesim.kubelet.gates import FeatureGates
from kubesim.kubelet.gates import known_gates as sim_gates
from kubesim.kubelet.kubeletconfig import LoadError, decode_payload
from kubesim.kubelet.validation import ValidationError, validate
from rollout.kubeletconfig.catalog import load_catalog
from rollout.kubeletconfig.check import validate_config
from rollout.kubeletconfig.versions import gate_refusal
from tests.conftest import examples

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "configs"
HEADER = {"apiVersion": "kubelet.config.k8s.io/v1beta1", "kind": "KubeletConfiguration"}

_RUNTIME = (
    "the running kubelet fails on it at start (crash loop, no DKC rollback) but its validation, which is "
    "all kubesim's DKC controller runs on a checkpoint, accepts it; the core refuses it up front "
    "because it would fail on every node"
)
_LENIENT = (
    "the 1.23 DKC controller decodes a checkpoint leniently (a warning, then the field is ignored); "
    "the core refuses the typo because the operator meant something by it"
)
# Core problem rule (or "rule:field") -> why the core rejects what kubesim's kubelet validation
# accepts. kubesim never rejects a config the core accepts: that direction has no entries.
INTENDED_DIFFERENCES: dict[str, str] = {
    "wrong-type:containerLogMaxSize": (
        "a string in the Go type that 1.23's validation never parses; NewMainKubelet's container log "
        "manager does, and exits on it at start. The core types it as a quantity, so it refuses it up front"
    ),
    "unknown-field": _LENIENT,
    "duplicate-field": _LENIENT,
    "eviction-signal": _RUNTIME,
    "eviction-threshold": _RUNTIME,
    "eviction-grace-duration": _RUNTIME,
    "eviction-soft-grace": _RUNTIME,
    "reserved-resource": _RUNTIME,
    "reserved-negative": _RUNTIME,
    "tls-cipher-name": _RUNTIME,
    "tls-min-version": _RUNTIME,
    "runtime-enum": _RUNTIME,
}


def sim_rejection(text: str) -> str | None:
    """Why kubesim's kubelet rejects the config (load or validation), or None if it accepts it."""
    try:
        cfg, _warnings = decode_payload(text)
    except LoadError as exc:
        return f"load: {exc}"
    try:
        validate(cfg, FeatureGates())
    except ValidationError as exc:
        return f"validate: {exc}"
    return None


def core_rules(text: str) -> list[str]:
    """``rule:field`` of every error the core reports for a 1.23 kubelet (empty: accepted): the
    config's own, and the gates a 1.23 kubelet has not (the core judges those per node's version)."""
    result = validate_config(text)
    gates = (result.document or {}).get("featureGates") or {}
    refused = [f"gate-on-1.23:featureGates.{name}" for name, value in gates.items()
               if isinstance(value, bool) and gate_refusal(name, value, 23) is not None]
    return [f"{problem.rule}:{problem.path}" for problem in result.errors] + refused


def intended(rule_at_field: str) -> bool:
    return rule_at_field in INTENDED_DIFFERENCES or rule_at_field.split(":", 1)[0] in INTENDED_DIFFERENCES


def assert_agree(text: str) -> None:
    """Same verdict, once the intended differences are set aside."""
    rules = core_rules(text)
    core_rejects = not all(intended(rule) for rule in rules)
    sim = sim_rejection(text)
    if sim is not None:
        assert core_rejects, f"only kubesim rejects ({sim}); core errors: {rules}\n{text}"
    else:
        assert not core_rejects, f"only the core rejects: {rules}\n{text}"


# --- the tables themselves -----------------------------------------------------------------------


def test_both_gate_tables_list_the_same_gates_with_the_same_defaults_and_locks():
    core = {name: (spec.default, spec.locked) for name, spec in load_catalog().gates.items()}
    sim = {name: (spec.default, spec.locked) for name, spec in sim_gates().items()}
    assert sim == core


@pytest.mark.parametrize(
    "gates, accepted",
    [
        pytest.param({"csiMigrationRBD": True}, True, id="csiMigrationRBD-is-the-1.23-name"),
        pytest.param({"CSIMigrationRBD": True}, False, id="CSIMigrationRBD-is-unknown-in-1.23"),
        pytest.param({"RemoveSelfLink": False}, True, id="RemoveSelfLink-beta-settable"),
        pytest.param({"EfficientWatchResumption": False}, True, id="EfficientWatchResumption-beta-settable"),
        pytest.param({"CSIMigration": False, "CSIMigrationGCE": False}, True, id="CSIMigration-settable"),
        pytest.param({"IPv6DualStack": False}, False, id="locked-GA-gate"),
    ],
)
def test_the_five_disputed_gates(gates, accepted):
    text = yaml.safe_dump({**HEADER, "featureGates": gates})
    assert (sim_rejection(text) is None) is accepted
    assert (not core_rules(text)) is accepted


def test_disputed_gate_defaults_agree():
    """CSIMigration and CSIMigrationGCE are on by default in 1.23 on both sides."""
    defaults = FeatureGates()
    core = validate_config(yaml.safe_dump(HEADER)).config
    assert core is not None
    for name in ("CSIMigration", "CSIMigrationGCE"):
        assert defaults.enabled(name) is True
        assert core.feature_gates[name] is True


# --- the fixture corpus --------------------------------------------------------------------------


@pytest.mark.parametrize("path", sorted(p for p in FIXTURES.iterdir() if p.suffix in (".yaml", ".json")), ids=str)
def test_fixture_corpus(path):
    assert_agree(path.read_text())


def test_the_intended_differences_are_real():
    """Each listed difference shows up on the fixtures (so the list cannot silently go stale)."""
    runtime = (FIXTURES / "bad-runtime.yaml").read_text()
    assert sim_rejection(runtime) is None and core_rules(runtime)
    typos = (FIXTURES / "bad-unknown-fields.yaml").read_text()
    assert sim_rejection(typos) is None and {r.split(":")[0] for r in core_rules(typos)} == {"unknown-field"}
    log_size = yaml.safe_dump({**HEADER, "containerLogMaxSize": "big"})
    assert sim_rejection(log_size) is None and core_rules(log_size) == ["wrong-type:containerLogMaxSize"]


# --- generated configs: random subsets of fields, valid and invalid values ----------------------

GATE_NAMES = sorted(sim_gates())
FIELD_VALUES: dict[str, list[Any]] = {
    "maxPods": [110, 0, 250, -1, "many"],
    "healthzPort": [10248, 0, 65535, 65536, -1],
    "imageGCHighThresholdPercent": [85, 100, 101, -1, 10],
    "imageGCLowThresholdPercent": [80, 0, 90, 101, -1],
    "syncFrequency": ["1m0s", "30s", "0s", "-1s", "soon"],
    "nodeStatusUpdateFrequency": ["10s", "1s", "0s", "-5s"],
    "eventRecordQPS": [5, 0, -1],
    "eventBurst": [10, 0, -1],
    "kubeAPIQPS": [5, 0, -1],
    "kubeAPIBurst": [10, 0, -1],
    "registryPullQPS": [5, 0, -1],
    "registryBurst": [10, 0, -1],
    "nodeStatusMaxImages": [50, -1, -2],
    "podPidsLimit": [-1, 1024, -2],
    "cgroupDriver": ["systemd", "cgroupfs", "upstart"],
    "hairpinMode": ["promiscuous-bridge", "hairpin-veth", "none", "veth"],
    "cpuManagerPolicy": ["none", "static", "dynamic"],
    "topologyManagerPolicy": ["none", "best-effort", "restricted", "single-numa-node", "strict"],
    "topologyManagerScope": ["container", "pod", "node"],
    "enforceNodeAllocatable": [["pods"], ["pods", "system-reserved"], ["none"], ["pods", "none"], ["gpus"]],
    "systemReservedCgroup": ["/system.slice", ""],
    "systemReserved": [{"cpu": "500m", "memory": "512Mi"}, {"cpu": "-1"}],
    "shutdownGracePeriod": ["30s", "0s", "-1s"],
    "shutdownGracePeriodCriticalPods": ["10s", "0s", "60s"],
    "memorySwap": [{}, {"swapBehavior": "LimitedSwap"}, {"swapBehavior": "Unlimited"}],
    "cpuCFSQuotaPeriod": ["100ms", "50ms", "2s", "0s"],
    "logging": [{"format": "text"}, {"format": "json"}, {"format": "xml"}],
    "showHiddenMetricsForVersion": ["", "1.22", "1.21", "1.23", "one"],
    "containerLogMaxSize": ["10Mi", "1Gi", "big"],
    "containerLogMaxFiles": [5, 1, 0],
    "evictionHard": [{"memory.available": "100Mi"}, {"nodefs.available": "10%"}, {"memory.availble": "1Gi"}],
    "evictionPressureTransitionPeriod": ["5m0s", "-1s"],
    "oomScoreAdj": [-999, -1001, 1000, 1001],
    "failSwapOn": [True, False],
    "memoryThrottlingFactor": [0.8, 1.5, 0.0],
    "reservedSystemCPUs": ["", "0-1", "x"],
    "tlsMinVersion": ["", "VersionTLS12", "VersionTLS99"],
}
gates = st.dictionaries(
    st.sampled_from(GATE_NAMES + ["NoSuchGate", "CSIMigrationRBD"]), st.booleans(), max_size=3
)


@st.composite
def configs(draw: st.DrawFn) -> dict[str, Any]:
    """A few fields at a time (so one rule's verdict is not masked by another's), sometimes gates."""
    names = draw(st.lists(st.sampled_from(sorted(FIELD_VALUES)), max_size=3, unique=True))
    doc = {name: draw(st.sampled_from(FIELD_VALUES[name])) for name in names}
    if draw(st.booleans()):
        doc["featureGates"] = draw(gates)
    return doc


@settings(max_examples=examples(300), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(configs())
def test_generated_configs(fields):
    assert_agree(yaml.safe_dump({**HEADER, **fields}, sort_keys=False))
