"""Prefect flows of kubelet-rollout: a thin shell over the ``rollout`` core (observe -> decide -> act).

    rollout_flow.py   kubelet-config-rollout: validate, lock, publish, plan, batches, gates, report
    rollback_flow.py  kubelet-config-rollback: restore touched nodes to previous or local config
    approval.py       typed approval gates (pause + resume API) and the answering side for the CLI
    status.py         a rollout's status from the cluster journal and the nodes
    report.py         per-node rows, batch tables, final markdown report
    events.py         Prefect events for automations
    common.py         gateway construction, policy refs, run outcomes, CLI helpers
    demo.py           `rollout demo`
    prefect_home.py   a private Prefect API for tests and the demo
"""
