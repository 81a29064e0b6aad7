"""kubesim's store keeps pods by ``spec.nodeName``, so a list of one node's pods (a kubelet's, a
drain's) reads that node's pods, not all of them; the index must say what a scan says after every
create, bind, in-place rewrite and delete."""

from __future__ import annotations

from typing import Any

from kubesim.apiserver.store import Store


def _pod(name: str, node: str = "", namespace: str = "shop") -> dict[str, Any]:
    spec: dict[str, Any] = {"containers": [{"name": "app", "image": "shop:1"}]}
    if node:
        spec["nodeName"] = node
    return {"metadata": {"name": name, "namespace": namespace}, "spec": spec}


def _scan(store: Store, node: str, namespace: str = "") -> list[str]:
    return [s.name for s in store.list("pods", namespace) if (s.obj.get("spec") or {}).get("nodeName") == node]


def _indexed(store: Store, node: str, namespace: str = "") -> list[str]:
    return [s.name for s in store.pods_on(node, namespace)]


def test_the_pods_of_a_node_are_what_a_scan_finds_after_each_write() -> None:
    store = Store()
    for i in range(6):
        store.write("pods", f"pods/shop/p{i}", _pod(f"p{i}", node=f"n{i % 2}" if i < 4 else ""))
    store.write("pods", "pods/other/q", _pod("q", node="n0", namespace="other"))
    store.write("pods", "pods/shop/p4", _pod("p4", node="n1"))  # a binding
    mutated = store.get("pods", "pods/shop/p0").copy()
    mutated["spec"]["nodeName"] = "n1"  # a writer that rewrote the dict it read
    store.write("pods", "pods/shop/p0", mutated)
    store.remove("pods", "pods/shop/p2")
    for node in ("n0", "n1", "n2"):
        assert _indexed(store, node) == _scan(store, node), node
        assert _indexed(store, node, "shop") == _scan(store, node, "shop"), node
    assert _indexed(store, "n1") == ["p0", "p1", "p3", "p4"]
    assert _indexed(store, "n0") == ["q"]
