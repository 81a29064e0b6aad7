"""Nodes: listed, read, watched, probed and assigned their config, by DKC or by the node agent.

Per node the backend is what the node shows: the node agent where it advertises itself
(``kubelet-rollout.io/agent``), else Dynamic Kubelet Config. :meth:`NodeVerbs.assign` writes
either in ONE merge PATCH with the assignment's annotations and labels, so what the node carries
never disagrees with its assignment, and reads the answer back: an API server with the
``DynamicKubeletConfig`` gate off answers 200 and silently drops a new ``spec.configSource``,
which is reported as :class:`~rollout.errors.ClusterNotReadyError`. A retried PATCH whose first
answer was lost reads the node before sending again. Nodes come back as
:class:`~rollout.model.NodeObservation` (``_wire.to_observation``), never as SDK objects.
"""

from __future__ import annotations

import contextlib
import json
import logging
import re
import time
from typing import Any, Callable, Iterable, Mapping, Sequence

from rollout.errors import ClusterNotReadyError, GatewayError, NotFoundError
from rollout.model import ClusterFacts, ConfigRef, NodeObservation
from rollout.names import ANN_DESIRED_CONFIG, ANN_STATE_RESET
from rollout.ports import NodeListing

from . import _wire
from ._configmaps import ConfigMapVerbs
from ._informer import NodeInformer

logger = logging.getLogger("rollout.gateway")

MERGE_PATCH = "application/merge-patch+json"


def _selector_text(selector: str | Mapping[str, str] | None) -> str | None:
    if selector is None or isinstance(selector, str):
        return selector or None
    return ",".join(f"{k}={v}" for k, v in sorted(selector.items())) or None


def _names(names: Sequence[str], limit: int = 10) -> str:
    shown = ", ".join(names[:limit])
    return shown + (f" and {len(names) - limit} more" if len(names) > limit else "")


def _landed(node: _wire.Node, source: ConfigRef | None,
            annotations: Mapping[str, str | None]) -> bool:
    """The node already carries this exact assignment (spec and every annotation asked for)."""
    got = ConfigRef.from_api(node.spec.config_source)
    spec_ok = got is None if source is None else source.same_reference(got)
    held = node.metadata.annotations
    return spec_ok and all(held.get(k) == v if v is not None else k not in held
                           for k, v in annotations.items())


def _annotated(node: _wire.Node, wanted: Mapping[str, str | None]) -> bool:
    held = node.metadata.annotations
    return all(held.get(k) == v if v is not None else k not in held for k, v in wanted.items())


def _desired_text(ref: ConfigRef) -> str:
    """The desired-config annotation: the agent's contract (rollout.names)."""
    return json.dumps({"namespace": ref.namespace, "name": ref.name, "uid": ref.uid or "",
                       "resourceVersion": ref.resource_version or "", "key": ref.kubelet_config_key},
                      sort_keys=True)


def _parse_version(git_version: str) -> tuple[int, int] | None:
    m = re.match(r"v?(\d+)\.(\d+)", git_version or "")
    return (int(m.group(1)), int(m.group(2))) if m else None


