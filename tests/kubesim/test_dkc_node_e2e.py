"""Kubernetes' own DKC node e2e (test/e2e_node/dynamic_kubelet_config_test.go, 1.23), replayed on
kubesim: every ``It`` of it, each on a node of its own, with the same cases in the same order.

After every step the e2e checks, as here: the node's ``spec.configSource``, its
``status.config`` (assigned with uid and resourceVersion, active = assigned or lastKnownGood,
lastKnownGood, error), the kubelet's ``kubelet_node_config_*`` metrics read **through the node
proxy** (``/api/v1/nodes/NODE/proxy/metrics``) and parsed by a Prometheus text-format parser,
the running config (configz) and the ``KubeletConfigChanged`` event. The e2e's 12-minute waits
are the trial period plus 20 %, on the module's clock (time scale 120). One deviation: the 100
update stress test changes the config 21 times, not 101 (the same toggling; the e2e looks for
resource leaks across changes, which a simulation does not have).
"""

from __future__ import annotations

import copy
import json
import shutil
import subprocess
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Iterator, Optional

import pytest
from kubernetes import client, config
from kubernetes.client.rest import ApiException
from prometheus_client.parser import text_string_to_metric_families

from kubesim.cluster import Cluster
from tests.kubesim.kubelet_helpers import config_status, node_events, payload, raw_node, wait_for

SCALE = 120.0
TRIAL_S = 600 / SCALE
LKG_WAIT_S = 720 / SCALE  # the e2e's 12 minutes
LOAD = "failed to load config, see Kubelet log for details"
VALIDATE = "failed to validate config, see Kubelet log for details"
DOWNLOAD = "failed to sync: failed to download config, see Kubelet log for details"
BOGUS = "{0xdeadbeef}"
CONFIG_METRICS = ("kubelet_node_config_assigned", "kubelet_node_config_active",
                  "kubelet_node_config_last_known_good", "kubelet_node_config_error")
NODES = ("transitions", "lkg", "lkg-key", "lkg-to-lkg", "stress", "inplace", "inplace-lkg", "recreate", "absent")


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    pools = [{"name": n, "count": 1, "namePrefix": n} for n in NODES]
    path = tmp_path_factory.mktemp("e2e") / "cluster.yaml"
    path.write_text(json.dumps({"apiVersion": "kubesim.kubelet-rollout.io/v1", "kind": "Cluster", "pools": pools}))
    with Cluster(cluster_file=path, time_scale=SCALE, ready_timeout=60) as running:
        yield running


@pytest.fixture(scope="module")
def api(cluster: Cluster) -> client.CoreV1Api:
    return client.CoreV1Api(config.new_client_from_config(str(cluster.kubeconfig)))


# ------------------------------------------------------------------------------ the e2e's case


@dataclass
class Case:
    """``nodeConfigTestCase``: a source to set (and the ConfigMap behind it), what to expect."""

    desc: str
    source: Optional[dict[str, Any]] = None
    cm: Optional[dict[str, Any]] = None  # the ConfigMap as created (metadata.uid/resourceVersion kept current)
    lkg: Optional[dict[str, Any]] = None  # expected lastKnownGood (resolved)
    err: str = ""
    lkg_active: bool = False
    qps: Optional[int] = None  # the running config's eventRecordQPS (the e2e's expectConfig)
    event: bool = False
    apierr: str = ""


def ref(cm: dict[str, Any], key: str = "kubelet") -> dict[str, Any]:
    meta = cm["metadata"]
    return {"configMap": {"namespace": meta["namespace"], "name": meta["name"], "kubeletConfigKey": key}}


def resolved_of(case: Case) -> Optional[dict[str, Any]]:
    if case.source is None or case.cm is None:
        return None
    out = copy.deepcopy(case.source)
    out["configMap"]["uid"] = case.cm["metadata"]["uid"]
    out["configMap"]["resourceVersion"] = case.cm["metadata"]["resourceVersion"]
    return out


def create_cm(api: client.CoreV1Api, name: str, data: dict[str, str]) -> dict[str, Any]:
    api.create_namespaced_config_map("kube-system", {"metadata": {"name": name}, "data": data})
    return json.loads(api.read_namespaced_config_map(name, "kube-system", _preload_content=False).data)


def kc(qps: int) -> dict[str, str]:
    return {"kubelet": payload(eventRecordQPS=qps)}


