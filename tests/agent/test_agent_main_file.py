"""The main-file backend: which file the agent writes per node, and how it writes and restores it.

A kubelet without a drop-in directory (1.24-1.27, or 1.28-1.29 without
``KUBELET_CONFIG_DROPIN_DIR_ALPHA``) reads one ``--config`` file. The agent finds that from the
kubelet's unit and version (``backend.choose``, a table below), then writes the whole merged file,
keeps the base config aside, proves the change through configz, and - like the drop-in - has the
host guard put the previous file back after failed starts with the agent gone.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from agent_fakes import BASE, FakeNodeApi, dropin_text
from kubelet_rollout_agent import names
from kubelet_rollout_agent.backend import UnitText, choose, kubelet_command, read_unit
from kubelet_rollout_agent.decide import Settings, agent_annotation
from kubelet_rollout_agent.install import Layout, install_guard, uninstall
from kubelet_rollout_agent.merge import changed_fields
from test_agent_loop import BAD, GOOD, SETTINGS, Node

KUBEADM_UNIT = """[Unit]
Description=kubelet: The Kubernetes Node Agent
[Service]
ExecStart=/usr/bin/kubelet
Restart=always
"""
KUBEADM_DROPIN = """[Service]
Environment="KUBELET_KUBECONFIG_ARGS=--kubeconfig=/etc/kubernetes/kubelet.conf"
Environment="KUBELET_CONFIG_ARGS=--config=/var/lib/kubelet/config.yaml"
EnvironmentFile=-/var/lib/kubelet/kubeadm-flags.env
EnvironmentFile=-/etc/default/kubelet
ExecStart=
ExecStart=/usr/bin/kubelet $KUBELET_KUBECONFIG_ARGS $KUBELET_CONFIG_ARGS $KUBELET_KUBEADM_ARGS $KUBELET_EXTRA_ARGS
"""
WITH_DIR = 'KUBELET_KUBEADM_ARGS="--config-dir=/etc/kubernetes/kubelet.conf.d --max-pods=90"\n'
WITHOUT_DIR = 'KUBELET_KUBEADM_ARGS="--max-pods=90"\n'
ALPHA_IN_UNIT = '[Service]\nEnvironment="KUBELET_CONFIG_DROPIN_DIR_ALPHA=on"\n'


def unit(flags_env: str, *extra: str, default_env: str | None = None) -> UnitText:
    files = {"/var/lib/kubelet/kubeadm-flags.env": flags_env}
    if default_env is not None:
        files["/etc/default/kubelet"] = default_env
    return UnitText((KUBEADM_UNIT, KUBEADM_DROPIN, *extra), files)


@pytest.mark.parametrize("unit_text, version, backend", [
    (unit(WITHOUT_DIR), "v1.31.4", "main-file"),
    (unit(WITH_DIR), "v1.31.4", "drop-in"),
    (unit(WITH_DIR), "v1.30.10", "drop-in"),
    (unit(WITH_DIR), "v1.29.14", "main-file"),
    (unit(WITH_DIR, ALPHA_IN_UNIT), "v1.29.14", "drop-in"),
    (unit(WITH_DIR, default_env="KUBELET_CONFIG_DROPIN_DIR_ALPHA=\n"), "v1.28.15", "drop-in"),
    (unit(WITH_DIR, ALPHA_IN_UNIT), "v1.27.16", "main-file"),
    (unit(WITHOUT_DIR), "v1.24.17", "main-file"),
    (unit(WITH_DIR), "", "main-file"),
], ids=[
    "1.31 without --config-dir: the main file",
    "1.31 with --config-dir: a drop-in",
    "1.30 reads --config-dir without the variable",
    "1.29 with --config-dir but no alpha variable: the main file",
    "1.29 with the alpha variable in the unit's Environment=: a drop-in",
    "1.28 with the alpha variable from an EnvironmentFile=: a drop-in",
    "1.27 has no --config-dir, whatever the environment says",
    "1.24: the main file",
    "an unreadable version is never taken to read drop-ins",
])
def test_the_backend_follows_the_kubelets_flags_environment_and_version(
        unit_text: UnitText, version: str, backend: str) -> None:
    chosen = choose(unit_text, version)
    assert chosen.backend == backend, chosen.why
    assert chosen.config == "/var/lib/kubelet/config.yaml"
    assert (chosen.config_dir is not None) == (backend == "drop-in")


def test_the_command_line_is_systemds_last_execstart_with_its_variables_expanded() -> None:
    argv, env = kubelet_command(unit(WITH_DIR, "[Service]\nExecStart=\nExecStart=/usr/bin/kubelet --config /etc/k.yaml\n"))
    assert argv == ["--config", "/etc/k.yaml"]
    argv, env = kubelet_command(unit(WITH_DIR))
    assert argv == ["--kubeconfig=/etc/kubernetes/kubelet.conf", "--config=/var/lib/kubelet/config.yaml",
                    "--config-dir=/etc/kubernetes/kubelet.conf.d", "--max-pods=90"]
    assert choose(UnitText((KUBEADM_UNIT,), {}), "v1.26.15").config is None


def test_the_unit_is_read_from_the_host_with_its_drop_ins_and_environment_files(tmp_path: Path) -> None:
    assert read_unit(tmp_path) is None
    for path, text in (("lib/systemd/system/kubelet.service", KUBEADM_UNIT),
                       ("usr/lib/systemd/system/kubelet.service.d/10-kubeadm.conf", KUBEADM_DROPIN),
                       ("etc/systemd/system/kubelet.service.d/20-alpha.conf", ALPHA_IN_UNIT),
                       ("var/lib/kubelet/kubeadm-flags.env", WITH_DIR)):
        (tmp_path / path).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / path).write_text(text)
    found = read_unit(tmp_path)
    assert found is not None and choose(found, "v1.29.14").backend == "drop-in"
    (tmp_path / "etc/systemd/system/kubelet.service.d/20-alpha.conf").unlink()
    found = read_unit(tmp_path)
    assert found is not None and choose(found, "v1.29.14").backend == "main-file"


def test_what_a_main_file_changes_is_the_merge_patch_from_the_base() -> None:
    base = {"kind": "K", "maxPods": 110, "evictionHard": {"memory.available": "100Mi", "nodefs.available": "10%"},
            "clusterDNS": ["10.0.0.10"], "readOnlyPort": 0}
    after = {"kind": "K", "maxPods": 50, "evictionHard": {"memory.available": "200Mi", "nodefs.available": "10%"},
             "clusterDNS": ["10.0.0.10"]}
    assert changed_fields(base, after) == {"maxPods": 50, "evictionHard": {"memory.available": "200Mi"},
                                           "readOnlyPort": None}


# -- the loop on a fake host whose kubelet reads no drop-in directory --------------------------


class OldNodeApi(FakeNodeApi):
    def get_node(self) -> dict[str, Any]:
        node = super().get_node()
        return {**node, "status": {"nodeInfo": {"kubeletVersion": "v1.26.15"}}}


class MainFileNode(Node):
    """A 1.26 node with kubeadm's unit (no --config-dir): the agent chooses the main file."""

    def __init__(self, root: Path, **host_options: Any) -> None:
        for path, text in (("etc/systemd/system/kubelet.service", KUBEADM_UNIT),
                           ("etc/systemd/system/kubelet.service.d/10-kubeadm.conf", KUBEADM_DROPIN),
                           ("var/lib/kubelet/kubeadm-flags.env", WITHOUT_DIR)):
            (root / path).parent.mkdir(parents=True, exist_ok=True)
            (root / path).write_text(text)
        super().__init__(root, **host_options)
        self.api = OldNodeApi()
        self.agent = self.new_agent()
        self.original = self.main_file()

    def new_agent(self) -> Any:
        agent = super().new_agent()
        agent.adopt_backend()
        install_guard(agent.host, agent.layout)
        return agent

    def main_file(self) -> bytes:
        return self.host.path(names.DEFAULT_BASE_CONFIG).read_bytes()


