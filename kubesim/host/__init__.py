"""Simulated hosts of modern-mode nodes: a real directory per node, a systemd-like service manager
for its ``kubelet.service``, the unit's journal, and the kubesim-only endpoints an agent drives."""
