"""The shipped manifest is minimal: take out any one verb and the command that needs it fails,
saying exactly which permission is missing.

Every (verb, resource, namespace) the manifest grants is one case, run with the cheapest command
that needs it. The case table must cover the manifest exactly: a new rule needs a case that
proves it is used (or it has no place in the manifest), and a case for a rule that is gone fails.

A refusal reaches the operator as ONE line (``error: <our call>: forbidden: <identity> cannot
<verb> <resource> (<scope>); apply deployments/kubernetes/rbac.yaml (see README: Permissions)``),
exit code 3, no traceback - from a plain command and from inside a flow run alike.
"""

from __future__ import annotations

import logging
import os
import subprocess
import sys
from pathlib import Path
from typing import Any, Callable

import pytest
import scenario as sc
import urllib3
from kubernetes.client.exceptions import ApiException
from rbac_rig import SA_USER, Manifest, Permission, Rig, manifest_permissions

from rollout.errors import ForbiddenError
from rollout.gateway import LOCK_NAME, KubeGateway, LockKeeper, default_retrying
from rollout.names import ANN_CORDONED_BY, ANN_ROLLOUT

pytestmark = pytest.mark.usefixtures("prefect_api")

HINT = "apply deployments/kubernetes/rbac.yaml (see README: Permissions)"
ONE_NODE = {"nodes": {"selector": "kubernetes.io/hostname=general-1"}}


def _start(rig: Rig, name: str) -> Any:
    """A one-node rollout of a config no node runs yet."""
    return rig.cli("start", "--config", str(rig.config()), "--policy", str(rig.policy(**ONE_NODE)), "--name", name)


def _start_without_lock_lease(rig: Rig, name: str) -> Any:
    """Only the very first rollout on a cluster creates the lock Lease."""
    _delete_lock(rig)
    return _start(rig, name)


def _delete_lock(rig: Rig) -> None:
    try:
        rig.admin.coordination.delete_namespaced_lease(LOCK_NAME, rig.admin.namespace)
    except ApiException as exc:
        if exc.status != 404:
            raise


def _start_with_lock_lease(rig: Rig, name: str) -> Any:
    """Every later rollout takes the existing (released) lock Lease over with an update."""
    rig.admin.acquire_lock("rbac-test", rollout="rbac-test", duration_s=1)
    rig.admin.release_lock("rbac-test")
    return _start(rig, name)


class _LostAnswer:
    """The cluster's CoreV1Api, except that the first node PATCH lands but its answer is lost
    (a connection reset after the server applied it): the gateway must read the node before
    writing again, which is what ``get nodes`` is for."""

    def __init__(self, core: Any) -> None:
        self._core = core
        self.lost = 0

    def __getattr__(self, name: str) -> Any:
        return getattr(self._core, name)

    def patch_node(self, *args: Any, **kwargs: Any) -> Any:
        answer = self._core.patch_node(*args, **kwargs)
        if not self.lost:
            self.lost += 1
            answer.release_conn()
            raise urllib3.exceptions.ProtocolError("Connection aborted: reset by peer")
        return answer


def _assign_whose_answer_is_lost(rig: Rig, name: str) -> str:
    """No CLI command can lose an answer on purpose, so this one drives the gateway directly."""
    gateway = KubeGateway.from_kubeconfig(rig.kubeconfig, retrying=default_retrying(sleep=lambda _s: None))
    gateway.core = _LostAnswer(gateway.core)
    with pytest.raises(ForbiddenError) as refused:
        gateway.assign("general-1", None, annotations={"kubelet-rollout.io/probe": None})
    assert gateway.core.lost == 1
    return str(refused.value)


def _drain(rig: Rig, name: str) -> Any:
    """A change that needs a drain (a topology manager policy: drained, no state reset, so Dynamic
    Kubelet Config can take it) on a node that runs a pod (no controller owns it: the policy says to
    evict such pods too). Refused before the write: general-1 keeps its config; the cordon is lifted
    after, for the cases that follow."""
    rig.admin.core.create_namespaced_pod("default", {
        "apiVersion": "v1", "kind": "Pod", "metadata": {"name": f"{name[-50:]}-pod"},
        "spec": {"nodeName": "general-1", "containers": [{"name": "web", "image": "nginx"}]}})
    drain = {"drain": "auto", "timeout": "1m", "evictUnmanagedPods": True}
    try:
        return rig.cli("start", "--config", str(rig.config(topologyManagerPolicy="best-effort")), "--policy",
                       str(rig.policy(**ONE_NODE, disruption=drain)), "--name", name)
    finally:
        rig.admin.core.patch_node("general-1", {"spec": {"unschedulable": None},
                                                "metadata": {"annotations": {ANN_CORDONED_BY: None}}})


