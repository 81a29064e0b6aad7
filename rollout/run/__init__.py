"""A run of a rollout or of its rollback, as a command or a flow run starts it: the request, checked
once (``request``), and the run itself (``run``: the lock, the preparation, the loop, its view)."""

from rollout.run.request import (
    PrometheusAddress,
    RunRequest,
    applied_policy,
    resumed_request,
    rollback_request,
    rollout_request,
)
from rollout.run.run import Began, BatchFinished, Decided, HoldLock, Notice, Run, RunTools, retried

__all__ = ["Began", "BatchFinished", "Decided", "HoldLock", "Notice", "PrometheusAddress", "Run", "RunRequest",
           "RunTools", "applied_policy", "resumed_request", "retried", "rollback_request", "rollout_request"]
