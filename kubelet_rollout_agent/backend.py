"""Which file the agent writes on this node: a ``--config-dir`` drop-in, or the ``--config`` file.

Why: the drop-in directory arrived in 1.28 behind ``KUBELET_CONFIG_DROPIN_DIR_ALPHA`` (a 1.28-1.29
kubelet given ``--config-dir`` without that variable in its environment does not start) and is
read without it from 1.30 (KEP-3983); a 1.24-1.27 kubelet does not know the flag at all. Many
clusters still run those versions, or 1.28-1.29 without the switch: their kubelet reads one
``--config`` file. So the agent looks, as a person on the host would, at how the kubelet is
started - its systemd unit and the unit's drop-ins (``Environment=``, ``EnvironmentFile=`` such as
kubeadm's ``kubeadm-flags.env``, the last ``ExecStart=``) - and at the kubelet's version
(``Node.status.nodeInfo.kubeletVersion``), and picks:

- **drop-in**: ``--config-dir`` is on the command line and this version reads it;
- **main-file**: otherwise; the agent writes the whole merged ``--config`` file.

Pure but for :func:`read_unit`, which gathers the texts from the host.
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from kubelet_rollout_agent import names

DROPIN_ALPHA_ENV = "KUBELET_CONFIG_DROPIN_DIR_ALPHA"
CONFIG_DIR_SINCE = 28  # an unknown flag before 1.28
CONFIG_DIR_WITHOUT_ENV = 30  # 1.28-1.29 (alpha) read it only with DROPIN_ALPHA_ENV set

# where systemd finds the unit and its drop-ins, highest precedence first
UNIT_DIRS = ("/etc/systemd/system", "/run/systemd/system", "/usr/lib/systemd/system", "/lib/systemd/system")
UNIT_NAME = "kubelet.service"


@dataclass(frozen=True)
class UnitText:
    """The kubelet's unit file and its drop-ins in systemd's order, and the environment files
    they name (host path -> text; a missing file is absent)."""

    files: tuple[str, ...]
    environment_files: Mapping[str, str]


@dataclass(frozen=True)
class KubeletFiles:
    """What this node's kubelet reads, and so what the agent writes."""

    backend: str  # names.BACKEND_DROPIN or names.BACKEND_MAIN_FILE
    config: str | None  # --config (host path), None when not given
    config_dir: str | None  # --config-dir, only when this kubelet reads it
    why: str  # for the log and the advertisement

    @property
    def target(self) -> str | None:
        """The file the agent writes: the main file, or None for a drop-in (its slot)."""
        return self.config if self.backend == names.BACKEND_MAIN_FILE else None


def kubelet_minor(version: str) -> int | None:
    """``v1.29.14`` -> 29; None when it cannot be read."""
    match = re.match(r"v?1\.(\d+)", version.strip())
    return int(match.group(1)) if match else None


def _parse_env_file(text: str) -> dict[str, str]:
    """``KEY=value`` lines (systemd's EnvironmentFile=: comments, optional quotes)."""
    out: dict[str, str] = {}
    for line in text.splitlines():
        line = line.strip()
        if not line or line.startswith(("#", ";")) or "=" not in line:
            continue
        key, _, value = line.partition("=")
        value = value.strip()
        if len(value) >= 2 and value[0] == value[-1] and value[0] in "\"'":
            value = value[1:-1]
        out[key.strip()] = value
    return out


def _service_lines(text: str) -> list[tuple[str, str]]:
    """``(key, value)`` of the ``[Service]`` section, in order."""
    section, out = "", []
    for raw in text.splitlines():
        line = raw.strip()
        if not line or line.startswith(("#", ";")):
            continue
        if line.startswith("[") and line.endswith("]"):
            section = line[1:-1]
        elif section == "Service" and "=" in line:
            key, _, value = line.partition("=")
            out.append((key.strip(), value.strip()))
    return out