# what needs each permission: a CLI run (exit 3 expected), or a callable returning the error text
CASES: dict[str, Callable[[Rig, str], Any]] = {
    "get nodes": _assign_whose_answer_is_lost,
    "list nodes": lambda rig, name: rig.cli("plan", "--name", name),
    "watch nodes": _start,
    "patch nodes": _start,
    "get nodes/proxy": lambda rig, name: rig.cli("export", "general-1"),
    "create events": _start,
    "list pods": _drain,
    "create pods/eviction": _drain,
    "get namespaces": lambda rig, name: rig.cli("fleet", "identify"),
    "get configmaps in kube-system": lambda rig, name: rig.cli("publish", "--config", str(rig.config())),
    "create configmaps in kube-system": lambda rig, name: rig.cli("publish", "--config", str(rig.config())),
    "update configmaps in kube-system": _start,
    "get leases.coordination.k8s.io in kube-system": _start,
    "create leases.coordination.k8s.io in kube-system": _start_without_lock_lease,
    "update leases.coordination.k8s.io in kube-system": _start_with_lock_lease,
    "list leases.coordination.k8s.io in kube-node-lease": lambda rig, name: rig.cli("plan", "--name", name),
    "watch leases.coordination.k8s.io in kube-node-lease": _start,
}
# Node Events inform people; the engine never fails a rollout over one (rollout.loop.engine's event
# queue), so without this verb the rollout completes and the refusal is logged, in the same words.
BEST_EFFORT = {"create events"}
# granted cluster-wide, asked of a namespace: the refusal names the namespace of the request
ASKED_IN = {"create pods/eviction": "default"}


def assert_one_clear_line(text: str, gone: Permission) -> str:
    # a refusal before the run ("error: ...") or the run's end line ("NAME: cluster-error: ...")
    lines = [line for line in text.splitlines()
             if "forbidden:" in line and (line.startswith("error:") or ": cluster-error: " in line)]
    assert len(lines) == 1, text
    line = lines[0]
    namespace = gone.namespace or ASKED_IN.get(gone.id, "")
    scope = f"(in namespace {namespace})" if namespace else "(cluster-wide)"
    assert f"forbidden: {SA_USER} cannot {gone.verb} {gone.qualified} {scope}; {HINT}" in line, line
    assert "Traceback" not in text
    return line


def test_the_cases_cover_the_manifest_exactly() -> None:
    assert sorted(p.id for p in manifest_permissions()) == sorted(CASES)


@pytest.mark.parametrize("gone", manifest_permissions(), ids=lambda p: p.id)
def test_without_this_one_verb_its_command_fails_naming_it(gone: Permission, rig: Rig, manifest: Manifest,
                                                         caplog: pytest.LogCaptureFixture) -> None:
    name = "without-" + "-".join(gone.id.replace("/", "-").replace(".", "-").split()[:3])
    with manifest.without(gone), caplog.at_level(logging.WARNING, logger="rollout"):
        outcome = CASES[gone.id](rig, name)
    if isinstance(outcome, str):
        assert_one_clear_line(f"error: {outcome}", gone)
    elif gone.id in BEST_EFFORT:
        assert outcome.exit_code == 0, outcome.output
        # ours only: a simulated kubelet may log its own transient 403 (the node authorizer's
        # graph catching up with a fresh assignment, as on a real 1.23 API server)
        warned = [r.getMessage() for r in caplog.records
                  if "forbidden:" in r.getMessage() and not r.name.startswith("kubesim")]
        assert warned and all(f"cannot {gone.verb} {gone.qualified}" in w for w in warned), warned
    else:
        assert outcome.exit_code == 3, outcome.output
        assert_one_clear_line(outcome.output, gone)


def test_a_refusal_inside_a_flow_run_is_one_line_on_the_terminal(rig: Rig, manifest: Manifest,
                                                                 prefect_api: str, tmp_path: Path) -> None:
    """The real process, as a user runs it: Prefect's own logging must not add a traceback."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("KUBE", "PREFECT_"))}
    env.update(PREFECT_API_URL=prefect_api, PREFECT_HOME=str(tmp_path), PREFECT_SERVER_ANALYTICS_ENABLED="false")
    args = ["start", "--config", str(rig.config()), "--policy", str(rig.policy(**ONE_NODE)),
            "--name", "terminal-403", "--kubeconfig", str(rig.kubeconfig)]
    gone = Permission("patch", "nodes", "", "")
    with manifest.without(gone):
        run = subprocess.run([sys.executable, "-m", "rollout_cli", *args], capture_output=True, text=True,
                             env=env, timeout=120)
    assert run.returncode == 3, run.stdout + run.stderr
    line = assert_one_clear_line(run.stdout + run.stderr, gone)
    assert line.startswith("terminal-403: cluster-error: patch node/general-1: forbidden:")
    assert all(o.annotations.get(ANN_ROLLOUT) != "terminal-403" for o in sc.nodes(rig.admin).values())


def test_a_lock_renewal_refused_mid_run_stops_the_rollout_before_its_next_write(rig: Rig, manifest: Manifest) -> None:
    """Losing ``update leases`` after the start is no API outage to ride out: the lease would
    lapse under a running rollout, so the next ``check`` raises the refusal itself."""
    gateway = KubeGateway.from_kubeconfig(rig.kubeconfig)
    keeper = LockKeeper(gateway, "kubelet-rollout/renewal-403", rollout="renewal-403", renew_every_s=3600)
    with keeper:
        with manifest.without(Permission("update", "leases", "coordination.k8s.io", "kube-system")):
            keeper.renew_now()
            with pytest.raises(ForbiddenError, match="cannot update leases.coordination.k8s.io"):
                keeper.check()
    _delete_lock(rig)  # it was never released
