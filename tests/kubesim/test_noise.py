"""Fleet noise (kubesim.noise): nodes that differ and wander like a fleet's, reproducible from a seed,
and fleet-wide shifts that hit every node alike - stepped directly (kubesim.standalone), no cluster.

Every test is deterministic from its seeds: no timing, no wall clock.
"""

from __future__ import annotations

import math
import statistics
from pathlib import Path

import pytest

from kubesim.clusterfile import ClusterFileError, expand, load_cluster_file
from kubesim.faults import Faults
from kubesim.kubelet.exposition import HistogramSnapshot
from kubesim.noise import Noise
from kubesim.standalone import StandaloneNode, kubelet_config, node_spec

FLEET = {"preset": "fleet"}


def series(node: StandaloneNode, hours: float, period: float = 10.0) -> list[tuple[int, float]]:
    """Running pods and free memory (GiB) after every step."""
    out = []
    for _ in range(round(hours * 3600 / period)):
        node.step(period)
        out.append((node.workload.running, round(node.workload.free_memory / 2**30, 6)))
    return out


def hist(node: StandaloneNode, name: str, **labels: str) -> HistogramSnapshot:
    sample = node.snapshot()[(name, tuple(sorted(labels.items())))]
    assert isinstance(sample, HistogramSnapshot)
    return sample


def test_the_same_seed_gives_the_same_series_and_another_seed_another() -> None:
    first = StandaloneNode.build("node-1", noise=FLEET, seed=11)
    again = StandaloneNode.build("node-1", noise=FLEET, seed=11)
    other = StandaloneNode.build("node-1", noise=FLEET, seed=12)
    a, b, c = series(first, 2), series(again, 2), series(other, 2)
    assert a == b
    assert first.snapshot() == again.snapshot()  # every counter and histogram bucket
    assert a != c
    assert first.snapshot() != other.snapshot()


def test_without_a_noise_section_nodes_are_deterministic_by_name_as_before() -> None:
    spec = node_spec("node-1")
    assert spec.noise == Noise() and spec.noise.seed is None
    node = StandaloneNode(spec)
    runs = series(node, 1)
    assert {r for r, _ in runs} == {10}  # the fixed replacement rate keeps the node at its pods
    assert {f for _, f in runs} == {10.0}  # 16Gi - 1Gi system - 10 x 512Mi, every step
    relist = hist(node, "kubelet_pleg_relist_duration_seconds")
    assert relist.sum / relist.count < 0.01  # 2 ms + 0.4 ms a pod + up to 3 ms of jitter


def test_hosts_differ_within_a_pool_by_their_speed_and_memory_factors() -> None:
    def spread(noise: dict[str, object]) -> tuple[float, float]:
        means, slows = [], []
        for i in range(24):
            node = StandaloneNode.build(f"node-{i}", noise=noise, seed=5)
            node.run("20m")
            relist = hist(node, "kubelet_pleg_relist_duration_seconds")
            means.append(relist.sum / relist.count)
            slows.append(node.workload.slowness)
        return statistics.pstdev(math.log(m) for m in means), statistics.pstdev(math.log(s) for s in slows)

    # failed pulls leave nodes a pod or two short for a while (relists cost per pod): held still here
    steady = {**FLEET, "pullErrorRate": 0}
    uniform_relist, uniform_hosts = spread({**steady, "hostSpeedSigma": 0})
    fleet_relist, fleet_hosts = spread(steady)
    assert uniform_hosts == 0.0 and 0.08 < fleet_hosts < 0.25  # lognormal, sigma 0.15
    assert fleet_relist > 2 * uniform_relist  # the per-node medians spread with the hosts
    memory = {StandaloneNode.build(f"node-{i}", noise=FLEET, seed=5).workload.memory_factor for i in range(8)}
    assert len(memory) == 8 and all(0.7 < m < 1.4 for m in memory)


def test_poisson_churn_brings_arrivals_and_completions_around_the_target() -> None:
    node = StandaloneNode.build("node-1", noise=FLEET, seed=3)
    seen: set[str] = set()
    running = []
    for _ in range(360):
        node.step(10)
        seen.update(p.name for p in node.workload.pods)
        running.append(node.workload.running)
    assert len(seen) > 300  # ~12 arrivals a minute for an hour, each a new pod
    assert min(running) < 8 and max(running) > 12  # wanders around 10 instead of staying there
    assert 7 < statistics.mean(running) < 11
    starts = hist(node, "kubelet_pod_start_duration_seconds")
    assert starts.count > 500 and starts.quantile(0.95) > 3 * starts.quantile(0.5)  # cache misses: a heavy tail