def test_a_main_file_is_written_whole_proven_and_promoted_and_the_base_kept_aside(tmp_path: Path) -> None:
    node = MainFileNode(tmp_path)
    assert node.agent.layout.backend == "main-file"
    advertised = json.loads(node.agent.settings.agent_annotation)
    assert advertised["backend"] == "main-file" and advertised["configFile"] == names.DEFAULT_BASE_CONFIG
    assert "configDir" not in advertised
    desired = node.api.publish("kc-a", GOOD)
    node.api.assign(desired)
    node.settle()
    written = yaml.safe_load(node.main_file())
    assert written == {**BASE, "maxPods": 50}  # the whole file: the base with the drop-in merged
    assert node.host.running is not None and node.host.running["maxPods"] == 50
    assert not list(node.host.path(names.DEFAULT_CONFIG_DIR).iterdir()), "no drop-in"
    assert node.state_file(names.ORIGINAL_FILE).read_bytes() == node.original
    node.clock.advance(seconds=SETTINGS.health_wait.total_seconds())
    node.settle()
    assert node.api.status(names.ANN_ACTIVE) == desired and node.api.status(names.ANN_ERROR) is None
    node.clock.advance(minutes=10)
    node.settle()
    assert node.api.status(names.ANN_LAST_KNOWN_GOOD) == desired
    assert node.state_file(names.LKG_FILE).read_bytes() == node.main_file()
    node.api.assign(None)  # withdrawn: the base file back, byte for byte
    node.settle()
    assert node.main_file() == node.original and node.host.running["maxPods"] == 110


