"""Scalar formats must be read exactly as the Go kubelet reads them: a string Go rejects must be
rejected here, and an accepted one must mean the same amount."""

from __future__ import annotations

from decimal import Decimal

import pytest

from rollout.kubeletconfig.catalog import load_catalog, parse_type
from rollout.kubeletconfig.defaults import effective_config
from rollout.kubeletconfig.values import (
    check_eviction_threshold,
    format_go_duration,
    parse_cpuset,
    parse_go_duration,
    parse_quantity,
)

S = 1_000_000_000


@pytest.mark.parametrize(
    ("text", "ns"),
    [
        ("0", 0),
        ("1m", 60 * S),
        ("1m0s", 60 * S),
        ("1h2m3s", 3723 * S),
        ("100ms", S // 10),
        ("1.5s", 3 * S // 2),
        (".5s", S // 2),
        ("1us", 1000),
        ("1µs", 1000),
        ("-2s", -2 * S),
        ("2h45m", (2 * 3600 + 45 * 60) * S),
    ],
    ids=lambda v: repr(v),
)
def test_go_duration_parses(text: str, ns: int) -> None:
    assert parse_go_duration(text) == ns


@pytest.mark.parametrize("text", ["", "10", "1 minute", "1d", "1m 30s", "s", ".s", "1.2.3s", "1M"])
def test_go_duration_rejects_what_go_rejects(text: str) -> None:
    with pytest.raises(ValueError):
        parse_go_duration(text)


@pytest.mark.parametrize(
    ("ns", "text"),
    [
        (0, "0s"),
        (60 * S, "1m0s"),
        (4 * 3600 * S, "4h0m0s"),
        (S // 10, "100ms"),
        (1500, "1.5µs"),
        (30 * S, "30s"),
        (90 * S + S // 2, "1m30.5s"),
    ],
)
def test_go_duration_formats_like_go(ns: int, text: str) -> None:
    assert format_go_duration(ns) == text
    assert parse_go_duration(text) == ns


@pytest.mark.parametrize(
    ("text", "value"),
    [
        ("10Mi", Decimal(10 * 2**20)),
        ("1Gi", Decimal(2**30)),
        ("500m", Decimal("0.5")),
        ("2", Decimal(2)),
        ("1e3", Decimal(1000)),
        ("1.5k", Decimal(1500)),
        ("-1", Decimal(-1)),
        (3, Decimal(3)),
    ],
)
def test_quantity_parses(text: str | int, value: Decimal) -> None:
    assert parse_quantity(text) == value


@pytest.mark.parametrize("text", ["", "10MB", "1 Gi", "lots", "1..2", "Mi"])
def test_quantity_rejects_bad_strings(text: str) -> None:
    with pytest.raises(ValueError):
        parse_quantity(text)


VALID_QUANTITIES = ["10Mi", "1Gi", "1.5Gi", "500m", "0.1", ".5", "5.", "+5", "-5Mi", "1e3", "1E3",
                    "1e-3", "100n", "250u", "2k", "3M", "4G", "5T", "6P", "7E", "1Ki", "1Ti", "1e999999999"]


@pytest.mark.parametrize("text", VALID_QUANTITIES)
def test_quantity_agrees_with_the_kubernetes_client_on_valid_quantities(text: str) -> None:
    from kubernetes.utils import parse_quantity as client_parse_quantity  # tests may import it

    assert parse_quantity(text) == client_parse_quantity(text)


@pytest.mark.parametrize(
    "text",
    [
        pytest.param("1K", id="upper-case K is not an SI suffix in ParseQuantity"),
        pytest.param("NaN", id="NaN"),
        pytest.param("Infinity", id="Infinity"),
        pytest.param("1_000", id="Python digit separators"),
        pytest.param(" 5", id="surrounding spaces"),
        pytest.param("1.5e3Mi", id="an exponent and a suffix together"),
        pytest.param("1e2147483648", id="an exponent beyond 32 bits"),
    ],
)
def test_quantity_refuses_what_the_kubernetes_client_wrongly_accepts(text: str) -> None:
    """Why values.py keeps its own parser: the client's is looser than the kubelet's."""
    from kubernetes.utils import parse_quantity as client_parse_quantity

    client_parse_quantity(text)  # accepted by the client library...
    with pytest.raises(ValueError):
        parse_quantity(text)  # ...but the kubelet (apimachinery ParseQuantity) refuses it


@pytest.mark.parametrize(
    "text",
    [
        pytest.param("9" * 30 + "h", id="longer than an int64 of nanoseconds"),
        pytest.param("-" + "9" * 30 + "h", id="negative and too long"),
    ],
)
def test_go_duration_out_of_range_is_refused_as_go_does(text: str) -> None:
    with pytest.raises(ValueError, match="292 years"):
        parse_go_duration(text)


def test_cpuset_refuses_ids_no_node_has_instead_of_building_them() -> None:
    with pytest.raises(ValueError, match="above 65535"):
        parse_cpuset("0-999999999999")


@pytest.mark.parametrize("value", ["100Mi", "10%", "0%", "100%", "5.5%"])
def test_eviction_threshold_accepts(value: str) -> None:
    check_eviction_threshold(value)


@pytest.mark.parametrize("value", ["-1Mi", "0", "101%", "x%", "lots"])
def test_eviction_threshold_rejects(value: str) -> None:
    with pytest.raises(ValueError):
        check_eviction_threshold(value)


def test_minimum_reclaim_may_be_zero() -> None:
    check_eviction_threshold("0", allow_zero=True)
    with pytest.raises(ValueError):
        check_eviction_threshold("-1Mi", allow_zero=True)


def test_cpuset() -> None:
    assert parse_cpuset("0-2,5") == frozenset({0, 1, 2, 5})
    assert parse_cpuset("") == frozenset()
    for bad in ("2-1", "a", "1,,2", "-1"):
        with pytest.raises(ValueError):
            parse_cpuset(bad)


def test_catalog_types_parse() -> None:
    assert parse_type("map<string, list<string>>").item.kind == "list"  # type: ignore[union-attr]
    catalog = load_catalog()
    assert len(catalog.fields) > 100
    assert catalog.lookup(("authentication", "webhook", "enabled")).pointer  # type: ignore[union-attr]
    assert catalog.field("kubeletCgroups").dkc_warning == "reboot"  # type: ignore[union-attr]
    assert catalog.field("podCIDR").dkc_warning == "keep_empty"  # type: ignore[union-attr]
    assert catalog.gates["DynamicKubeletConfig"].default is False


@pytest.mark.parametrize(
    ("doc", "field", "value"),
    [
        ({}, "maxPods", 110),
        ({"maxPods": 0}, "maxPods", 110),
        ({"registryPullQPS": 0}, "registryPullQPS", 0),
        ({}, "registryPullQPS", 5),
        ({}, "syncFrequency", "1m0s"),
        ({"syncFrequency": "0s"}, "syncFrequency", "1m0s"),
        ({}, "enforceNodeAllocatable", ["pods"]),
        ({"enforceNodeAllocatable": []}, "enforceNodeAllocatable", []),
        ({"podPidsLimit": -7}, "podPidsLimit", -1),
        ({}, "nodeStatusReportFrequency", "5m0s"),
        ({"nodeStatusUpdateFrequency": "20s"}, "nodeStatusReportFrequency", "20s"),
        ({}, "cpuCFSQuotaPeriod", "100ms"),
    ],
    ids=[
        "omitted gets default",
        "zero means default",
        "pointer keeps explicit zero",
        "omitted pointer gets default",
        "durations in Go form",
        "zero duration means default",
        "omitted list gets default",
        "explicit empty list stays",
        "negative pid limit is -1",
        "report frequency default",
        "report frequency follows explicit update frequency",
        "cfs period default",
    ],
)
def test_defaulting(doc: dict[str, object], field: str, value: object) -> None:
    assert effective_config(doc)[field] == value


def test_defaulting_fills_nested_objects() -> None:
    eff = effective_config({"authentication": {"webhook": {"enabled": False}}})
    assert eff["authentication"]["webhook"] == {"enabled": False, "cacheTTL": "2m0s"}
    assert eff["authentication"]["anonymous"] == {"enabled": False}
    assert eff["authorization"]["mode"] == "Webhook"
    assert eff["logging"]["format"] == "text" and eff["logging"]["flushFrequency"] == 5_000_000_000


def test_model_covers_every_catalog_field() -> None:
    from rollout.kubeletconfig import kubelet_configuration_model

    model = kubelet_configuration_model()
    aliases = {f.alias for f in model.model_fields.values()}
    assert aliases == {f.name for f in load_catalog().fields} | {"kind", "apiVersion"}
