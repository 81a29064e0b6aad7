"""A run given no rollout name (the scheduled deployment's) takes its config's ConfigMap name:
each new config is a new rollout, the same config resumes its own."""

from __future__ import annotations

import pytest
import scenario as sc

from rollout.usecases.prepare import rollout_name_for

pytestmark = pytest.mark.usefixtures("prefect_api")


def _flow_run(run_id: str):
    from prefect.client.orchestration import get_client

    with get_client(sync_client=True) as client:
        return client.read_flow_run(run_id)


def test_a_run_without_a_name_is_named_after_its_config(tmp_path) -> None:
    with sc.cluster(tmp_path, general=2) as c:
        gw = sc.gateway(c)
        text = sc.config_text(gw, maxPods=84)
        derived = rollout_name_for(config=text, configmap=None)
        assert derived.startswith("kubelet-config-")
        first = sc.run(config=text, policy=sc.policy(), kubeconfig=str(c.kubeconfig))
        assert first.outcome == "completed", first.message
        assert sc.journal(gw, derived).target.name == derived
        run = _flow_run(first.flow_run_id)  # named after the rollout, tagged for the UI's filters
        assert run.name == derived
        assert {f"rollout:{derived}", "policy:test", f"config:{derived}"} <= set(run.tags)
        again = sc.run(configmap=f"kube-system/{derived}", policy=sc.policy(), kubeconfig=str(c.kubeconfig))
        assert again.outcome == "completed", again.message  # the same rollout, resumed: nothing to do
        assert sc.assignment_patches(c) == {n: 1 for n in sc.workers(gw)}