def test_under_the_default_config_evictions_are_rare_but_do_happen() -> None:
    total, windows, evicting = 0.0, 0, 0
    for i in range(8):
        node = StandaloneNode.build(f"node-{i}", noise=FLEET, seed=21)
        last = 0.0
        for _ in range(12 * 6):  # 12 hours in 10-minute windows
            node.run("10m")
            now = node.value("kubelet_evictions", eviction_signal="memory.available")
            windows += 1
            evicting += now > last
            last = now
        total += last
    per_node_hour = total / (8 * 12)
    assert total > 0  # genuine evictions under evictionHard's 100Mi: memory use crossed it
    assert per_node_hour < 1.0  # rare: a node sees one every few hours
    assert evicting / windows < 0.15


def test_a_shift_moves_changed_and_unchanged_nodes_alike() -> None:
    changed = {"containerLogMaxSize": "1Mi"}  # a harm that leaves pod starts and memory alone

    def measured(config: dict[str, object], shifted: bool) -> tuple[float, float]:
        node = StandaloneNode.build("node-1", noise=FLEET, seed=8, config=config)
        node.run("20m")
        node.configure(config)
        if shifted:
            node.shift(pod_start=3.0, memory=1.3, for_="1h")
        per_pod = []
        for _ in range(360):
            node.step(10)
            if node.workload.running:
                per_pod.append(node.workload.used_memory() / node.workload.running)
        return hist(node, "kubelet_pod_start_duration_seconds").quantile(0.5), statistics.mean(per_pod)

    for config in ({}, changed):
        calm_start, calm_memory = measured(config, False)
        start, memory = measured(config, True)
        assert start > 2 * calm_start  # pod starts take 3x as long on every node
        assert memory > 1.15 * calm_memory  # each pod uses 30% more memory on every node


def test_a_shift_only_lasts_its_window_and_shifts_multiply() -> None:
    node = StandaloneNode.build("node-1", noise=FLEET, seed=8)
    node.run("10m")
    node.shift(churn=3.0, for_="10m", at="5m")
    node.shift(churn=2.0, cpu=1.5, for_="20m")
    assert node.workload.factors().churn == 2.0
    node.run("6m")
    assert node.workload.factors().churn == 6.0 and node.workload.factors().cpu == 1.5
    node.run("15m")
    assert node.workload.factors().churn == 1.0


def test_shifts_declared_in_the_cluster_file_run_on_the_fleet_clock() -> None:
    node = StandaloneNode.build("node-1", noise={**FLEET, "shifts": [{"at": "10m", "for": "5m", "memory": 1.2}]})
    assert node.workload.factors().memory == 1.0
    node.run("11m")
    assert node.workload.factors().memory == 1.2
    node.run("5m")
    assert node.workload.factors().memory == 1.0


def test_snapshot_reads_the_registry_as_a_scrape_would() -> None:
    node = StandaloneNode.build("node-1", noise=FLEET, seed=2, kubelet_version="1.31")
    node.run("30m")
    snap = node.snapshot()
    assert snap[("kubelet_running_pods", ())] == node.workload.running
    starts = snap[("kubelet_pod_start_duration_seconds", ())]
    assert isinstance(starts, HistogramSnapshot)
    assert starts.buckets[-1] == (math.inf, starts.count)
    assert [c for _, c in starts.buckets] == sorted(c for _, c in starts.buckets)  # cumulative
    assert 0 < starts.quantile(0.5) <= starts.quantile(0.99)
    assert ("kubelet_runtime_operations_duration_seconds", (("operation_type", "pull_image"),)) in snap
    assert not any(name == "kubelet_admission_rejections_total" for name, _ in snap)  # 1.32+
    assert snap[("kubelet_pleg_last_seen_seconds", ())] == node.clock  # no wall clock
    # the text a scrape reads carries the same numbers
    text = node.metrics.text(node.workload)
    assert f"kubelet_pod_start_duration_seconds_count {starts.count}" in text


def test_configure_restarts_the_kubelet_counters_but_not_the_pods() -> None:
    node = StandaloneNode.build("node-1", noise=FLEET, seed=2, kubelet_version="1.32")
    node.run("20m")
    running = node.workload.running
    assert running > 4
    node.configure({"maxPods": 4})
    assert ("kubelet_pod_start_duration_seconds", ()) not in node.snapshot()  # a new registry
    assert node.workload.running == running  # containers keep running across a kubelet restart
    step = node.step(10)
    # re-admitted oldest first: the newest pods beyond maxPods are rejected (OutOfpods)
    assert step.rejected == {"OutOfpods": running - 4}
    assert node.value("kubelet_admission_rejections_total", reason="OutOfpods") == running - 4
    assert node.workload.running <= 4


