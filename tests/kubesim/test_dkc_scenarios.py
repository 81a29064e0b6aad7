"""DKC scenarios (reference section 6.10) and edge cases (section 13) through the Python client.

One cluster for the module (time scale 40: sync/status ticks 0.25-0.3 s, restart delay 0.25 s,
trial 4 s, crash window 1.5 s, node-monitor grace 3 s); every test owns its own node(s), so the
tests do not depend on each other's order. Each test asserts ``status.config``, the Ready
condition, the ``KubeletConfigChanged``/``Starting`` events and the node's on-disk store.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any, Iterator

import pytest
import yaml
from kubernetes import client, config

from kubesim.cluster import Cluster
from tests.kubesim.kubelet_helpers import (
    NodeStore,
    assign,
    cm_ref,
    config_status,
    lease_renew_time,
    node_events,
    payload,
    raw_node,
    ready_status,
    resolved,
    wait_for,
)

SCALE = 40.0
TRIAL = 160.0 / SCALE  # real seconds
LOAD = "failed to load config, see Kubelet log for details"
VALIDATE = "failed to validate config, see Kubelet log for details"
DOWNLOAD = "failed to sync: failed to download config, see Kubelet log for details"

CLUSTER = {
    "apiVersion": "kubesim.kubelet-rollout.io/v1",
    "kind": "Cluster",
    "pools": [
        {"name": "w", "count": 19},
        {
            "name": "sysd",
            "count": 1,
            "host": {"cgroupDriver": "systemd", "cgroups": ["/", "/kubepods.slice"]},
            "kubelet": {"config": {"cgroupDriver": "systemd"}},
        },
        {"name": "swap", "count": 1, "host": {"swap": True}, "kubelet": {"config": {"failSwapOn": False}}},
        {"name": "flagged", "count": 1, "kubelet": {"flags": {"--max-pods": "50", "--image-gc-low-threshold": "70"}}},
        {"name": "norestart", "count": 1, "kubelet": {"restartAlways": False}},
        {"name": "v124", "count": 1, "kubelet": {"version": "v1.24.9"}},
    ],
}


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    path = tmp_path_factory.mktemp("dkc") / "cluster.yaml"
    path.write_text(yaml.safe_dump(CLUSTER))
    with Cluster(
        cluster_file=path,
        time_scale=SCALE,
        trial_period="160s",
        crash_window="60s",
        node_monitor_grace="120s",
        ready_timeout=60,
    ) as running:
        yield running


@pytest.fixture(scope="module")
def api(cluster: Cluster) -> client.CoreV1Api:
    return client.CoreV1Api(config.new_client_from_config(str(cluster.kubeconfig)))


@pytest.fixture(scope="module")
def coord(cluster: Cluster) -> client.CoordinationV1Api:
    return client.CoordinationV1Api(config.new_client_from_config(str(cluster.kubeconfig)))


def store(cluster: Cluster, node: str) -> NodeStore:
    return NodeStore(cluster.node_dir(node))


def journal(cluster: Cluster, node: str) -> str:
    """The node's kubelet log on disk (warnings, errors and restarts)."""
    path = Path(cluster.node_dir(node)) / "kubelet.log"
    return path.read_text() if path.exists() else ""


def make_cm(
    api: client.CoreV1Api, name: str, body: str, *, key: str = "kubelet", extra: dict[str, str] | None = None
) -> dict[str, Any]:
    api.create_namespaced_config_map("kube-system", {"metadata": {"name": name}, "data": {key: body, **(extra or {})}})
    return resolved(api, name, key=key)


def matches(actual: Any, expected: dict[str, Any], may_graduate: tuple[dict[str, Any], ...] = ()) -> bool:
    """``actual == expected``, except that a config in ``may_graduate`` may also be lastKnownGood.

    Why: the module's trial is 4 s of real time. A test about something else (a deleted ConfigMap,
    a key change) may, on a slow machine, run past the trial of a config it ran cleanly; that
    config's promotion is then correct kubelet behaviour, not a failure of what the test checks.
    """
    if not isinstance(actual, dict):
        return False
    if "lastKnownGood" not in expected and actual.get("lastKnownGood") in may_graduate:
        actual = {k: v for k, v in actual.items() if k != "lastKnownGood"}
    return actual == expected