class NodeVerbs(ConfigMapVerbs):
    """Every node verb (see the module doc); a node run by the agent is pointed at a resolved
    ConfigMap, hence the ConfigMap verbs beneath."""

    def _init_resource_state(self) -> None:
        super()._init_resource_state()
        self._backends: dict[str, str] = {}

    def informer(self, selector: str | Mapping[str, str] | None = None, *,
                 seed: NodeListing | None = None) -> NodeInformer:
        """A live cache of the nodes and their Leases (see :class:`NodeInformer`); not started.
        ``seed``: a :meth:`listing` of the same selector to watch on from (no list of its own)."""
        return NodeInformer(self, selector=_selector_text(selector), seed=seed)

    # -- cluster facts -------------------------------------------------------------------

    def server_facts(self) -> ClusterFacts:
        """The API server's version (``GET /version``)."""
        info = self._json("get /version", self.version_api.get_code)
        return ClusterFacts(
            server_version=str(info.get("gitVersion", "")),
            extra={k: str(v) for k, v in info.items() if isinstance(v, (str, int))},
        )

    # -- nodes -----------------------------------------------------------------------------

    def _list_wire_nodes(self, selector: str | Mapping[str, str] | None, *,
                         page_size: int | None = None) -> tuple[list[_wire.Node], str]:
        text = _selector_text(selector)
        pages, rv = self._pages(_wire.NodeList, "list nodes", self.core.list_node, page_size=page_size,
                                **({"label_selector": text} if text else {}))
        return [node for page in pages for node in page.items], rv

    def _lease_infos(self) -> tuple[dict[str, _wire.LeaseInfo], str]:
        """Node leases in one list call, and its resourceVersion; none when the namespace does not exist."""
        try:
            pages, rv = self._pages(_wire.LeaseList, f"list leases in {self.lease_namespace}",
                                    self.coordination.list_namespaced_lease, self.lease_namespace,
                                    page_size=None)
        except NotFoundError:
            return {}, ""
        return _wire.lease_infos(*pages), rv

    def list_nodes(self, selector: str | Mapping[str, str] | None = None, *,
                   page_size: int | None = None) -> tuple[list[NodeObservation], str]:
        """All nodes matching a label selector, joined with their kube-node-lease Lease.

        Two API calls (nodes, leases) whatever the cluster size, unless ``page_size`` asks for
        paging (less memory, more calls). Returns the observations sorted by name and the list's
        resourceVersion.
        """
        listing = self._listing(selector, page_size=page_size)
        return list(listing.nodes), listing.resource_version

    def listing(self, selector: str | Mapping[str, str] | None = None) -> NodeListing:
        """Every node matching ``selector`` and its Lease, one list each, with the resourceVersions
        a watch of each resumes from (:meth:`informer` seeded with it lists nothing again)."""
        return self._listing(selector)

    def _listing(self, selector: str | Mapping[str, str] | None, *, page_size: int | None = None) -> NodeListing:
        started = time.perf_counter()
        nodes, rv = self._list_wire_nodes(selector, page_size=page_size)
        leases, lease_rv = self._lease_infos()
        now = self._now()
        observations = sorted(
            (_wire.to_observation(n, lease=leases.get(n.metadata.name), observed_at=now)
             for n in nodes),
            key=lambda o: o.name,
        )
        for obs in observations:
            self.note_backend(obs)
        logger.info("listed %d nodes at rv %s in %.3fs", len(observations), rv,
                    time.perf_counter() - started)
        return NodeListing(tuple(observations), _selector_text(selector), rv, lease_rv)

    def read_node(self, name: str) -> NodeObservation:
        """One node (and its Lease). Prefer :meth:`informer` for following many nodes."""
        node = self._parsed(_wire.Node, f"get node/{name}", self.core.read_node, name)
        lease: _wire.LeaseInfo | None = None
        with contextlib.suppress(NotFoundError):
            found = self._parsed(_wire.Lease, f"get lease {self.lease_namespace}/{name}",
                                 self.coordination.read_namespaced_lease, name,
                                 self.lease_namespace)
            lease = _wire.lease_infos(_wire.LeaseList(items=[found])).get(name)
        obs = _wire.to_observation(node, lease=lease, observed_at=self._now())
        self.note_backend(obs)
        return obs

    # -- DKC prerequisites -----------------------------------------------------------------

    @staticmethod
    def check_dkc_usable(nodes: Iterable[NodeObservation]) -> None:
        """Refuse (``ClusterNotReadyError``) if any node reports no ``status.config``.

        A kubelet running Dynamic Kubelet Config always reports ``status.config`` (at least
        ``{}``) within ~12 s of starting. Its absence means DKC is off on that kubelet, or the API
        server's gate is off and strips it - either way an assignment would be ignored or dropped.
        Pure: makes no API call.
        """
        missing = sorted(n.name for n in nodes if not n.has_config_status)
        if missing:
            raise ClusterNotReadyError(
                f"Dynamic Kubelet Config is not usable on {len(missing)} node(s): "
                f"{_names(missing)} report no status.config and run no kubelet-rollout agent. Their "
                "kubelets run without --dynamic-config-dir / the DynamicKubeletConfig gate, or the API "
                "server has the gate off (default since 1.22) and strips the field; install the agent "
                "(deployments/kubernetes/agent-daemonset.yaml) on such nodes. Nothing was written.")

    def probe_cluster(self, nodes: Iterable[NodeObservation] | None = None) -> ClusterFacts:
        """Can config reach every target node? Checks with ZERO writes; ``ClusterNotReadyError`` if not.

        Per node, the backend: the node agent where it advertises itself (``kubelet-rollout.io/agent``,
        any Kubernetes version), else Dynamic Kubelet Config, which needs an API server before
        1.26 (``GET /version``; later ones always drop a new ``spec.configSource``) and a kubelet
        reporting ``status.config`` (:meth:`check_dkc_usable`; this also catches a gate-off
        1.22-1.25 API server, which strips it). A node with neither is refused by name, before
        anything is written. A gate-off API server that keeps an *existing* configSource is caught
        by reading back each assignment in :meth:`assign`. Uses :meth:`list_nodes` when ``nodes``
        is None.
        """
        facts = self.server_facts()
        version = _parse_version(facts.server_version)
        if nodes is None:
            nodes, _ = self.list_nodes()
        nodes = list(nodes)
        dkc_server = version is None or version < (1, 26)
        by_dkc = [n for n in nodes if n.backend != "agent"]
        if by_dkc and not dkc_server:
            names = sorted(n.name for n in by_dkc)
            raise ClusterNotReadyError(
                f"API server {facts.server_version} has no Dynamic Kubelet Config (removed in 1.26; "
                f"kubelets dropped it in 1.24) and {len(names)} target node(s) run no kubelet-rollout "
                f"agent: {_names(names)}. Install the agent (deployments/kubernetes/agent-daemonset.yaml) "
                "or leave those nodes out (nodes.excludeNames / excludeSelector). Nothing was written.",
                advice="install kubelet-rollout-agent on those nodes: this API server has no DynamicKubeletConfig "
                       "gate to enable")
        self.check_dkc_usable(by_dkc)
        return facts

    # -- assignment ------------------------------------------------------------------------

    def assign(self, node: str, source: ConfigRef | None, *, annotations: Mapping[str, str | None],
               labels: Mapping[str, str | None] | None = None) -> NodeObservation:
        """Point ``node`` at ``source`` (None = back to its local config) and annotate it.

        ONE JSON merge PATCH sets ``spec.configSource.configMap`` (namespace, name,
        kubeletConfigKey only; uid/resourceVersion are forbidden in spec) - or removes
        ``spec.configSource`` when ``source`` is None - together with ``annotations`` (a None
        value removes that annotation) and ``labels`` (likewise), so the journal on the node can
        never disagree with the assignment. The returned Node is read back: if the configSource did not stick (an API
        server with the DynamicKubeletConfig gate off answers 200 and drops it),
        ``ClusterNotReadyError`` is raised. Idempotent: repeating it is harmless.
        """
        if self.backend_of(node) == "agent":
            return self._assign_via_agent(node, source, annotations, labels)
        config_source = ({"configMap": source.unresolved().to_api()}
                         if source is not None else None)
        metadata: dict[str, Any] = {"annotations": dict(annotations)}
        if labels:
            metadata["labels"] = dict(labels)
        body = {"metadata": metadata, "spec": {"configSource": config_source}}
        result = self._patch_once(node, body, lambda current: _landed(current, source, annotations))
        got = ConfigRef.from_api(result.spec.config_source)
        if source is not None and not source.same_reference(got):
            logger.error("node %s: API server dropped spec.configSource (asked %s, got %s)",
                         node, source, got)
            raise ClusterNotReadyError(
                f"node {node}: the API server accepted the assignment of {source.unresolved()} "
                f"but the node's spec.configSource is {got or 'absent'} on read-back. The API "
                "server's DynamicKubeletConfig feature gate is off (default since 1.22), so new "
                "configSources are silently dropped. Enable the gate (--feature-gates="
                "DynamicKubeletConfig=true on kube-apiserver) before rolling out.")
        if source is None and got is not None:
            raise GatewayError(f"node {node}: spec.configSource is still {got} after unassigning it")
        logger.info("node %s: assigned %s", node,
                    source.unresolved() if source else "local config (configSource removed)")
        return _wire.to_observation(result, lease=None, observed_at=self._now())

    def _patch_once(self, node: str, body: Mapping[str, Any], landed: Callable[[_wire.Node], bool]) -> _wire.Node:
        """One merge PATCH of a node, retried like any call - but a retry first reads the node: an
        earlier attempt whose answer was lost may have landed, and must not be written twice."""
        tries = 0

        def attempt() -> _wire.Node:
            nonlocal tries
            tries += 1
            if tries > 1:
                current = self._single(_wire.Node, f"get node/{node}", self.core.read_node, node)
                if landed(current):
                    logger.info("node %s: the earlier attempt landed; not writing again", node)
                    return current
            return self._single(_wire.Node, f"patch node/{node}", self._fenced(self.core.patch_node), node,
                                body, _content_type=MERGE_PATCH)

        return self._policy()(attempt)

    def _assign_via_agent(self, node: str, source: ConfigRef | None, annotations: Mapping[str, str | None],
                          labels: Mapping[str, str | None] | None) -> NodeObservation:
        """The same assignment for a node run by kubelet-rollout-agent: the desired-config
        annotation (resolved: the agent refuses a ConfigMap whose uid/resourceVersion moved)."""
        desired = None if source is None else _desired_text(self.resolve_cached(source))
        wanted = {**annotations, ANN_DESIRED_CONFIG: desired}
        reset = wanted.get(ANN_STATE_RESET)
        if reset:  # the agent resets for exactly what it applies: this desired-config, as written
            asked = json.loads(reset)
            asked["desired"] = None if desired is None else json.loads(desired)
            wanted[ANN_STATE_RESET] = json.dumps(asked, sort_keys=True, separators=(",", ":"))
        metadata: dict[str, Any] = {"annotations": wanted}
        if labels:
            metadata["labels"] = dict(labels)
        result = self._patch_once(node, {"metadata": metadata}, lambda current: _annotated(current, wanted))
        logger.info("node %s: desired config %s (agent)", node, source or "none: back to its base config")
        return _wire.to_observation(result, lease=None, observed_at=self._now())

    def backend_of(self, node: str) -> str:
        """How config reaches ``node`` ("dkc", "agent", ""), as last listed, read or watched. A
        node never seen is taken for DKC: the orchestrator always looks before it writes."""
        return self._backends.get(node, "dkc")

    def note_backend(self, obs: NodeObservation) -> None:
        self._backends[obs.name] = obs.backend

    def would_keep_assignment(self, node: str, source: ConfigRef) -> bool:
        """Ask the API server, with ``dryRun=All``, whether it would keep this assignment.

        Nothing is persisted, but the request is a PATCH and shows as such in audit logs, so
        :meth:`probe_cluster` does not use it. It answers the one case the status probe cannot:
        a node that still reports ``status.config`` but has no ``spec.configSource`` on an API
        server whose gate is now off (a *new* configSource would be dropped).
        """
        body = {"spec": {"configSource": {"configMap": source.unresolved().to_api()}}}
        result = self._parsed(_wire.Node, f"node {node}: dry-run assign", self.core.patch_node,
                              node, body, dry_run="All", _content_type=MERGE_PATCH)
        got = ConfigRef.from_api(result.spec.config_source)
        return source.same_reference(got)

    # -- the kubelet's running config ------------------------------------------------------

    def configz(self, node: str) -> dict[str, Any]:
        """The running kubelet's effective config: ``GET /api/v1/nodes/NODE/proxy/configz``.

        Returns the endpoint's JSON as is: ``{"kubeletconfig": {...}}``.
        """
        return dict(self._json(f"node {node}: get configz",
                               self.core.connect_get_node_proxy_with_path, node, "configz"))
