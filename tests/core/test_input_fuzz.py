"""Fuzzing the input boundary: generated bad configs and policies never crash and never hang.

For every input the outcome is one of two: a valid config/policy, or an ``InputError``
(``ConfigError``/``PolicyError``) that names the file. Any other exception is a bug, and so is an
input that keeps the CPU busy: each example runs under a CPU-time deadline (``ITIMER_VIRTUAL``,
so other work on a shared machine does not count, and pytest-timeout's wall-clock alarm is left
alone), and the slowest example must stay under 2 s of CPU.

Two sources of inputs:
- explicit corpora of structured mutations (``tests/input_mutations.py``: deleted keys, type
  swaps, extreme scalars, huge numbers, deep nesting, alias bombs, complex keys, YAML-only types,
  binary files, non-UTF-8, empty, multi-document, truncation, 1 MiB+ and 10 MB files), 1,000
  configs and 300 policies, reproducible from a fixed seed;
- hypothesis: any JSON-shaped value in any field (lists for maps, maps for strings, floats, huge
  ints, None), and raw bytes.
"""

from __future__ import annotations

import json
import signal
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import input_mutations as im
import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from rollout.errors import InputError
from rollout.kubeletconfig import dkc_refusals, export_from_configz, load_catalog, load_config, validate_config
from rollout.policy import DEFAULT_POLICY_DIR, RolloutPolicy, load_policy_text
from tests.conftest import examples

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
CPU_DEADLINE_S = 10.0  # a hang guard, far above the slowest example
SLOWEST_ALLOWED_S = 2.0
NOW = datetime(2026, 3, 29, 0, 30, tzinfo=timezone.utc)  # a DST change night in Europe

WINDOWS_POLICY = """
name: windows
steps: [1, "50%", "100%"]
nodes: {selector: "role=worker,pool in (a, b)", matchLabels: {zone: a}}
approval: {after: [0], timeout: 1h}
maintenanceWindows:
  timezone: Europe/Berlin
  windows:
    - {days: [mon, fri], start: "22:00", end: "02:00"}
    - {cron: "30 2 * * sun", duration: 2h}
    - {cron: "*/15 9-11 1,15 * mon-fri", duration: 10m}
allowFields: [cgroupDriver]
"""


class _Hang(Exception):
    pass


@contextmanager
def cpu_deadline(seconds: float, what: str) -> Iterator[None]:
    """Raise ``_Hang`` when the block has used ``seconds`` of CPU (not wall-clock) time."""

    def expire(signum: int, frame: Any) -> None:
        raise _Hang(f"{what} used more than {seconds} s of CPU")

    previous = signal.signal(signal.SIGVTALRM, expire)
    signal.setitimer(signal.ITIMER_VIRTUAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_VIRTUAL, 0)
        signal.signal(signal.SIGVTALRM, previous)


def outcome(check: Callable[[bytes], object], data: bytes, what: str) -> tuple[str, float]:
    """``valid`` or the InputError's class name, and the CPU seconds it took; anything else fails."""
    start = time.thread_time()  # this thread's: a worker's other threads (a fixture's cluster) are not the input's
    with cpu_deadline(CPU_DEADLINE_S, what):
        try:
            check(data)
            result = "valid"
        except InputError as exc:
            assert str(exc), what
            result = type(exc).__name__
    return result, time.thread_time() - start


def check_config(data: bytes) -> None:
    validate_config(data)  # never raises
    load_config(data, origin="fuzz.yaml")  # the config, or ConfigValidationError (an InputError)


def check_policy(data: bytes) -> None:
    policy = load_policy_text(data, source="fuzz.yaml")
    policy.in_window(NOW)
    policy.next_window(NOW)
    assert load_policy_text(yaml.safe_dump(policy.dump()), source="fuzz.yaml") == policy


def config_seeds() -> list[tuple[dict[str, Any], str]]:
    texts = [(FIXTURES / "configs" / n).read_text() for n in ("good.yaml", "good-kubeadm-1.23.yaml", "good.json")]
    configz = json.loads((FIXTURES / "configs" / "configz-node.json").read_text())
    texts.append(yaml.safe_dump(export_from_configz(configz), sort_keys=False))
    return [(yaml.safe_load(t), t) for t in texts]


def policy_seeds() -> list[tuple[dict[str, Any], str]]:
    texts = [p.read_text() for p in sorted(DEFAULT_POLICY_DIR.glob("*.yaml"))] + [WINDOWS_POLICY] * 2
    return [(yaml.safe_load(t), t) for t in texts]


def run_corpus(check: Callable[[bytes], object], corpus: list[tuple[str, bytes]]) -> dict[str, int]:
    seen: dict[str, int] = {}
    slowest = (0.0, "")
    for i, (name, data) in enumerate(corpus):
        what = f"example {i} ({name}, {len(data)} bytes)"
        result, cpu = outcome(check, data, what)
        seen[result] = seen.get(result, 0) + 1
        slowest = max(slowest, (cpu, what))
    assert slowest[0] < SLOWEST_ALLOWED_S, f"slowest: {slowest[1]} took {slowest[0]:.2f} s of CPU"
    return seen


@pytest.mark.slow  # a thousand whole validations: `make test` only
@pytest.mark.timeout(600)  # 240 s ran out on a loaded 2-CPU machine (ci-30: CPU-bound, every worker busy)
def test_a_thousand_mutated_configs_are_valid_or_one_input_error() -> None:
    corpus = im.corpus(config_seeds(), 1000, seed=7)
    assert {name for name, _ in corpus} >= set(im.MUTATIONS) | set(im.RARE)
    seen = run_corpus(check_config, corpus)
    assert seen.get("ConfigValidationError", 0) > 500 and seen.get("valid", 0) > 20, seen