def wait_config(
    api: client.CoreV1Api,
    node: str,
    expected: dict[str, Any],
    timeout: float = 15,
    *,
    may_graduate: tuple[dict[str, Any], ...] = (),
) -> dict[str, Any]:
    def probe() -> Any:
        actual = config_status(api, node)
        return matches(actual, expected, may_graduate) and actual

    return wait_for(probe, timeout=timeout, what=f"{node} status.config == {expected}")


def changed_events(api: client.CoreV1Api, node: str) -> list[dict[str, Any]]:
    return node_events(api, node, "KubeletConfigChanged")


def restart_message(src: dict[str, Any]) -> str:
    cm = src["configMap"]
    return (
        f"Kubelet restarting to use /api/v1/namespaces/{cm['namespace']}/configmaps/{cm['name']}, "
        f"UID: {cm['uid']}, ResourceVersion: {cm['resourceVersion']}, KubeletConfigKey: {cm['kubeletConfigKey']}"
    )


def settle(coord: client.CoordinationV1Api, node: str, renewals: int = 4) -> None:
    """Let observable time pass: wait until the node's Lease was renewed ``renewals`` more times."""
    seen = {lease_renew_time(coord, node)}
    wait_for(
        lambda: seen.add(lease_renew_time(coord, node)) or len(seen) > renewals,
        timeout=20,
        interval=0.05,
        what=f"{renewals} lease renewals of {node}",
    )


def configz(api: client.CoreV1Api, node: str) -> dict[str, Any]:
    response = api.connect_get_node_proxy_with_path(node, "configz", _preload_content=False)
    return json.loads(response.data)["kubeletconfig"]


# ------------------------------------------------------------------------------ rows of 6.10
def test_first_assignment_nil_to_A_then_promotion(api: client.CoreV1Api, cluster: Cluster) -> None:
    """Row 1 + E5 (LKG absent until the time-only promotion), E6 (restart rewrites meta/assigned),
    E10 (first assignment fetched with a GET), E17 (unknown field tolerated), E19 (event shape)."""
    node, disk = "w-1", store(cluster, "w-1")
    a = make_cm(api, "row1-a", payload(eventRecordQPS=3, futureField=True))
    assign(api, node, cm_ref("row1-a"))
    mtimes: set[float] = set()
    wait_for(
        lambda: mtimes.add(disk.assigned_mtime()) or config_status(api, node) == {"active": a, "assigned": a},
        interval=0.01,
        what="active == assigned == A",
    )
    # empty at start, written by the pass, rewritten by the first pass after the restart (E6)
    wait_for(lambda: mtimes.add(disk.assigned_mtime()) or len(mtimes) >= 3, interval=0.01, what="3 mtimes")
    assert ready_status(api, node) == "True"
    events = changed_events(api, node)
    assert [e["message"] for e in events] == [restart_message(a)]
    event = events[0]
    assert event["metadata"]["namespace"] == "default" and event["type"] == "Normal" and event["count"] == 1
    assert event["metadata"]["name"].startswith(f"{node}.") and int(event["metadata"]["name"].split(".", 1)[1], 16)
    assert event["involvedObject"]["kind"] == "Node" and event["involvedObject"]["uid"] == node
    assert event["source"] == {"component": "kubelet", "host": node}
    assert len(node_events(api, node, "Starting")) >= 2
    assert disk.assigned == a and disk.last_known_good is None
    assert json.loads(disk.checkpoint_file(a).read_text())["eventRecordQPS"] == 3
    assert configz(api, node)["eventRecordQPS"] == 3
    gets = [
        e
        for e in cluster.audit_log.events(verb="get")
        if e["user"]["username"] == f"system:node:{node}" and (e.get("objectRef") or {}).get("name") == "row1-a"
    ]
    assert gets, "the first-ever assignment is downloaded with a direct GET (E10)"
    written = disk.assigned_mtime()
    wait_config(api, node, {"active": a, "assigned": a, "lastKnownGood": a}, timeout=TRIAL + 10)
    assert time.time() - written >= TRIAL * 0.9
    assert disk.last_known_good == a


