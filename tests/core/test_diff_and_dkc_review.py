"""Field-level diff with defaults on both sides, and the DKC-danger review built on it."""

from __future__ import annotations

from typing import Any

import pytest

from rollout.kubeletconfig import (
    FieldChange,
    dangerous_fields,
    diff_configs,
    effective_config,
    review_changes,
)

KIND = {"kind": "KubeletConfiguration", "apiVersion": "kubelet.config.k8s.io/v1beta1"}
# A node's active config as configz shows it: everything explicit, legacy flag baseline values.
ACTIVE = effective_config(
    {
        "cgroupDriver": "systemd",
        "readOnlyPort": 10255,
        "kubeletCgroups": "/kubelet.slice",
        "authentication": {"anonymous": {"enabled": True}, "webhook": {"enabled": False}},
        "authorization": {"mode": "AlwaysAllow"},
        "clusterDomain": "cluster.local",
    }
)
SAME = {
    **KIND,
    "cgroupDriver": "systemd",
    "readOnlyPort": 10255,
    "kubeletCgroups": "/kubelet.slice",
    "authentication": {"anonymous": {"enabled": True}, "webhook": {"enabled": False}},
    "authorization": {"mode": "AlwaysAllow"},
    "clusterDomain": "cluster.local",
}


def paths(changes: list[FieldChange]) -> set[str]:
    return {c.path for c in changes}


def test_identical_meaning_is_no_change() -> None:
    assert diff_configs(SAME, ACTIVE) == []


@pytest.mark.parametrize(
    ("override", "path"),
    [
        ({"syncFrequency": "60s"}, None),
        ({"syncFrequency": "1m"}, None),
        ({"syncFrequency": "2m"}, "syncFrequency"),
        ({"containerLogMaxSize": "10240Ki"}, None),
        ({"containerLogMaxSize": "20Mi"}, "containerLogMaxSize"),
        ({"maxPods": 0}, None),
        ({"maxPods": 111}, "maxPods"),
    ],
    ids=[
        "60s equals 1m0s",
        "1m equals 1m0s",
        "2m differs",
        "10240Ki equals 10Mi",
        "20Mi differs",
        "zero means default: no change",
        "a real change",
    ],
)
def test_values_compare_by_meaning(override: dict[str, Any], path: str | None) -> None:
    changes = diff_configs({**SAME, **override}, ACTIVE)
    assert paths(changes) == ({path} if path else set())


def test_omitted_fields_that_silently_change_show_up() -> None:
    changes = {
        c.path: c
        for c in diff_configs(
            {
                **KIND,
                "cgroupDriver": "systemd",
                "kubeletCgroups": "/kubelet.slice",
                "clusterDomain": "cluster.local",
            },
            ACTIVE,
        )
    }
    assert set(changes) == {
        "readOnlyPort",
        "authentication.anonymous.enabled",
        "authentication.webhook.enabled",
        "authorization.mode",
    }
    assert changes["readOnlyPort"].old == 10255 and changes["readOnlyPort"].new == 0
    assert not changes["readOnlyPort"].explicit
    assert changes["authorization.mode"].new == "Webhook"


def test_nested_map_paths_and_replaced_defaults() -> None:
    changes = {
        c.path: c for c in diff_configs({**SAME, "evictionHard": {"memory.available": "200Mi"}}, ACTIVE)
    }
    assert changes["evictionHard.memory.available"].old == "100Mi"
    assert changes["evictionHard.memory.available"].new == "200Mi"
    assert changes["evictionHard.memory.available"].explicit
    # setting the map replaces the whole default map: the other signals disappear
    assert changes["evictionHard.nodefs.available"].new is None


def test_feature_gate_at_its_default_is_no_change() -> None:
    assert diff_configs({**SAME, "featureGates": {"NodeSwap": False}}, ACTIVE) == []
    (change,) = diff_configs({**SAME, "featureGates": {"NodeSwap": True}}, ACTIVE)
    assert (change.path, change.old, change.new) == ("featureGates.NodeSwap", False, True)


