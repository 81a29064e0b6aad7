"""The kubelet's feature gates, 1.23 to 1.31 (component-base ``featuregate`` semantics).

Why: ``ValidateKubeletConfiguration`` first applies the config's ``featureGates`` to a copy of the
process gates; an unknown name or a locked gate fails the whole validation ("failed to validate
config"), and the gate-dependent rules read the merged set. The gate lists and defaults live in
``kubesim/data/feature-gates-1.N.yaml`` (from ``pkg/features/kube_features.go`` of a pinned
release of each minor, and the gates the kubelet registers beside them: sources in each file);
a minor after the last file (1.31) takes that file's. A gate a minor no longer has graduated and
is on (``TopologyManager`` from 1.29), but for DKC's, removed with DKC.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from importlib import resources
from typing import Mapping

import yaml


class GateError(ValueError):
    """Setting the gates failed (message as ``featuregate.SetFromMap``)."""


@dataclass(frozen=True)
class GateSpec:
    default: bool
    stage: str  # Alpha | Beta | GA | Deprecated
    locked: bool = False


_STAGES = {"alpha": "Alpha", "beta": "Beta", "ga": "GA", "deprecated": "Deprecated"}


@lru_cache(maxsize=16)
def _gates_file(minor: int) -> dict[str, GateSpec] | None:
    path = resources.files("kubesim").joinpath("data", f"feature-gates-1.{minor}.yaml")
    if not path.is_file():
        return None
    raw = yaml.safe_load(path.read_text())["gates"]
    return {
        name: GateSpec(bool(v["default"]), _STAGES.get(str(v["stage"]).lower(), str(v["stage"])),
                       bool(v.get("lockToDefault", v.get("lock", False))))
        for name, v in raw.items()
    }


def known_gates() -> dict[str, GateSpec]:
    gates = _gates_file(23)
    assert gates is not None, "kubesim/data/feature-gates-1.23.yaml is part of the package"
    return gates


@lru_cache(maxsize=16)
def modern_gates(minor: int) -> dict[str, GateSpec]:
    """The gate table of a 1.24+ kubelet: its minor's list, or after the last one we have (1.31)
    that one's (a later kubelet's own additions and removals are not modelled)."""
    for listed in range(minor, 23, -1):
        if (gates := _gates_file(listed)) is not None:
            return gates
    raise AssertionError(f"no feature gate list for kubelet 1.{minor} or before it")


def _go_bool(value: bool) -> str:
    return "true" if value else "false"


class FeatureGates:
    """An immutable-by-convention gate set: known defaults plus explicit settings."""

    def __init__(
        self, explicit: Mapping[str, bool] | None = None, *, dkc_default: bool = False, kubelet_minor: int = 23
    ):
        self._known = dict(known_gates()) if kubelet_minor <= 23 else modern_gates(kubelet_minor)
        if kubelet_minor <= 23:
            # before 1.22 DynamicKubeletConfig was beta and on by default (reference section 1)
            self._known["DynamicKubeletConfig"] = GateSpec(dkc_default, "Beta" if dkc_default else "Deprecated")
        self._explicit: dict[str, bool] = {}
        if explicit:
            self._set(explicit)

    def _set(self, values: Mapping[str, bool]) -> None:
        for name in sorted(values):
            value = values[name]
            spec = self._known.get(name)
            if spec is None:
                raise GateError(f"unrecognized feature gate: {name}")
            if spec.locked and value != spec.default:
                raise GateError(
                    f"cannot set feature gate {name} to {_go_bool(value)}, "
                    f"feature is locked to {_go_bool(spec.default)}"
                )
            self._explicit[name] = bool(value)

    def with_overrides(self, values: Mapping[str, bool] | None) -> "FeatureGates":
        """A copy with ``values`` applied (``DeepCopy`` + ``SetFromMap``); raises :class:`GateError`."""
        copy = FeatureGates.__new__(FeatureGates)
        copy._known = self._known
        copy._explicit = dict(self._explicit)
        if values:
            copy._set(values)
        return copy

    def enabled(self, name: str) -> bool:
        if name in self._explicit:
            return self._explicit[name]
        spec = self._known.get(name)
        if spec is None:  # gone from this minor's list: graduated (on), or DKC's, removed with it
            return name != "DynamicKubeletConfig"
        if spec.stage == "Alpha" and self._explicit.get("AllAlpha"):
            return True
        if spec.stage == "Beta" and self._explicit.get("AllBeta"):
            return True
        return spec.default

    def explicit(self) -> dict[str, bool]:
        return dict(self._explicit)