def test_A_to_B_keeps_the_graduated_A_as_last_known_good(api: client.CoreV1Api, cluster: Cluster) -> None:
    node = "w-2"
    a = make_cm(api, "row2-a", payload(eventRecordQPS=4))
    b = make_cm(api, "row2-b", payload(eventRecordQPS=6))
    assign(api, node, cm_ref("row2-a"))
    wait_config(api, node, {"active": a, "assigned": a, "lastKnownGood": a}, timeout=TRIAL + 10)
    assign(api, node, cm_ref("row2-b"))
    wait_config(api, node, {"active": b, "assigned": b, "lastKnownGood": a})
    assert [e["message"] for e in changed_events(api, node)] == [restart_message(a), restart_message(b)]
    assert store(cluster, node).last_known_good == a and store(cluster, node).assigned == b
    assert ready_status(api, node) == "True"


def test_bad_C_during_B_trial_falls_back_to_the_older_lkg_not_B(api: client.CoreV1Api, cluster: Cluster) -> None:
    """Row 3 and row 11 (validation failure, incl. an unknown feature gate, rolls back)."""
    node = "w-3"
    a = make_cm(api, "row3-a", payload(eventRecordQPS=4))
    b = make_cm(api, "row3-b", payload(eventRecordQPS=6))
    c = make_cm(api, "row3-c", payload(featureGates={"NoSuchGate": True}))
    assign(api, node, cm_ref("row3-a"))
    wait_config(api, node, {"active": a, "assigned": a, "lastKnownGood": a}, timeout=TRIAL + 10)
    assign(api, node, cm_ref("row3-b"))
    wait_config(api, node, {"active": b, "assigned": b, "lastKnownGood": a})
    assign(api, node, cm_ref("row3-c"))
    wait_config(api, node, {"active": a, "assigned": c, "lastKnownGood": a, "error": VALIDATE})
    disk = store(cluster, node)
    assert disk.assigned == c and disk.last_known_good == a
    assert configz(api, node)["eventRecordQPS"] == 4
    assert ready_status(api, node) == "True"


def test_in_place_edit_restarts_every_consumer_and_checkpoints_pile_up(api: client.CoreV1Api, cluster: Cluster) -> None:
    """Row 4 + E9: a label edit alone restarts both nodes onto the new rv; old checkpoints stay."""
    nodes = ("w-4", "w-5")
    v1 = make_cm(api, "row4-shared", payload(eventRecordQPS=2))
    for node in nodes:
        assign(api, node, cm_ref("row4-shared"))
    for node in nodes:
        wait_config(api, node, {"active": v1, "assigned": v1}, may_graduate=(v1,))
    api.patch_namespaced_config_map("row4-shared", "kube-system", {"metadata": {"labels": {"touched": "yes"}}})
    v2 = resolved(api, "row4-shared")
    assert v2["configMap"]["resourceVersion"] != v1["configMap"]["resourceVersion"]
    for node in nodes:
        wait_config(api, node, {"active": v2, "assigned": v2}, may_graduate=(v1, v2))
        assert [e["message"] for e in changed_events(api, node)] == [restart_message(v1), restart_message(v2)]
        uid = v1["configMap"]["uid"]
        assert {(uid, v1["configMap"]["resourceVersion"]), (uid, v2["configMap"]["resourceVersion"])} <= store(
            cluster, node
        ).checkpoints()


def test_no_op_update_changes_nothing(api: client.CoreV1Api, coord: client.CoordinationV1Api, cluster: Cluster) -> None:
    """Row 5: an update with identical content keeps the rv, so no informer event and no restart."""
    node = "w-6"
    a = make_cm(api, "row5-a", payload(eventRecordQPS=2))
    assign(api, node, cm_ref("row5-a"))
    wait_config(api, node, {"active": a, "assigned": a})
    current = api.read_namespaced_config_map("row5-a", "kube-system")
    api.replace_namespaced_config_map("row5-a", "kube-system", current)
    assert resolved(api, "row5-a") == a
    settle(coord, node)
    assert len(changed_events(api, node)) == 1
    assert matches(config_status(api, node), {"active": a, "assigned": a}, may_graduate=(a,))