def test_changes_carry_their_dkc_kind() -> None:
    (change,) = diff_configs({**SAME, "cgroupRoot": "/pods"}, ACTIVE)
    assert (change.field, change.dkc_warning) == ("cgroupRoot", "reboot")


REVIEW = [
    (
        "reboot field change is refused",
        {"cgroupsPerQOS": False, "enforceNodeAllocatable": []},
        "cgroupsPerQOS",
        "reboot",
    ),
    ("keep_empty field change is refused", {"podCIDR": "10.0.0.0/24"}, "podCIDR", "keep_empty"),
    (
        "not_recommended field change is refused",
        {"clusterDomain": "example.local"},
        "clusterDomain",
        "not_recommended",
    ),
    ("omitting a reboot field is a change too", {"kubeletCgroups": None}, "kubeletCgroups", "reboot"),
]


@pytest.mark.parametrize(("override", "field", "kind"), [c[1:] for c in REVIEW], ids=[c[0] for c in REVIEW])
def test_dangerous_change_refused_unless_allowed(override: dict[str, Any], field: str, kind: str) -> None:
    new = {k: v for k, v in {**SAME, **override}.items() if v is not None}
    review = review_changes(new, ACTIVE, allowed_fields=set())
    assert review.refused
    (refusal,) = [r for r in review.refusals if r.change.field == field]
    assert refusal.change.dkc_warning == kind
    assert "allowed fields" in refusal.reason
    allowed = review_changes(new, ACTIVE, allowed_fields={field})
    assert not [r for r in allowed.refusals if r.change.field == field]
    assert field in {c.field for c in allowed.allowed}


def test_caveat_change_carries_its_consequence() -> None:
    review = review_changes({**SAME, "maxPods": 200}, ACTIVE, allowed_fields=set())
    assert not review.refused
    (caveat,) = review.caveats
    assert caveat.change.path == "maxPods"
    assert (
        caveat.consequence
        == "pods may fail admission after the restart; changes capacity and future scheduling"
    )


def test_none_kind_change_is_neither_refused_nor_caveat() -> None:
    review = review_changes(
        {**SAME, "seccompDefault": True, "featureGates": {"SeccompDefault": True}},
        ACTIVE,
        allowed_fields=set(),
    )
    assert not review.refused
    assert [c.change.path for c in review.caveats] == ["featureGates.SeccompDefault"]
    assert "seccompDefault" in {c.path for c in review.changes}


def test_no_change_no_findings() -> None:
    review = review_changes(SAME, ACTIVE, allowed_fields=set())
    assert review.changes == () and not review.refused and review.caveats == ()


@pytest.mark.parametrize(
    ("override", "path"),
    [
        ({"cgroupDriver": "cgroupfs"}, "cgroupDriver"),
        ({"protectKernelDefaults": True}, "protectKernelDefaults"),
        (
            {"enforceNodeAllocatable": ["pods", "kube-reserved"], "kubeReservedCgroup": "/kube"},
            "enforceNodeAllocatable",
        ),
    ],
    ids=[
        "cgroupDriver change must match the runtime",
        "protectKernelDefaults depends on sysctls",
        "new reserved cgroup must exist",
    ],
)
def test_node_dependent_changes_warn(override: dict[str, Any], path: str) -> None:
    review = review_changes({**SAME, **override}, ACTIVE, allowed_fields=set(dangerous_fields()))
    assert path in {w.path for w in review.warnings}


def test_dangerous_fields_lists_only_refused_kinds() -> None:
    fields = dangerous_fields()
    assert (
        fields["cgroupDriver"] == "reboot"
        and fields["podCIDR"] == "keep_empty"
        and fields["clusterDomain"] == "not_recommended"
    )
    assert "maxPods" not in fields


