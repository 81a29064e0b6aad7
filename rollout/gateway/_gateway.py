"""KubeGateway: every cluster read and write the rollout makes, as domain verbs.

It implements every port of ``rollout.ports``, one resource per module: ``_nodes`` (list, read,
watch, probe, assign, configz), ``_configmaps`` (published configs), ``_journals`` (journals, a
head and its parts committed together, and the lifecycle requests on them), ``_lock`` (the lock
Lease, with its :class:`LockKeeper`), ``_events`` (node Events) and ``_evidence`` (a batch's
analysis evidence) and ``_identity`` (which cluster the credentials reach),
all sending through ``_client`` (:class:`ClusterClient`), the one way in. Together with those
modules it is the only place that imports ``kubernetes``. Its contracts:

* **No SDK types leave it.** Nodes come back as :class:`rollout.model.NodeObservation`, config
  sources as :class:`rollout.model.ConfigRef`, everything else as plain dicts/strings.
* **Errors are translated once**, per attempt, into :mod:`rollout.errors`; the retry policy (a
  ``tenacity.Retrying`` value) retries only :class:`TransientGatewayError` (429/5xx/connection),
  honouring ``Retry-After``.
* **Every attempt takes a token** from one client-side :class:`TokenBucket`, so a big batch cannot
  burst the API server; node Events take only the tokens no other request waits for.
* **Connections are watched, not trusted.** TCP keep-alive probes every connection (a peer that
  vanished is noticed in about 30 s, as with client-go); small requests wait at most
  ``request_timeout_s`` for an answer, lists ``list_timeout_s``; an attempt that timed out drops
  the pool's idle connections (a blackhole freezes them all at once), so its retry and every later
  request open new ones. The pool keeps :data:`POOL_SIZE` connections: one for each request the
  engine sends at once, so none is thrown away and rebuilt with a TLS handshake.
* **Stops are seen everywhere.** The run's stop (:meth:`KubeGateway.tolerate_outages`) and a
  thread's own (:meth:`KubeGateway.cut_short_by`: a worker told to end) end retries and rate-limit
  waits alike, so no thread outlives its owner by more than the request it has on the wire.
* **Reads are raw.** Responses are read with ``_preload_content=False`` and parsed into small
  structs (``_wire``, msgspec) or ``json.loads``; the typed models are never built for responses.
* **Writes are read back.** :meth:`KubeGateway.assign` checks the returned Node: an API server
  with the ``DynamicKubeletConfig`` gate off answers 200 and silently drops a new
  ``spec.configSource``; that is reported as :class:`ClusterNotReadyError`.

Logging: ``logging.getLogger("rollout.gateway")``; lines about one node start with ``node NAME:``.
"""

from __future__ import annotations

from rollout.ports import Gateway

from ._client import POOL_SIZE
from ._events import NodeEventVerbs
from ._evidence import EvidenceVerbs
from ._identity import ClusterIdentityVerbs
from ._journals import JournalVerbs
from ._lock import LeaseLockVerbs
from ._drains import DrainVerbs


class KubeGateway(DrainVerbs, JournalVerbs, LeaseLockVerbs, NodeEventVerbs, EvidenceVerbs, ClusterIdentityVerbs):
    """The cluster, as the rollout needs it: every port of ``rollout.ports``. Construct with
    :meth:`from_kubeconfig` in production; the arguments are :class:`ClusterClient`'s."""


def open_gateway(kubeconfig: str | None = None, context: str | None = None) -> Gateway:
    """The cluster for a kubeconfig/context (in-cluster config inside a pod), as the ports see it:
    what the composition roots (the flows' run, the CLI's commands) hand to the core."""
    return KubeGateway.from_kubeconfig(kubeconfig or None, context=context or None)


__all__ = ["POOL_SIZE", "KubeGateway", "open_gateway"]
