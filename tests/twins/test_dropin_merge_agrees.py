"""The twin drop-in merges agree: kubesim's simulated kubelet (``kubesim.kubelet.dropins``) and
the core's rules the orchestrator and the agent share (``rollout.kubeletconfig.dropin``, walked by
``kubelet_rollout_agent.merge``) read the same files of a ``--config-dir`` in the same order and
merge them to the same result. kubesim keeps its own copy on purpose (it stands alone); this is
what keeps the two from drifting."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kubelet_rollout_agent.configdir import dropin_files as agent_walk
from kubesim.kubelet.dropins import dropin_files as sim_walk
from kubesim.kubelet.dropins import merge_patch as sim_merge_patch
from rollout.kubeletconfig.dropin import merge_patch as core_merge_patch
from tests.conftest import examples

KEYS = st.sampled_from(["maxPods", "featureGates", "A", "B", "clusterDNS", "evictionHard"])
SCALARS = st.none() | st.booleans() | st.integers(-3, 3) | st.sampled_from(["x", "10s", ""])
VALUES = st.recursive(SCALARS, lambda inner: st.lists(inner, max_size=3) | st.dictionaries(KEYS, inner, max_size=3),
                      max_leaves=8)
DOCS = st.dictionaries(KEYS, VALUES, max_size=4)


@given(target=DOCS, patch=DOCS)
@settings(max_examples=examples(300), deadline=None)
def test_the_merge_patches_agree(target: dict[str, Any], patch: dict[str, Any]) -> None:
    assert sim_merge_patch(target, patch) == core_merge_patch(target, patch)


NAMES = st.sampled_from(["10-a.conf", "90-kubelet-rollout.conf", "99-z.conf", "a", "a.conf", "Z.conf", ".conf",
                         "x.conf.bak", "x.conf.d", "sub", "README", "b-c.conf"])
TREES = st.recursive(st.just("file"), lambda inner: st.dictionaries(NAMES, inner, min_size=1, max_size=4),
                     max_leaves=12)


def _build(root: Path, tree: Any) -> None:
    for name, sub in tree.items():
        if sub == "file":
            (root / name).write_text("x")
        else:
            (root / name).mkdir()
            _build(root / name, sub)


@given(tree=st.dictionaries(NAMES, TREES, max_size=5))
@settings(max_examples=examples(60), deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
def test_the_walks_read_the_same_files_in_the_same_order(tmp_path_factory: Any, tree: dict[str, Any]) -> None:
    root = tmp_path_factory.mktemp("conf.d")
    _build(root, tree)
    assert agent_walk(root) == sim_walk(root)[0]
