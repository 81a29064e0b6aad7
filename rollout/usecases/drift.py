"""`rollout drift`: every selected node's running config against what its last completed rollout
proved, read from the cluster (the journals, the proved ConfigMaps, each node's configz), judged
by ``rollout.drift``; one ``KubeletConfigDrift`` Event per drifted node; and the config a
`--fix` rolls out again, published for it.

What it costs the API server: one list of the nodes, one read of each journal a node names (its
head and parts), one read per proved ConfigMap, and one configz read per managed node (through
the node proxy), all through the gateway's rate limit. The configz reads go out from a few threads at once, so the
rate limit, not one kubelet's latency after another, sets the pace; each gives up after two
quick attempts (``RunningConfigs.impatient``): a node whose kubelet does not answer is
reported unreachable, it does not hold up the others.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

from rollout.drift import NodeDrift, Proof, compare, event_message, proofs, unmanaged, unreachable, DriftState
from rollout.errors import InputError, RolloutError
from rollout.inputs import parse_document
from rollout.journal import Journal
from rollout.model import ConfigRef, NodeObservation
from rollout.names import ANN_ROLLOUT, ANN_SET_ASIDE_OVERRIDES, CONFIG_BASE_NAME, EVENT_DRIFT, label_value, rollout_name_problem
from rollout.planner import selected_nodes
from rollout.policy import RolloutPolicy
from rollout.ports import ClusterForDrift, ConfigReader, ConfigStore, JournalReader, NodeEvents, RunningConfigs
from rollout.usecases.status import load_journal
from rollout.publish import build_configmap

READERS = 16  # configz reads in flight at once; the rate limit sets the pace


@dataclass(frozen=True)
class ProvedConfig:
    """A proved ConfigMap's KubeletConfiguration (``document``), or why it cannot be read."""

    text: str = ""
    document: Mapping[str, Any] | None = None
    problem: str = ""


def reachable_journals(gateway: JournalReader, nodes: Sequence[NodeObservation]) -> list[Journal]:
    """The journals of every rollout a node names (``kubelet-rollout.io/rollout``, written with
    each assignment, removed by a revert), each read by name: a node re-created without our
    annotations is still found in the plan of the rollout its neighbours name. By name, not by
    a list of ConfigMaps: the shipped ServiceAccount may read kube-system's ConfigMaps, never list
    them (deployments/kubernetes/rbac.yaml)."""
    names = sorted({rollout for obs in nodes if (rollout := obs.annotations.get(ANN_ROLLOUT))})
    found = []
    for name in names:
        loaded = load_journal(gateway, name) if rollout_name_problem(name) is None else None
        if loaded is not None:
            found.append(loaded[0])
    return found


def read_proved(gateway: ConfigReader, ref: ConfigRef) -> ProvedConfig:
    """The KubeletConfiguration a proved ConfigMap holds (its uid checked against the journal's:
    a ConfigMap deleted and created again under the name is not what was proved)."""
    where = f"{ref.namespace}/{ref.name}"
    try:
        cm = gateway.read_configmap(ref.name, namespace=ref.namespace)
    except RolloutError as exc:
        return ProvedConfig(problem=f"the proved ConfigMap {where} cannot be read: {exc}")
    uid = (cm.get("metadata") or {}).get("uid")
    if ref.uid and uid and uid != ref.uid:
        return ProvedConfig(problem=f"the proved ConfigMap {where} was replaced (uid {uid}, proved {ref.uid})")
    text = (cm.get("data") or {}).get(ref.kubelet_config_key)
    if text is None:
        return ProvedConfig(problem=f"the proved ConfigMap {where} has no key {ref.kubelet_config_key!r}")
    try:
        parsed = parse_document(text, source=where).data
    except InputError as exc:
        return ProvedConfig(problem=f"the proved ConfigMap {where} holds no config: {exc}")
    if not isinstance(parsed, dict):
        return ProvedConfig(problem=f"the proved ConfigMap {where} holds no KubeletConfiguration")
    return ProvedConfig(text, parsed)


def _judge(gateway: RunningConfigs, obs: NodeObservation, proof: Proof, proved: ProvedConfig) -> NodeDrift:
    if proved.document is None:
        return unreachable(obs, proof, proved.problem)
    try:
        configz = gateway.configz(obs.name)
    except RolloutError as exc:
        return unreachable(obs, proof, f"configz could not be read: {exc}")
    if not isinstance(configz.get("kubeletconfig"), Mapping):
        return unreachable(obs, proof, "configz answered something that is not configz output")
    return compare(obs, proof, proved.document, configz)


def drift_report(gateway: ClusterForDrift, *, policy: RolloutPolicy, readers: int = READERS) -> list[NodeDrift]:
    """Each node the policy selects (its selector and names; ``rollout.planner.selected_nodes``),
    sorted by name: in sync, drifted, unmanaged or unreachable. Raises only when the nodes or the
    journals cannot be listed."""
    listed, _ = gateway.list_nodes()
    nodes = selected_nodes(listed, policy)
    proved = proofs(reachable_journals(gateway, listed))
    targets = {proved[n.name].target for n in nodes if n.name in proved}
    configs = {ref: read_proved(gateway, ref) for ref in targets}
    reader = gateway.impatient()

    def one(obs: NodeObservation) -> NodeDrift:
        proof = proved.get(obs.name)
        return unmanaged(obs) if proof is None else _judge(reader, obs, proof, configs[proof.target])

    if len(nodes) <= 1 or readers <= 1:
        return [one(obs) for obs in nodes]
    with ThreadPoolExecutor(max_workers=readers, thread_name_prefix="configz") as pool:
        return list(pool.map(one, nodes))


def record_drift_events(gateway: NodeEvents, results: Sequence[NodeDrift]) -> int:
    """One Warning Event ``KubeletConfigDrift`` per drifted node, the fields in its message
    (best effort, as every node Event); how many were recorded."""
    return sum(1 for r in results if r.state is DriftState.DRIFTED
               and gateway.record_node_event(r.node, EVENT_DRIFT, event_message(r), "Warning"))


def publish_fix_config(gateway: ConfigStore, proof: Proof, *, rollout: str) -> ConfigRef:
    """The proved config published again for the fix rollout ``rollout``, as a ConfigMap of its
    own (``kubelet-config-<rollout>-<hash>``, immutable, content-hash named like every config).

    Why not the proved ConfigMap itself: a node whose file was edited by hand still reports it
    active (the agent proved it once and does not write a config it already runs again; DKC's
    ``status.config`` names it as well), so a rollout of the same ConfigMap would find the node
    on its target and leave it as it is. Under a name of its own the config is new to every
    node, which takes it as any assignment: written, restarted onto, proved. It takes precedence
    (``rollout.kubeletconfig.dropin.takes_precedence``): on a node where a drop-in read after ours
    overrides a field of it, the agent sets that file aside (into its state dir, named in its
    Event) and the proved config runs again."""
    proved = read_proved(gateway, proof.target)
    if proved.document is None:
        raise RolloutError(f"{proved.problem}: nothing was started")
    manifest = build_configmap(proof.target.namespace, base_name=f"{CONFIG_BASE_NAME}-{rollout}",
                               config_text=proved.text, rollout_name=label_value(rollout),
                               extra_annotations={ANN_SET_ASIDE_OVERRIDES: "true"})
    return gateway.publish_configmap(manifest)


__all__ = ["ProvedConfig", "reachable_journals", "drift_report", "publish_fix_config", "read_proved",
           "record_drift_events"]
