"""The kubelet's drop-in merge and the read-back proof, as the agent computes them.

Merge rules from modern-kubelet.md (fact 2): RFC 7386 over the base, maps key by key, lists
replaced whole, null deletes, ``*.conf`` files only, subdirectories walked, lexical order.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from kubelet_rollout_agent.configdir import dropin_files, read_dropins
from kubelet_rollout_agent.merge import merge_dropins, merge_patch
from kubelet_rollout_agent.readback import not_in_effect, same_value

BASE: dict[str, Any] = {"maxPods": 110, "featureGates": {"A": True, "B": False},
                        "clusterDNS": ["10.0.0.10", "10.0.0.11"], "evictionHard": {"memory.available": "100Mi"}}


@pytest.mark.parametrize(("patch", "expected"), [
    pytest.param({"maxPods": 50}, {**BASE, "maxPods": 50}, id="scalars replace"),
    pytest.param({"featureGates": {"B": True}}, {**BASE, "featureGates": {"A": True, "B": True}},
                 id="maps of scalars merge key by key"),
    pytest.param({"clusterDNS": ["10.0.0.53"]}, {**BASE, "clusterDNS": ["10.0.0.53"]},
                 id="lists are replaced whole, not merged"),
    pytest.param({"maxPods": None}, {k: v for k, v in BASE.items() if k != "maxPods"},
                 id="null deletes a key (defaulting re-fills it later)"),
    pytest.param({"featureGates": {"A": None}}, {**BASE, "featureGates": {"B": False}},
                 id="null deletes inside a map too"),
    pytest.param({"readOnlyPort": 0}, {**BASE, "readOnlyPort": 0}, id="explicit zero values are kept"),
])
def test_merge_patch_rules(patch: dict[str, Any], expected: dict[str, Any]) -> None:
    assert merge_patch(BASE, patch) == expected


def test_merge_does_not_modify_its_inputs() -> None:
    base = {"featureGates": {"A": True}}
    merge_dropins(base, [{"featureGates": {"A": False}}])
    assert base == {"featureGates": {"A": True}}


def test_later_dropins_win() -> None:
    assert merge_dropins({"maxPods": 1}, [{"maxPods": 2}, {"maxPods": 3}])["maxPods"] == 3


def test_dropin_files_walk_subdirectories_in_lexical_order_and_only_conf(tmp_path: Path) -> None:
    for name in ("90-kubelet-rollout.conf", "40-nodeadm.conf", "sub/50-x.conf", "sub/deeper/10-y.conf",
                 "README", "90-kubelet-rollout.conf.bak", ".90-kubelet-rollout.conf.kubelet-rollout-tmp-ab"):
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text("x")
    found = [p.relative_to(tmp_path).as_posix() for p in dropin_files(tmp_path)]
    assert found == ["40-nodeadm.conf", "90-kubelet-rollout.conf", "sub/50-x.conf", "sub/deeper/10-y.conf"]


def test_dropin_files_of_a_missing_dir_is_empty(tmp_path: Path) -> None:
    assert dropin_files(tmp_path / "nope") == []


@pytest.mark.parametrize(("written", "running", "same"), [
    pytest.param("1m", "1m0s", True, id="durations compare by length (the kubelet prints 1m0s)"),
    pytest.param("1024Mi", "1Gi", True, id="quantities compare canonically"),
    pytest.param(50, 50.0, True, id="JSON numbers compare by value"),
    pytest.param(True, 1, False, id="a boolean is never a number"),
    pytest.param(["a", "b"], ["b", "a"], False, id="lists compare in order"),
    pytest.param("10s", "11s", False, id="different durations differ"),
])
def test_same_value(written: Any, running: Any, same: bool) -> None:
    assert same_value(written, running) is same


def test_readback_names_each_field_not_in_effect() -> None:
    dropin = {"apiVersion": "kubelet.config.k8s.io/v1beta1", "kind": "KubeletConfiguration",
              "maxPods": 50, "resolvConf": "/run/x", "featureGates": {"A": True, "B": True},
              "shutdownGracePeriod": "30s", "imageGCHighThresholdPercent": None}
    configz = {"kubeletconfig": {"maxPods": 90, "featureGates": {"A": True, "B": False},
                                 "shutdownGracePeriod": "30s"}}
    assert not_in_effect(dropin, configz) == ["featureGates.B", "maxPods", "resolvConf"]


def test_readback_of_a_config_in_effect_is_empty() -> None:
    dropin = {"maxPods": 50, "systemReserved": {"memory": "1Gi"}}
    configz = {"kubeletconfig": {"maxPods": 50, "systemReserved": {"memory": "1024Mi", "cpu": "500m"}}}
    assert not_in_effect(dropin, configz) == []


def test_dropin_files_follow_walkdir_on_symlinks_and_directory_names(tmp_path: Path) -> None:
    """WalkDir enters directories (even one named x.conf) but no symlink; a symlink named *.conf
    is read as a file, whatever it points at."""
    outside = tmp_path / "outside"
    (outside / "linked").mkdir(parents=True)
    (outside / "linked" / "10-hidden.conf").write_text("x")
    (outside / "target.yaml").write_text("x")
    conf_d = tmp_path / "conf.d"
    (conf_d / "50-dir.conf").mkdir(parents=True)
    (conf_d / "50-dir.conf" / "1.conf").write_text("x")
    (conf_d / "60-link").symlink_to(outside / "linked", target_is_directory=True)
    (conf_d / "70-file-link.conf").symlink_to(outside / "target.yaml")
    found = [p.relative_to(conf_d).as_posix() for p in dropin_files(conf_d)]
    assert found == ["50-dir.conf/1.conf", "70-file-link.conf"]


def test_read_dropins_names_each_file_the_kubelet_could_not_load(tmp_path: Path) -> None:
    head = "apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\n"
    files = {"40-nodeadm.conf": head + "maxPods: 58\n", "50-empty.conf": "", "60-nokind.conf": "maxPods: 1\n",
             "90-kubelet-rollout.conf": head + "maxPods: 50\n", "99-other.conf": head + "podPidsLimit: 9\n"}
    for name, text in files.items():
        (tmp_path / name).write_text(text)
    read = read_dropins(tmp_path, skip=tmp_path / "90-kubelet-rollout.conf")
    assert [(f.path, bool(f.problem)) for f in read] == [
        ("40-nodeadm.conf", False), ("50-empty.conf", True), ("60-nokind.conf", True), ("99-other.conf", False)]
    assert read[0].document["maxPods"] == 58 and "kind" in read[2].problem