def test_configmap_deleted_then_recreated(
    api: client.CoreV1Api, coord: client.CoordinationV1Api, cluster: Cluster
) -> None:
    """Row 6 (download error, keeps running, never rolls back) and row 7 (new uid -> restart)."""
    node = "w-7"
    a = make_cm(api, "row6-a", payload(eventRecordQPS=2))
    assign(api, node, cm_ref("row6-a"))
    wait_config(api, node, {"active": a, "assigned": a})
    api.delete_namespaced_config_map("row6-a", "kube-system")
    wait_config(api, node, {"active": a, "assigned": a, "error": DOWNLOAD}, may_graduate=(a,))
    settle(coord, node)
    assert len(changed_events(api, node)) == 1 and ready_status(api, node) == "True"
    assert store(cluster, node).assigned == a
    a2 = make_cm(api, "row6-a", payload(eventRecordQPS=2))
    assert a2["configMap"]["uid"] != a["configMap"]["uid"]
    wait_config(api, node, {"active": a2, "assigned": a2}, may_graduate=(a, a2))
    assert changed_events(api, node)[-1]["message"] == restart_message(a2)


def test_missing_configmap_is_a_sync_error_cleared_by_the_next_good_pass(
    api: client.CoreV1Api, coord: client.CoordinationV1Api, cluster: Cluster
) -> None:
    """Row 8 + E8: no restart, assigned unchanged; pointing back clears the override."""
    node = "w-8"
    a = make_cm(api, "row8-a", payload(eventRecordQPS=2))
    assign(api, node, cm_ref("row8-a"))
    wait_config(api, node, {"active": a, "assigned": a})
    assign(api, node, cm_ref("row8-does-not-exist"))
    wait_config(api, node, {"active": a, "assigned": a, "error": DOWNLOAD}, may_graduate=(a,))
    assign(api, node, cm_ref("row8-a"))
    wait_config(api, node, {"active": a, "assigned": a}, may_graduate=(a,))
    assert len(changed_events(api, node)) == 1
    assert store(cluster, node).assigned == a and ready_status(api, node) == "True"


def test_missing_key_is_a_load_error_after_the_restart(api: client.CoreV1Api, cluster: Cluster) -> None:
    """Row 9 + E4/E17: download and checkpoint succeed, the restart fails to load -> local config."""
    node = "w-9"
    a = make_cm(api, "row9-a", payload(eventRecordQPS=2), key="other")
    assign(api, node, cm_ref("row9-a"))  # kubeletConfigKey "kubelet" is not in the ConfigMap
    expected = dict(a)
    expected["configMap"] = dict(a["configMap"], kubeletConfigKey="kubelet")
    wait_config(api, node, {"assigned": expected, "error": LOAD})
    assert changed_events(api, node)[-1]["message"] == restart_message(expected)
    disk = store(cluster, node)
    assert disk.assigned == expected and disk.last_known_good is None
    assert not disk.checkpoint_file(expected).exists()
    assert ready_status(api, node) == "True"


def test_undecodable_payload_then_invalid_payload_on_a_local_node(api: client.CoreV1Api, cluster: Cluster) -> None:
    """Row 10 (missing kind -> load error) and row 11 (validate error), first-ever assignments (E4)."""
    node = "w-10"
    body = json.loads(payload(eventRecordQPS=2))
    del body["kind"]
    bad = make_cm(api, "row10-nokind", json.dumps(body))
    assign(api, node, cm_ref("row10-nokind"))
    wait_config(api, node, {"assigned": bad, "error": LOAD})
    assert f"{LOAD}, error: failed to decode: Object 'Kind' is missing in '" in journal(cluster, node)
    invalid = make_cm(api, "row10-invalid", payload(eventRecordQPS=-1))
    assign(api, node, cm_ref("row10-invalid"))
    wait_config(api, node, {"assigned": invalid, "error": VALIDATE})
    assert configz(api, node)["eventRecordQPS"] == 5  # still the local config's default
    assert ready_status(api, node) == "True"


def test_key_change_with_same_content_restarts(api: client.CoreV1Api, cluster: Cluster) -> None:
    """Row 14: kubeletConfigKey changed, same ConfigMap and content -> assigned differs -> restart."""
    node = "w-11"
    body = payload(eventRecordQPS=2)
    first = make_cm(api, "row14-a", body, key="k1", extra={"k2": body})
    assign(api, node, cm_ref("row14-a", key="k1"))
    wait_config(api, node, {"active": first, "assigned": first})
    second = resolved(api, "row14-a", key="k2")
    assign(api, node, cm_ref("row14-a", key="k2"))
    wait_config(api, node, {"active": second, "assigned": second}, may_graduate=(first, second))
    assert [e["message"] for e in changed_events(api, node)] == [restart_message(first), restart_message(second)]