def invalid_kc(qps: int) -> dict[str, str]:
    return {"kubelet": payload(eventRecordQPS=qps, kubeAPIQPS=-1)}


# ------------------------------------------------------------------------------ what run() does


Setter = Callable[[client.CoreV1Api, str, Case], None]


def set_source(api: client.CoreV1Api, node: str, case: Case) -> None:
    """``setNodeConfigSource``: GET the node, set the source, UPDATE (retried on a conflict)."""
    for _ in range(10):
        body = raw_node(api, node)
        body.setdefault("spec", {})["configSource"] = case.source
        if case.source is None:
            body["spec"].pop("configSource")
        try:  # raw: the generated client would refuse the e2e's invalid sources before sending them
            raw_put(api, f"/api/v1/nodes/{node}", body)
            return
        except ApiException as exc:
            if exc.status != 409:
                raise
    raise AssertionError(f"{case.desc}: the node kept changing under the update")


def raw_put(api: client.CoreV1Api, path: str, body: dict[str, Any]) -> None:
    method, url, headers, data, _ = api.api_client.param_serialize(
        "PUT", path, header_params={"Content-Type": "application/json"}, body=body, auth_settings=["BearerToken"])
    response = api.api_client.call_api(method, url, header_params=headers, body=data)
    if response.status >= 400:
        raise ApiException(status=response.status, reason=response.read().decode())


def update_cm(api: client.CoreV1Api, node: str, case: Case) -> None:
    assert case.cm is not None
    meta = case.cm["metadata"]
    body = {"metadata": {"name": meta["name"], "namespace": meta["namespace"]}, "data": case.cm["data"]}
    updated = api.replace_namespaced_config_map(meta["name"], meta["namespace"], body)
    meta["resourceVersion"] = updated.metadata.resource_version


def delete_cm(api: client.CoreV1Api, node: str, case: Case) -> None:
    assert case.cm is not None
    api.delete_namespaced_config_map(case.cm["metadata"]["name"], "kube-system")


def create_again(api: client.CoreV1Api, node: str, case: Case) -> None:
    assert case.cm is not None
    meta = case.cm["metadata"]
    made = create_cm(api, meta["name"], case.cm["data"])
    meta["uid"], meta["resourceVersion"] = made["metadata"]["uid"], made["metadata"]["resourceVersion"]


def recreate_cm(api: client.CoreV1Api, node: str, case: Case) -> None:
    try:
        delete_cm(api, node, case)
    except ApiException as exc:
        if exc.status != 404:
            raise
    create_again(api, node, case)


def run(api: client.CoreV1Api, node: str, case: Case, setter: Setter, *, expect_event: bool, wait: float = 0) -> None:
    events_before = len(node_events(api, node, "KubeletConfigChanged"))
    try:
        setter(api, node, case)
        assert not case.apierr, f"{case.desc}: expected an API error containing {case.apierr!r}"
    except ApiException as exc:
        said = str(exc.body or exc.reason)
        assert case.apierr and case.apierr in said, f"{case.desc}: {said}"
        return
    time.sleep(wait)
    wait_for(lambda: (raw_node(api, node).get("spec") or {}).get("configSource") == case.source, timeout=10,
             what=f"{case.desc}: spec.configSource")
    wait_for(lambda: config_status(api, node) == expected_status(case), timeout=20,
             what=f"{case.desc}: status.config == {expected_status(case)}")
    wait_for(lambda: config_metrics(api, node) == expected_metrics(case), timeout=20,
             what=f"{case.desc}: kubelet_node_config_* == {expected_metrics(case)}")
    if case.qps is not None:
        wait_for(lambda: configz(api, node).get("eventRecordQPS") == case.qps, timeout=20, what=f"{case.desc}: configz")
    if expect_event:
        wait_for(lambda: last_event(api, node, events_before) == event_message(case), timeout=20,
                 what=f"{case.desc}: KubeletConfigChanged event")


def both_directions(api: client.CoreV1Api, node: str, setter: Setter, first: Case, cases: list[Case],
                    wait_after_first: float = 0) -> None:
    """``testBothDirections``: first, then for each case there and back again."""
    run(api, node, first, setter, expect_event=False, wait=wait_after_first)
    for case in cases:
        run(api, node, case, setter, expect_event=case.event)
        run(api, node, first, setter, expect_event=first.event and case.event)


def expected_status(case: Case) -> dict[str, Any]:
    assigned = resolved_of(case)
    active = case.lkg if case.lkg_active else assigned
    out = {k: v for k, v in (("assigned", assigned), ("active", active), ("lastKnownGood", case.lkg)) if v}
    if case.err:
        out["error"] = case.err
    return out