def _expand(command: str, env: Mapping[str, str]) -> list[str]:
    """systemd's expansion: ``${VAR}`` stays one word, a bare ``$VAR`` word splits on spaces."""
    words: list[str] = []
    for word in shlex.split(command):
        bare = re.fullmatch(r"\$([A-Za-z_][A-Za-z0-9_]*)", word)
        if bare:
            words.extend(shlex.split(env.get(bare.group(1), "")))
            continue
        words.append(re.sub(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}", lambda m: env.get(m.group(1), ""), word))
    return words


def kubelet_command(unit: UnitText) -> tuple[list[str], dict[str, str]]:
    """The kubelet's argv (after the program) and its environment, as systemd would start it."""
    env: dict[str, str] = {}
    exec_start = ""
    for text in unit.files:
        for key, value in _service_lines(text):
            if key == "Environment":
                for word in shlex.split(value):
                    name, _, val = word.partition("=")
                    env[name] = val
            elif key == "EnvironmentFile":
                path = value.lstrip("-")
                if path in unit.environment_files:
                    env.update(_parse_env_file(unit.environment_files[path]))
            elif key == "ExecStart":
                exec_start = value  # an empty ExecStart= resets; the last one wins
    argv = _expand(exec_start.lstrip("-@:+!"), env) if exec_start else []
    return argv[1:], env


def _flag(argv: Sequence[str], name: str) -> str | None:
    """The last value of ``--name=V`` or ``--name V`` (pflag: the last one wins)."""
    value = None
    for i, word in enumerate(argv):
        if word.startswith(f"{name}="):
            value = word.split("=", 1)[1]
        elif word == name and i + 1 < len(argv):
            value = argv[i + 1]
    return value


def choose(unit: UnitText, kubelet_version: str) -> KubeletFiles:
    """The backend for this kubelet: drop-in when it reads ``--config-dir``, else main-file."""
    argv, env = kubelet_command(unit)
    config, config_dir = _flag(argv, "--config"), _flag(argv, "--config-dir")
    minor = kubelet_minor(kubelet_version)
    if config_dir and minor is not None:
        if minor >= CONFIG_DIR_WITHOUT_ENV or (minor >= CONFIG_DIR_SINCE and DROPIN_ALPHA_ENV in env):
            return KubeletFiles(names.BACKEND_DROPIN, config, config_dir,
                                f"kubelet {kubelet_version} runs with --config-dir={config_dir}")
    if not config_dir:
        why = "the kubelet runs without --config-dir"
    elif minor is None:
        why = f"--config-dir is set, but the kubelet's version {kubelet_version!r} cannot be read"
    elif minor < CONFIG_DIR_SINCE:
        why = f"kubelet {kubelet_version} has no --config-dir (from 1.28)"
    else:
        why = f"kubelet {kubelet_version} reads --config-dir only with {DROPIN_ALPHA_ENV} in its environment"
    return KubeletFiles(names.BACKEND_MAIN_FILE, config, None, why + (f"; writing its --config {config}" if config
                                                                       else "; and without --config"))


def read_unit(root: Path) -> UnitText | None:
    """The kubelet's unit and drop-ins from a host root (``root``: where the host's / is), and the
    environment files they name; None when there is no kubelet unit to read."""
    def under(host_path: str) -> Path:
        return root / host_path.lstrip("/")

    unit = next((under(f"{d}/{UNIT_NAME}") for d in UNIT_DIRS if under(f"{d}/{UNIT_NAME}").is_file()), None)
    if unit is None:
        return None
    dropins: dict[str, Path] = {}
    for directory in reversed(UNIT_DIRS):  # a higher directory's file of the same name wins
        folder = under(f"{directory}/{UNIT_NAME}.d")
        if folder.is_dir():
            dropins.update({p.name: p for p in folder.glob("*.conf") if p.is_file()})
    texts = [unit.read_text(), *(dropins[name].read_text() for name in sorted(dropins))]
    env_files: dict[str, str] = {}
    for text in texts:
        for key, value in _service_lines(text):
            path = value.lstrip("-")
            if key == "EnvironmentFile" and under(path).is_file():
                env_files[path] = under(path).read_text()
    return UnitText(tuple(texts), env_files)