def test_node_deleted_and_recreated_resets_to_local_and_loses_lkg(api: client.CoreV1Api, cluster: Cluster) -> None:
    """Row 15 + E16."""
    node = "w-12"
    a = make_cm(api, "row15-a", payload(eventRecordQPS=2))
    assign(api, node, cm_ref("row15-a"))
    wait_config(api, node, {"active": a, "assigned": a, "lastKnownGood": a}, timeout=TRIAL + 10)
    labels = raw_node(api, node)["metadata"]["labels"]
    api.delete_node(node)
    api.create_node({"metadata": {"name": node, "labels": labels}})
    wait_for(
        lambda: changed_events(api, node)[-1]["message"] == "Kubelet restarting to use local config",
        what="restart onto the local config",
    )
    disk = store(cluster, node)
    wait_for(lambda: disk.assigned is None and disk.last_known_good is None, what="meta files emptied")
    wait_for(lambda: ready_status(api, node) == "True", what="Ready again")
    wait_for(lambda: config_status(api, node) in ({}, None), what="empty status.config")


def test_valid_config_that_cannot_run_crash_loops_and_is_rescued_by_repointing(
    api: client.CoreV1Api, cluster: Cluster
) -> None:
    """Row 12, seed 002: system-reserved enforcement on a missing cgroup. Bootstrap succeeds, the
    kubelet dies after its run window: no rollback, no promotion, NotReady; re-pointing rescues."""
    node = "sysd-1"
    good = make_cm(api, "row12-good", payload(cgroupDriver="systemd"))
    bad = make_cm(
        api,
        "row12-bad",
        payload(
            cgroupDriver="systemd",
            systemReserved={"cpu": "1", "memory": "1Gi"},
            systemReservedCgroup="/system.slice",
            enforceNodeAllocatable=["pods", "system-reserved"],
        ),
    )
    assign(api, node, cm_ref("row12-bad"))
    wait_for(lambda: ready_status(api, node) == "Unknown", timeout=20, what="Ready=Unknown")
    cond = next(c for c in raw_node(api, node)["status"]["conditions"] if c["type"] == "Ready")
    assert (cond["reason"], cond["message"]) == ("NodeStatusUnknown", "Kubelet stopped posting node status.")
    assert config_status(api, node) == {"active": bad, "assigned": bad}
    starts = len(node_events(api, node, "Starting"))
    wait_for(lambda: len(node_events(api, node, "Starting")) >= starts + 2, timeout=20, what="crash-loop restarts")
    seed_002 = (
        'Failed to start ContainerManager Failed to enforce System Reserved Cgroup Limits on "/system.slice": '
        '["system"] cgroup does not exist'
    )
    assert seed_002 in journal(cluster, node)
    assert store(cluster, node).last_known_good is None
    taints = {t["key"] for t in raw_node(api, node)["spec"].get("taints", [])}
    assert "node.kubernetes.io/unreachable" in taints
    assign(api, node, cm_ref("row12-good"))
    wait_config(api, node, {"active": good, "assigned": good}, timeout=20)
    wait_for(lambda: ready_status(api, node) == "True", what="Ready again")
    assert changed_events(api, node)[-1]["message"] == restart_message(good)


def test_omitted_failswapon_crash_loops_a_swap_host_until_reset_to_local(
    api: client.CoreV1Api, cluster: Cluster
) -> None:
    """Row 12 (swap) + section 12 point 10: omitted fields get v1beta1 defaults, not local values;
    removing configSource (reset) rescues and empties status.config (6.9)."""
    node = "swap-1"
    a = make_cm(api, "swap-a", payload(eventRecordQPS=2))
    assign(api, node, cm_ref("swap-a"))
    wait_for(lambda: ready_status(api, node) == "Unknown", timeout=20, what="Ready=Unknown")
    assert config_status(api, node) == {"active": a, "assigned": a}  # a crash-looping config never graduates
    assign(api, node, None)
    wait_for(lambda: ready_status(api, node) == "True", timeout=20, what="Ready again on the local config")
    assert changed_events(api, node)[-1]["message"] == "Kubelet restarting to use local config"
    wait_for(lambda: config_status(api, node) in ({}, None), what="empty status.config")
    assert store(cluster, node).assigned is None


