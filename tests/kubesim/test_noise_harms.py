"""The harm catalogue (kubesim.harms): each harmful config, at its documented strength, moves its
named metric the harmful way against an unchanged node with the same fleet noise (same node name,
same seed: the same hosts, pods and cache misses up to the change), stepped directly.
"""

from __future__ import annotations

import statistics
from typing import Any

import pytest

from kubesim.harms import HARMS, Harm, harm
from kubesim.kubelet.exposition import HistogramSnapshot
from kubesim.standalone import StandaloneNode

FLEET = {"preset": "fleet"}
SEEDS = (1, 2, 3)


def measure(entry: Harm, config: dict[str, Any], seed: int, *, version: str = "1.32") -> dict[str, float]:
    """Half an hour on the base config, then the kubelet restarts onto ``config`` for an hour."""
    node = StandaloneNode.build("node-1", noise=FLEET, seed=seed, kubelet_version=version,
                                pool={"host": entry.host} if entry.host else None, config=entry.base)
    node.run("30m")
    restarts_before = _restarts(node)
    node.configure({**entry.base, **config})
    running = []
    for _ in range(360):
        node.step(10)
        running.append(node.workload.running)
    snap = node.snapshot()
    sample = snap.get((entry.metric, entry.labels), 0.0)
    if entry.statistic == "mean":
        value = statistics.mean(running)
    elif entry.statistic == "p95":
        assert isinstance(sample, HistogramSnapshot)
        value = sample.quantile(0.95)
    else:
        assert isinstance(sample, float)
        value = sample
    return {
        "value": value,
        "evictions": float(snap.get(("kubelet_evictions", (("eviction_signal", "memory.available"),)), 0.0)),
        "restarts": _restarts(node) - restarts_before,
        "running": statistics.mean(running),
    }


def _restarts(node: StandaloneNode) -> float:
    return sum(p.restarts for p in node.workload.pods)


def worse(entry: Harm, canary: float, control: float) -> bool:
    """Clearly harmful: a third up (or 15% down), and for a counter at least a handful more."""
    if entry.direction == "down":
        return canary < 0.85 * control
    if entry.statistic == "increase":
        return canary > 1.3 * control + 5
    return canary > 1.3 * control


@pytest.mark.parametrize("entry", HARMS, ids=[h.name for h in HARMS])
def test_each_harm_at_its_documented_strength_shows_against_an_unchanged_node(entry: Harm) -> None:
    for seed in SEEDS:
        control = measure(entry, {}, seed)["value"]
        canary = measure(entry, entry.config, seed)["value"]
        assert worse(entry, canary, control), f"seed {seed}: {entry.metric} {control} -> {canary}"


@pytest.mark.parametrize("entry", HARMS, ids=[h.name for h in HARMS])
def test_the_mild_strength_lies_between_no_change_and_the_documented_one(entry: Harm) -> None:
    """Over four seeds (medians: one run of a mild harm is within the noise)."""
    seeds = range(1, 5)
    control, mild, strong = (statistics.median(measure(entry, config, seed)["value"] for seed in seeds)
                             for config in ({}, entry.mild, entry.config))
    if entry.direction == "down":
        assert strong <= mild <= control, (control, mild, strong)
    else:
        assert control <= mild * 1.05 and mild <= strong, (control, mild, strong)


def test_reserved_memory_shows_only_against_the_control_cohort() -> None:
    """kubeReserved 11Gi + systemReserved 3.5Gi on a 16Gi node: allocatable falls to 1.4Gi, the
    node runs fewer pods than its unchanged peer, and nothing on the node itself looks wrong."""
    entry = harm("reserved-memory")
    for seed in SEEDS:
        control = measure(entry, {}, seed)
        canary = measure(entry, entry.config, seed)
        assert canary["evictions"] == 0 and canary["restarts"] == 0
        assert canary["running"] < 0.7 * control["running"]


def test_admission_rejections_are_served_from_1_32_only() -> None:
    for version, expected in (("1.31", False), ("1.32", True)):
        node = StandaloneNode.build("node-1", noise=FLEET, seed=1, kubelet_version=version)
        node.run("20m")
        node.configure({"maxPods": 1})  # below what it runs: re-admission rejects the rest
        node.run("1m")
        names = {name for name, _ in node.snapshot()}
        assert ("kubelet_admission_rejections_total" in names) is expected


def test_image_gc_counter_is_served_from_1_30_and_remove_image_on_every_version() -> None:
    entry = harm("image-gc")
    for version, gc in (("1.23", False), ("1.30", True)):
        node = StandaloneNode.build("node-1", noise=FLEET, seed=1, kubelet_version=version, config=entry.config)
        node.run("30m")
        assert node.value("kubelet_runtime_operations_total", operation_type="remove_image") > 0
        names = {name for name, _ in node.snapshot()}
        assert ("kubelet_image_garbage_collected_total" in names) is gc


