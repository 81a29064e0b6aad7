"""The disruption catalogue (rollout/catalog/kubelet-disruption.yaml) against the kubelet source
facts it cites: each entry's class, state file, condition and cited words are checked here against
what was read in kubernetes/kubernetes, written down independently of the data file, so a
correction to one that the other does not follow fails.

What each fact says, and where it was read:
- pkg/kubelet/cm/cpumanager/state/state_checkpoint.go, restoreState: a checkpoint written under
  another policy is refused ("configured policy %q differs from state checkpoint policy %q");
  NewCheckpointState wraps it: "please drain this node and delete the CPU manager checkpoint file".
- pkg/kubelet/cm/cpumanager/cpu_manager.go: cpuManagerStateFileName = "cpu_manager_state".
- pkg/kubelet/cm/cpumanager/policy_static.go, validateState: the reserved CPUs must lie in the
  checkpoint's default cpuset ("not all reserved cpus: ... are present in defaultCpuSet"), and with
  strict-cpu-reservation none of them may ("some of strictly reserved cpus").
- pkg/kubelet/cm/memorymanager/state/state_checkpoint.go, restoreState: "[memorymanager] configured
  policy %q differs from state checkpoint policy %q"; memory_manager.go: "memory_manager_state".
- pkg/kubelet/cm/memorymanager/policy_static.go, validateState: "[memorymanager] the expected machine
  state is different from the real one" (reserved memory changed).
- the topology manager keeps no checkpoint; that running pods are admitted again at restart under
  a new policy is reported (kubernetes/kubernetes#123859), not read in the source: not confirmed.
"""

from __future__ import annotations

from typing import Any, NamedTuple

import pytest

from rollout.kubeletconfig.catalog import load_catalog
from rollout.kubeletconfig.diff import FieldChange
from rollout.kubeletconfig.disruption import (
    CLASSES,
    DRAIN_CLASSES,
    REBOOT,
    RESTART,
    STATE_RESET,
    field_cost,
    load_disruption_catalogue,
)

CATALOGUE_VERSION = (1, 23)  # the field catalogue's minor: a later field is absent from it


class Fact(NamedTuple):
    kind: str
    state_file: str | None
    when: dict[str, Any]
    file: str
    words: str  # a part of the kubelet's own words the entry must cite
    confirmed: bool = True


CPU_STATE = "pkg/kubelet/cm/cpumanager/state/state_checkpoint.go"
CPU_STATIC = "pkg/kubelet/cm/cpumanager/policy_static.go"
MEMORY_STATE = "pkg/kubelet/cm/memorymanager/state/state_checkpoint.go"
MEMORY_STATIC = "pkg/kubelet/cm/memorymanager/policy_static.go"
STATIC_CPU = {"cpuManagerPolicy": "static"}
READMIT = "kubernetes/kubernetes#123859"

KUBELET_FACTS: dict[str, Fact] = {
    "cpuManagerPolicy": Fact(STATE_RESET, "cpu_manager_state", {}, CPU_STATE,
                             "configured policy %q differs from state checkpoint policy %q"),
    "cpuManagerPolicyOptions": Fact(STATE_RESET, "cpu_manager_state", STATIC_CPU, CPU_STATIC,
                                    "some of strictly reserved cpus"),
    "reservedSystemCPUs": Fact(STATE_RESET, "cpu_manager_state", STATIC_CPU, CPU_STATIC,
                               "not all reserved cpus"),
    "kubeReserved.cpu": Fact(STATE_RESET, "cpu_manager_state", STATIC_CPU, CPU_STATIC, "not all reserved cpus"),
    "systemReserved.cpu": Fact(STATE_RESET, "cpu_manager_state", STATIC_CPU, CPU_STATIC, "not all reserved cpus"),
    "memoryManagerPolicy": Fact(STATE_RESET, "memory_manager_state", {}, MEMORY_STATE,
                                "[memorymanager] configured policy %q differs from state checkpoint policy %q"),
    "reservedMemory": Fact(STATE_RESET, "memory_manager_state", {"memoryManagerPolicy": "Static"}, MEMORY_STATIC,
                           "the expected machine state is different from the real one"),
    "topologyManagerPolicy": Fact("drain", None, {}, "pkg/kubelet/kubelet.go", READMIT, confirmed=False),
    "topologyManagerScope": Fact("drain", None, {}, "pkg/kubelet/kubelet.go", READMIT, confirmed=False),
    "topologyManagerPolicyOptions": Fact("drain", None, {}, "pkg/kubelet/kubelet.go", READMIT, confirmed=False),
    "clusterDNS": Fact(RESTART, None, {}, "staging/src/k8s.io/kubelet/config/v1beta1/types.go",
                       "Draining the node is recommended"),
    "resolvConf": Fact(RESTART, None, {}, "staging/src/k8s.io/kubelet/config/v1beta1/types.go",
                       "Draining the node is recommended"),
}
STATE_FILES = {"cpu_manager_state": ("pkg/kubelet/cm/cpumanager/cpu_manager.go", "cpu_manager_state"),
               "memory_manager_state": ("pkg/kubelet/cm/memorymanager/memory_manager.go", "memory_manager_state")}


