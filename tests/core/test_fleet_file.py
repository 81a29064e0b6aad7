"""The fleet file: which clusters each stage holds (a table of rules), and every way the file can
be wrong reported as one error naming the file, the line and the field."""

from __future__ import annotations

from pathlib import Path
from textwrap import dedent

import pytest

from rollout.errors import FleetError
from rollout.fleet import check_rollout_name, cluster_rollout, load_fleet, load_fleet_text, portable_fleet_text
from rollout.fleet.model import FleetFailureAction

ROOT = Path(__file__).resolve().parents[2]

CLUSTERS = """\
clusters:
  - {name: dev-1, workPool: dev-1, identity: {kubeSystemUID: uid-dev-1}, labels: {env: dev}}
  - {name: stg-1, workPool: stg-1, identity: {kubeSystemUID: uid-stg-1}, labels: {env: staging}}
  - {name: prod-1, workPool: prod-1, identity: {kubeSystemUID: uid-prod-1}, labels: {env: prod, region: eu}}
  - {name: prod-2, workPool: prod-2, identity: {kubeSystemUID: uid-prod-2}, labels: {env: prod, region: eu}}
  - {name: prod-3, workPool: prod-3, identity: {kubeSystemUID: uid-prod-3}, labels: {env: prod, region: us}}
  - {name: prod-4, workPool: prod-4, identity: {kubeSystemUID: uid-prod-4}, labels: {env: prod, region: us}}
"""


def stages_of(stages: str, **extra: str) -> list[tuple[str, ...]]:
    text = CLUSTERS + "stages:\n" + dedent(stages) + "".join(f"{k}: {v}\n" for k, v in extra.items())
    return [stage.clusters for stage in load_fleet_text(text).stages]


@pytest.mark.parametrize(("stages", "expected"), [
    pytest.param("- clusters: [dev-1]\n- {}\n",
                 [("dev-1",), ("stg-1", "prod-1", "prod-2", "prod-3", "prod-4")],
                 id="a stage with no clusters and no selector takes every cluster left"),
    pytest.param("- clusters: [dev-1]\n- selector: env=staging\n- selector: env=prod\n",
                 [("dev-1",), ("stg-1",), ("prod-1", "prod-2", "prod-3", "prod-4")],
                 id="a selector takes the clusters it matches, in the file's order"),
    pytest.param("- clusters: [dev-1]\n- {selector: env=prod, count: '25%'}\n- {selector: env=prod, count: '25%'}\n- {}\n",
                 [("dev-1",), ("prod-1",), ("prod-2",), ("stg-1", "prod-3", "prod-4")],
                 id="a percentage is of the clusters the selector matches, rounded up; each stage takes new ones"),
    pytest.param("- clusters: [dev-1, stg-1]\n- {count: 2}\n- {count: '100%'}\n",
                 [("dev-1", "stg-1"), ("prod-1", "prod-2"), ("prod-3", "prod-4")],
                 id="a count takes that many clusters no earlier stage took"),
    pytest.param("- clusters: [prod-4]\n- {matchLabels: {region: us}}\n- {}\n",
                 [("prod-4",), ("prod-3",), ("dev-1", "stg-1", "prod-1", "prod-2")],
                 id="matchLabels select like a selector, and skip what the canary took"),
])
def test_stages_take_clusters_by_rule(stages: str, expected: list[tuple[str, ...]]) -> None:
    assert stages_of(stages) == expected


def test_plan_resolves_limits_budget_policies_and_gates() -> None:
    text = CLUSTERS + dedent("""\
        policies:
          - {matchLabels: {env: prod}, policy: cautious}
          - policy: canary
        stages:
          - clusters: [dev-1]
            soak: 10m
          - {selector: env=prod, maxConcurrent: '50%'}
          - {}
        soak: 1h
        approval: {after: [1]}
        failureBudget: '20%'
        failureAction: rollback
        maxConcurrent: 1
        """)
    plan = load_fleet_text(text, source="fleet.yaml")
    assert plan.name == "fleet"
    assert [s.soak.total_seconds() for s in plan.stages] == [600, 3600, 3600]
    assert [s.max_concurrent for s in plan.stages] == [1, 2, 1]
    assert [s.approval_after for s in plan.stages] == [False, True, False]
    assert plan.failure_budget == 1 and plan.failure_action is FleetFailureAction.ROLLBACK
    assert {c.name: c.policy for c in plan.clusters.values()} == {
        "dev-1": "canary", "stg-1": "canary", "prod-1": "cautious", "prod-2": "cautious", "prod-3": "cautious",
        "prod-4": "cautious"}