@pytest.mark.timeout(120)
def test_three_hundred_mutated_policies_are_valid_or_one_input_error() -> None:
    seen = run_corpus(check_policy, im.corpus(policy_seeds(), 300, seed=7))
    assert seen.get("PolicyError", 0) > 150 and seen.get("valid", 0) > 10, seen


# ----------------------------------------------------------------------------------- hypothesis

def json_values() -> st.SearchStrategy[Any]:
    """Any JSON-shaped value, with the numbers that break naive code."""
    scalars = (
        st.none()
        | st.booleans()
        | st.integers()
        | st.integers(min_value=2**31 - 2, max_value=2**70)
        | st.floats(allow_nan=False, allow_infinity=False)
        | st.text(max_size=30)
        | st.sampled_from(im.EXTREME_SCALARS)
    )
    return st.recursive(
        scalars,
        lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=12), inner, max_size=4),
        max_leaves=12,
    )


def _config_paths() -> list[tuple[str, ...]]:
    out: list[tuple[str, ...]] = []
    for spec in load_catalog().fields:
        out.append((spec.name,))
        out += [(spec.name, child.name) for child in spec.children]
    return out + [("kind",), ("apiVersion",), ("evictionHard", "memory.available"), ("featureGates", "CPUManager")]


def _put(doc: dict[str, Any], path: tuple[str, ...], value: Any) -> dict[str, Any]:
    doc = json.loads(json.dumps(doc))
    here = doc
    for part in path[:-1]:
        if not isinstance(here.get(part), dict):
            here[part] = {}
        here = here[part]
    here[path[-1]] = value
    return doc


_GOOD_CONFIG = yaml.safe_load((FIXTURES / "configs" / "good.yaml").read_text())
_GOOD_POLICY = yaml.safe_load(WINDOWS_POLICY)
_POLICY_PATHS = [
    *((name,) for name in RolloutPolicy.model_fields),
    ("steps",), ("nodes", "selector"), ("nodes", "matchLabels"), ("nodes", "excludeNames"),
    ("done", "until"), ("done", "soak"), ("approval", "after"), ("approval", "timeout"),
    ("maintenanceWindows", "timezone"), ("maintenanceWindows", "windows"),
]
# no wall-clock deadline: on a loaded machine an example took 2.7 s of wall; the CPU-time deadline
# of `outcome` is the hang guard
FUZZ = settings(max_examples=examples(300), deadline=None, suppress_health_check=[HealthCheck.too_slow])


def _text(doc: Any, as_json: bool) -> bytes:
    return (json.dumps(doc) if as_json else yaml.safe_dump(doc)).encode()


@pytest.mark.timeout(120)
@FUZZ
@given(path=st.sampled_from(_config_paths()), value=json_values(), as_json=st.booleans())
def test_any_json_value_in_any_config_field_is_a_problem_never_an_exception(
    path: tuple[str, ...], value: Any, as_json: bool
) -> None:
    data = _text(_put(_GOOD_CONFIG, path, value), as_json)
    outcome(check_config, data, f"{'.'.join(path)} = {value!r:.80}")


@pytest.mark.timeout(120)
@FUZZ
@given(
    path=st.sampled_from(_POLICY_PATHS + [("maintenanceWindows", "windows", "0")]),
    value=json_values(),
    as_json=st.booleans(),
)
def test_any_json_value_in_any_policy_field_is_a_policy_error_never_an_exception(
    path: tuple[str, ...], value: Any, as_json: bool
) -> None:
    doc = _put(_GOOD_POLICY, path[:2], value) if len(path) < 3 else _window(value)
    outcome(check_policy, _text(doc, as_json), f"{'.'.join(path)} = {value!r:.80}")


def _window(value: Any) -> dict[str, Any]:
    doc = json.loads(json.dumps(_GOOD_POLICY))
    doc["maintenanceWindows"]["windows"][0] = value
    return doc


@pytest.mark.timeout(120)
@settings(max_examples=examples(100), deadline=None)
@given(data=st.binary(max_size=2000) | st.text(max_size=500).map(str.encode))
def test_arbitrary_bytes_are_valid_or_one_input_error(data: bytes) -> None:
    outcome(check_config, data, "config bytes")
    outcome(check_policy, data, "policy bytes")


# --------------------------------------------------------------------------------------- configz

_CONFIGZ = json.loads((FIXTURES / "configs" / "configz-node.json").read_text())


def check_configz(data: bytes) -> None:
    """A node's configz answer: exported (then validated, diffed and reviewed against a good
    config, as plan/diff/start do) or one ConfigzError (an InputError)."""
    running = export_from_configz(data)
    validate_config(json.dumps(running).encode())
    dkc_refusals(_GOOD_CONFIG, allow_fields=(), running={"node-1": running})
    dkc_refusals(running, allow_fields=("cgroupDriver",), running={"node-1": _GOOD_CONFIG})


@pytest.mark.timeout(120)
def test_mutated_configz_answers_export_or_fail_as_one_input_error() -> None:
    seeds = [(_CONFIGZ, json.dumps(_CONFIGZ, indent=1))]
    seen = run_corpus(check_configz, im.corpus(seeds, 150, seed=11))
    assert seen.get("valid", 0) > 10 and seen.get("ConfigzError", 0) > 50, seen


@pytest.mark.timeout(120)
@settings(max_examples=examples(150), deadline=None)
@given(path=st.sampled_from(_config_paths()), value=json_values())
def test_any_json_value_in_configz_exports_to_a_config_that_validates_without_exceptions(
    path: tuple[str, ...], value: Any
) -> None:
    body = _put(_CONFIGZ["kubeletconfig"], path, value)
    outcome(check_configz, json.dumps({"kubeletconfig": body}).encode(), f"configz {'.'.join(path)}")
