"""Where things live on a simulated host, and how a node's host is first set up.

Why real files at host-absolute paths: a node agent written for a real machine should run
unchanged, only prefixing its paths with ``$HOST_ROOT``. kubesim writes the kubeadm-style files at
the node's first boot and then leaves them alone: like a real disk they survive restarts, and only
the agent (or a test) changes them.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from kubesim.clusterfile import NodeSpec
from kubesim.kubelet.dropins import format_kubeadm_args
from kubesim.kubelet.schema import API_VERSION, KIND

CONFIG_FILE = "/var/lib/kubelet/config.yaml"
DROPIN_DIR = "/etc/kubernetes/kubelet.conf.d"
FLAGS_ENV = "/var/lib/kubelet/kubeadm-flags.env"
KUBECONFIG = "/etc/kubernetes/kubelet.conf"
UNIT_DIR = "/etc/systemd/system"
KUBELET_UNIT = "kubelet.service"
WANTS_DIR = "multi-user.target.wants"  # under UNIT_DIR: what `systemctl enable` links
AGENT_STATE_DIR = "/var/lib/kubelet-rollout"


@dataclass(frozen=True)
class HostLayout:
    """The host root of one node and its well-known paths."""

    root: Path

    def path(self, host_path: str) -> Path:
        """``/etc/x`` on the host -> ``<root>/etc/x``."""
        return self.root / host_path.lstrip("/")

    @property
    def config_file(self) -> Path:
        return self.path(CONFIG_FILE)

    @property
    def dropin_dir(self) -> Path:
        return self.path(DROPIN_DIR)

    @property
    def flags_env(self) -> Path:
        return self.path(FLAGS_ENV)

    @property
    def unit_dir(self) -> Path:
        return self.path(UNIT_DIR)

    @property
    def kubelet_unit(self) -> Path:
        return self.unit_dir / KUBELET_UNIT

    @property
    def kubelet_unit_dropins(self) -> Path:
        return self.unit_dir / f"{KUBELET_UNIT}.d"


def with_type_meta(body: dict[str, Any]) -> dict[str, Any]:
    """A KubeletConfiguration document: ``apiVersion``/``kind`` first unless the body has them."""
    return {"apiVersion": API_VERSION, "kind": KIND, **body} if "kind" not in body else dict(body)


def _unit_text(spec: NodeSpec) -> str:
    """kubeadm's kubelet unit with its 10-kubeadm.conf folded in (the pool's unit settings)."""
    unit = spec.kubelet.unit
    config_dir = f" --config-dir={DROPIN_DIR}" if spec.kubelet.config_dir else ""
    environment = "".join(f'Environment="{key}={value}"\n' for key, value in sorted(unit.environment.items()))
    return (
        "[Unit]\n"
        "Description=kubelet: The Kubernetes Node Agent\n"
        "Documentation=https://kubernetes.io/docs/\n"
        f"StartLimitIntervalSec={unit.start_limit_interval_sec}\n"
        f"StartLimitBurst={unit.start_limit_burst}\n"
        "\n[Service]\n"
        f"{environment}"
        f"EnvironmentFile=-{FLAGS_ENV}\n"
        # informational: the simulated kubelet's command line is this one plus kubeadm-flags.env
        f"ExecStart=/usr/bin/kubelet --kubeconfig={KUBECONFIG} --config={CONFIG_FILE}{config_dir} "
        "$KUBELET_KUBEADM_ARGS\n"
        f"Restart={unit.restart}\n"
        f"RestartSec={unit.restart_sec}\n"
        "\n[Install]\nWantedBy=multi-user.target\n"
    )


def _write(path: Path, text: str, mode: int = 0o644) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.kubesim-tmp")
    tmp.write_text(text)
    tmp.chmod(mode)
    os.replace(tmp, path)


def provision(layout: HostLayout, spec: NodeSpec, kubeconfig_text: str) -> None:
    """First boot: kubeadm-style files from the cluster file; later boots: only the kubeconfig
    (the server's port can change between runs)."""
    _write(layout.path(KUBECONFIG), kubeconfig_text, 0o600)
    if layout.config_file.exists():
        return
    setup = spec.kubelet
    layout.dropin_dir.mkdir(parents=True, exist_ok=True)
    layout.kubelet_unit_dropins.mkdir(parents=True, exist_ok=True)
    layout.path(AGENT_STATE_DIR).mkdir(parents=True, exist_ok=True)
    for name, body in setup.dropins.items():
        text = body if isinstance(body, str) else yaml.safe_dump(with_type_meta(body), sort_keys=False)
        _write(layout.dropin_dir / name, text)
    _write(layout.flags_env, format_kubeadm_args(setup.flags, setup.feature_gates))
    _write(layout.kubelet_unit, _unit_text(spec))
    wants = layout.unit_dir / WANTS_DIR
    wants.mkdir(parents=True, exist_ok=True)
    if not (wants / KUBELET_UNIT).is_symlink():
        (wants / KUBELET_UNIT).symlink_to(f"../{KUBELET_UNIT}")  # kubeadm: systemctl enable kubelet
    # last: its existence marks a provisioned host
    _write(layout.config_file, yaml.safe_dump(with_type_meta(dict(setup.config)), sort_keys=False))


def describe(layout: HostLayout) -> dict[str, Any]:
    """The host's well-known paths (for ``GET /kubesim/v1/hosts/NODE``)."""
    return {
        "root": str(layout.root),
        "config": CONFIG_FILE,
        "configDir": DROPIN_DIR,
        "flagsEnv": FLAGS_ENV,
        "kubeconfig": KUBECONFIG,
        "unitDropinDir": f"{UNIT_DIR}/{KUBELET_UNIT}.d",
        "agentStateDir": AGENT_STATE_DIR,
    }
