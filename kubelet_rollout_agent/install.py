"""Install and uninstall the agent's host-side pieces: the guard, its unit drop-in, our slot.

Why idempotent and atomic: the agent installs at every start (so an upgraded agent upgrades its
guard), possibly on thousands of nodes at once, and may be killed half-way. Each file is written
only when its bytes differ, atomically, and ``systemctl daemon-reload`` runs only when a unit
file really changed (a reload on every agent start would be noise in every node's journal).

Uninstall returns the node to its base config in one step: guard, unit drop-in and our kubelet
drop-in removed, the state dir emptied, one daemon-reload and one kubelet restart.
"""

from __future__ import annotations

import shlex
from dataclasses import dataclass
from pathlib import Path

from kubelet_rollout_agent import names
from kubelet_rollout_agent.atomic import atomic_remove, atomic_write, read_bytes, remove_stale_temps
from kubelet_rollout_agent.host import Host

GUARD_SOURCE = Path(__file__).with_name("guard.py")
STATE_FILES = (names.STATE_FILE, names.STAGED_FILE, names.LKG_FILE, names.GUARD_TRIAL_FILE,
               names.GUARD_COUNT_FILE, names.GUARD_RECORD_FILE, names.ORIGINAL_FILE)


@dataclass(frozen=True)
class Layout:
    """Where things live on the host (host-absolute paths)."""

    config_dir: str = names.DEFAULT_CONFIG_DIR
    state_dir: str = names.DEFAULT_STATE_DIR
    base_config: str = names.DEFAULT_BASE_CONFIG
    python: str = names.GUARD_PYTHON
    # drop-in, main-file (the agent writes base_config itself) or auto (the agent chooses at start)
    backend: str = names.BACKEND_AUTO

    @property
    def dropin(self) -> str:
        return f"{self.config_dir.rstrip('/')}/{names.DROPIN_NAME}"

    @property
    def main_file(self) -> bool:
        return self.backend == names.BACKEND_MAIN_FILE

    @property
    def slot(self) -> str:
        """The file the agent writes: our drop-in, or (main-file) the kubelet's --config file."""
        return self.base_config if self.main_file else self.dropin

    def state(self, name: str) -> str:
        return f"{self.state_dir.rstrip('/')}/{name}"


def unit_dropin_text(layout: Layout) -> str:
    """The ``kubelet.service.d`` drop-in that runs the guard before every kubelet start."""
    command = shlex.join([names.GUARD_PROGRAM, "--state-dir", layout.state_dir,
                          "--config-dir", layout.config_dir, "--dropin", names.DROPIN_NAME])
    return (
        "# Installed by kubelet-rollout-agent; removed by `kubelet-rollout-agent uninstall`.\n"
        "# Before each kubelet start, counts starts during a drop-in's trial and restores the\n"
        "# last-known-good drop-in after repeated failures. '-': the guard never blocks a start.\n"
        "[Service]\n"
        f"ExecStartPre=-{command}\n"
    )


def guard_program(layout: Layout) -> bytes:
    """The guard as installed: its ``#!`` line names the host's python3 (``--guard-python``).

    The unit runs the program itself (an absolute path, as systemd wants), so the interpreter
    is chosen here; kubesim's service manager finds host-absolute programs under the host root.
    """
    source = GUARD_SOURCE.read_bytes()
    _, rest = source.split(b"\n", 1)
    return f"#!{layout.python}\n".encode() + rest


def _put(host: Host, host_path: str, data: bytes, *, mode: int) -> bool:
    """Write when the bytes differ; True when something changed."""
    target = host.path(host_path)
    if read_bytes(target) == data and (target.stat().st_mode & 0o777) == mode:
        return False
    atomic_write(target, data, mode=mode)
    return True


def keep_original(host: Host, layout: Layout) -> bool:
    """Main-file backend: a copy of the ``--config`` file as it is before the agent first writes
    it (the node's base config: withdrawal and the guard put it back). Taken once; True when
    taken now."""
    copy = host.path(layout.state(names.ORIGINAL_FILE))
    if not layout.main_file or copy.exists():
        return False
    data = read_bytes(host.path(layout.base_config))
    if data is None:
        raise RuntimeError(f"the kubelet's --config file {layout.base_config} cannot be read")
    atomic_write(copy, data, mode=0o600)
    return True


def install_guard(host: Host, layout: Layout) -> bool:
    """Guard program + unit drop-in; ``daemon-reload`` when the unit drop-in changed; for the
    main-file backend, the copy of the base config taken once."""
    host.path(layout.state_dir).mkdir(parents=True, exist_ok=True)
    keep_original(host, layout)
    remove_stale_temps(host.path(layout.config_dir))
    if layout.main_file:
        remove_stale_temps(host.path(layout.base_config).parent)
    _put(host, names.GUARD_PROGRAM, guard_program(layout), mode=0o755)
    unit_changed = _put(host, names.GUARD_UNIT_DROPIN, unit_dropin_text(layout).encode(), mode=0o644)
    if unit_changed:
        result = host.systemctl("daemon-reload")
        if not result.ok:
            raise RuntimeError(f"systemctl daemon-reload failed: {result.stderr.strip()}")
    return unit_changed


def uninstall(host: Host, layout: Layout) -> list[str]:
    """Remove everything the agent put on the host; returns what was done (for the operator)."""
    done: list[str] = []
    if atomic_remove(host.path(names.GUARD_UNIT_DROPIN)):
        done.append(f"removed {names.GUARD_UNIT_DROPIN}")
        host.systemctl("daemon-reload")
        done.append("systemctl daemon-reload")
    if atomic_remove(host.path(names.GUARD_PROGRAM)):
        done.append(f"removed {names.GUARD_PROGRAM}")
    dropin_removed = atomic_remove(host.path(layout.dropin))
    original = read_bytes(host.path(layout.state(names.ORIGINAL_FILE)))
    if original is not None and read_bytes(host.path(layout.base_config)) != original:
        atomic_write(host.path(layout.base_config), original, mode=0o644)  # main-file: the base back
        done.append(f"restored {layout.base_config} as it was before the agent")
        dropin_removed = True
    for name in STATE_FILES:
        if atomic_remove(host.path(layout.state(name))):
            done.append(f"removed {layout.state(name)}")
    if dropin_removed:
        done.append(f"removed {layout.dropin}")
        result = host.systemctl("restart", names.KUBELET_UNIT)
        done.append("systemctl restart kubelet" + ("" if result.ok else f" (failed: {result.stderr.strip()})"))
    return done