def test_image_gc_starts_again_with_the_kubelet_and_frees_nothing_for_five_minutes() -> None:
    """A restarted kubelet's first GC pass finds every image newly detected (none older than
    imageMinimumGCAge): a low GC threshold deletes images at the second pass, five minutes on."""
    node = StandaloneNode.build("node-1", noise=FLEET, seed=1)
    node.run("17m")  # mid-way between two of the old process's passes (every 5 minutes from boot)
    node.configure(harm("image-gc").config)
    node.run("290s")
    assert node.value("kubelet_runtime_operations_total", operation_type="remove_image") == 0
    node.run("20s")
    assert node.value("kubelet_runtime_operations_total", operation_type="remove_image") > 5


def test_max_parallel_image_pulls_needs_a_1_27_kubelet() -> None:
    entry = harm("max-parallel-pulls")
    p95 = {}
    for version in ("1.26", "1.27"):
        control = measure(entry, {}, 1, version=version)["value"]
        canary = measure(entry, entry.config, 1, version=version)["value"]
        p95[version] = canary / control
    assert p95["1.26"] == 1.0  # an unknown field to a 1.26 kubelet: nothing changes
    assert p95["1.27"] > 1.3


def _series(node: StandaloneNode, name: str) -> dict[tuple[tuple[str, str], ...], float]:
    return {labels: value for (metric, labels), value in node.snapshot().items() if metric == name}


def test_allocatable_is_served_as_kube_state_metrics_names_it_and_follows_the_config() -> None:
    node = StandaloneNode.build("node-1", noise=FLEET, seed=1)
    node.run("5m")
    before = _series(node, "kube_node_status_allocatable")
    assert before[(("resource", "pods"), ("unit", "integer"))] == 110
    assert before[(("resource", "memory"), ("unit", "byte"))] > 15 * 2**30  # 16Gi less the 100Mi threshold
    requests = _series(node, "kube_pod_container_resource_requests")
    assert len(requests) == node.workload.running and set(requests.values()) == {node.workload.pod_request}
    assert len(_series(node, "kube_pod_status_phase")) == node.workload.running
    node.configure({**harm("reserved-memory").config, "maxPods": 6})
    node.step(10)
    after = _series(node, "kube_node_status_allocatable")
    assert after[(("resource", "pods"), ("unit", "integer"))] == 6
    assert after[(("resource", "memory"), ("unit", "byte"))] == 16 * 2**30 - (11 + 3.5) * 2**30 - 100 * 2**20


def _backing_off(config: dict[str, Any], noise: dict[str, Any]) -> list[int]:
    """Pods seen waiting in ImagePullBackOff at each scrape of 10 minutes, per seed."""
    seen = []
    for seed in SEEDS:
        node = StandaloneNode.build("node-1", noise=noise, seed=seed, config={"serializeImagePulls": False})
        node.run("20m")
        node.configure({"serializeImagePulls": False, **config})
        count = 0
        for _ in range(60):
            node.step(10)
            count += len(_series(node, "kube_pod_container_status_waiting_reason"))
        seen.append(count)
    return seen


def test_pulls_refused_by_the_registry_qps_or_failed_by_the_registry_wait_in_image_pull_back_off() -> None:
    assert _backing_off({}, {**FLEET, "pullErrorRate": 0}) == [0, 0, 0]  # nothing fails: nobody waits
    rare = _backing_off({}, FLEET)  # the fleet's registry fails one pull in 200
    throttled = _backing_off(harm("pull-qps").config, {**FLEET, "pullErrorRate": 0})
    assert max(rare) <= 10 and min(throttled) > 5 * max(max(rare), 1), (rare, throttled)


def _waited_per_start(node: StandaloneNode) -> float:
    """Seconds a pod start took beyond its image pull and its container start, per start."""
    snap = node.snapshot()
    starts = snap[("kubelet_pod_start_duration_seconds", ())]
    assert isinstance(starts, HistogramSnapshot)
    spent = 0.0
    for op in ("pull_image", "start_container"):
        timed = snap[("kubelet_runtime_operations_duration_seconds", (("operation_type", op),))]
        assert isinstance(timed, HistogramSnapshot)
        spent += timed.sum
    return (starts.sum - spent) / starts.count


def test_a_pod_start_is_its_pull_and_its_container_start_unless_pulls_wait_for_the_puller() -> None:
    """The kubelet times each PullImage and StartContainer call as it returns, and a pod's start
    from when it was seen: on a node pulling in parallel the three add up (what
    `image-pull-wait-vs-control` reads), after a restart too (a pull in flight is timed again by
    the new process); one pulling serially makes starts wait behind each other's pulls."""
    for seed in SEEDS:
        waited = {}
        for serial in (False, True):
            node = StandaloneNode.build("node-1", noise={**FLEET, "pullErrorRate": 0}, seed=seed,
                                        config={"serializeImagePulls": False})
            node.run("20m")
            node.configure({"serializeImagePulls": serial})
            node.run("10m")
            waited[serial] = _waited_per_start(node)
        assert abs(waited[False]) < 0.05, (seed, waited)
        assert waited[True] > 0.5, (seed, waited)
