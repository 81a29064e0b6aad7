"""How a modern kubelet builds its config at start: base ``--config``, ``--config-dir`` drop-ins
(JSON merge patches in lexical order, only ``*.conf``, subdirectories too), then command-line flags
- first on files directly, then end to end through a 1.31 cluster's configz."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from kubernetes import client

from kubesim.kubelet.dropins import CommandLine, StartError, load_start_config, merge_patch
from tests.conftest import api_client

HEAD = "apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\n"


def _host(tmp_path: Path, base: str = "", dropins: dict[str, str] | None = None) -> CommandLine:
    (tmp_path / "var/lib/kubelet").mkdir(parents=True)
    (tmp_path / "var/lib/kubelet/config.yaml").write_text(HEAD + base)
    conf_d = tmp_path / "etc/kubernetes/kubelet.conf.d"
    conf_d.mkdir(parents=True)
    for name, body in (dropins or {}).items():
        (conf_d / name).parent.mkdir(parents=True, exist_ok=True)
        (conf_d / name).write_text(body)
    return CommandLine(config=tmp_path / "var/lib/kubelet/config.yaml", config_dir=conf_d)


def _start(tmp_path: Path, base: str = "", dropins: dict[str, str] | None = None, minor: int = 31, **cmd):
    line = _host(tmp_path, base, dropins)
    line = CommandLine(line.config, line.config_dir, **cmd)
    return load_start_config(line, minor, tmp_path).config


def test_merge_patch_is_rfc_7386():
    target = {"a": 1, "m": {"x": 1, "y": 2}, "l": [1, 2]}
    assert merge_patch(target, {"m": {"y": None, "z": 3}, "l": [9], "a": None}) == {"m": {"x": 1, "z": 3}, "l": [9]}


def test_later_file_names_win_and_subdirectories_are_walked(tmp_path):
    cfg = _start(
        tmp_path,
        "maxPods: 50\n",
        {
            "10-a.conf": HEAD + "maxPods: 60\n",
            "20-b.conf": HEAD + "maxPods: 70\n",
            "15-dir/x.conf": HEAD + "maxPods: 65\n",  # walked between 10-a and 20-b
            "30-c.conf.bak": HEAD + "maxPods: 1\n",  # not .conf: skipped
            "30-d.yaml": HEAD + "maxPods: 2\n",
        },
    )
    assert cfg["maxPods"] == 70


def test_subdirectory_order_is_lexical_by_path(tmp_path):
    cfg = _start(tmp_path, "", {"10-a.conf": HEAD + "maxPods: 60\n", "15-dir/x.conf": HEAD + "maxPods: 65\n"})
    assert cfg["maxPods"] == 65


def test_maps_merge_per_key_lists_are_replaced_and_null_restores_the_default(tmp_path):
    cfg = _start(
        tmp_path,
        "clusterDNS: [10.0.0.10, 10.0.0.11]\nsystemReserved: {cpu: 100m}\nevictionHard: {memory.available: 200Mi}\n"
        "featureGates: {NodeSwap: true}\nimageGCHighThresholdPercent: 90\n",
        {
            "50-x.conf": HEAD + "clusterDNS: [10.0.0.53]\nsystemReserved: {memory: 1Gi}\n"
            "featureGates: {MemoryQoS: false}\nimageGCHighThresholdPercent: null\n"
        },
    )
    assert cfg["clusterDNS"] == ["10.0.0.53"]
    assert cfg["systemReserved"] == {"cpu": "100m", "memory": "1Gi"}
    assert cfg["featureGates"] == {"NodeSwap": True, "MemoryQoS": False}
    assert cfg["imageGCHighThresholdPercent"] == 85  # null deleted the key; defaulting re-filled it
    assert cfg["evictionHard"]["memory.available"] == "200Mi"


def test_flags_win_over_drop_ins_and_gates_merge_with_the_flag_winning(tmp_path):
    cfg = _start(
        tmp_path,
        "",
        {"90-x.conf": HEAD + "maxPods: 70\nfeatureGates: {NodeSwap: false, MemoryQoS: true}\n"},
        flags={"--max-pods": "90"},
        feature_gates={"NodeSwap": True},
    )
    assert cfg["maxPods"] == 90
    assert cfg["featureGates"] == {"NodeSwap": True, "MemoryQoS": True}


@pytest.mark.parametrize(
    ("body", "message"),
    [
        ("", "was empty"),
        ("maxPods: 70\n", "Object 'Kind' is missing"),
        ("apiVersion: v1\nkind: ConfigMap\n", 'no kind "ConfigMap" is registered'),
        (HEAD + "maxPods: [\n", "error converting YAML to JSON"),
    ],
    ids=["empty", "no-type-meta", "wrong-kind", "bad-yaml"],
)
def test_an_unloadable_drop_in_fails_the_start_naming_the_file(tmp_path, body, message):
    with pytest.raises(StartError) as info:
        _start(tmp_path, "", {"50-bad.conf": body})
    text = str(info.value)
    assert text.startswith("failed to merge kubelet configs: ")
    assert "failed to load kubelet dropin file, path: /etc/kubernetes/kubelet.conf.d/50-bad.conf" in text
    assert message in text


def test_wrong_types_fail_at_the_merged_decode(tmp_path):
    with pytest.raises(StartError, match="failed to unmarshal merged JSON into kubelet configuration: .*maxPods"):
        _start(tmp_path, "", {"50-x.conf": HEAD + 'maxPods: "many"\n'})


def test_invalid_merged_config_fails_validation(tmp_path):
    with pytest.raises(StartError, match=r"^failed to validate kubelet configuration, error: .*maxPods"):
        _start(tmp_path, "", {"50-x.conf": HEAD + "maxPods: -1\n"})


def test_the_dkc_gate_no_longer_exists(tmp_path):
    with pytest.raises(StartError, match="unrecognized feature gate: DynamicKubeletConfig"):
        _start(tmp_path, "", {"50-x.conf": HEAD + "featureGates: {DynamicKubeletConfig: true}\n"})


def test_resolv_conf_in_a_drop_in_is_ignored_before_1_32(tmp_path):
    cfg = _start(tmp_path, "", {"50-x.conf": HEAD + "resolvConf: /run/resolv.conf\nmaxPods: 12\n"})
    assert (cfg["resolvConf"], cfg["maxPods"]) == ("/etc/resolv.conf", 12)


def test_config_dir_needs_the_alpha_variable_on_1_29(tmp_path):
    with pytest.raises(StartError, match="KUBELET_CONFIG_DROPIN_DIR_ALPHA"):
        _start(tmp_path, "", {}, minor=29)
    assert _start(tmp_path / "b", "", {}, minor=29, environment={"KUBELET_CONFIG_DROPIN_DIR_ALPHA": ""})


def test_no_swap_and_unlimited_swap_on_1_31(tmp_path):
    assert _start(tmp_path, "memorySwap: {swapBehavior: NoSwap}\n")["memorySwap"] == {"swapBehavior": "NoSwap"}
    with pytest.raises(StartError, match="swapBehavior"):
        _start(tmp_path / "b", "memorySwap: {swapBehavior: UnlimitedSwap}\n")


def test_a_later_field_counts_from_the_minor_that_brought_it(tmp_path):
    pulls = {"50-x.conf": HEAD + "maxParallelImagePulls: 3\nserializeImagePulls: false\n"}
    cfg = _start(tmp_path, "", pulls)  # 1.31: known
    assert (cfg["maxParallelImagePulls"], cfg["serializeImagePulls"]) == (3, False)
    # a whole config gets serializeImagePulls false by default beside it ...
    assert _start(tmp_path / "w", "maxParallelImagePulls: 3\n")["serializeImagePulls"] is False
    # ... a drop-in does not: the base was defaulted (serial) before the merge, as the kubelet merges
    with pytest.raises(StartError, match="maxParallelImagePulls cannot be larger than 1"):
        _start(tmp_path / "a", "", {"50-x.conf": HEAD + "maxParallelImagePulls: 3\n"})
    old = _start(tmp_path / "b", "", pulls, minor=30)  # 1.30 knows it too
    assert old["maxParallelImagePulls"] == 3
    assert "podLogsDir" not in _start(tmp_path / "c", "", {"50-x.conf": HEAD + "podLogsDir: /logs\n"}, minor=29,
                                      environment={"KUBELET_CONFIG_DROPIN_DIR_ALPHA": ""})  # lenient: dropped
    assert _start(tmp_path / "d", "").get("maxParallelImagePulls") is None  # unset unless set


@pytest.mark.parametrize(("body", "message"), [
    ("maxParallelImagePulls: 0\n", "maxParallelImagePulls 0 must be a positive number"),
    ("maxParallelImagePulls: 2\nserializeImagePulls: true\n", "maxParallelImagePulls cannot be larger than 1"),
    ("containerLogMonitorInterval: 1s\n", "greater than or equal to 3s"),
])
def test_the_rules_of_later_fields_fail_the_start(tmp_path, body, message):
    with pytest.raises(StartError, match=message):
        _start(tmp_path, "", {"50-x.conf": HEAD + body})


# --- end to end: cluster file -> host files -> configz ------------------------------------------


def test_cluster_file_drop_ins_and_flags_reach_configz(kubesim_cluster, tmp_path):
    fleet = {
        "apiVersion": "kubesim.kubelet-rollout.io/v1",
        "kind": "Cluster",
        "kubernetesVersion": "1.31",
        "pools": [
            {
                "name": "general",
                "count": 1,
                "kubelet": {
                    "flags": {"--max-pods": "90"},
                    "config": {"maxPods": 50, "eventRecordQPS": 3},
                    "dropins": {"40-nodeadm.conf": {"maxPods": 58, "eventRecordQPS": 4}},
                },
            }
        ],
    }
    path = tmp_path / "fleet.yaml"
    path.write_text(yaml.safe_dump(fleet))
    cluster = kubesim_cluster(cluster_file=path, time_scale=20)
    host = cluster.host("general-1")
    assert host.flags_env.read_text() == 'KUBELET_KUBEADM_ARGS="--max-pods=90"\n'
    assert yaml.safe_load((host.dropin_dir / "40-nodeadm.conf").read_text())["kind"] == "KubeletConfiguration"
    core = client.CoreV1Api(api_client(cluster.kubeconfig))
    raw = core.connect_get_node_proxy_with_path("general-1", "configz", _preload_content=False).data
    running = json.loads(raw)["kubeletconfig"]
    assert (running["maxPods"], running["eventRecordQPS"]) == (90, 4)  # flag > drop-in > base


def test_shutdown_by_pod_priority_needs_no_gate_on_1_31(tmp_path):
    body = "shutdownGracePeriodByPodPriority: [{priority: 0, shutdownGracePeriodSeconds: 30}]\n"
    cfg = _start(tmp_path, "", {"50-x.conf": HEAD + body})
    assert cfg["shutdownGracePeriodByPodPriority"] == [{"priority": 0, "shutdownGracePeriodSeconds": 30}]
