"""Fakes for the agent's tests: a node API in memory and a host whose kubelet is simulated.

Why fakes and not kubesim here: these tests pin the agent's own behaviour (the loop, the files it
leaves, what it reports) in milliseconds. The simulated kubelet below follows the rules of
modern-kubelet.md that the agent depends on: it reads the base file and every ``*.conf`` below
the drop-in dir at each start only, merges them as RFC 7386 patches, lets flags win, and
crash-loops (restart counter rising) on a config it cannot run. kubesim's modern mode is the
real integration partner (test_agent_on_kubesim.py).
"""

from __future__ import annotations

import copy
import json
import os
import subprocess
import sys
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any, Mapping

import yaml

from kubelet_rollout_agent import names
from kubelet_rollout_agent.host import CommandResult, under_root
from kubelet_rollout_agent.configdir import dropin_files
from kubelet_rollout_agent.merge import load_document, merge_dropins

T0 = datetime(2026, 11, 24, 2, 0, tzinfo=timezone.utc)
BASE = {"apiVersion": "kubelet.config.k8s.io/v1beta1", "kind": "KubeletConfiguration",
        "cgroupDriver": "systemd", "maxPods": 110}


def dropin_text(**fields: Any) -> str:
    return yaml.safe_dump({"apiVersion": "kubelet.config.k8s.io/v1beta1",
                           "kind": "KubeletConfiguration", **fields}, sort_keys=False)


class Clock:
    def __init__(self, start: datetime = T0) -> None:
        self.now = start

    def __call__(self) -> datetime:
        return self.now

    def advance(self, **kwargs: float) -> None:
        self.now += timedelta(**kwargs)


class FakeNodeApi:
    """The NodeApi surface over dicts; ``calls`` records what the agent did."""

    def __init__(self, node: str = "node-1") -> None:
        self.node = node
        self.annotations: dict[str, str] = {}
        self.rv = 1
        self.configmaps: dict[tuple[str, str], dict[str, Any]] = {}
        self.events: list[tuple[str, str, str]] = []
        self.patches: list[dict[str, Any]] = []

    def publish(self, name: str, text: str, *, namespace: str = "kube-system",
                annotations: Mapping[str, str] | None = None) -> dict[str, str]:
        """A ConfigMap; returns the desired-config annotation body that names it."""
        uid = f"uid-{name}"
        self.rv += 1
        self.configmaps[(namespace, name)] = {
            "metadata": {"name": name, "namespace": namespace, "uid": uid,
                         "resourceVersion": str(self.rv), "annotations": dict(annotations or {})},
            "data": {"kubelet": text}}
        return {"namespace": namespace, "name": name, "uid": uid,
                "resourceVersion": str(self.rv), "key": "kubelet"}

    def assign(self, desired: Mapping[str, str] | None) -> None:
        if desired is None:
            self.annotations.pop(names.ANN_DESIRED, None)
        else:
            self.annotations[names.ANN_DESIRED] = json.dumps(desired)
        self.rv += 1

    def status(self, key: str) -> Any:
        value = self.annotations.get(key)
        return json.loads(value) if value and value.startswith("{") else value

    def get_node(self) -> dict[str, Any]:
        return {"metadata": {"name": self.node, "resourceVersion": str(self.rv),
                             "annotations": dict(self.annotations)}}

    def wait_for_change(self, resource_version: str, timeout_s: float) -> bool:
        return False

    def get_configmap(self, namespace: str, name: str) -> dict[str, Any]:
        from rollout.errors import NotFoundError

        if (namespace, name) not in self.configmaps:
            raise NotFoundError(f"configmap {namespace}/{name} not found")
        return copy.deepcopy(self.configmaps[(namespace, name)])

    def patch_annotations(self, annotations: Mapping[str, str | None]) -> dict[str, Any]:
        self.patches.append(dict(annotations))
        for key, value in annotations.items():
            if value is None:
                self.annotations.pop(key, None)
            else:
                self.annotations[key] = value
        self.rv += 1
        return self.get_node()

    def configz(self) -> dict[str, Any] | None:
        return None

    def record_event(self, reason: str, message: str, type_: str = "Normal", *,
                     now: datetime | None = None) -> bool:
        self.events.append((reason, type_, message))
        return True

    def reasons(self) -> list[str]:
        return [reason for reason, _, _ in self.events]


class FakeHost:
    """A host root on disk with a simulated kubelet behind ``systemctl``.

    ``flags`` win over files (like --max-pods); a merged config with ``maxPods`` above
    ``crash_above`` cannot run, so every start fails and the restart counter climbs - with the
    guard's ExecStartPre run first when ``run_guard`` is set, as systemd would.
    """

    def __init__(self, root: Path, node: str = "node-1", *, flags: Mapping[str, Any] | None = None,
                 crash_above: int = 250, run_guard: bool = False) -> None:
        self.node = node
        self.root = root
        self.flags = dict(flags or {})
        self.crash_above = crash_above
        self.run_guard = run_guard
        self.commands: list[tuple[str, ...]] = []
        self.n_restarts = 0
        self.running: dict[str, Any] | None = None
        base = self.path(names.DEFAULT_BASE_CONFIG)
        base.parent.mkdir(parents=True, exist_ok=True)
        base.write_text(yaml.safe_dump(BASE))
        self.path(names.DEFAULT_CONFIG_DIR).mkdir(parents=True, exist_ok=True)
        self.path(names.DEFAULT_STATE_DIR).mkdir(parents=True, exist_ok=True)
        self.start()

    def path(self, host_path: str) -> Path:
        return under_root(self.root, host_path)

    def merged(self) -> dict[str, Any]:
        base = load_document(self.path(names.DEFAULT_BASE_CONFIG).read_text())
        docs = [load_document(p.read_text()) for p in dropin_files(self.path(names.DEFAULT_CONFIG_DIR))]
        return {**merge_dropins(base, docs), **self.flags}

    def _guard(self) -> None:
        guard = self.path(names.GUARD_PROGRAM)
        if self.run_guard and guard.exists():
            subprocess.run([sys.executable, str(guard)], env={**os.environ, "HOST_ROOT": str(self.root)},
                           check=True, capture_output=True)

    def start(self) -> bool:
        self._guard()
        config = self.merged()
        self.running = config if int(config.get("maxPods", 0)) <= self.crash_above else None
        return self.running is not None

    def crash_loop(self, times: int) -> None:
        """What systemd does while the agent is away: automatic restarts, each with the guard."""
        for _ in range(times):
            if self.running is not None:
                return
            self.n_restarts += 1
            self.start()

    def systemctl(self, *args: str) -> CommandResult:
        self.commands.append(args)
        if args[:1] == ("restart",):
            self.n_restarts = 0  # systemd flushes NRestarts on a manual start
            self.start()
            return CommandResult(0)
        if args[:1] == ("show",):
            state = "active" if self.running is not None else "activating"
            return CommandResult(0, f"ActiveState={state}\nNRestarts={self.n_restarts}\n"
                                    "ExecMainStartTimestamp=Tue 2026-11-24 02:00:00 UTC\n")
        return CommandResult(0)

    def journal(self, unit: str = "kubelet", lines: int = 50) -> list[str]:
        if self.running is None:
            return ['E1124 kubelet "command failed" err="failed to run Kubelet: too many pods"']
        return []

    def kubelet_healthz(self) -> bool:
        return self.running is not None

    def kubelet_configz(self) -> dict[str, Any] | None:
        return {"kubeletconfig": dict(self.running)} if self.running is not None else None
