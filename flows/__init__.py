"""Prefect flows of kubelet-rollout: a thin shell over the ``rollout`` core (observe -> decide -> act).

    rollout_flow.py   kubelet-config-rollout: validate, lock, publish, plan, batches, gates, report
    rollback_flow.py  kubelet-config-rollback: restore touched nodes to previous or local config
    drift_flow.py     kubelet-config-drift: every node against what its last rollout proved (scheduled)
    cluster.py        the gateway and the rollout lock a run holds, set from its policy
    shell.py          the engine's Prefect shell: logs, artifacts, events, approval pauses, run tags
    approval.py       typed approval gates (pause + resume API) and the answering side for the CLI
    outcome.py        how a run ends (its outcome's state, never a traceback) and how a finished run reads
    run_logs.py       the traceback filter a process installs when it starts
    events.py         Prefect events for automations

`rollout demo` and the local Prefect API live with the command line (``rollout_cli``).
"""
