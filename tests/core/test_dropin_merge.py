"""The kubelet's drop-in merge as the orchestrator and the agent both compute it
(``rollout.kubeletconfig.dropin``): which files, in which order, and what a later file takes away
from ours. The Kubernetes source is the reference (cmd/kubelet/app/server.go,
``mergeKubeletConfigurations``: ``filepath.WalkDir``, ``filepath.Ext == ".conf"``, RFC 7386)."""

from __future__ import annotations

import json
from typing import Any

import pytest

from rollout.kubeletconfig.dropin import (
    ADVERTISE_LIMIT,
    ADVERTISED_AFTER,
    DropinFile,
    advertise_after,
    advertised_after,
    in_kubelet_order,
    is_dropin_name,
    merge_in_kubelet_order,
    merged_over_running,
    overrides,
    read_after,
)

OURS = "90-kubelet-rollout.conf"


@pytest.mark.parametrize(("name", "read"), [
    ("90-kubelet-rollout.conf", True), (".conf", True), ("x.CONF", False), ("x.conf.bak", False),
    ("x.conf~", False), ("x.yaml", False), (".90-kubelet-rollout.conf.kubelet-rollout-tmp-ab12", False),
])
def test_only_names_whose_extension_is_conf_are_read(name: str, read: bool) -> None:
    assert is_dropin_name(name) is read


def test_walkdir_order_is_lexical_by_path_component() -> None:
    paths = ["90-kubelet-rollout.conf", "99-other.conf", "40-nodeadm.conf", "sub/10-y.conf", "a.conf",
             "a/z.conf", "90-kubelet-rollout.conf.d/x.conf", "Z.conf"]
    ordered = [f.path for f in in_kubelet_order(DropinFile(p) for p in paths)]
    # "a" < "a.conf" (a directory's files come where its name sorts); "Z" < "a" (bytes, not case)
    assert ordered == ["40-nodeadm.conf", "90-kubelet-rollout.conf", "90-kubelet-rollout.conf.d/x.conf",
                       "99-other.conf", "Z.conf", "a/z.conf", "a.conf", "sub/10-y.conf"]
    assert [f.path for f in read_after(OURS, (DropinFile(p) for p in paths))] == ordered[2:]


def test_later_files_win_over_ours_and_earlier_ones_do_not() -> None:
    files = [DropinFile("99-other.conf", {"maxPods": 70}), DropinFile(OURS, {"maxPods": 50}),
             DropinFile("40-nodeadm.conf", {"maxPods": 58, "podPidsLimit": 9})]
    assert merge_in_kubelet_order({"maxPods": 110}, files) == {"maxPods": 70, "podPidsLimit": 9}


def test_the_merge_over_a_running_config_is_the_kubelets_merge() -> None:
    """configz already holds the base and every file (ours of before included): ours applied
    over it, then the later files again, is what the kubelet builds from the files themselves."""
    base = {"maxPods": 110, "featureGates": {"A": True}, "clusterDNS": ["10.0.0.10"], "imageGCLowThresholdPercent": 80}
    earlier = DropinFile("40-nodeadm.conf", {"maxPods": 58})
    later = [DropinFile("99-other.conf", {"imageGCLowThresholdPercent": 70, "featureGates": {"B": False}}),
             DropinFile("zz/1.conf", {"clusterDNS": ["10.0.0.53"], "podPidsLimit": None})]
    ours = {"imageGCHighThresholdPercent": 65, "imageGCLowThresholdPercent": 60, "featureGates": {"A": False},
            "clusterDNS": ["1.1.1.1", "8.8.8.8"], "podPidsLimit": 4096}
    running = merge_in_kubelet_order(base, [earlier, *later])
    assert merged_over_running(running, ours, later) == merge_in_kubelet_order(
        base, [earlier, DropinFile(OURS, ours), *later])