def _sample(source: Optional[dict[str, Any]]) -> dict[str, str]:
    if source is None:
        return {"node_config_source": "local", "node_config_uid": "", "node_config_resource_version": "",
                "node_config_kubelet_key": ""}
    cm = source["configMap"]
    return {"node_config_source": f"/api/v1/namespaces/{cm['namespace']}/configmaps/{cm['name']}",
            "node_config_uid": cm["uid"], "node_config_resource_version": cm["resourceVersion"],
            "node_config_kubelet_key": cm["kubeletConfigKey"]}


def expected_metrics(case: Case) -> dict[str, list[tuple[dict[str, str], float]]]:
    """``checkConfigMetrics``: one sample per gauge, local when no source, the error as 0/1."""
    assigned = resolved_of(case)
    active = case.lkg if case.lkg_active else assigned
    return {
        "kubelet_node_config_assigned": [(_sample(assigned), 1.0)],
        "kubelet_node_config_active": [(_sample(active), 1.0)],
        "kubelet_node_config_last_known_good": [(_sample(case.lkg), 1.0)],
        "kubelet_node_config_error": [({}, 1.0 if case.err else 0.0)],
    }


def metrics_text(api: client.CoreV1Api, node: str) -> str:
    return str(api.connect_get_node_proxy_with_path(node, "metrics"))


def config_metrics(api: client.CoreV1Api, node: str) -> dict[str, list[tuple[dict[str, str], float]]]:
    families = text_string_to_metric_families(metrics_text(api, node))
    return {f.name: [(dict(s.labels), s.value) for s in f.samples] for f in families if f.name in CONFIG_METRICS}


def configz(api: client.CoreV1Api, node: str) -> dict[str, Any]:
    response = api.connect_get_node_proxy_with_path(node, "configz", _preload_content=False)
    return dict(json.loads(response.data)["kubeletconfig"])


def last_event(api: client.CoreV1Api, node: str, before: int) -> str:
    events = node_events(api, node, "KubeletConfigChanged")
    return str(events[-1]["message"]) if len(events) > before else ""


def event_message(case: Case) -> str:
    source = resolved_of(case)
    if source is None:
        return "Kubelet restarting to use local config"
    cm = source["configMap"]
    return (f"Kubelet restarting to use /api/v1/namespaces/{cm['namespace']}/configmaps/{cm['name']}, "
            f"UID: {cm['uid']}, ResourceVersion: {cm['resourceVersion']}, KubeletConfigKey: {cm['kubeletConfigKey']}")


LOCAL_QPS = 5  # the local config's eventRecordQPS (the v1beta1 default): the e2e's localKC


@pytest.fixture
def reset(api: client.CoreV1Api) -> Callable[[str], None]:
    """The e2e's BeforeEach: reset the node via a nil config source (a clean slate)."""

    def go(node: str) -> None:
        run(api, node, Case("reset via nil config source"), set_source, expect_event=False)

    return go


# ------------------------------------------------------------------------------ the e2e's Its