def test_review_per_node() -> None:
    from rollout.kubeletconfig import review_nodes

    other = effective_config({**SAME, "kubeletCgroups": "/other"})
    reviews = review_nodes(SAME, {"n1": ACTIVE, "n2": other}, allowed_fields=set())
    assert not reviews["n1"].refused
    assert [r.change.path for r in reviews["n2"].refusals] == ["kubeletCgroups"]


# ------------------------------------------------------------- one refusal rule for every command

CGROUPFS_NODE = effective_config({**SAME, "cgroupDriver": "cgroupfs"})


@pytest.mark.parametrize(
    ("document", "allow", "running", "refused"),
    [
        pytest.param({**KIND, "cgroupDriver": "systemd"}, [], None, {"cgroupDriver": ()},
                     id="offline: a dangerous field away from its default is refused"),
        pytest.param({**KIND, "cgroupDriver": "systemd"}, ["cgroupDriver"], None, {},
                     id="offline: allowFields lets it through"),
        pytest.param({**KIND, "cgroupDriver": "systemd"}, [], {}, {"cgroupDriver": ()},
                     id="no node answered: the same as offline"),
        pytest.param({**KIND, "maxPods": 50}, [], None, {}, id="a safe field is never refused"),
        pytest.param(SAME, [], {"n1": ACTIVE, "n2": ACTIVE}, {},
                     id="nodes already run the value: nothing to refuse"),
        pytest.param(SAME, [], {"n1": ACTIVE, "n2": CGROUPFS_NODE, "n3": CGROUPFS_NODE},
                     {"cgroupDriver": ("n2", "n3")}, id="one refusal naming every node it would hit"),
        pytest.param({**KIND}, [], {"n1": ACTIVE}, {
            "cgroupDriver": ("n1",), "clusterDomain": ("n1",), "kubeletCgroups": ("n1",)},
            id="an omitted field takes its default: that is a change too"),
    ],
)
def test_dkc_refusals(document: dict[str, Any], allow: list[str], running: Any,
                      refused: dict[str, tuple[str, ...]]) -> None:
    from rollout.kubeletconfig import dkc_refusals

    found = dkc_refusals(document, allow_fields=allow, running=running)
    assert {r.change.path: r.nodes for r in found} == refused
    assert all("allowed fields" in str(r) for r in found)


def test_dkc_refusals_is_the_review_start_runs_node_by_node() -> None:
    """validate/plan/diff (dkc_refusals) and start (review_changes per node) refuse the same."""
    from rollout.kubeletconfig import dkc_refusals

    nodes = {"n1": ACTIVE, "n2": CGROUPFS_NODE, "n3": effective_config({**SAME, "kubeletCgroups": "/x"})}
    for document in (SAME, {**KIND}, {**SAME, "podCIDR": "10.0.0.0/24"}, {**KIND, "cgroupDriver": "systemd"}):
        per_node = {(r.change.path, name) for name, active in nodes.items()
                    for r in review_changes(document, active, allowed_fields=set()).refusals}
        combined = {(r.change.path, n) for r in dkc_refusals(document, allow_fields=(), running=nodes)
                    for n in r.nodes}
        assert combined == per_node


@pytest.mark.parametrize("odd", [5, 1.5, True, [{"a": 1}], {"pods": 1}, [None, 3]], ids=repr)
def test_a_node_running_an_odd_value_is_reviewed_not_crashed(odd: Any) -> None:
    """configz is another program's output: any JSON value may sit in any field."""
    from rollout.kubeletconfig import dkc_refusals

    running = {**ACTIVE, "enforceNodeAllocatable": odd, "cgroupDriver": odd}
    new = {**SAME, "enforceNodeAllocatable": ["pods", "system-reserved"]}
    review = review_changes(new, running, allowed_fields=set())
    assert "enforceNodeAllocatable" in {c.path for c in review.changes}
    assert [r.change.path for r in dkc_refusals(new, allow_fields=(), running={"n1": running})] == ["cgroupDriver"]
