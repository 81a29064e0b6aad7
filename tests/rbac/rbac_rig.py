"""The least-privilege rig: the shipped RBAC manifest as data, ``kubectl apply`` of it (whole, or
minus one permission), and the CLI run as the worker's ServiceAccount.

A module of its own (not the conftest) so the test modules can import it by a unique name.
"""

from __future__ import annotations

import contextlib
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator

import yaml

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "flows"))
import scenario as sc  # noqa: E402

from tests.kubesim.kubectl_helpers import Kubectl  # noqa: E402

REPO = Path(__file__).resolve().parents[2]
RBAC_YAML = REPO / "deployments" / "kubernetes" / "rbac.yaml"
SA_NAME = SA_NAMESPACE = "kubelet-rollout"
SA_USER = f"system:serviceaccount:{SA_NAMESPACE}:{SA_NAME}"


@dataclass(frozen=True)
class Permission:
    """One verb on one resource, as one rule of the manifest grants it."""

    verb: str
    resource: str  # with its subresource: nodes/proxy
    group: str
    namespace: str  # "" for a ClusterRole
    names: tuple[str, ...] = ()  # the rule's resourceNames: only these objects (none: any)

    @property
    def qualified(self) -> str:
        """``leases.coordination.k8s.io``, ``nodes/proxy``: as kubectl and our errors spell it."""
        return f"{self.resource}.{self.group}" if self.group else self.resource

    @property
    def id(self) -> str:
        """``patch nodes``, ``update leases.coordination.k8s.io in kube-system``."""
        return f"{self.verb} {self.qualified}" + (f" in {self.namespace}" if self.namespace else "")


def manifest_docs(text: str | None = None) -> list[dict[str, Any]]:
    return [d for d in yaml.safe_load_all(text or RBAC_YAML.read_text()) if d]


def manifest_permissions() -> list[Permission]:
    """Every verb of every resource the manifest's Roles and ClusterRoles grant, in file order."""
    found: list[Permission] = []
    for doc in manifest_docs():
        if doc["kind"] not in ("Role", "ClusterRole"):
            continue
        namespace = doc["metadata"].get("namespace", "") if doc["kind"] == "Role" else ""
        for rule in doc.get("rules", []):
            for group in rule.get("apiGroups", [""]):
                for resource in rule.get("resources", []):
                    names = tuple(rule.get("resourceNames", ()))
                    found += [Permission(verb, resource, group, namespace, names) for verb in rule["verbs"]]
    return found


def _without(docs: list[dict[str, Any]], gone: Permission) -> list[dict[str, Any]]:
    """The manifest with one verb of one resource taken out of the role that grants it."""
    out = []
    for doc in docs:
        doc = dict(doc)
        if doc["kind"] in ("Role", "ClusterRole"):
            namespace = doc["metadata"].get("namespace", "") if doc["kind"] == "Role" else ""
            rules = []
            for rule in doc.get("rules", []):
                hit = (namespace == gone.namespace and gone.group in rule.get("apiGroups", [""])
                       and gone.resource in rule.get("resources", []) and gone.verb in rule["verbs"])
                if not hit:
                    rules.append(rule)
                    continue
                others = [r for r in rule["resources"] if r != gone.resource]
                if others:
                    rules.append({**rule, "resources": others})
                verbs = [v for v in rule["verbs"] if v != gone.verb]
                if verbs:
                    rules.append({**rule, "resources": [gone.resource], "verbs": verbs})
            doc["rules"] = rules
        out.append(doc)
    return out


class Manifest:
    """``kubectl apply -f`` of the shipped manifest, or of it minus one permission."""

    def __init__(self, kubectl: Kubectl, workdir: Path) -> None:
        self.kubectl = kubectl
        self.workdir = workdir

    def apply_shipped(self) -> None:
        self.kubectl.run("apply", "-f", str(RBAC_YAML))

    @contextlib.contextmanager
    def without(self, gone: Permission) -> Iterator[None]:
        path = self.workdir / f"rbac-without-{gone.id.replace(' ', '-').replace('/', '-')}.yaml"
        path.write_text(yaml.safe_dump_all(_without(manifest_docs(), gone), sort_keys=False))
        self.kubectl.run("apply", "-f", str(path))
        try:
            yield
        finally:
            self.apply_shipped()


def _rebind_prefect_console() -> None:
    """CliRunner swaps sys.stdout/err for each invoke and closes them after: Prefect's console log
    handler, set up during an earlier invoke in this process, would go on writing to a closed
    stream ("--- Logging error ---"). Point it at the test process's own stderr again."""
    import logging
    import sys

    for name in ("", "prefect", "prefect.flow_runs", "prefect.task_runs"):
        for handler in logging.getLogger(name).handlers:
            console = getattr(handler, "console", None)
            if console is not None:
                console.file = sys.stderr


class Rig:
    """The CLI as the ServiceAccount: ``rig.cli("plan", ...)`` is ``rollout plan ... --kubeconfig SA``.

    Commands run in-process through typer's runner on ``rollout_cli.main:app`` (the real CLI,
    the real flows, the real kubernetes client over HTTPS); each config it writes changes
    ``maxPods`` to a value not used before, so every rollout has something to do.
    """

    def __init__(self, cluster: Any, kubeconfig: Path, admin: Any, workdir: Path) -> None:
        self.cluster = cluster
        self.kubeconfig = kubeconfig
        self.admin = admin
        self.workdir = workdir
        self._base = sc.base_config(admin)
        self._serial = 0
        # Prefect sets its console handler up on first use, bound to the stderr of that moment:
        # do it now, not inside one runner invocation whose captured stderr is closed after it
        import flows.rollback_flow  # noqa: F401
        import flows.rollout_flow  # noqa: F401

    def cli(self, *args: str) -> Any:
        from typer.testing import CliRunner

        from rollout_cli.main import app

        local = args[0] == "validate"  # judged offline here (with --kubeconfig it reads the nodes, as diff does)
        credentials = [] if local else ["--kubeconfig", str(self.kubeconfig)]
        _rebind_prefect_console()
        return CliRunner().invoke(app, [*args, *credentials], catch_exceptions=False)

    def config(self, **changes: Any) -> Path:
        self._serial += 1
        path = self.workdir / f"kubelet-{self._serial}.yaml"
        path.write_text(yaml.safe_dump({**self._base, "maxPods": 60 + self._serial, **changes}, sort_keys=False))
        return path

    def policy(self, **overrides: Any) -> Path:
        self._serial += 1
        path = self.workdir / f"policy-{self._serial}.yaml"
        path.write_text(sc.policy(**{"steps": [1, "100%"], **overrides}))
        return path