def test_the_catalogue_names_exactly_the_fields_whose_facts_were_read() -> None:
    assert set(load_disruption_catalogue().entries) == set(KUBELET_FACTS)


@pytest.mark.parametrize("field", sorted(KUBELET_FACTS))
def test_each_entry_says_what_the_kubelet_source_says(field: str) -> None:
    fact, entry = KUBELET_FACTS[field], load_disruption_catalogue().entries[field]
    assert (entry.kind, entry.state_file, dict(entry.when)) == (fact.kind, fact.state_file, fact.when)
    assert entry.source.file == fact.file and fact.words in entry.source.says
    assert entry.source.confirmed is fact.confirmed
    assert entry.source.confirmed or entry.source.note, "an unconfirmed fact says why in its note"


@pytest.mark.parametrize("name", sorted(STATE_FILES))
def test_each_state_file_is_named_as_its_manager_names_it(name: str) -> None:
    source = load_disruption_catalogue().state_files[name]
    assert (source.file, source.confirmed) == (STATE_FILES[name][0], True)
    assert f'"{STATE_FILES[name][1]}"' in source.says


def test_the_state_files_live_in_the_kubelets_root_directory() -> None:
    catalogue = load_disruption_catalogue()
    assert catalogue.state_dir == "/var/lib/kubelet"  # --root-dir's default
    assert "delete the CPU manager checkpoint file" in catalogue.state_dir_source.says
    assert catalogue.state_path("cpu_manager_state") == "/var/lib/kubelet/cpu_manager_state"


def test_every_state_reset_entry_names_a_known_file_and_every_drain_entry_cites_a_source() -> None:
    catalogue = load_disruption_catalogue()
    for entry in catalogue.entries.values():
        assert entry.kind in CLASSES, entry.path
        assert (entry.state_file is not None) == (entry.kind == STATE_RESET), entry.path
        if entry.state_file is not None:
            assert entry.state_file in catalogue.state_files and "{file}" in entry.why, entry.path
        if entry.kind in DRAIN_CLASSES:
            assert entry.source.file and entry.source.function and entry.source.says, entry.path
            assert entry.why, entry.path


def _minor(text: str) -> tuple[int, int]:
    major, minor = text.split(".")
    return int(major), int(minor)


def test_every_entry_is_a_field_of_its_kubelets_unless_it_came_later() -> None:
    """By version: a field newer than 1.23 is in the field catalogue with the same first minor, or
    absent from it (newer than its since table); every other one is a field, or a key of a map
    field, of the 1.23 catalogue."""
    catalog = load_catalog()
    for entry in load_disruption_catalogue().entries.values():
        assert entry.since is not None, entry.path
        top, _, key = entry.path.partition(".")
        spec = catalog.field(top)
        if _minor(entry.since) > CATALOGUE_VERSION:
            assert spec is None or (1, spec.since) == _minor(entry.since), f"{entry.path}: its `since` disagrees"
            continue
        assert spec is not None, entry.path
        assert not key or spec.type.kind == "map", entry.path
        for condition in entry.when:
            assert catalog.field(condition) is not None, condition


def _change(name: str) -> FieldChange:
    spec = load_catalog().field(name)
    assert spec is not None
    return FieldChange(name, None, None, name, spec.dkc_warning, spec.dkc_reason)


@pytest.mark.parametrize("name", [f.name for f in load_catalog().fields])
def test_every_field_of_the_catalogue_has_a_class(name: str) -> None:
    """A field the catalogue does not name costs a restart, or a reboot where its doc comment asks
    for one; every named one costs its entry's class (under its condition)."""
    entry = load_disruption_catalogue().entries.get(name)
    when = dict(entry.when) if entry is not None else {}
    cost = field_cost(_change(name), old=when, new=when)
    spec = load_catalog().field(name)
    assert spec is not None
    expected = entry.kind if entry is not None else REBOOT if spec.dkc_warning == REBOOT else RESTART
    assert cost.kind == expected


def test_the_doc_comments_reboot_is_overridden_only_where_the_source_says_otherwise() -> None:
    """types.go asks a full reboot of the CPU, memory and topology manager policies too; the
    kubelet's own messages give a drain and a state reset: those entries say why (a note)."""
    catalogue = load_disruption_catalogue()
    reboots = {f.name for f in load_catalog().fields if f.dkc_warning == REBOOT}
    overridden = reboots & set(catalogue.entries)
    assert overridden == {"cpuManagerPolicy", "cpuManagerPolicyOptions", "memoryManagerPolicy", "topologyManagerPolicy"}
    assert "the source wins" in catalogue.entries["cpuManagerPolicy"].source.note
    assert catalogue.reboot_source.file == "staging/src/k8s.io/kubelet/config/v1beta1/types.go"
    assert "full node reboot" in catalogue.reboot_source.says


def test_the_estimate_states_its_numbers_and_where_they_come_from() -> None:
    catalogue = load_disruption_catalogue()
    assert (catalogue.restart_seconds, catalogue.eviction_grace_seconds) == (40, 30)
    assert "a restart 40s (the upper end of the 5-40 s" in catalogue.estimate_model
    assert "eviction grace, 30s (a Pod's default terminationGracePeriodSeconds" in catalogue.estimate_model