def test_kubelet_config_fills_in_the_defaults_and_is_shared() -> None:
    cfg = kubelet_config({"maxPods": 6})
    assert cfg["maxPods"] == 6 and cfg["evictionHard"]["memory.available"] == "100Mi"
    assert kubelet_config({"maxPods": 6}) is cfg  # decoded once per distinct body
    assert "maxParallelImagePulls" not in kubelet_config({"maxParallelImagePulls": 2}, minor=26)
    assert kubelet_config({"maxParallelImagePulls": 2}, minor=27)["maxParallelImagePulls"] == 2


# --------------------------------------------------------------------------------- cluster file


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "cluster.yaml"
    path.write_text(text)
    return path


def test_the_cluster_file_noise_section_with_a_pool_override(tmp_path: Path) -> None:
    path = write(tmp_path, """
apiVersion: kubesim.kubelet-rollout.io/v1
kind: Cluster
noise:
  preset: fleet
  seed: 42
  imageCacheHit: 0.5
  shifts: [{at: 10m, for: 20m, podStart: 2.0, memory: 1.1, churn: 3}]
pools:
  - {name: general, count: 2}
  - name: quiet
    count: 1
    noise: {preset: none, relistJitter: 1ms}
""")
    specs = {s.name: s.noise for s in expand(load_cluster_file(path))}
    general, quiet = specs["general-1"], specs["quiet-1"]
    assert general.preset == "fleet" and general.seed == 42 and general.image_cache_hit == 0.5
    assert general.host_speed_sigma == 0.15 and general.churn == "poisson"
    assert quiet.preset == "none" and quiet.host_speed_sigma == 0.0 and quiet.relist_jitter == "1ms"
    assert quiet.image_cache_hit == 0.5  # the cluster's explicit keys still reach the pool
    assert general.shifts == quiet.shifts and general.shifts[0].shift().end == 1800.0
    assert specs["general-2"] == general  # the same noise, drawn differently per node name


def test_every_existing_cluster_file_keeps_no_noise(tmp_path: Path) -> None:
    path = write(tmp_path, "pools: [{name: general, count: 1}]\n")
    assert expand(load_cluster_file(path))[0].noise == Noise()


@pytest.mark.parametrize(
    ("noise", "message"),
    [
        ("{hostSpeedSigma: -1}", "noise.hostSpeedSigma: Input should be greater than or equal to 0"),
        ("{imageCacheHit: 1.5}", "noise.imageCacheHit: Input should be less than or equal to 1"),
        ("{preset: busy}", "noise.preset: Input should be 'none' or 'fleet'"),
        ("{churn: bursty}", "noise.churn: Input should be 'steady' or 'poisson'"),
        ("{memoryWalkPeriod: soon}", "noise.memoryWalkPeriod: Value error, invalid duration 'soon'"),
        ("{seeed: 1}", "noise.seeed: Extra inputs are not permitted"),
        ("{shifts: [{at: 10m}]}", "noise.shifts.0.for: Field required"),
        ("{shifts: [{for: 0s}]}", "noise.shifts.0.for: Value error, must be a positive duration"),
        ("{shifts: [{for: 5m, podStart: 0}]}", "noise.shifts.0.podStart: Input should be greater than 0"),
    ],
)
def test_bad_noise_keys_are_reported_with_their_path(tmp_path: Path, noise: str, message: str) -> None:
    path = write(tmp_path, f"noise: {noise}\npools: [{{name: general, count: 1}}]\n")
    with pytest.raises(ClusterFileError) as caught:
        load_cluster_file(path)
    assert message in str(caught.value) and str(path) in str(caught.value)


def test_shifts_are_fleet_wide_not_a_pools(tmp_path: Path) -> None:
    path = write(tmp_path, "pools: [{name: general, count: 1, noise: {shifts: [{for: 5m}]}}]\n")
    with pytest.raises(ClusterFileError, match="shifts are fleet-wide: declare them in the cluster's noise section"):
        load_cluster_file(path)


# --------------------------------------------------------------------------------- run time


def test_faults_carry_runtime_shifts_on_the_fleet_clock() -> None:
    faults = Faults(time_scale=60.0)
    faults.apply({"shifts": [{"for": "10m", "podStart": 2}]})
    (shift,) = faults.active_shifts()
    assert shift.pod_start == 2.0 and shift.end - shift.start == 600.0
    assert shift.start <= faults.now() < shift.end
    assert faults.to_dict()["shifts"][0]["podStart"] == 2.0
    faults.apply({"shifts": [{"for": "5m", "at": "1h", "churn": 3}]})
    assert len(faults.active_shifts()) == 2
    faults.apply({"shifts": None})
    assert faults.active_shifts() == []
    faults.apply({"shifts": [{"for": "5m"}]})
    faults.apply({"reset": True})
    assert faults.active_shifts() == []
    for bad in ({"shifts": [{"podStart": 2}]}, {"shifts": [{"for": "5m", "speed": 2}]}, {"shifts": "slow"}):
        with pytest.raises(ValueError):
            faults.apply(bad)
