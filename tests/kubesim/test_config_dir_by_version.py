"""kubesim's 1.24-1.29: no DKC in the kubelet, ``--config-dir`` as each version has it."""

from __future__ import annotations

import pytest

from kubesim.clusterfile import ClusterFile, expand
from kubesim.host.layout import _unit_text
from kubesim.versions import KubernetesVersion

ALPHA = {"KUBELET_CONFIG_DROPIN_DIR_ALPHA": "on"}


def _pools(version: str) -> dict[str, bool]:
    cluster = ClusterFile.model_validate({"kubernetesVersion": version, "pools": [
        {"name": "plain", "count": 1},
        {"name": "alpha", "count": 1, "kubelet": {"unit": {"environment": ALPHA}}},
        {"name": "forced", "count": 1, "kubelet": {"configDir": True}},
    ]})
    return {n.pool: n.kubelet.config_dir for n in expand(cluster, KubernetesVersion.parse(version))}


@pytest.mark.parametrize("version, plain, alpha", [
    ("1.24", False, False), ("1.27", False, False), ("1.28", False, True), ("1.29", False, True),
    ("1.30", True, True), ("1.31", True, True),
], ids=lambda v: str(v))
def test_config_dir_is_passed_as_the_version_has_it_unless_the_pool_says(version: str, plain: bool, alpha: bool) -> None:
    assert _pools(version) == {"plain": plain, "alpha": alpha, "forced": True}


def test_1_24_and_1_25_are_modern_with_the_api_fields_behind_the_gate() -> None:
    for text, gone in (("1.24", False), ("1.25", False), ("1.26", True)):
        version = KubernetesVersion.parse(text)
        assert version.modern and version.config_source_gone is gone
    assert KubernetesVersion.parse("1.24").git_version == "v1.24.17"


def test_the_units_environment_is_written_as_environment_lines() -> None:
    cluster = ClusterFile.model_validate({"kubernetesVersion": "1.29", "pools": [
        {"name": "alpha", "count": 1, "kubelet": {"unit": {"environment": ALPHA}}}]})
    [node] = expand(cluster, KubernetesVersion.parse("1.29"))
    text = _unit_text(node)
    assert 'Environment="KUBELET_CONFIG_DROPIN_DIR_ALPHA=on"' in text and "--config-dir=" in text
