"""kubesim: a simulated Kubernetes 1.23 cluster with Dynamic Kubelet Config - or, in modern mode
(``kubernetes_version="1.31"``), one whose kubelets run from drop-in files on simulated hosts.

Start one from Python with :class:`Cluster` (a context manager) or from a shell with
``kubesim up``; talk to it with the real ``kubectl`` or the ``kubernetes`` client through the
kubeconfig it writes. Heavy modules are imported lazily so ``import kubesim`` stays cheap.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from kubesim.cluster import Cluster, ClusterConfig, run_cluster

__all__ = ["Cluster", "ClusterConfig", "run_cluster"]


def __getattr__(name: str) -> Any:
    if name in __all__:
        from kubesim import cluster

        return getattr(cluster, name)
    raise AttributeError(f"module 'kubesim' has no attribute {name!r}")