@pytest.mark.parametrize(("given", "fleet_nodes", "nodes"), [
    pytest.param(3, None, 3, id="a count is itself, whatever the fleet"),
    pytest.param("10%", 45, 4, id="a share of the fleet's nodes rounds down, as maxUnavailable does"),
    pytest.param("10%", 9, 1, id="and is at least one node, so the fleet can move"),
    pytest.param("100%", 9, 9, id="the whole fleet at once"),
])
def test_a_disruption_budget_is_nodes_or_a_share_of_the_fleets_nodes(given: int | str, fleet_nodes: int | None,
                                                                     nodes: int) -> None:
    text = CLUSTERS + f"stages:\n  - clusters: [dev-1]\n  - {{}}\ndisruptionBudget: {given!r}\n"
    plan = load_fleet_text(text)
    assert plan.disruption_budget == given and plan.budget_needs_fleet_size is isinstance(given, str)
    assert plan.budget_nodes(fleet_nodes) == nodes
    assert plan.to_json()["disruption_budget"] == given


def test_a_share_of_a_fleet_not_counted_is_no_number() -> None:
    plan = load_fleet_text(CLUSTERS + "stages:\n  - clusters: [dev-1]\n  - {}\ndisruptionBudget: '5%'\n")
    with pytest.raises(FleetError, match="share of the fleet's nodes, which were not counted"):
        plan.budget_nodes(None)


def test_the_fleet_journal_keeps_the_nodes_counted() -> None:
    from datetime import datetime, timezone

    from rollout.fleet import FleetJournal, from_data, to_data

    journal = FleetJournal(rollout="f", digest="d", created_at=datetime(2026, 1, 1, tzinfo=timezone.utc))
    counted = journal.with_fleet_nodes(45)
    assert counted.with_fleet_nodes(50).fleet_nodes == 45  # counted once: a re-run keeps the first count
    assert from_data(to_data(counted)) == counted and from_data(to_data(journal)).fleet_nodes is None


@pytest.mark.parametrize(("body", "problems"), [
    pytest.param("clusters:\n  - {name: a, workPool: pa, identity: {kubeSystemUID: uid-a}}\n  - {name: b, workPol: pb, identity: {kubeSystemUID: uid-b}}\nstages:\n  - clusters: [a]\n",
                 ["line 3: clusters.1.workPool: Field required",
                  "line 3: clusters.1.workPol: unknown field; did you mean 'workPool'?"],
                 id="a typo names the closest field and its line"),
    pytest.param("clusters:\n  - {name: A_1, workPool: p, identity: {kubeSystemUID: uid-a_1}}\nstages:\n  - clusters: [A_1]\n",
                 ["line 2: clusters.0.name: a cluster name is a DNS label"], id="cluster names are DNS labels"),
    pytest.param("clusters:\n  - {name: a, workPool: p, identity: {kubeSystemUID: uid-a}}\n  - {name: b, workPool: p, identity: {kubeSystemUID: uid-b}}\nstages:\n  - selector: x=y\n",
                 ["line 5: stages.0: the first stage is the canary: name its cluster(s)",
                  "line 5: stages.0: takes no cluster", "line 4: stages: cluster(s) a, b are in no stage"],
                 id="the canary stage names its clusters, and every cluster is in a stage"),
    pytest.param("clusters:\n  - {name: a, workPool: p, identity: {kubeSystemUID: uid-a}}\n  - {name: b, workPool: p, identity: {kubeSystemUID: uid-b}}\nstages:\n  - clusters: [a]\n"
                 "  - clusters: [a, c]\n",
                 ["line 6: stages.1.clusters.0: cluster 'a' is already in stage 0",
                  "line 6: stages.1.clusters.1: no cluster named 'c' in clusters"],
                 id="a cluster is in one stage, and must exist"),
    pytest.param("clusters:\n  - {name: a, workPool: p, identity: {kubeSystemUID: uid-a}}\n  - {name: a, workPool: q, identity: {kubeSystemUID: uid-a}}\nstages:\n  - clusters: [a]\n",
                 ["line 3: clusters.1.name: cluster 'a' is listed twice"], id="cluster names are unique"),
    pytest.param("clusters:\n  - {name: a, workPool: p, identity: {kubeSystemUID: uid-a}, labels: {env: dev}}\npolicies:\n  - {matchLabels: {env: prod},"
                 " policy: canary}\nstages:\n  - clusters: [a]\n",
                 ["line 3: policies: no rule matches cluster(s) a"], id="every cluster has a policy"),
    pytest.param("clusters:\n  - {name: a, workPool: p, identity: {kubeSystemUID: uid-a}}\n  - {name: b, workPool: p, identity: {kubeSystemUID: uid-b}}\nstages:\n  - clusters: [a]\n"
                 "  - {}\napproval: {after: [1]}\n",
                 ["line 7: approval.after: stage 1 is the last stage"], id="no gate after the last stage"),
    pytest.param("clusters:\n  - {name: a, workPool: p, identity: {kubeSystemUID: uid-a}}\nstages:\n  - clusters: [a]\ndisruptionBudget: 0\n",
                 ["line 5: disruptionBudget: a node count must be at least 1, got 0"],
                 id="a disruption budget of no node"),
    pytest.param("clusters:\n  - {name: a, workPool: p, identity: {kubeSystemUID: uid-a}}\nstages:\n  - clusters: [a]\ndisruptionBudget: 10 percent\n",
                 ["line 5: disruptionBudget: a node count (3) or a percentage ('10%')"],
                 id="a disruption budget is a count or a percentage"),
    pytest.param("clusters:\n  - {name: a, workPool: p, identity: {kubeSystemUID: uid-a}}\nstages:\n  - clusters: [a]\nfailureAction: revert-all\n",
                 ["line 5: failureAction: Input should be 'halt' or 'rollback'"], id="a fleet halts or rolls back"),
])
def test_a_bad_fleet_file_is_one_error_naming_file_line_and_field(tmp_path: Path, body: str,
                                                                  problems: list[str]) -> None:
    path = tmp_path / "fleet.yaml"
    path.write_text(body)
    with pytest.raises(FleetError) as caught:
        load_fleet(path)
    message = str(caught.value)
    assert message.startswith(f"{path}: invalid fleet file"), message
    for problem in problems:
        assert any(line.strip().startswith(f"- {problem}") for line in message.splitlines()), (problem, message)
    assert caught.value.outcome.exit_code == 2