OVERRIDE_CASES = [
    pytest.param({"maxPods": 50}, [{"maxPods": 70}], {"maxPods": ("99-a.conf", 70)}, id="a scalar set again"),
    pytest.param({"maxPods": 50}, [{"maxPods": None}], {"maxPods": ("99-a.conf", None)}, id="a field deleted"),
    pytest.param({"featureGates": {"A": True}}, [{"featureGates": {"B": False}}], {},
                 id="maps merge key by key: another key takes nothing from ours"),
    pytest.param({"featureGates": {"A": True}}, [{"featureGates": None}], {"featureGates.A": ("99-a.conf", None)},
                 id="a whole map deleted takes every key of ours"),
    pytest.param({"clusterDNS": ["1.1.1.1"]}, [{"clusterDNS": ["1.1.1.1", "8.8.8.8"]}],
                 {"clusterDNS": ("99-a.conf", ["1.1.1.1", "8.8.8.8"])}, id="lists are replaced whole"),
    pytest.param({"maxPods": None}, [{"maxPods": 70}], {"maxPods": ("99-a.conf", 70)},
                 id="a deletion of ours set again"),
    pytest.param({"maxPods": 50}, [{"maxPods": 70}, {"maxPods": 50}], {},
                 id="a value restored by a still later file is ours in the end"),
    pytest.param({"maxPods": 50}, [{"maxPods": 50.0}], {}, id="the same number"),
    pytest.param({"failSwapOn": True}, [{"failSwapOn": 1}], {"failSwapOn": ("99-a.conf", 1)},
                 id="true is never 1"),
    pytest.param({"apiVersion": "kubelet.config.k8s.io/v1beta1", "kind": "KubeletConfiguration"},
                 [{"apiVersion": "kubelet.config.k8s.io/v1beta1", "kind": "KubeletConfiguration"}], {},
                 id="type meta is no field"),
]


@pytest.mark.parametrize(("ours", "later", "expected"), OVERRIDE_CASES)
def test_overrides(ours: dict[str, Any], later: list[dict[str, Any]], expected: dict[str, Any]) -> None:
    files = [DropinFile(f"99-{'abc'[i]}.conf", doc) for i, doc in enumerate(later)]
    found = {o.field: (o.file, o.theirs) for o in overrides(ours, files)}
    assert found == expected


def test_an_override_names_the_file_the_field_and_both_values() -> None:
    [override] = overrides({"imageGCLowThresholdPercent": 60}, [DropinFile("99-other.conf", {"imageGCLowThresholdPercent": 70})])
    assert str(override) == ("imageGCLowThresholdPercent is set to 70 by 99-other.conf, read after the drop-in "
                             "(which sets 60): the drop-in's value would not take effect")


def test_the_advertisement_round_trips_and_masks_header_values() -> None:
    after = [DropinFile("99-other.conf", {"imageGCLowThresholdPercent": 70,
                                           "staticPodURLHeader": {"Authorization": ["Bearer secret"]}}),
             DropinFile("zz/x.conf", {}, "cannot be loaded: empty")]
    text = json.dumps({"version": "1", ADVERTISED_AFTER: advertise_after(after)})
    assert "secret" not in text
    back = advertised_after(text)
    assert [(f.path, f.problem) for f in back] == [("99-other.conf", ""), ("zz/x.conf", "cannot be loaded: empty")]
    assert back[0].document["imageGCLowThresholdPercent"] == 70


def test_files_too_large_to_advertise_are_named_with_a_problem() -> None:
    big = DropinFile("99-big.conf", {"staticPodURL": "x" * ADVERTISE_LIMIT})
    [entry] = advertise_after([big])
    assert entry["file"] == "99-big.conf" and "too large" in entry["problem"] and "config" not in entry


@pytest.mark.parametrize("annotation", [None, "", '{"version": "1", "backend": "drop-in"}'])
def test_an_agent_that_advertises_nothing_after_its_drop_in(annotation: str | None) -> None:
    assert advertised_after(annotation) == []


@pytest.mark.parametrize("annotation", ["{not json", '{"dropinsAfter": [{"config": {}}]}', '{"dropinsAfter": "x"}'])
def test_an_unreadable_advertisement_is_a_problem_not_an_error(annotation: str) -> None:
    [entry] = advertised_after(annotation)
    assert "cannot be read" in entry.problem