def test_partitioned_node_still_promotes_and_reports_after_healing(api: client.CoreV1Api, cluster: Cluster) -> None:
    """Row 13 + E2: no API -> no heartbeats (Unknown), but the trial clock runs and LKG is written
    to disk; the status reaches the API once the partition heals."""
    node = "w-13"
    a = make_cm(api, "row13-a", payload(eventRecordQPS=2))
    assign(api, node, cm_ref("row13-a"))
    wait_config(api, node, {"active": a, "assigned": a})
    cluster.faults.partition(node)
    try:
        wait_for(lambda: ready_status(api, node) == "Unknown", timeout=15, what="Ready=Unknown")
        wait_for(lambda: store(cluster, node).last_known_good == a, timeout=TRIAL + 10, what="LKG on disk")
        assert "lastKnownGood" not in (config_status(api, node) or {})
    finally:
        cluster.faults.heal(node)
    wait_config(api, node, {"active": a, "assigned": a, "lastKnownGood": a})
    wait_for(lambda: ready_status(api, node) == "True", what="Ready again")


def test_reset_with_nothing_assigned_keeps_a_stale_sync_error(
    api: client.CoreV1Api, coord: client.CoordinationV1Api, cluster: Cluster
) -> None:
    """E14."""
    node = "w-14"
    assign(api, node, cm_ref("e14-missing"))
    wait_config(api, node, {"error": DOWNLOAD})
    assign(api, node, None)
    settle(coord, node)
    assert config_status(api, node) == {"error": DOWNLOAD}
    assert changed_events(api, node) == []
    assert store(cluster, node).assigned is None


def test_lkg_that_no_longer_loads_makes_the_kubelet_unstartable(api: client.CoreV1Api, cluster: Cluster) -> None:
    """E7 / row 17: assigned fails and LKG fails too -> exit non-zero at every start, no fallback to
    local; only an on-node fix (emptying meta/assigned) brings it back."""
    node, disk = "w-15", store(cluster, "w-15")
    a = make_cm(api, "e7-a", payload(eventRecordQPS=2))
    assign(api, node, cm_ref("e7-a"))
    wait_config(api, node, {"active": a, "assigned": a, "lastKnownGood": a}, timeout=TRIAL + 10)
    disk.checkpoint_file(a).write_text("not a kubelet config")  # e.g. a binary upgrade tightened decoding
    b = make_cm(api, "e7-b", "{}")
    assign(api, node, cm_ref("e7-b"))
    wait_for(lambda: ready_status(api, node) == "Unknown", timeout=20, what="Ready=Unknown")
    starts_after = [
        e
        for e in node_events(api, node, "Starting")
        if e["firstTimestamp"] > changed_events(api, node)[-1]["firstTimestamp"]
    ]
    assert starts_after == []  # dies in Bootstrap, before the BirthCry
    assert "failed to determine a valid configuration, error: failed to load config" in journal(cluster, node)
    assert disk.assigned == b
    assign(api, node, None)
    (disk.root / "meta" / "assigned").write_text("")
    wait_for(lambda: ready_status(api, node) == "True", timeout=20, what="Ready after the on-node fix")


def test_flags_override_the_dynamic_config_on_one_node_only(api: client.CoreV1Api, cluster: Cluster) -> None:
    """E18: --max-pods wins silently; --image-gc-low-threshold=70 makes a high threshold of 60
    invalid on this node although the same ConfigMap is valid elsewhere."""
    node = "flagged-1"
    a = make_cm(api, "e18-a", payload(maxPods=200))
    assign(api, node, cm_ref("e18-a"))
    wait_config(api, node, {"active": a, "assigned": a})
    assert configz(api, node)["maxPods"] == 50
    wait_for(lambda: raw_node(api, node)["status"]["capacity"]["pods"] == "50", what="capacity.pods == 50")
    b = make_cm(api, "e18-b", payload(imageGCHighThresholdPercent=60, imageGCLowThresholdPercent=50))
    assign(api, node, cm_ref("e18-b"))
    # the fallback is the local config (active absent), or a if its 4 s trial already passed
    fallbacks = (
        {"assigned": b, "error": VALIDATE},
        {"active": a, "assigned": b, "lastKnownGood": a, "error": VALIDATE},
    )
    wait_for(lambda: config_status(api, node) in fallbacks, what=f"{node} fell back from the invalid b")
    assert configz(api, node)["imageGCLowThresholdPercent"] == 70
    assign(api, "w-16", cm_ref("e18-b"))
    wait_config(api, "w-16", {"active": b, "assigned": b})