def test_a_broken_policy_is_named_with_the_fleet_files_line(tmp_path: Path) -> None:
    (tmp_path / "mine.yaml").write_text("steps: [1, '50%']\n")
    path = tmp_path / "fleet.yaml"
    path.write_text("clusters:\n  - {name: a, workPool: p, identity: {kubeSystemUID: uid-a}}\nstages:\n  - clusters: [a]\npolicy: mine.yaml\n")
    with pytest.raises(FleetError) as caught:
        load_fleet(path)
    first, *rest = str(caught.value).splitlines()
    assert first.startswith(f"{path}:5: policy: policy 'mine.yaml'") and "invalid rollout policy" in first
    assert any("the last step must be '100%'" in line for line in rest)
    path.write_text("clusters:\n  - {name: a, workPool: p, identity: {kubeSystemUID: uid-a}}\nstages:\n  - clusters: [a]\npolicy: nosuch\n")
    with pytest.raises(FleetError, match=r"fleet.yaml:5: policy: policy 'nosuch'.*no policy named"):
        load_fleet(path)


def test_a_policy_file_travels_as_its_text(tmp_path: Path) -> None:
    """The fleet flow may run on any worker: a policy file is passed as its text, a name as a name."""
    (tmp_path / "mine.yaml").write_text("name: mine\nsteps: [1, '100%']\n")
    path = tmp_path / "fleet.yaml"
    path.write_text("clusters:\n  - {name: a, workPool: p, identity: {kubeSystemUID: uid-a}, labels: {x: y}}\n  - {name: b, workPool: q, identity: {kubeSystemUID: uid-b}}\n"
                    "policies:\n  - {matchLabels: {x: y}, policy: mine.yaml}\n  - {policy: fast}\n"
                    "stages:\n  - clusters: [a]\n  - {}\n")
    portable = load_fleet_text(portable_fleet_text(path))
    assert portable.clusters["a"].policy == "name: mine\nsteps: [1, '100%']\n"
    assert portable.clusters["a"].policy_name == "mine" and portable.clusters["b"].policy == "fast"
    assert portable.stages == load_fleet(path).stages


def test_each_cluster_rollout_name_is_a_label_value() -> None:
    plan = load_fleet_text(CLUSTERS + "stages:\n  - clusters: [dev-1]\n  - {}\n")
    assert cluster_rollout("maxpods-80", "prod-1") == "maxpods-80-prod-1"
    check_rollout_name("maxpods-80", plan)
    for bad in ("", "x" * 60, "has space", "dots.are.not.variables", "-lead"):
        with pytest.raises(FleetError):
            check_rollout_name(bad, plan)


def test_the_documented_example_loads() -> None:
    plan = load_fleet(ROOT / "docs" / "fleet-example.yaml")
    assert plan.stages[0].clusters and all(plan.stage_of(c) >= 0 for c in plan.clusters)