def test_a_flag_that_overrides_the_main_file_is_an_error_naming_the_field(tmp_path: Path) -> None:
    node = MainFileNode(tmp_path, flags={"maxPods": 90})
    node.api.assign(node.api.publish("kc-a", GOOD))
    node.settle()
    assert "maxPods" in node.api.status(names.ANN_ERROR)
    assert node.main_file() == node.original  # rolled back to the base


def test_the_guard_restores_the_previous_main_file_while_the_agent_is_gone(tmp_path: Path) -> None:
    node = MainFileNode(tmp_path, run_guard=True)
    good = node.api.publish("kc-a", GOOD)
    node.api.assign(good)
    node.settle()
    node.clock.advance(minutes=10)
    node.settle()
    promoted = node.main_file()
    node.api.assign(node.api.publish("kc-b", BAD))
    node.settle()  # written and restarted; then the agent dies with the kubelet down
    assert yaml.safe_load(node.main_file())["maxPods"] == 999
    node.host.crash_loop(5)
    assert node.host.running is not None and node.main_file() == promoted
    node.agent = node.new_agent()  # back
    node.settle()
    assert node.api.status(names.ANN_ACTIVE) == good and "host guard restored" in node.api.status(names.ANN_ERROR)


def test_the_guard_puts_the_base_file_back_when_nothing_was_promoted_yet(tmp_path: Path) -> None:
    node = MainFileNode(tmp_path, run_guard=True)
    node.api.assign(node.api.publish("kc-b", BAD))
    node.settle()
    node.host.crash_loop(5)
    assert node.host.running is not None and node.main_file() == node.original
    record = json.loads(node.state_file(names.GUARD_RECORD_FILE).read_text())
    assert record["restored"] == "base"


def test_uninstall_puts_the_base_file_back(tmp_path: Path) -> None:
    node = MainFileNode(tmp_path)
    node.api.assign(node.api.publish("kc-a", GOOD))
    node.settle()
    done = uninstall(node.host, Layout())  # type: ignore[arg-type]
    assert node.main_file() == node.original and any("restored" in line for line in done)
    assert not node.state_file(names.ORIGINAL_FILE).exists()


def test_a_layout_given_as_drop_in_is_not_second_guessed(tmp_path: Path) -> None:
    node = MainFileNode(tmp_path)
    agent = node.new_agent()
    agent.layout = Layout(backend="drop-in")
    agent.settings = Settings(agent_annotation=agent_annotation(version="t", config_dir=names.DEFAULT_CONFIG_DIR))
    agent.adopt_backend()
    assert agent.layout.backend == "drop-in"
    assert json.loads(agent.settings.agent_annotation)["backend"] == "drop-in"
