"""Simulated kubelets: config decode/validate, checkpoint store, DKC controller, lifecycle."""

from kubesim.kubelet.process import SimKubelet

__all__ = ["SimKubelet"]
