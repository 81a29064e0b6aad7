"""kill -9 of ``kubesim up`` loses nothing acknowledged; a restart on the same state dir brings the
same cluster back with increasing resourceVersions and the kubelets' checkpoints in place."""

from __future__ import annotations

import pytest
from kubernetes import client

from kubesim import Cluster
from kubesim.apiserver.client import local_client
from tests.conftest import api_client, wait_for


def _core(cluster):
    return client.CoreV1Api(api_client(cluster.kubeconfig))


def _checkpoints(cluster, node):
    root = cluster.node_dir(node) / "dynamic-config" / "store" / "checkpoints"
    # a checkpoint being written is a temp file beside its final name (the kubelet's atomic write):
    # only finished checkpoints count
    return sorted(str(p.relative_to(root)) for p in root.glob("*/*") if "_" not in p.name) if root.exists() else []


@pytest.mark.slow
def test_kill_dash_nine_and_restart_on_the_same_state_dir(tmp_path):
    state = tmp_path / "state"
    first = Cluster(2, state_dir=state, mode="process", time_scale=60).start()
    try:
        core = _core(first)
        cm = core.create_namespaced_config_map(
            "kube-system",
            client.V1ConfigMap(
                metadata=client.V1ObjectMeta(name="durable-cfg"),
                data={"kubelet": "apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\n"},
            ),
        )
        core.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name="durable-ns")))
        source = {"configMap": {"name": "durable-cfg", "namespace": "kube-system", "kubeletConfigKey": "kubelet"}}
        node = core.patch_node("node-1", {"spec": {"configSource": source}, "metadata": {"labels": {"kept": "yes"}}})
        wait_for(lambda: _checkpoints(first, "node-1"), timeout=30, what="node-1 to checkpoint its config")
        checkpoints = _checkpoints(first, "node-1")
        last_rv = int(core.list_node().metadata.resource_version)
    finally:
        first.kill()

    second = Cluster(2, state_dir=state, mode="process", time_scale=60).start()
    try:
        core = _core(second)
        again = core.read_namespaced_config_map("durable-cfg", "kube-system")
        assert again.metadata.uid == cm.metadata.uid and again.data == cm.data
        assert core.read_namespace("durable-ns").metadata.uid
        restored = core.read_node("node-1")
        assert restored.metadata.uid == node.metadata.uid
        assert restored.metadata.labels["kept"] == "yes"
        assert restored.spec.config_source.config_map.name == "durable-cfg"
        assert set(checkpoints) <= set(_checkpoints(second, "node-1"))

        def active_name():
            config = core.read_node("node-1").status.config
            return config and config.active and config.active.config_map.name

        # the kubelet bootstraps from its checkpoint, as a real one does after a reboot
        assert wait_for(active_name, timeout=30, what="node-1 active config after restart") == "durable-cfg"
        written = core.create_namespaced_config_map(
            "default", client.V1ConfigMap(metadata=client.V1ObjectMeta(name="after"))
        )
        assert int(written.metadata.resource_version) > last_rv
        assert int(core.list_node().metadata.resource_version) > last_rv
    finally:
        second.stop()


def test_wal_replay_tolerates_a_torn_tail_and_compaction(tmp_path):
    """The store alone: a half-written last record is ignored; a snapshot + log replay agree."""
    import asyncio

    from kubesim.apiserver import ApiServer

    async def write_some(server, prefix, n):
        for i in range(n):
            await local_client(server).create(
                "/api/v1/namespaces/default/configmaps", {"metadata": {"name": f"{prefix}-{i}"}, "data": {"i": str(i)}}
            )

    server = ApiServer(state_dir=tmp_path)
    asyncio.run(write_some(server, "a", 5))
    server.store.compact()
    asyncio.run(write_some(server, "b", 5))
    rv = server.store.rv
    server.close()
    with open(tmp_path / "apiserver" / "wal.log", "ab") as log:
        log.write(b'{"rv":999999,"op":"put","key":"configmaps/default/torn","obj":{"meta')
    reopened = ApiServer(state_dir=tmp_path)
    names = {s.name for s in reopened.store.list("configmaps", "default")}
    assert {f"a-{i}" for i in range(5)} | {f"b-{i}" for i in range(5)} <= names
    assert "torn" not in names
    assert reopened.store.rv == rv
    reopened.close()


def test_a_state_dir_serves_one_kubesim_at_a_time(tmp_path):
    from kubesim.apiserver import ApiServer
    from kubesim.apiserver.wal import StateDirBusy

    first = ApiServer(state_dir=tmp_path)
    with pytest.raises(StateDirBusy):
        ApiServer(state_dir=tmp_path)
    first.close()
    ApiServer(state_dir=tmp_path).close()  # free again once the first one is gone
