"""`rollout drift` on kubesim, as a person runs it: after a completed rollout, nodes are made to
drift the ways the field does (a configSource reassigned by hand on 1.23; on 1.31 a drop-in
edited by hand, a foreign drop-in read after ours, a node re-created from an old image), and
`rollout drift` names exactly those nodes and fields (exit 1, an Event on each), `--fix` brings
back what a rollout can, and drift then exits 0. Through the real client, the real agent code
and the CLI (``CliRunner``), nothing mocked."""

from __future__ import annotations

import json
import shutil
import sys
import time
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import pytest
import scenario as sc
import yaml
from typer.testing import CliRunner

from rollout_cli.contract import validator
from rollout_cli.main import app

sys.path.insert(0, str(Path(__file__).resolve().parent))
from test_modern import Agents, _node_event_messages, agent_cluster, dropin, modern_cluster_file  # noqa: E402

pytestmark = [pytest.mark.usefixtures("prefect_api"), pytest.mark.slow]
runner = CliRunner()


def cli(*args: str, code: int) -> str:
    result = runner.invoke(app, list(args), env={"COLUMNS": "250"}, catch_exceptions=False)
    assert result.exit_code == code, result.output
    return result.output


def drift_json(kc: str, *more: str, code: int) -> dict[str, Any]:
    result = runner.invoke(app, ["drift", "--kubeconfig", kc, "-o", "json", *more], catch_exceptions=False)
    assert result.exit_code == code, result.output
    data = json.loads(result.stdout)
    validator("drift").validate(data)
    return data


