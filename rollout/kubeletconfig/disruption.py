"""What a config change costs a node: a restart, a drain, a state reset, or a reboot.

Why: Dynamic Kubelet Config (and the agent) only restart the kubelet, but some fields need more.
A CPU or memory manager policy change makes the kubelet refuse to start while its checkpoint file
was written under the old policy (the documented procedure: drain, stop the kubelet, delete the
file, start it); a topology policy change re-admits the pods already running under the new rules.
The per-field facts, each citing the kubelet source it comes from, are data
(``rollout/catalog/kubelet-disruption.yaml``); this module is the one rule that reads them:
:func:`node_disruption` takes a node's running config and the new one and says what the change
costs that node, which fields drive it, which state files to delete, and about how long it takes.

Pure, as the rest of the package: documents in, frozen values out; the catalogue is read once.
"""

from __future__ import annotations

import functools
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from importlib import resources
from types import MappingProxyType
from typing import Any

import yaml

from rollout.kubeletconfig.defaults import effective_config
from rollout.kubeletconfig.diff import FieldChange, diff_configs

DISRUPTION_FILE = "kubelet-disruption.yaml"
RESTART, DRAIN, STATE_RESET, REBOOT = "restart", "drain", "state-reset", "reboot"
CLASSES = (RESTART, DRAIN, STATE_RESET, REBOOT)  # cheapest first: a node costs its dearest change
DRAIN_CLASSES = frozenset({DRAIN, STATE_RESET})  # the node is drained before its kubelet restarts
NOTHING = "none"  # the config changes nothing on the node
DRAIN_MODES = ("auto", "always", "never")  # the policy's disruption.drain


@dataclass(frozen=True)
class Source:
    """Where a fact comes from: a file of kubernetes/kubernetes, its function, its own words."""

    file: str
    function: str
    says: str
    confirmed: bool
    note: str = ""

    def __str__(self) -> str:
        return f"{self.file} {self.function}: {self.says!r}" + ("" if self.confirmed else " (not confirmed)")


@dataclass(frozen=True)
class Entry:
    """One catalogued field (or map key): its class, and why, from which source."""

    path: str  # a field, or a map field's key (kubeReserved.cpu)
    kind: str
    why: str
    source: Source
    state_file: str | None = None  # state-reset: the checkpoint file's name, in the state directory
    when: Mapping[str, Any] = field(default_factory=dict)  # the class holds only with these values
    since: str | None = None  # the first kubelet minor with the field

    def applies(self, old: Mapping[str, Any], new: Mapping[str, Any]) -> bool:
        """Does the class hold for a node going from ``old`` to ``new`` (effective configs)?"""
        return not self.when or any(all(side.get(k) == v for k, v in self.when.items()) for side in (old, new))


@dataclass(frozen=True)
class DisruptionCatalogue:
    """The catalogue file, parsed: entries by field, where the state files live, the estimate's numbers."""

    entries: Mapping[str, Entry]
    state_dir: str
    state_dir_source: Source
    state_files: Mapping[str, Source]
    reboot_source: Source
    restart_seconds: int
    eviction_grace_seconds: int
    estimate_model: str  # the model and where its numbers come from, for people

    def state_path(self, name: str) -> str:
        return f"{self.state_dir.rstrip('/')}/{name}"


def _source(raw: Mapping[str, Any]) -> Source:
    return Source(file=str(raw["file"]), function=str(raw["function"]), says=str(raw["says"]),
                  confirmed=bool(raw["confirmed"]), note=str(raw.get("note", "")))


def _entry(raw: Mapping[str, Any]) -> Entry:
    kind = str(raw["class"])
    if kind not in CLASSES:
        raise ValueError(f"{raw['field']}: unknown disruption class {kind!r}")
    return Entry(path=str(raw["field"]), kind=kind, why=str(raw["why"]), source=_source(raw["source"]),
                 state_file=raw.get("stateFile"), when=MappingProxyType(dict(raw.get("when") or {})),
                 since=str(raw["since"]) if "since" in raw else None)


@functools.cache
def load_disruption_catalogue() -> DisruptionCatalogue:
    """The catalogue, parsed once per process."""
    raw = yaml.safe_load(resources.files("rollout").joinpath("catalog", DISRUPTION_FILE).read_text(encoding="utf-8"))
    estimate = raw["estimate"]
    return DisruptionCatalogue(
        entries=MappingProxyType({e.path: e for e in map(_entry, raw["fields"])}),
        state_dir=str(raw["stateDir"]),
        state_dir_source=_source(raw["stateDirSource"]),
        state_files=MappingProxyType({name: _source(f["source"]) for name, f in raw["stateFiles"].items()}),
        reboot_source=_source(raw["rebootFromDocComment"]),
        restart_seconds=int(estimate["restartSeconds"]),
        eviction_grace_seconds=int(estimate["evictionGraceSeconds"]),
        estimate_model=(f"a restart {estimate['restartSeconds']}s ({estimate['restartSource']}); a drain adds one "
                        f"eviction grace, {estimate['evictionGraceSeconds']}s ({estimate['evictionGraceSource']}); "
                        "PodDisruptionBudgets that hold an eviction back are not counted; a reboot is not estimated"),
    )


@dataclass(frozen=True)
class FieldCost:
    """What one changed field costs a node, and why (its catalogue entry's words, filled in)."""

    path: str
    kind: str
    why: str = ""
    state_file: str | None = None  # the full path to delete (state-reset)
    source: Source | None = None


