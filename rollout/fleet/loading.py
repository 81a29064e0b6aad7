"""Loading a fleet file: text or file in, a :class:`FleetPlan` or one ``FleetError`` out.

The only door a fleet file comes in by. It passes the input boundary (``rollout.inputs``: size,
nesting, encoding, line numbers), the fleet model's rules, then every policy it names is loaded
and validated too, so a fleet with a broken policy for its last stage never starts its canary.
Every error names the file, the line and the field, the way a policy's errors do (one formatter:
``rollout.policy.loading.validation_problems``).

A policy is named as ``--policy`` names one: a shipped policy (``canary``), a file (relative to
the fleet file), or YAML text. The fleet flow may run on any worker, where the fleet file's
directory does not exist: :func:`portable_fleet_text` gives the fleet file with each policy
file's text in place of its path, which is what the CLI passes to the flow.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml
from pydantic import ValidationError

from rollout.errors import FleetError, InputError
from rollout.fleet.model import FleetFile
from rollout.fleet.plan import ClusterPlan, FleetPlan, StagePlan, stage_limits
from rollout.inputs import Document, parse_document, read_input
from rollout.policy import load_policy, load_policy_text, resolve_amount, resolve_policy
from rollout.policy.loading import validation_problems


def load_fleet(path: str | Path) -> FleetPlan:
    """Read and validate a fleet file and every policy it names."""
    return load_fleet_text(read_input(path, error=FleetError), source=str(path), base_dir=Path(path).parent)


def load_fleet_text(text: str | bytes, *, source: str = "<fleet>", base_dir: Path | None = None) -> FleetPlan:
    doc, fleet = _validated(text, source)
    policies = {ref: _policy(ref, doc, fleet, base_dir) for ref in sorted({fleet.policy_of(c) for c in fleet.clusters})}
    clusters = {c.name: ClusterPlan(name=c.name, work_pool=c.work_pool, identity=c.identity.identity(),
                                    labels=dict(c.labels),
                                    policy=policies[fleet.policy_of(c)][0], policy_name=policies[fleet.policy_of(c)][1])
                for c in fleet.clusters}
    stage_clusters = fleet.stage_clusters()
    last = len(fleet.stages) - 1
    stages = tuple(StagePlan(
        index=i, name=stage.name, clusters=stage_clusters[i],
        soak=stage.soak if stage.soak is not None else fleet.soak,
        max_concurrent=stage_limits(stage_clusters[i], stage.max_concurrent or fleet.max_concurrent),
        approval_after=i < last and fleet.approval.required_after_step(i),
    ) for i, stage in enumerate(fleet.stages))
    return FleetPlan(name=fleet.name or (Path(source).stem if source != "<fleet>" else ""), stages=stages,
                     clusters=clusters,
                     failure_budget=resolve_amount(fleet.failure_budget, len(clusters), round_up=False),
                     failure_action=fleet.failure_action, approval=fleet.approval,
                     disruption_budget=fleet.disruption_budget)


def portable_fleet_text(path: str | Path) -> str:
    """The fleet file as the fleet flow reads it anywhere: each policy file's text in place of its path."""
    source, base_dir = str(path), Path(path).parent
    doc, fleet = _validated(read_input(path, error=FleetError), source)
    data: dict[str, Any] = dict(doc.data)
    if fleet.policy is not None:
        data["policy"] = _portable(fleet.policy, base_dir)
    if fleet.policies:
        data["policies"] = [{**rule, "policy": _portable(str(rule["policy"]), base_dir)} for rule in data["policies"]]
    return yaml.safe_dump(data, sort_keys=False)


def _validated(text: str | bytes, source: str) -> tuple[Document, FleetFile]:
    doc = parse_document(text, source=source, error=FleetError)
    if not isinstance(doc.data, dict):
        raise FleetError("a fleet file is a YAML mapping of fields (clusters, stages, ...)", source=source)
    try:
        return doc, FleetFile.model_validate(doc.data)
    except ValidationError as exc:
        problems = validation_problems(exc, doc, FleetFile)
        raise FleetError(f"invalid fleet file ({len(problems)} problem(s))", source=source, problems=problems) from None


def _is_file_ref(ref: str) -> bool:
    return "\n" not in ref and (ref.endswith((".yaml", ".yml")) or "/" in ref)


def _portable(ref: str, base_dir: Path) -> str:
    return read_input(base_dir / ref, error=FleetError) if _is_file_ref(ref) else ref


def _policy(ref: str, doc: Document, fleet: FleetFile, base_dir: Path | None) -> tuple[str, str]:
    """(what a worker loads: a shipped name or the policy's text, the policy's name), validated."""
    try:
        if "\n" in ref:
            return ref, load_policy_text(ref, source="<inline policy>").name or "inline"
        if _is_file_ref(ref):
            if base_dir is None:
                raise FleetError(f"policy file {ref!r}: give the policy's text or a shipped policy's name here")
            path = base_dir / ref
            return read_input(path, error=FleetError), load_policy(path).name
        return ref, resolve_policy(ref).name
    except InputError as error:
        line, field = _where_named(ref, doc, fleet)
        where = f" ({error.source})" if error.source and error.source != ref else ""
        raise FleetError(f"policy {ref!r}{where}: {error.reason}", source=doc.source, line=line, path=field,
                         problems=error.problems) from None


def _where_named(ref: str, doc: Document, fleet: FleetFile) -> tuple[int | None, str]:
    if fleet.policy == ref:
        return doc.line_of(("policy",)), "policy"
    index = next(i for i, rule in enumerate(fleet.policies) if rule.policy == ref)
    return doc.line_of(("policies", index, "policy")), f"policies.{index}.policy"
