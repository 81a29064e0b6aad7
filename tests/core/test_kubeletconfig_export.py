"""Exporting a node's configz output: the seed-001 jq step done right (valid, round-trippable)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from rollout.kubeletconfig import (
    diff_configs,
    dropped_keys,
    effective_config,
    export_from_configz,
    validate_config,
)

CONFIGZ = json.loads(
    (Path(__file__).resolve().parents[1] / "fixtures" / "configs" / "configz-node.json").read_text()
)


def test_export_is_a_valid_document() -> None:
    doc = export_from_configz(CONFIGZ)
    assert doc["kind"] == "KubeletConfiguration"
    assert doc["apiVersion"] == "kubelet.config.k8s.io/v1beta1"
    result = validate_config(yaml.safe_dump(doc))
    assert result.ok, [str(p) for p in result.errors]


def test_export_round_trips_through_the_validator_unchanged() -> None:
    doc = export_from_configz(CONFIGZ)
    result = validate_config(json.dumps(doc))
    assert result.config is not None
    assert result.config.effective == effective_config(doc)
    assert diff_configs(doc, result.config.effective) == []


def test_export_has_no_diff_against_the_node() -> None:
    """Re-publishing a node's own config must change nothing on it."""
    doc = export_from_configz(CONFIGZ)
    assert diff_configs(doc, CONFIGZ["kubeletconfig"]) == []


def test_export_drops_unknown_and_null_keys() -> None:
    doc = export_from_configz(CONFIGZ)
    assert "kubeletRuntimeOnlyState" not in doc
    assert "staticPodURLHeader" not in doc and "tlsCipherSuites" not in doc
    assert dropped_keys(CONFIGZ) == ["kubeletRuntimeOnlyState"]


def test_export_maps_go_field_names_to_json_names() -> None:
    doc = export_from_configz(CONFIGZ)
    assert doc["enableServer"] is True and "EnableServer" not in doc


def test_export_keeps_the_legacy_sensitive_values() -> None:
    """The fields whose omission silently changes a node must be carried over explicitly."""
    doc = export_from_configz(
        {
            "kubeletconfig": {
                "readOnlyPort": 10255,
                "authorization": {"mode": "AlwaysAllow"},
                "authentication": {"anonymous": {"enabled": True}},
                "cgroupDriver": "systemd",
            }
        }
    )
    warnings = {p.path for p in validate_config(yaml.safe_dump(doc)).warnings if p.rule == "legacy-default"}
    assert "readOnlyPort" not in warnings and "authorization.mode" not in warnings
    assert doc["readOnlyPort"] == 10255


def test_naive_jq_export_is_refused() -> None:
    """What `jq '.kubeletconfig|.kind=...|.apiVersion=...'` produces: unknown keys and nulls."""
    naive = {
        **CONFIGZ["kubeletconfig"],
        "kind": "KubeletConfiguration",
        "apiVersion": "kubelet.config.k8s.io/v1beta1",
    }
    result = validate_config(json.dumps(naive))
    assert {p.path for p in result.errors} == {"EnableServer", "kubeletRuntimeOnlyState"}


def test_export_rejects_non_configz_input() -> None:
    with pytest.raises(ValueError, match="kubeletconfig"):
        export_from_configz({"kind": "KubeletConfiguration"})


def test_validating_an_export_warns_about_nothing_it_omits() -> None:
    """Before: validating what `rollout export` had just written warned that readOnlyPort was omitted."""
    configz = {"kubeletconfig": {k: v for k, v in CONFIGZ["kubeletconfig"].items() if k != "readOnlyPort"}}
    doc = export_from_configz(configz)
    assert "readOnlyPort" in doc
    assert not [w for w in validate_config(yaml.safe_dump(doc)).warnings if "readOnlyPort" in str(w)]