def test_update_node_config_source_state_transitions(api: client.CoreV1Api, reset: Callable[[str], None]) -> None:
    node = "transitions1"
    reset(node)
    correct = create_cm(api, "e2e-correct", kc(7))
    fail_parse = create_cm(api, "e2e-fail-parse", {"kubelet": BOGUS})
    fail_validate = create_cm(api, "e2e-fail-validate", invalid_kc(7))
    cases = [
        Case("Node.Spec.ConfigSource is nil", event=True, qps=LOCAL_QPS),
        Case("all nil subfields", source={}, apierr="exactly one reference subfield must be non-nil"),
        Case("missing namespace", source={"configMap": {"name": "bar", "kubeletConfigKey": "kubelet"}},
             apierr="spec.configSource.configMap.namespace: Required value: namespace must be set"),
        Case("missing name", source={"configMap": {"namespace": "foo", "kubeletConfigKey": "kubelet"}},
             apierr="spec.configSource.configMap.name: Required value: name must be set"),
        Case("missing kubeletConfigKey", source={"configMap": {"namespace": "foo", "name": "bar"}},
             apierr="spec.configSource.configMap.kubeletConfigKey: Required value: kubeletConfigKey must be set"),
        Case("uid illegally specified", source={"configMap": {"uid": "foo", "name": "bar", "namespace": "baz",
                                                              "kubeletConfigKey": "kubelet"}},
             apierr="spec.configSource.configMap.uid: Forbidden: uid must not be set in spec"),
        Case("resourceVersion illegally specified",
             source={"configMap": {"resourceVersion": "1", "name": "bar", "namespace": "baz",
                                   "kubeletConfigKey": "kubelet"}},
             apierr="spec.configSource.configMap.resourceVersion: Forbidden: resourceVersion must not be set in spec"),
        Case("invalid namespace", source={"configMap": {"name": "bar", "namespace": "../baz",
                                                        "kubeletConfigKey": "kubelet"}},
             apierr="spec.configSource.configMap.namespace: Invalid value"),
        Case("invalid name", source={"configMap": {"name": "../bar", "namespace": "baz", "kubeletConfigKey": "kubelet"}},
             apierr="spec.configSource.configMap.name: Invalid value"),
        Case("invalid kubeletConfigKey", source={"configMap": {"name": "bar", "namespace": "baz",
                                                               "kubeletConfigKey": "../qux"}},
             apierr="spec.configSource.configMap.kubeletConfigKey: Invalid value"),
        Case("correct", source=ref(correct), cm=correct, qps=7, event=True),
        Case("fail-parse", source=ref(fail_parse), cm=fail_parse, err=LOAD, lkg_active=True, qps=LOCAL_QPS,
             event=True),
        Case("fail-validate", source=ref(fail_validate), cm=fail_validate, err=VALIDATE, lkg_active=True,
             qps=LOCAL_QPS, event=True),
    ]
    for i in range(1, len(cases) + 1):
        both_directions(api, node, set_source, cases[i - 1], cases[i:])


@pytest.mark.parametrize("by_key", [False, True], ids=["configmap", "kubelet-config-key"])
def test_update_node_config_source_recover_to_last_known_good(api: client.CoreV1Api, reset: Callable[[str], None],
                                                              by_key: bool) -> None:
    node = "lkg-key1" if by_key else "lkg1"
    reset(node)
    if by_key:
        combined = create_cm(api, "e2e-combined", {**kc(8), "bad": BOGUS})
        lkg_cm, bad_cm, bad_source = combined, combined, ref(combined, key="bad")
    else:
        lkg_cm = create_cm(api, "e2e-intended-lkg", kc(8))
        bad_cm = create_cm(api, "e2e-bad", {"kubelet": BOGUS})
        bad_source = ref(bad_cm)
    lkg_status = resolved_of(Case("", source=ref(lkg_cm), cm=lkg_cm))
    first = Case("intended last-known-good", source=ref(lkg_cm), cm=lkg_cm, lkg=lkg_status, qps=8, event=True)
    bad = Case("bad config", source=bad_source, cm=bad_cm, lkg=lkg_status, err=LOAD, lkg_active=True, qps=8,
               event=True)
    both_directions(api, node, set_source, first, [bad], LKG_WAIT_S)


def test_update_node_config_source_non_nil_lkg_to_a_new_non_nil_lkg(api: client.CoreV1Api,
                                                                     reset: Callable[[str], None]) -> None:
    node = "lkg-to-lkg1"
    reset(node)
    cm1, cm2 = create_cm(api, "e2e-lkg-1", kc(9)), create_cm(api, "e2e-lkg-2", kc(9))
    first = Case("last-known-good-1", source=ref(cm1), cm=cm1, qps=9, event=True)
    first.lkg = resolved_of(first)
    second = Case("last-known-good-2", source=ref(cm2), cm=cm2, qps=9, event=True)
    second.lkg = resolved_of(second)
    run(api, node, first, set_source, expect_event=True, wait=LKG_WAIT_S)
    run(api, node, second, set_source, expect_event=True, wait=LKG_WAIT_S)


def test_update_node_config_source_update_stress(api: client.CoreV1Api, reset: Callable[[str], None]) -> None:
    node = "stress1"
    reset(node)
    cm1, cm2 = create_cm(api, "e2e-cm1", kc(10)), create_cm(api, "e2e-cm2", kc(11))
    cases = [Case("cm1", source=ref(cm1), cm=cm1, qps=10, event=True),
             Case("cm2", source=ref(cm2), cm=cm2, qps=11, event=True)]
    for _ in range(10):
        both_directions(api, node, set_source, cases[0], cases[1:])


