"""Which clusters each stage of a fleet holds: one pure rule, used by validation and the plan alike.

Stages are read in order and each takes clusters no earlier stage took, in the order the fleet
file lists them, so the same file always gives the same stages:

- ``clusters: [a, b]`` takes exactly those (the first stage, the canary, must name its clusters:
  the cluster that goes first is chosen by a person, not by a count);
- ``selector`` / ``matchLabels`` take the clusters they match, ``count`` only that many of them: a
  number, or a percentage of the clusters the selector matches in the whole fleet (of every
  cluster when there is no selector), rounded up;
- a stage with none of these takes every cluster left.

A stage that ends up with no cluster, a cluster named twice or unknown, and a cluster no stage
takes are problems, each naming its field, so ``rollout fleet plan`` shows them all at once.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Protocol

from rollout.policy import CountOrPercent, LabelSelector, resolve_amount


# what the rule reads of the fleet file's models (rollout.fleet.model), which validate with it
class ClusterSpec(Protocol):
    @property
    def name(self) -> str: ...
    @property
    def labels(self) -> Mapping[str, str]: ...


class Stage(Protocol):
    @property
    def clusters(self) -> Sequence[str]: ...
    @property
    def selector(self) -> str: ...
    @property
    def match_labels(self) -> Mapping[str, str]: ...
    @property
    def count(self) -> CountOrPercent | int | None: ...
    @property
    def chooses(self) -> bool: ...


def resolve_stages(clusters: Sequence[ClusterSpec],
                   stages: Sequence[Stage]) -> tuple[tuple[tuple[str, ...], ...], list[str]]:
    """(the clusters of each stage, the problems found); the clusters are right only without problems."""
    known = [c.name for c in clusters]
    taken: dict[str, int] = {}
    resolved: list[tuple[str, ...]] = []
    problems: list[str] = []
    for index, stage in enumerate(stages):
        where = f"stages.{index}"
        if stage.clusters and stage.chooses:
            problems.append(f"{where}: name its clusters, or choose them with selector/matchLabels/count, not both")
        if index == 0 and not stage.clusters:
            problems.append(f"{where}: the first stage is the canary: name its cluster(s), e.g. clusters: [{known[0]}]")
        chosen = (_named(stage.clusters, known, taken, where, problems) if stage.clusters
                  else _chosen(stage, clusters, taken))
        if not chosen:
            problems.append(f"{where}: takes no cluster (every cluster it would take is in an earlier stage)")
        for name in chosen:
            taken[name] = index
        resolved.append(tuple(chosen))
    left = [name for name in known if name not in taken]
    if left:
        problems.append(f"stages: cluster(s) {', '.join(left)} are in no stage; name them in a stage, or end with "
                        "a stage without clusters or selector (it takes every cluster left)")
    return tuple(resolved), problems


def _named(names: Sequence[str], known: list[str], taken: dict[str, int], where: str,
           problems: list[str]) -> list[str]:
    chosen = []
    for i, name in enumerate(names):
        if name not in known:
            problems.append(f"{where}.clusters.{i}: no cluster named {name!r} in clusters")
        elif name in taken or name in chosen:
            earlier = taken.get(name)
            problems.append(f"{where}.clusters.{i}: cluster {name!r} is already in "
                            + (f"stage {earlier}" if earlier is not None else "this stage"))
        else:
            chosen.append(name)
    return chosen


def _chosen(stage: Stage, clusters: Sequence[ClusterSpec], taken: dict[str, int]) -> list[str]:
    selector = LabelSelector.parse(stage.selector, match_labels=stage.match_labels)
    matching = [c.name for c in clusters if selector.matches(c.labels)]
    left = [name for name in matching if name not in taken]
    if stage.count is None:
        return left
    size = resolve_amount(stage.count, len(matching), round_up=True)
    return left[:size]