def _words(value: Any) -> str:
    return repr(value) if isinstance(value, str) else str(value)


def field_cost(change: FieldChange, *, old: Mapping[str, Any], new: Mapping[str, Any]) -> FieldCost:
    """The cost of one change, from its catalogue entry (the map key's, else the field's); a field
    the catalogue does not name costs a reboot when its doc comment asks for one, else a restart.
    ``old`` and ``new`` are the node's effective configs before and after (for ``when``)."""
    catalogue = load_disruption_catalogue()
    entry = catalogue.entries.get(change.path) or catalogue.entries.get(change.field)
    if entry is None:
        if change.dkc_warning == REBOOT:
            return FieldCost(change.path, REBOOT, change.dkc_reason, source=catalogue.reboot_source)
        return FieldCost(change.path, RESTART)
    if not entry.applies(old, new):  # e.g. reservedSystemCPUs under the `none` CPU policy
        return FieldCost(change.path, RESTART)
    state_file = catalogue.state_path(entry.state_file) if entry.state_file else None
    why = entry.why.format(old=_words(change.old), new=_words(change.new), file=state_file or "")
    return FieldCost(change.path, entry.kind, why, state_file, entry.source)


@dataclass(frozen=True)
class Disruption:
    """What a config change costs one node: the dearest class of its changes, the fields that
    drive it, the state files to delete between stopping and starting the kubelet, and an
    estimate of the node's own time (:func:`estimate_seconds`; None for a reboot)."""

    kind: str  # NOTHING or one of CLASSES
    fields: tuple[str, ...] = ()
    state_files: tuple[str, ...] = ()
    reasons: tuple[str, ...] = ()
    seconds: int | None = 0

    @property
    def drains(self) -> bool:
        """The node is drained before its kubelet restarts."""
        return self.kind in DRAIN_CLASSES

    @property
    def what(self) -> str:
        """``drain + state reset``: the class, for people."""
        return {NOTHING: "nothing", RESTART: "restart", DRAIN: "drain + restart",
                STATE_RESET: "drain + state reset", REBOOT: "reboot"}[self.kind]

    @property
    def how_long(self) -> str:
        """``about 1m10s``, or ``not estimated`` (a reboot)."""
        return f"about {_seconds_words(self.seconds)}" if self.seconds is not None else "not estimated"

    def words(self) -> str:
        """``drain + state reset (/var/lib/kubelet/cpu_manager_state), about 1m10s``."""
        files = f" ({', '.join(self.state_files)})" if self.state_files else ""
        return self.what if self.kind == NOTHING else f"{self.what}{files}, {self.how_long}"

    def as_json(self) -> dict[str, Any]:
        return {"class": self.kind, "fields": list(self.fields), "stateFiles": list(self.state_files),
                "reasons": list(self.reasons), "seconds": self.seconds}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Disruption:
        """:meth:`as_json` read back (a plan's JSON, shown)."""
        return cls(str(data["class"]), tuple(data["fields"]), tuple(data["stateFiles"]), tuple(data["reasons"]),
                   data["seconds"])


def _seconds_words(seconds: int) -> str:
    minutes, rest = divmod(seconds, 60)
    return f"{minutes}m{rest}s" if minutes and rest else f"{minutes}m" if minutes else f"{rest}s"


def estimate_seconds(kind: str) -> int | None:
    """The stated model (the catalogue's numbers and their sources): a restart takes
    ``restartSeconds``; a drain adds one eviction grace (a node's evictions run at once); a state
    reset costs what a drain does; a reboot is not estimated. PDB waits are not counted."""
    catalogue = load_disruption_catalogue()
    if kind == NOTHING:
        return 0
    if kind == REBOOT:
        return None
    grace = catalogue.eviction_grace_seconds if kind in DRAIN_CLASSES else 0
    return grace + catalogue.restart_seconds


def disruption_of(costs: Iterable[FieldCost], *, drain: str = "auto") -> Disruption:
    """A node's cost from its changes' costs: the dearest class, and the fields driving it. With
    ``drain: always`` (the policy's) a node that restarts is drained too."""
    costs = list(costs)
    if not costs:
        return Disruption(NOTHING)
    kind = max((c.kind for c in costs), key=CLASSES.index)
    driving = [c for c in costs if c.kind == kind]
    reasons = tuple(dict.fromkeys(f"{c.path}: {c.why}" for c in driving if c.why))
    if kind == RESTART and drain == "always":
        kind, reasons = DRAIN, ("the policy drains every node (disruption.drain: always)",)
    files = tuple(dict.fromkeys(c.state_file for c in driving if c.state_file))
    return Disruption(kind, tuple(c.path for c in driving), files, reasons, estimate_seconds(kind))


def change_costs(changes: Iterable[FieldChange], *, old: Mapping[str, Any],
                 new: Mapping[str, Any]) -> list[FieldCost]:
    """Each change's cost; ``old``/``new`` are the documents (defaulted here, for ``when``)."""
    old_eff, new_eff = effective_config(old), effective_config(new)
    return [field_cost(c, old=old_eff, new=new_eff) for c in changes]


def node_disruption(old: Mapping[str, Any], new: Mapping[str, Any], *, drain: str = "auto") -> Disruption:
    """What changing a node from its running config ``old`` to ``new`` costs it.

    ``new`` is the config the kubelet will run (for a drop-in, merged over ``old``); ``drain`` the
    policy's ``disruption.drain`` (``auto`` when it has none: the catalogue decides)."""
    return disruption_of(change_costs(diff_configs(new, old), old=old, new=new), drain=drain)

