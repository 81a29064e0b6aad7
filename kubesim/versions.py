"""Which Kubernetes minor a simulated cluster is, and what follows from it.

Why one module: the API server (``/version``, whether Nodes still have ``spec.configSource``), the
kubelets (DKC or drop-ins) and the cluster wiring (are there simulated hosts?) must all agree on
the same version switch. kubesim simulates two worlds: 1.23 with Dynamic Kubelet Config, and
"modern" 1.24+ where the kubelet has no DKC (removed from it in 1.24) and kubelets run from
``--config``, plus a ``--config-dir`` drop-in directory on their host where the version has one
(1.28-1.29 only with ``KUBELET_CONFIG_DROPIN_DIR_ALPHA`` in the kubelet's environment, 1.30+
without). The API server of 1.24-1.25 still has ``spec.configSource``/``status.config`` behind its
``DynamicKubeletConfig`` gate, off by default (dropped on write unless already in use); from 1.26
the fields are gone from the Node type.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

DEFAULT_VERSION = "1.23"
# the last patch release of each simulated minor (what /version and the kubelets report)
_PATCH = {23: 17, 24: 17, 25: 16, 26: 15, 27: 16, 28: 15, 29: 14, 30: 10, 31: 4, 32: 3, 33: 1}
# Node.spec.configSource / status.config left the Node type in 1.26 (KEP-281)
CONFIG_SOURCE_REMOVED = 26
# the kubelet lost Dynamic Kubelet Config in 1.24 (its DynamicKubeletConfig gate removed)
KUBELET_DKC_REMOVED = 24


class VersionError(ValueError):
    """A Kubernetes version kubesim does not simulate."""


@dataclass(frozen=True)
class KubernetesVersion:
    """A simulated minor version, e.g. ``KubernetesVersion.parse("1.31")``."""

    minor: int

    @classmethod
    def parse(cls, text: str | int | float) -> "KubernetesVersion":
        match = re.fullmatch(r"v?1\.(\d+)(?:\.\d+)?", str(text).strip())
        if not match or int(match.group(1)) not in _PATCH:
            known = ", ".join(f"1.{m}" for m in sorted(_PATCH))
            raise VersionError(f"unsupported Kubernetes version {text!r}; kubesim simulates {known}")
        return cls(int(match.group(1)))

    @property
    def modern(self) -> bool:
        """No DKC in the kubelet; kubelets run from files on simulated hosts."""
        return self.minor >= KUBELET_DKC_REMOVED

    @property
    def config_source_gone(self) -> bool:
        """``spec.configSource`` and ``status.config`` are gone from the Node type (1.26+)."""
        return self.minor >= CONFIG_SOURCE_REMOVED

    @property
    def git_version(self) -> str:
        return f"v1.{self.minor}.{_PATCH[self.minor]}"

    def __str__(self) -> str:
        return f"1.{self.minor}"

    def version_info(self) -> dict[str, Any]:
        """The ``/version`` document."""
        return {
            "major": "1",
            "minor": str(self.minor),
            "gitVersion": self.git_version,
            "gitCommit": "0000000000000000000000000000000000000000" if self.minor != 23 else _V123_COMMIT,
            "gitTreeState": "clean",
            "buildDate": "2023-02-22T13:27:46Z" if self.minor == 23 else "2024-12-10T11:37:46Z",
            "goVersion": "go1.19.6" if self.minor == 23 else "go1.22.10",
            "compiler": "gc",
            "platform": "linux/amd64",
        }


_V123_COMMIT = "953be8927218ec8067e1af2641e540238ffd7576"
