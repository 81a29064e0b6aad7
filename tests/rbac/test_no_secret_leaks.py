"""No credential ever leaves the process: a rollout as the ServiceAccount, with every logger at
DEBUG, writes neither the bearer token it runs with nor any other secret of the cluster (the
admin token, the token-signing secret, the PKI's private keys) anywhere an operator or another
tenant can read: the terminal, the Prefect run's logs and artifacts, the journal ConfigMap, the
Kubernetes Events and the node annotations.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
import scenario as sc
import yaml
from rbac_rig import Rig

pytestmark = pytest.mark.usefixtures("prefect_api")

# the real CLI, with DEBUG on for the rollout's own loggers and the HTTP client beneath them
# (Prefect's logging is set up on import; its extra loggers then ship to the run's logs too)
DEBUG_CLI = """
import logging, sys
import prefect.main
for name in ("rollout", "kubernetes", "urllib3"):
    logging.getLogger(name).setLevel(logging.DEBUG)
from rollout_cli.main import app
app(sys.argv[1:], prog_name="rollout")
"""


def _kubeconfig_tokens(path: Path) -> list[str]:
    users = yaml.safe_load(path.read_text()).get("users") or []
    return [u["user"]["token"] for u in users if (u.get("user") or {}).get("token")]


def secrets(cluster: Any, sa_kubeconfig: Path) -> dict[str, str]:
    """Every secret a leak could expose, by a readable name (a private key: each line of its body)."""
    found = {f"service account token {i}": t for i, t in enumerate(_kubeconfig_tokens(sa_kubeconfig))}
    found.update({f"admin token {i}": t for i, t in enumerate(_kubeconfig_tokens(cluster.kubeconfig))})
    pki = Path(cluster.state_dir) / "pki"
    signing, admin = (pki / "tokens").read_text().split()
    found.update({"token-signing secret": signing, "admin token (state dir)": admin})
    for key in sorted(pki.glob("*.key")):
        body = [line for line in key.read_text().splitlines() if line and not line.startswith("-----")]
        found.update({f"{key.name} line {i}": line for i, line in enumerate(body) if len(line) >= 16})
    assert any(name.startswith("service account") for name in found) and any(".key" in n for n in found)
    return found


def _prefect_logs(flow_run_id: str) -> list[Any]:
    """The run's logs as the Prefect API holds them (polled: they are shipped in batches)."""
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import LogFilter, LogFilterFlowRunId

    deadline = time.monotonic() + 15
    while True:
        with get_client(sync_client=True) as client:
            logs = client.read_logs(log_filter=LogFilter(flow_run_id=LogFilterFlowRunId(any_=[flow_run_id])),
                                    limit=200)
        if any("completed" in log.message for log in logs) or time.monotonic() > deadline:
            return logs
        time.sleep(0.5)


def _cluster_text(rig: Rig, rollout: str) -> dict[str, str]:
    """What the rollout left in the cluster, read as admin."""
    admin = rig.admin
    core = admin.core
    events = json.loads(core.list_namespaced_event("default", _preload_content=False).data)
    nodes = {n.name: dict(n.annotations) for n in sc.nodes(admin).values()}
    return {
        "journal ConfigMap": json.dumps(admin.read_configmap(admin.journal_name(rollout))),
        "Kubernetes Events": json.dumps(events),
        "node annotations": json.dumps(nodes),
        "lock Lease": json.dumps(json.loads(admin.coordination.read_namespaced_lease(
            "kubelet-rollout-lock", admin.namespace, _preload_content=False).data)),
    }


def test_a_debug_rollout_as_the_service_account_leaks_no_secret(rig: Rig, prefect_api: str,
                                                               tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("KUBE", "PREFECT_"))}
    env.update(PREFECT_API_URL=prefect_api, PREFECT_HOME=str(tmp_path), PREFECT_SERVER_ANALYTICS_ENABLED="false",
               PREFECT_LOGGING_LEVEL="DEBUG", PREFECT_LOGGING_EXTRA_LOGGERS="rollout,kubernetes,urllib3")
    policy = rig.policy(nodes={"selector": "kubernetes.io/hostname in (general-1, general-2)"})
    args = ["start", "--config", str(rig.config()), "--policy", str(policy), "--name", "leak-check",
            "--kubeconfig", str(rig.kubeconfig), "-o", "json"]
    run = subprocess.run([sys.executable, "-c", DEBUG_CLI, *args], capture_output=True, text=True, env=env,
                         timeout=150)
    assert run.returncode == 0, run.stdout + run.stderr
    result = json.loads(run.stdout)

    logs = _prefect_logs(result["flow_run_id"])
    assert any(log.level == 10 and log.name.startswith(("rollout", "urllib3")) for log in logs), \
        "debug records of the rollout reached the Prefect API"
    assert "DEBUG" in run.stderr
    corpus = {
        "CLI stdout": run.stdout,
        "CLI stderr": run.stderr,
        "Prefect logs": "\n".join(f"{log.name} {log.message}" for log in logs),
        "Prefect artifacts": json.dumps([[a.key, a.description, a.data] for a in sc.artifacts("leak-check").values()],
                                        default=str),
        **_cluster_text(rig, "leak-check"),
    }
    assert all(corpus.values())
    leaks = [f"{secret} in {where}" for where, text in corpus.items()
             for secret, value in secrets(rig.cluster, rig.kubeconfig).items() if value in text]
    assert not leaks
