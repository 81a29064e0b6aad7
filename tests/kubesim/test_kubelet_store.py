"""Unit tests: the DKC checkpoint store's on-disk layout and semantics (reference section 5)."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
import yaml

from kubesim.kubelet.store import ALL_NIL_ERROR, FsStore, StoreError, same_source

SRC = {
    "configMap": {
        "namespace": "kube-system",
        "name": "cfg-abc",
        "uid": "u-1",
        "resourceVersion": "42",
        "kubeletConfigKey": "kubelet",
    }
}


def test_initialize_creates_the_real_layout_with_empty_meta(tmp_path: Path) -> None:
    store = FsStore(tmp_path / "dynamic-config")
    store.initialize()
    root = tmp_path / "dynamic-config" / "store"
    assert (root / "meta" / "assigned").read_text() == ""
    assert (root / "meta" / "last-known-good").read_text() == ""
    assert (root / "checkpoints").is_dir()
    assert store.assigned() is None and store.last_known_good() is None


def test_meta_is_a_serialized_node_config_source_and_every_write_moves_the_mtime(tmp_path: Path) -> None:
    store = FsStore(tmp_path)
    store.initialize()
    store.set_assigned(SRC)
    record = yaml.safe_load(store.assigned_file.read_text())
    assert record["kind"] == "SerializedNodeConfigSource"
    assert record["apiVersion"] == "kubelet.config.k8s.io/v1beta1"
    assert record["source"] == SRC
    first = store.assigned_modified()
    time.sleep(0.02)
    store.set_assigned(SRC)  # unchanged content, new mtime: the trial clock restarts (E6)
    assert store.assigned_modified() > first
    assert not list(store.meta.glob("tmp_*"))


def test_checkpoints_are_keyed_by_uid_and_rv_and_never_collected(tmp_path: Path) -> None:
    store = FsStore(tmp_path)
    store.initialize()
    store.save("u-1", "42", {"kubelet": "payload-42", "other": "x"})
    store.save("u-1", "43", {"kubelet": "payload-43"})
    assert (store.checkpoints / "u-1" / "42" / "other").read_text() == "x"
    assert store.load(SRC) == "payload-42"
    assert store.exists(SRC) and sorted(p.name for p in (store.checkpoints / "u-1").iterdir()) == ["42", "43"]


def test_load_errors(tmp_path: Path) -> None:
    store = FsStore(tmp_path)
    store.initialize()
    with pytest.raises(StoreError, match="no checkpoint for source /api/v1/namespaces/kube-system/configmaps/cfg-abc"):
        store.load(SRC)
    store.save("u-1", "42", {"other": "x", "kubelet": ""})
    with pytest.raises(StoreError, match="was empty"):
        store.load(SRC)
    missing_key = {"configMap": dict(SRC["configMap"], kubeletConfigKey="nope")}
    with pytest.raises(StoreError, match="failed to read kubelet config file"):
        store.load(missing_key)


def test_reset_and_write_guards(tmp_path: Path) -> None:
    store = FsStore(tmp_path)
    store.initialize()
    assert store.reset() is False
    store.set_assigned(SRC)
    store.set_last_known_good(SRC)
    assert store.reset() is True
    assert store.assigned() is None and store.last_known_good() is None
    with pytest.raises(StoreError, match="empty UID is ambiguous"):
        store.set_assigned({"configMap": dict(SRC["configMap"], uid="")})
    store.assigned_file.write_text("kind: SerializedNodeConfigSource\nsource: {}\n")
    with pytest.raises(StoreError, match=ALL_NIL_ERROR):
        store.assigned()


def test_same_source_compares_the_five_fields() -> None:
    other_rv = {"configMap": dict(SRC["configMap"], resourceVersion="43")}
    assert same_source(SRC, {"configMap": dict(SRC["configMap"])})
    assert not same_source(SRC, other_rv) and not same_source(SRC, None) and same_source(None, None)
