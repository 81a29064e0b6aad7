"""Fault injection: the agent kills itself with SIGKILL at a named step, as ``kill -9`` would.

Why: the agent promises that a kill at any moment leaves no half-written drop-in and that the
node converges when it comes back. Some moments (between a temp file and its rename, between a
restart and recording it) last microseconds; no outside ``kill -9`` can aim at them, so the
tests set ``KUBELET_ROLLOUT_AGENT_KILL_AT=<step>`` on one agent process and start it again
without it. Unset (always, in production), every call is one dictionary lookup.

Steps: ``download`` (before reading the ConfigMap), ``write`` (the drop-in's temp file written
and fsynced, not yet renamed into ``--config-dir``), ``restart`` (the kubelet restarted, the
agent's record of it not yet written), ``health-wait`` (restarted, health and read-back not yet
proven), ``promotion`` (the last-known-good copy written, the state not yet saying so),
``state-reset`` (a state reset stopped the kubelet and deleted its files, the agent's record of the
deletion not yet written, the kubelet not yet started).
"""

from __future__ import annotations

import os
import signal

ENV = "KUBELET_ROLLOUT_AGENT_KILL_AT"
STEPS = ("download", "write", "restart", "health-wait", "promotion")  # every rollout passes these
RESET_STEPS = ("state-reset",)  # only a rollout that asks for a state reset


def reached(step: str) -> None:
    """Die here, now, if this process was told to die at ``step``."""
    if os.environ.get(ENV) == step:
        os.kill(os.getpid(), signal.SIGKILL)