def test_restart_on_failure_unit_leaves_the_kubelet_down_after_a_config_change(
    api: client.CoreV1Api, cluster: Cluster
) -> None:
    """E1: the config restart is exit code 0; without Restart=always nothing brings it back."""
    node = "norestart-1"
    a = make_cm(api, "e1-a", payload(eventRecordQPS=2))
    assign(api, node, cm_ref("e1-a"))
    wait_for(lambda: changed_events(api, node), what="KubeletConfigChanged")
    wait_for(lambda: ready_status(api, node) == "Unknown", timeout=20, what="Ready=Unknown")
    event_time = changed_events(api, node)[-1]["firstTimestamp"]
    assert [e for e in node_events(api, node, "Starting") if e["firstTimestamp"] > event_time] == []
    assert "assigned" not in (config_status(api, node) or {})
    assert store(cluster, node).assigned == a


def test_kubelet_124_has_no_dkc(api: client.CoreV1Api, coord: client.CoordinationV1Api, cluster: Cluster) -> None:
    """E20 (1.24+): no status.config at all, and a spec.configSource is simply ignored."""
    node = "v124-1"
    assert raw_node(api, node)["status"]["nodeInfo"]["kubeletVersion"] == "v1.24.9"
    make_cm(api, "e20-a", payload(eventRecordQPS=2))
    assign(api, node, cm_ref("e20-a"))
    settle(coord, node)
    assert config_status(api, node) is None
    assert changed_events(api, node) == [] and ready_status(api, node) == "True"
    assert not (Path(cluster.node_dir(node)) / "dynamic-config").exists()


def test_nothing_assigned_reports_an_empty_config_not_an_absent_one(api: client.CoreV1Api, cluster: Cluster) -> None:
    """E3: a DKC kubelet with nothing assigned pushes ``status.config: {}`` on its first status sync."""
    node = "w-17"
    wait_for(lambda: config_status(api, node) == {}, what="status.config == {}")
    assert ready_status(api, node) == "True"
    assert store(cluster, node).assigned is None and store(cluster, node).checkpoints() == set()


def test_never_return_fault_leaves_the_node_down_until_cleared(api: client.CoreV1Api, cluster: Cluster) -> None:
    """Fault ``never_return``: the config restart's exit is the last one; the node goes Unknown."""
    node = "w-18"
    make_cm(api, "fault-a", payload(eventRecordQPS=2))
    cluster.faults.never_return(node)
    try:
        assign(api, node, cm_ref("fault-a"))
        wait_for(lambda: changed_events(api, node), what="KubeletConfigChanged")
        wait_for(lambda: ready_status(api, node) == "Unknown", timeout=20, what="Ready=Unknown")
        stamp = changed_events(api, node)[-1]["firstTimestamp"]
        assert [e for e in node_events(api, node, "Starting") if e["firstTimestamp"] > stamp] == []
    finally:
        cluster.faults.never_return(node, False)
    a = resolved(api, "fault-a")
    # hang guards; and a loaded machine may see the kubelet back only after a's 4 s trial
    wait_config(api, node, {"active": a, "assigned": a}, timeout=90, may_graduate=(a,))
    wait_for(lambda: ready_status(api, node) == "True", timeout=90, what="Ready after the fault is cleared")


def test_slow_restart_fault_delays_the_restart(api: client.CoreV1Api, cluster: Cluster) -> None:
    node = "w-19"
    a = make_cm(api, "fault-b", payload(eventRecordQPS=2))
    cluster.faults.slow_restart(node, 2.0)
    try:
        started = time.monotonic()
        assign(api, node, cm_ref("fault-b"))
        wait_for(lambda: changed_events(api, node), what="KubeletConfigChanged")
        restarted = time.monotonic()
        wait_config(api, node, {"active": a, "assigned": a}, timeout=20)
        assert time.monotonic() - restarted >= 2.0 - 0.2 and time.monotonic() - started >= 2.0
    finally:
        cluster.faults.slow_restart(node, 0.0)
