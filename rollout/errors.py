"""The rollout's own exceptions: each one tells the caller what to do next.

Following kopf's ``errors.py``, no SDK exception ever leaves the gateway: it is translated into one of
these (``raise ... from exc``), so the flows and the CLI branch on *our* types and the Kubernetes
client stays replaceable. Every class carries an ``advice`` line: the action the caller should take
(retry, fix the input, wait for a lock, re-read and decide again). Messages are written for an
operator reading a log, not for a developer reading a traceback.

    RolloutError
    ├── InputError           bad input, found before anything touched the cluster
    │   ├── FlagError        fix the value on the command line; nothing was started
    │   ├── PolicyError      fix the policy file; nothing was written to the cluster
    │   ├── ConfigError      fix the kubelet config; nothing was written to the cluster
    │   └── FleetError       fix the fleet file (or the fleet rollout's name); no cluster was started
    ├── PlanError            the node pool cannot be planned under this policy; change one of them
    ├── LockHeldError        another process holds the lock; wait, or take over once it is gone
    ├── ClusterNotReadyError DKC cannot work on this cluster; refuse before any write
    ├── WrongClusterError    the credentials reach another cluster than the one named; refuse before any write
    └── GatewayError         an API call failed for good
        ├── TransientGatewayError  retry later (429/5xx/connection), honouring retry_after
        ├── ConflictError          409: re-read the object and decide again, never retry blindly
        ├── NotFoundError          404: the object is gone; re-observe
        │   └── RolloutNotFoundError   no journal of that name: `rollout list` names the rollouts
        └── ForbiddenError         403: RBAC lacks a permission; apply the shipped manifest
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import ClassVar

from rollout.outcome import Outcome


class RolloutError(Exception):
    """Base of every error the rollout raises on purpose.

    ``advice`` is the class's hint; an error that knows better (a missing file is no bad config,
    a cluster after 1.26 has no DKC gate to enable) gives its own as ``advice=``.
    """

    advice: str = "see the message"
    # How a run ended by this error reads (the state, the exit code and the JSON of its outcome):
    # the one place that classifies our errors.
    outcome: ClassVar[Outcome] = Outcome.FAILED

    def __init__(self, message: str, *, advice: str = "") -> None:
        super().__init__(message)
        self.message = message
        if advice:
            self.advice = advice

    def __str__(self) -> str:
        return self.message


class InputError(RolloutError):
    """Bad user input, found before anything touched the cluster.

    ``source`` names the file, ``path`` the field (``evictionHard.memory``), ``line`` the 1-based
    line when it is known (``file:12: ...``, as
    compilers write it, so editors jump there), ``problems`` lists one ``field: why`` per problem;
    the message shows them all, so one run tells the user everything to fix.
    """

    outcome = Outcome.INVALID

    def __init__(
        self,
        message: str,
        *,
        source: str = "",
        problems: Sequence[str] = (),
        line: int | None = None,
        path: str = "",
        advice: str = "",
    ) -> None:
        self.source = source
        self.line = line
        self.path = path
        self.problems = tuple(problems)
        self.reason = message  # without file, line and field: for callers that add their own
        where = f"{source}:{line}" if source and line else source or (f"line {line}" if line else "")
        text = f"{path}: {message}" if path else message
        lines = [f"{where}: {text}" if where else text]
        lines.extend(f"  - {p}" for p in self.problems[:MAX_PROBLEMS_SHOWN])
        if len(self.problems) > MAX_PROBLEMS_SHOWN:
            lines.append(f"  ... and {len(self.problems) - MAX_PROBLEMS_SHOWN} more (fix these first)")
        super().__init__("\n".join(lines), advice=advice)


# A message lists every problem up to this many; ``problems`` keeps them all for programs.
MAX_PROBLEMS_SHOWN = 50


class FlagError(InputError):
    """A value given on the command line (or as a flow parameter) is not one the command can use;
    ``source`` names the flag (``--selector``)."""

    advice = "fix the value on the command line; nothing was started"


class PolicyError(InputError):
    """A rollout policy is invalid."""

    advice = "fix the policy file and run again; nothing was written to the cluster"


class ConfigError(InputError):
    """A KubeletConfiguration is invalid or changes a field the policy does not allow."""

    advice = "fix the kubelet config (or allow the field in the policy) and run again"


class FleetError(InputError):
    """A fleet file is invalid, or names a policy that is."""

    advice = "fix the fleet file and run again; no cluster was started"


class PlanError(RolloutError):
    """The selected nodes cannot be planned under the policy (e.g. too many already unhealthy)."""

    outcome = Outcome.INVALID

    advice = "repair the unhealthy nodes, or change the selector / maxUnavailable in the policy"


class LockHeldError(RolloutError):
    """Another process holds the cluster-wide lock (a coordination.k8s.io Lease).

    ``holder`` describes it (rollout, host, pid, run, since when, last renewal: see
    ``rollout.lock.describe``); ``rollout`` is the rollout it runs.
    """

    outcome = Outcome.LOCKED

    advice = ("wait for it to end; a re-run of the same rollout takes over at once when the holder's process is "
              "gone (seen from its machine), anyone else once its lease lapses")

    def __init__(self, holder: str, *, lease: str = "", expires: datetime | None = None, rollout: str = "") -> None:
        self.holder = holder
        self.lease = lease
        self.expires = expires
        self.rollout = rollout
        where = f" ({lease})" if lease else ""
        super().__init__(f"rollout lock{where} is held by {holder}")


class ClusterNotReadyError(RolloutError):
    """Dynamic Kubelet Config cannot work here (gate off, no status.config, dropped configSource)."""

    outcome = Outcome.CLUSTER_ERROR

    advice = "enable the DynamicKubeletConfig gate on the API server and kubelets; nothing was written"


class WrongClusterError(RolloutError):
    """The credentials reach another cluster than the one the run is for (``rollout.identity``)."""

    outcome = Outcome.CLUSTER_ERROR

    advice = ("give this work pool's workers the kubeconfig of the cluster the fleet file names for it "
              "(or correct the fleet file's identity: `rollout fleet identify --kubeconfig FILE`)")

    def __init__(self, message: str, *, expected: dict[str, str], reached: dict[str, str], advice: str = "") -> None:
        self.expected = expected
        self.reached = reached
        super().__init__(message, advice=advice)


class GatewayError(RolloutError):
    """An API call failed and retrying it will not help."""

    outcome = Outcome.CLUSTER_ERROR

    advice = "check the cluster and the credentials; the message has the API's answer"


class TransientGatewayError(GatewayError):
    """An API call failed in a way that may pass (429, 5xx, connection error)."""

    # said to a person after the retries gave up: what to check, not how to retry
    advice = ("the API server did not answer (or kept answering busy): check that the cluster is up and that "
              "--kubeconfig/--context point at it, then run again")

    def __init__(self, message: str, *, retry_after: float | None = None) -> None:
        self.retry_after = retry_after
        super().__init__(message)


class ConflictError(GatewayError):
    """409 Conflict: the object changed since it was read."""

    advice = "re-read the object, decide again, then write; never retry the same write blindly"


class NotFoundError(GatewayError):
    """404: the object does not exist (any more)."""

    outcome = Outcome.NOT_FOUND

    advice = "re-observe; the object was deleted or never existed"


class RolloutNotFoundError(NotFoundError):
    """No rollout of that name: the cluster has no journal for it."""

    advice = "`rollout list` names the rollouts of this cluster (check --context too)"


class ForbiddenError(GatewayError):
    """403 Forbidden: the credentials lack one permission the rollout needs.

    Retrying cannot help and neither can re-reading: an operator must grant the permission. The
    message names what the API server refused (verb, resource with subresource, namespace, and
    the identity, as its Status message gives them), so the missing rule can be read off one
    line, and ends with :attr:`advice` (the message alone reaches the user when a flow run
    fails elsewhere, so it must carry the hint itself).
    """

    advice = "apply deployments/kubernetes/rbac.yaml (see README: Permissions)"

    def __init__(self, message: str, *, user: str = "", verb: str = "", resource: str = "",
                 namespace: str = "") -> None:
        self.user = user
        self.verb = verb
        self.resource = resource
        self.namespace = namespace
        super().__init__(message)


class MetricsError(RolloutError):
    """Prometheus could not answer a query: an analysis measurement is inconclusive, never a crash."""

    outcome = Outcome.CLUSTER_ERROR


class MetricsUnreachableError(MetricsError):
    """Prometheus out of reach (connection refused, timeout, 5xx): ridden out, then inconclusive."""


class MetricsQueryError(MetricsError):
    """Prometheus refused the query (4xx, an execution error): the measurement is inconclusive."""
