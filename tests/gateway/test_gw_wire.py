"""Raw node JSON -> small model -> NodeObservation, from sample API objects."""

from __future__ import annotations

import json
from datetime import datetime, timezone

from rollout.gateway import _wire
from rollout.model import ConfigRef

CM_A = {"namespace": "kube-system", "name": "kc-a", "kubeletConfigKey": "kubelet",
        "uid": "u-a", "resourceVersion": "11"}
CM_B = {"namespace": "kube-system", "name": "kc-b", "kubeletConfigKey": "kubelet",
        "uid": "u-b", "resourceVersion": "22"}

SAMPLE = {
    "kind": "NodeList", "apiVersion": "v1", "metadata": {"resourceVersion": "4242"},
    "items": [
        {   # invalid new config B: the kubelet fell back to A
            "metadata": {"name": "n1", "uid": "uid-1", "resourceVersion": "77",
                         "labels": {"zone": "a"},
                         "annotations": {"kubelet-rollout.io/rollout": "r1"},
                         "managedFields": [{"manager": "kubelet"}]},
            "spec": {"podCIDR": "10.0.0.0/24", "unschedulable": True,
                     "configSource": {"configMap": {k: CM_B[k] for k in
                                                    ("namespace", "name", "kubeletConfigKey")}}},
            "status": {"config": {"assigned": {"configMap": CM_B}, "active": {"configMap": CM_A},
                                  "lastKnownGood": {"configMap": CM_A},
                                  "error": "failed to validate config, see Kubelet log for details"},
                       "conditions": [{"type": "Ready", "status": "True",
                                       "lastHeartbeatTime": "2026-11-22T10:00:00Z",
                                       "lastTransitionTime": "2026-11-22T09:00:00Z"}],
                       "images": [{"names": ["x"], "sizeBytes": 1}] * 25},
        },
        {"metadata": {"name": "n2"}, "spec": {}, "status": {"config": {}, "conditions": []}},
        {"metadata": {"name": "n3"}, "status": {"conditions": [{"type": "Ready", "status": "Unknown"}]}},
    ],
}


def parse() -> dict[str, object]:
    lst = _wire.decode(_wire.NodeList, json.dumps(SAMPLE))
    leases = _wire.lease_infos(_wire.from_object(_wire.LeaseList, {"items": [
        {"metadata": {"name": "n1"}, "spec": {"renewTime": "2026-11-22T10:00:05.123456Z",
                                              "leaseDurationSeconds": 40}}]}))
    now = datetime(2026, 11, 22, 10, 0, 10, tzinfo=timezone.utc)
    assert lst.metadata.resource_version == "4242"
    return {n.metadata.name: _wire.to_observation(n, lease=leases.get(n.metadata.name), observed_at=now)
            for n in lst.items}


def test_full_dkc_status_maps_to_config_refs():
    n1 = parse()["n1"]
    assert n1.spec_source == ConfigRef("kube-system", "kc-b", "kubelet")
    assert n1.assigned == ConfigRef("kube-system", "kc-b", "kubelet", "u-b", "22")
    assert n1.active == n1.last_known_good == ConfigRef("kube-system", "kc-a", "kubelet", "u-a", "11")
    assert n1.error.startswith("failed to validate config")
    assert n1.has_config_status and n1.unschedulable and n1.is_ready
    assert dict(n1.labels) == {"zone": "a"} and n1.annotations["kubelet-rollout.io/rollout"] == "r1"
    assert (n1.uid, n1.resource_version) == ("uid-1", "77")


def test_lease_and_ready_times_are_utc_aware():
    n1 = parse()["n1"]
    assert n1.lease_renewed == datetime(2026, 11, 22, 10, 0, 5, 123456, tzinfo=timezone.utc)
    assert n1.lease_duration_s == 40.0
    assert n1.ready_heartbeat is not None and n1.ready_heartbeat.utcoffset().total_seconds() == 0
    assert n1.ready_transition == datetime(2026, 11, 22, 9, 0, tzinfo=timezone.utc)


def test_empty_config_status_differs_from_absent():
    obs = parse()
    assert obs["n2"].has_config_status and obs["n2"].assigned is None and obs["n2"].error == ""
    assert not obs["n3"].has_config_status
    assert obs["n3"].ready == "Unknown" and obs["n3"].lease_renewed is None
    assert obs["n2"].ready == "" and obs["n2"].spec_source is None
