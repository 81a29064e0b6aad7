"""Feature-gate merging as a 1.23 kubelet does it before validating a config.

Why: ``ValidateKubeletConfiguration`` copies the kubelet's gates, applies the config's
``featureGates`` and fails outright on an unknown gate or on a locked gate set away from its
default. Every gate-dependent rule (GracefulNodeShutdown, NodeSwap, TopologyManager, ...) then
reads the merged set, so we must compute the same set. Gates passed on a node's command line
(``--feature-gates``) win over the file's, so callers that know them pass ``flag_gates``.

A gate 1.23 does not know but a later kubelet does (``SidecarContainers``, 1.28) is no error
here: whether each node's kubelet knows it is judged against its version
(``rollout.kubeletconfig.versions``); a name no kubelet we know of has is.
"""

from __future__ import annotations

from collections.abc import Mapping

from rollout.kubeletconfig.catalog import known_gate_names, load_catalog
from rollout.kubeletconfig.decode import suggest
from rollout.kubeletconfig.problems import Problem, error


def default_gates() -> dict[str, bool]:
    """Every gate a 1.23 kubelet knows, at its built-in default."""
    return {name: spec.default for name, spec in load_catalog().gates.items()}


def _check_gate(name: str, value: object, *, where: str) -> Problem | None:
    gates = load_catalog().gates
    spec = gates.get(name)
    # a gate only later kubelets know is judged against each node's version, not here
    if spec is None and name not in known_gate_names():
        hint = suggest(name, sorted(known_gate_names()))
        tail = f"; did you mean {hint}?" if hint else ""
        return error(
            where,
            f"unrecognized feature gate: {name}{tail} (the kubelet fails the whole validation)",
            rule="unknown-gate",
        )
    if not isinstance(value, bool):
        return error(
            where,
            f"feature gate value must be true or false, got {value!r}",
            source="decode",
            rule="gate-type",
        )
    if spec is not None and spec.locked and value != spec.default:
        return error(
            where,
            f"cannot set feature gate {name} to {str(value).lower()}, feature is locked to {str(spec.default).lower()}",
            rule="locked-gate",
        )
    return None


def merge_gates(
    file_gates: Mapping[str, object] | None, *, flag_gates: Mapping[str, bool] | None = None
) -> tuple[dict[str, bool], tuple[Problem, ...]]:
    """Defaults, then the config's ``featureGates``, then the node's flag gates (which win)."""
    merged, problems, explicit = default_gates(), [], set()
    for source, gates in (("featureGates", file_gates or {}), ("--feature-gates", flag_gates or {})):
        for name, value in gates.items():
            problem = _check_gate(name, value, where=f"{source}.{name}")
            if problem is not None:
                problems.append(problem)
            elif name in merged:
                merged[name] = bool(value)
                explicit.add(name)
    return _apply_all_gates(merged, explicit=explicit), tuple(problems)


def _apply_all_gates(merged: dict[str, bool], *, explicit: set[str]) -> dict[str, bool]:
    """AllAlpha/AllBeta switch every gate of that stage that was not set explicitly."""
    for pseudo, stage in (("AllAlpha", "alpha"), ("AllBeta", "beta")):
        if merged.get(pseudo):
            for name, spec in load_catalog().gates.items():
                if spec.stage == stage and name not in explicit and name != pseudo:
                    merged[name] = True
    return merged
