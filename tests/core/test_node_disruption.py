"""What a config change costs a node (rollout.kubeletconfig.disruption.node_disruption): the
dearest class of its changes, the fields driving it, the state files to delete, and the estimate
of the stated model. Pure: documents in, values out; one case per rule, named for it."""

from __future__ import annotations

from typing import Any, NamedTuple

import pytest

from rollout.kubeletconfig.disruption import (
    DRAIN,
    NOTHING,
    REBOOT,
    RESTART,
    STATE_RESET,
    Disruption,
    estimate_seconds,
    load_disruption_catalogue,
    node_disruption,
)

CPU_STATE = "/var/lib/kubelet/cpu_manager_state"
MEMORY_STATE = "/var/lib/kubelet/memory_manager_state"
STATIC = {"cpuManagerPolicy": "static", "reservedSystemCPUs": "0"}
PINNED = {"memoryManagerPolicy": "Static", "reservedMemory": [{"numaNode": 0, "limits": {"memory": "1Gi"}}]}


class Case(NamedTuple):
    old: dict[str, Any]
    new: dict[str, Any]
    kind: str
    fields: tuple[str, ...]
    files: tuple[str, ...] = ()
    drain: str = "auto"


CASES = {
    "nothing changes: nothing to pay": Case({"maxPods": 80}, {"maxPods": 80}, NOTHING, ()),
    "a plain field: a restart": Case({}, {"maxPods": 80}, RESTART, ("maxPods",)),
    "cpuManagerPolicy none -> static: a state reset of the CPU manager's file":
        Case({}, STATIC, STATE_RESET, ("cpuManagerPolicy", "reservedSystemCPUs"), (CPU_STATE,)),
    "static -> none: the file was written under static, a state reset too":
        Case(STATIC, {}, STATE_RESET, ("cpuManagerPolicy", "reservedSystemCPUs"), (CPU_STATE,)),
    "reservedSystemCPUs under the none policy: nothing checks it, a restart":
        Case({}, {"reservedSystemCPUs": "0-1"}, RESTART, ("reservedSystemCPUs",)),
    "reservedSystemCPUs under static: the static policy checks it against its file":
        Case(STATIC, {**STATIC, "reservedSystemCPUs": "0-1"}, STATE_RESET, ("reservedSystemCPUs",), (CPU_STATE,)),
    "kubeReserved cpu under static moves the reserved set; its memory does not":
        Case({"cpuManagerPolicy": "static", "kubeReserved": {"cpu": "1", "memory": "1Gi"}},
             {"cpuManagerPolicy": "static", "kubeReserved": {"cpu": "2", "memory": "2Gi"}},
             STATE_RESET, ("kubeReserved.cpu",), (CPU_STATE,)),
    "memoryManagerPolicy None -> Static: a state reset of the memory manager's file":
        Case({}, PINNED, STATE_RESET, ("memoryManagerPolicy", "reservedMemory"), (MEMORY_STATE,)),
    "reservedMemory under the None policy: a restart":
        Case({}, {"reservedMemory": PINNED["reservedMemory"]}, RESTART, ("reservedMemory",)),
    "both managers at once: both files": Case({}, {**STATIC, **PINNED}, STATE_RESET,
                                              ("cpuManagerPolicy", "memoryManagerPolicy", "reservedSystemCPUs",
                                               "reservedMemory"), (CPU_STATE, MEMORY_STATE)),
    "a topology policy: a drain, no file to delete":
        Case({}, {"topologyManagerPolicy": "single-numa-node"}, DRAIN, ("topologyManagerPolicy",)),
    "the dearest change sets the cost, and only it drives it":
        Case({}, {"maxPods": 80, "topologyManagerScope": "pod"}, DRAIN, ("topologyManagerScope",)),
    "a cgroup field: a reboot, as its doc comment says": Case({}, {"cgroupDriver": "systemd"}, REBOOT, ("cgroupDriver",)),
    "drain: always drains for a plain restart": Case({}, {"maxPods": 80}, DRAIN, ("maxPods",), drain="always"),
    "drain: always does not lighten a state reset":
        Case({}, STATIC, STATE_RESET, ("cpuManagerPolicy", "reservedSystemCPUs"), (CPU_STATE,), drain="always"),
}


@pytest.mark.parametrize("case", CASES.values(), ids=CASES.keys())
def test_node_disruption(case: Case) -> None:
    cost = node_disruption(case.old, case.new, drain=case.drain)
    assert (cost.kind, sorted(cost.fields), cost.state_files) == (case.kind, sorted(case.fields), case.files)
    assert cost.seconds == estimate_seconds(case.kind)
    assert cost.drains is (case.kind in (DRAIN, STATE_RESET))


def test_the_reasons_quote_the_node_and_the_file() -> None:
    cost = node_disruption({"cpuManagerPolicy": "none"}, STATIC)
    assert f"cpuManagerPolicy: the kubelet refuses to start while {CPU_STATE} was written under policy 'none'" in \
        cost.reasons


def test_the_estimate_is_the_stated_model() -> None:
    """A restart; a drain adds one eviction grace; a state reset costs what a drain does; a reboot is
    not estimated (a host's boot is its own)."""
    catalogue = load_disruption_catalogue()
    restart, grace = catalogue.restart_seconds, catalogue.eviction_grace_seconds
    assert [estimate_seconds(k) for k in (NOTHING, RESTART, DRAIN, STATE_RESET, REBOOT)] == \
        [0, restart, grace + restart, grace + restart, None]


@pytest.mark.parametrize(("cost", "words"), [
    (Disruption(NOTHING), "nothing"),
    (Disruption(RESTART, ("maxPods",), seconds=40), "restart, about 40s"),
    (Disruption(STATE_RESET, ("cpuManagerPolicy",), (CPU_STATE,), seconds=70),
     f"drain + state reset ({CPU_STATE}), about 1m10s"),
    (Disruption(REBOOT, ("cgroupDriver",), seconds=None), "reboot, not estimated"),
])
def test_the_words_people_read(cost: Disruption, words: str) -> None:
    assert cost.words() == words
    assert Disruption.from_json(cost.as_json()) == cost