@pytest.mark.parametrize("setter", [update_cm, recreate_cm], ids=["update-in-place", "delete-and-recreate"])
def test_configmap_changed_under_the_node_state_transitions(api: client.CoreV1Api, reset: Callable[[str], None],
                                                            setter: Setter) -> None:
    node = "inplace1" if setter is update_cm else "recreate1"
    reset(node)
    name = f"e2e-{node}"
    correct = create_cm(api, name, kc(12))
    source = ref(correct)
    run(api, node, Case("initial state (correct)", source=source, cm=correct, qps=12), set_source, expect_event=False)
    shared = correct  # the three cases are versions of one ConfigMap (uid/rv follow it)
    cases = [
        Case("correct", source=source, cm=shared, qps=12, event=True),
        Case("fail-parse", source=source, cm=shared, err=LOAD, lkg_active=True, qps=LOCAL_QPS, event=True),
        Case("fail-validate", source=source, cm=shared, err=VALIDATE, lkg_active=True, qps=LOCAL_QPS, event=True),
    ]
    data = [kc(12), {"kubelet": BOGUS}, invalid_kc(12)]

    def with_data(index: int) -> Setter:
        def go(api: client.CoreV1Api, node: str, case: Case) -> None:
            shared["data"] = data[index]
            setter(api, node, case)
        return go

    for i in range(1, len(cases) + 1):
        run(api, node, cases[i - 1], with_data(i - 1), expect_event=False)
        for j in range(i, len(cases)):
            run(api, node, cases[j], with_data(j), expect_event=cases[j].event)
            run(api, node, cases[i - 1], with_data(i - 1), expect_event=cases[i - 1].event and cases[j].event)


def test_update_configmap_in_place_recover_to_last_known_good(api: client.CoreV1Api,
                                                              reset: Callable[[str], None]) -> None:
    node = "inplace-lkg1"
    reset(node)
    cm = create_cm(api, "e2e-in-place-lkg", kc(13))
    source = ref(cm)
    lkg_status = resolved_of(Case("", source=source, cm=cm))
    run(api, node, Case("initial state (correct)", source=source, cm=cm, qps=13), set_source, expect_event=False)
    good, bad = kc(13), {"kubelet": BOGUS}

    def put(data: dict[str, str]) -> Setter:
        def go(api: client.CoreV1Api, node: str, case: Case) -> None:
            cm["data"] = data
            update_cm(api, node, case)
        return go

    first = Case("intended last-known-good", source=source, cm=cm, lkg=lkg_status, qps=13, event=True)
    run(api, node, first, put(good), expect_event=False, wait=LKG_WAIT_S)
    bad_case = Case("bad config", source=source, cm=cm, lkg=lkg_status, err=LOAD, lkg_active=True, qps=13, event=True)
    run(api, node, bad_case, put(bad), expect_event=True)
    run(api, node, first, put(good), expect_event=True)


def test_delete_and_recreate_configmap_error_while_absent(api: client.CoreV1Api,
                                                          reset: Callable[[str], None]) -> None:
    node = "absent1"
    reset(node)
    cm = create_cm(api, "e2e-delete-create", kc(14))
    source = ref(cm)
    run(api, node, Case("correct", source=source, cm=cm, qps=14), set_source, expect_event=False)
    run(api, node, Case("correct", source=source, cm=cm, err=DOWNLOAD, qps=14), delete_cm, expect_event=False)
    run(api, node, Case("correct", source=source, cm=cm, qps=14), create_again, expect_event=False)


# ------------------------------------------------------------------------------ the text format


def test_metrics_pass_prometheus_text_format_parsers(api: client.CoreV1Api) -> None:
    """Every family parses with prometheus_client's parser, and promtool's linter (the real
    Prometheus parser) finds no format error in it."""
    text = metrics_text(api, "transitions1")
    names = {f.name for f in text_string_to_metric_families(text)}
    assert {"kubelet_running_pods", "kubelet_pod_start_duration_seconds",
            "kubelet_pleg_relist_duration_seconds", "kube_pod_container_status_restarts", *CONFIG_METRICS} <= names
    promtool = shutil.which("promtool")
    assert promtool is not None, "promtool is not installed (make system-deps installs Debian's prometheus)"
    checked = subprocess.run([promtool, "check", "metrics"], input=text, capture_output=True, text=True, timeout=30)
    # the linter's style remarks (counter names without _total are the kubelet's own) are not errors
    assert "error while linting" not in checked.stderr + checked.stdout, checked.stderr