def by_node(data: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {n["node"]: n for n in data["nodes"]}


def wait(what: str, check: Any, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.3)


def test_a_configsource_reassigned_by_hand_on_a_dkc_node_is_drift_and_fix_brings_it_back(tmp_path: Path) -> None:
    with sc.cluster(tmp_path, general=3) as c:
        gw, kc = sc.gateway(c), str(c.kubeconfig)
        pol = tmp_path / "policy.yaml"
        pol.write_text(sc.policy(steps=[1, "100%"], maxUnavailable=3))
        good, other = tmp_path / "good.yaml", tmp_path / "other.yaml"
        good.write_text(sc.config_text(gw, maxPods=71))
        other.write_text(sc.config_text(gw, maxPods=72))
        # before any rollout every node is unmanaged: nothing to compare, exit 0
        before = drift_json(kc, code=0)
        assert before["counts"]["unmanaged"] == len(before["nodes"]) and before["ok"] is True
        cli("start", "--config", str(good), "--policy", str(pol), "--name", "r1", "--kubeconfig", kc, code=0)
        assert drift_json(kc, code=0)["counts"]["drifted"] == 0

        # a person points node-2's kubelet at another ConfigMap by hand
        published = json.loads(cli("publish", "--config", str(other), "--kubeconfig", kc, "-o", "json", code=0))
        workers = sc.workers(gw)
        victim = workers[1]
        gw.core.patch_node(victim, {"spec": {"configSource": {"configMap": {
            "namespace": "kube-system", "name": published["name"], "kubeletConfigKey": "kubelet"}}}})
        wait("the kubelet on the other config", lambda: sc.configz_field(gw, victim, "maxPods") == 72)

        data = drift_json(kc, code=1)
        nodes = by_node(data)
        assert {n for n, r in nodes.items() if r["state"] == "drifted"} == {victim}
        fields = {f["field"]: (f["expected"], f["running"]) for f in nodes[victim]["fields"]}
        target = sc.journal(gw, "r1").target
        assert fields == {"spec.configSource": (f"kube-system/{target.name}", f"kube-system/{published['name']}"),
                          "maxPods": (71, 72)}
        assert nodes[victim]["rollout"] == "r1" and all(nodes[n]["state"] == "in-sync" for n in workers if n != victim)
        assert sc.node_events(c, "KubeletConfigDrift").get(victim, 0) >= 1
        table = cli("drift", "--kubeconfig", kc, "--no-events", code=1)
        assert victim in table and "spec.configSource" in table and "drifted" in table

        # the scheduled watch (the `drift` deployment's flow): a Prefect event per drifted node
        from flows.drift_flow import kubelet_config_drift

        since = datetime.now(timezone.utc)
        watched = kubelet_config_drift(policy=str(pol), kubeconfig=kc, events=False)
        assert [n["node"] for n in watched["drifted"]] == [victim] and watched["counts"]["drifted"] == 1
        emitted = sc.prefect_events(f"kubelet-rollout.node.{victim}", expect={"kubelet-rollout.node.drifted"},
                                    since=since)
        drifted_event = next(e for e in emitted if e["event"] == "kubelet-rollout.node.drifted")
        assert drifted_event["resource"]["kubelet-rollout.rollout"] == "r1"
        assert {f["field"] for f in drifted_event["payload"]["fields"]} == {"spec.configSource", "maxPods"}

        cli("drift", "--fix", "--policy", str(pol), "--kubeconfig", kc, code=0)
        after = drift_json(kc, code=0)
        fixed = by_node(after)[victim]
        assert fixed["state"] == "in-sync" and fixed["rollout"].startswith("drift-fix-"), fixed
        assert set(sc.journal(gw, fixed["rollout"]).plan.nodes) == {victim}  # the drifted node only
        assert sc.configz_field(gw, victim, "maxPods") == 71


@pytest.fixture
def modern(tmp_path: Path) -> Any:
    with agent_cluster(tmp_path, modern_cluster_file(general=4)) as running:
        yield running


def restart_kubelet(c: Any, node: str, gw: Any, field: str, value: Any) -> None:
    c.host(node).systemctl("restart", "kubelet")
    wait(f"{node}'s kubelet running {field}={value}", lambda: _configz(gw, node, field) == value, timeout=90)


def _configz(gw: Any, node: str, field: str) -> Any:
    try:
        return sc.configz_field(gw, node, field)
    except Exception:  # noqa: BLE001 - the kubelet restarting
        return None


def test_drift_on_drop_in_nodes_edited_overridden_and_recreated(modern: Any, tmp_path: Path) -> None:
    """After a completed drop-in rollout (maxPods 150, evictionHard memory.available 500Mi):
    (a) a node whose drop-in is edited by hand, (b) one where a later foreign drop-in overrides a
    field, (c) one re-created from an old image (the base config, none of our files): drift names
    exactly those nodes and fields, exit 1. --fix rolls the proved config out again to all three:
    on (b) its agent sets the overriding file aside (the fix's ConfigMap takes precedence; a plain
    `start` would be refused there), naming it; drift then exits 0."""
    c, agents = modern
    gw, kc = sc.gateway(c), str(c.kubeconfig)
    general = agents.start_pool("general")
    pol = tmp_path / "policy.yaml"
    pol.write_text(sc.policy(steps=[1, "100%"], maxUnavailable=4, nodes={"selector": "kubesim.kubelet-rollout.io/pool=general"},
                             progressDeadline="3m"))
    config = tmp_path / "dropin.yaml"
    config.write_text(dropin(maxPods=150, evictionHard={"memory.available": "500Mi"}))
    cli("start", "--config", str(config), "--policy", str(pol), "--name", "maxpods-150", "--kubeconfig", kc, code=0)
    assert drift_json(kc, "-p", str(pol), code=0)["counts"] == {"in-sync": 4, "drifted": 0, "unmanaged": 0,
                                                                 "unreachable": 0}
    edited, overridden, recreated, untouched = general

    # (a) the drop-in edited by hand, the kubelet restarted
    ours = agents.root(edited) / "etc/kubernetes/kubelet.conf.d/90-kubelet-rollout.conf"
    doc = yaml.safe_load(ours.read_text())
    ours.write_text(yaml.safe_dump({**doc, "maxPods": 120}))
    restart_kubelet(c, edited, gw, "maxPods", 120)
    # (b) another tool's drop-in, read after ours, sets a field of ours
    foreign = agents.root(overridden) / "etc/kubernetes/kubelet.conf.d/99-other.conf"
    foreign.write_text(yaml.safe_dump({"apiVersion": "kubelet.config.k8s.io/v1beta1", "kind": "KubeletConfiguration",
                                       "evictionHard": {"memory.available": "200Mi"}}))
    restart_kubelet(c, overridden, gw, "evictionHard", {**(_configz(gw, overridden, "evictionHard") or {}),
                                                        "memory.available": "200Mi"})
    wait("the agent advertising the foreign drop-in",
         lambda: "99-other.conf" in sc.nodes(gw)[overridden].annotations.get("kubelet-rollout.io/agent", ""))
    # (c) re-created from an old image: the Node object deleted, the host back to its base config
    agents.stop(recreated)
    gw.core.delete_node(recreated)
    root = agents.root(recreated)
    (root / "etc/kubernetes/kubelet.conf.d/90-kubelet-rollout.conf").unlink()
    shutil.rmtree(root / "var/lib/kubelet-rollout")
    (root / "var/lib/kubelet-rollout").mkdir()
    restart_kubelet(c, recreated, gw, "maxPods", 110)
    wait("the re-created node registered", lambda: recreated in sc.nodes(gw))
    agents.start(recreated)
    wait("its agent advertised", lambda: sc.nodes(gw)[recreated].backend == "agent")

    data = drift_json(kc, "-p", str(pol), code=1)
    nodes = by_node(data)
    drifted = {n: {f["field"]: (f["expected"], f["running"], f["overridden_by"]) for f in r["fields"]}
               for n, r in nodes.items() if r["state"] == "drifted"}
    assert drifted == {
        edited: {"maxPods": (150, 120, None)},
        overridden: {"evictionHard.memory.available": ("500Mi", "200Mi", "99-other.conf")},
        recreated: {"maxPods": (150, 110, None), "evictionHard.memory.available": ("500Mi", "100Mi", None)},
    }, drifted
    assert nodes[untouched]["state"] == "in-sync" and data["events"] == 3
    assert set(sc.node_events(c, "KubeletConfigDrift")) == {edited, overridden, recreated}

    fixing = runner.invoke(app, ["drift", "--fix", "-p", str(pol), "--kubeconfig", kc], env={"COLUMNS": "250"},
                           catch_exceptions=False)
    assert fixing.exit_code == 0, fixing.output
    assert f"{overridden}: its agent sets aside 99-other.conf" in fixing.output, fixing.output
    after = by_node(drift_json(kc, "-p", str(pol), code=0))
    assert all(r["state"] == "in-sync" for r in after.values()), after
    fix = after[edited]["rollout"]
    assert fix.startswith("drift-fix-") and after[recreated]["rollout"] == after[overridden]["rollout"] == fix
    assert after[untouched]["rollout"] == "maxpods-150"  # not touched by the fix
    assert set(sc.journal(gw, fix).plan.nodes) == {edited, overridden, recreated}
    # (b): the foreign file moved into the agent's state dir, whole; the kubelet runs ours again
    assert not foreign.exists()
    aside = agents.root(overridden) / "var/lib/kubelet-rollout/set-aside/99-other.conf"
    assert yaml.safe_load(aside.read_text())["evictionHard"] == {"memory.available": "200Mi"}
    assert (_configz(gw, overridden, "evictionHard") or {}).get("memory.available") == "500Mi"
    said = _node_event_messages(gw, overridden, "KubeletConfigAssigned")
    assert any("setting aside 99-other.conf" in m for m in said), said
