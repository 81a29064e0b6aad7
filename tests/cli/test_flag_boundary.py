"""Every option of every command, with bad values: one clear message and exit 2, before anything
starts; never a traceback; every exit code one of the documented table (``rollout.outcome``).

Property-based (hypothesis) and in process (typer's CliRunner). Each invocation draws a command,
a bad value for one or more of its options (or of its arguments) and good values for the rest;
a few draw only good values. The command must refuse a bad value with exit 2 and a message that
names the option (or the file), having made no connection: the kubeconfig it is given points at a
tripwire, a listener that counts every connection made to it. Good values only: the read-only and
lifecycle commands run for real against one small shared kubesim (their exit code is whatever the
cluster says, from the table); the commands that run a rollout or the demo always get a bad value.

Every option must be in ``BAD`` (and ``GOOD``): a new option without bad values to try fails
``test_every_option_of_every_command_has_bad_values``.
"""

from __future__ import annotations

import math
import socket
import string
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml
from cli_commands import COMMANDS
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from rollout.outcome import ENDINGS
from rollout_cli.main import EXIT_INVALID, app

EXIT_CODES = {ending.exit_code for ending in ENDINGS.values()}
# typer carries its own copy of click: its parameters are told apart by what they say they are
Param = Any
# commands that start a run (or a cluster): never run with good values only
STARTS_SOMETHING = {"start", "retry", "rollback", "demo", "approve", "reject"}
EXAMPLES_PER_COMMAND = 39  # 26 commands: over 1,000 invocations (test_over_1000_... counts them)
INVOCATIONS: list[tuple[str, int]] = []
runner = CliRunner()
ROOT = Path(__file__).resolve().parents[2]


class Tripwire:
    """A TCP listener that counts the connections made to it (and closes each)."""

    def __init__(self) -> None:
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(64)
        self.port = self.sock.getsockname()[1]
        self.count = 0
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            self.count += 1
            conn.close()


def _kubeconfig(server: str, context: str = "tripwire") -> str:
    return yaml.safe_dump({
        "apiVersion": "v1", "kind": "Config", "current-context": context,
        "clusters": [{"name": "c", "cluster": {"server": server, "insecure-skip-tls-verify": True}}],
        "users": [{"name": "u", "user": {"token": "t"}}],
        "contexts": [{"name": context, "context": {"cluster": "c", "user": "u"}}]})


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory, kubesim_cluster_module: Callable[..., Any]) -> dict[str, Any]:
    """Files good and bad, the tripwire, and one small kubesim for the invocations with good values."""
    tmp = tmp_path_factory.mktemp("flags")
    tripwire = Tripwire()
    files = {
        "tripwire.kc": _kubeconfig(f"https://127.0.0.1:{tripwire.port}"),
        "good.yaml": "apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\nmaxPods: 70\n",
        "invalid.yaml": "apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\nmaxPods: -1\n",
        "notyaml.yaml": "maxPods: [1,\n",
        "policy.yaml": "name: mine\nsteps: [1, '100%']\n",
        "badpolicy.yaml": "stpes: [1, '100%']\n",
        "list.kc": "- not\n- a kubeconfig\n",
    }
    for name, text in files.items():
        (tmp / name).write_text(text)
    (tmp / "binary.yaml").write_bytes(b"\x00\x01\x02kubelet")
    (tmp / "dir").mkdir()
    cluster = kubesim_cluster_module(nodes=2)
    context = yaml.safe_load(Path(cluster.kubeconfig).read_text())["contexts"][0]["name"]
    return {"tmp": tmp, "tripwire": tripwire, "kubesim": str(cluster.kubeconfig), "context": context,
            "nodes": list(cluster.node_names)}


def _text(alphabet: str, min_size: int = 1, max_size: int = 30) -> st.SearchStrategy[str]:
    return st.text(alphabet=alphabet, min_size=min_size, max_size=max_size)


NOT_NAME = st.one_of(st.just(""), st.just("a" * 64), st.just("-x"), st.just("x-"), st.just("a..b"),
                     st.text(min_size=1, max_size=20).filter(lambda s: any(c not in "abcdefghijklmnopqrstuvwxyz0123456789.-"
                                                                            for c in s)))
NOT_SELECTOR = st.one_of(st.builds(lambda a, b: a + b, st.sampled_from(["", "a=b,", "tier in (x),"]),
                                   _text("@#$%^&*{}|<>?;~`")), st.just("bad selector!!"), st.just("a b"))
NOT_UUID = _text("ghijklmnopqrstuvwxyz-", 1, 40)
NOT_PERSON = st.one_of(st.just(""), st.just(" "), st.just("x" * 300), _text("\x00\x01\x07\x1b", 1, 5))
NOT_COMMENT = st.one_of(st.just("x" * 401), _text("\x00\x01\x07\x1b", 1, 5).map(lambda s: "ok" + s))
NOT_SCALE = st.one_of(st.sampled_from(["0", "-1", "0.5", "nan", "inf", "-inf", "1e9", "abc", ""]),
                      st.floats(max_value=0.99, allow_nan=False).map(repr))


def bad_values(world: dict[str, Any]) -> dict[str, st.SearchStrategy[str]]:
    """Per option (its Python name): values the command must refuse."""
    tmp = world["tmp"]
    missing = st.builds(lambda s: str(tmp / f"nope-{s}.yaml"), _text(string.ascii_lowercase, 1, 8))
    bad_file = st.one_of(missing, st.sampled_from([str(tmp / f) for f in ("dir", "binary.yaml", "invalid.yaml",
                                                                          "notyaml.yaml")]))
    return {
        "name": NOT_NAME,
        "node": NOT_NAME.filter(lambda s: s not in ("a..b", "a" * 64)),  # a node's name is a DNS subdomain
        "selector": NOT_SELECTOR,
        "config": bad_file,
        "configmap": st.one_of(st.sampled_from(["a/b/c", "/x", "x/", "Kube/x", "ns/Bad_Name", ""]), NOT_NAME.map(lambda s: s + "/x/y")),
        "policy": st.one_of(st.sampled_from(["nope", str(tmp / "badpolicy.yaml"), str(tmp / "dir")]), missing),
        "deployment": st.one_of(_text(string.ascii_lowercase, 1, 20), st.just("a/b/c"), st.just("/x"), st.just("x/")),
        "run_id": NOT_UUID,
        "approver": NOT_PERSON,
        "by": NOT_PERSON,
        "comment": NOT_COMMENT,
        "time_scale": NOT_SCALE,
        "nodes": st.one_of(st.sampled_from(["0", "1", "-3", "201", "100000", "x", "1.5"]), st.integers(max_value=1).map(str)),
        "workdir": st.sampled_from([str(tmp / "good.yaml"), "/proc/1/nope/x"]),
        "namespace": st.one_of(st.sampled_from(["Kube", "-x", "a" * 64, "a.b", ""]), NOT_NAME.filter(lambda s: s != "")),
        "kubeconfig": st.one_of(missing, st.sampled_from([str(tmp / "dir"), str(tmp / "binary.yaml"),
                                                         str(tmp / "list.kc")])),
        "context": st.one_of(st.just(""), _text(string.ascii_lowercase, 1, 12).filter(lambda s: s != "tripwire")),
        "output": st.sampled_from(["xml", "", "JSON", "tables"]),
        "to": st.sampled_from(["later", "", "PREVIOUS"]),
        "prometheus": st.sampled_from(["prometheus:9090", "ftp://p:21", "http://", "http://p:99999", "http://p :9", ""]),
        "prometheus_token_file": st.one_of(missing, st.just(str(tmp / "dir"))),
        "prometheus_ca_file": st.one_of(missing, st.just(str(tmp / "dir"))),
        # flags take no value: giving one is a usage error
        "wait": st.just("=yes"), "watch": st.just("=1"), "offline": st.just("=no"), "three_clusters": st.just("=yes"),
        "fix": st.just("=yes"), "events": st.just("=no"),
        "fleet": bad_file,
        "fleet_name": st.sampled_from(["", "a.b", "-x", "_x", "a" * 70, "x y", "n\u00e9", "a/b"]),
        "timeout": st.sampled_from(["0", "-1", "x", "", "1.5", "3601", "nan"]),
        "listen": st.sampled_from(["9101", "127.0.0.1", "127.0.0.1:x", "127.0.0.1:99999", ":9101", "a b:1", ""]),
    }


def good_values(world: dict[str, Any], *, real: bool) -> dict[str, st.SearchStrategy[str]]:
    """Per option: values it takes; ``real``: the kubeconfig and context of the shared kubesim."""
    tmp = world["tmp"]
    names = st.sampled_from(["r1", "maxpods-80", "a.b", "x" * 63])
    return {
        "name": names,
        "node": st.sampled_from([*world["nodes"], "node-9"]),
        "selector": st.sampled_from(["zone=a", "tier in (web,api),!legacy", "kubesim.kubelet-rollout.io/pool"]),
        "config": st.just(str(tmp / "good.yaml")),
        "configmap": st.sampled_from(["kube-system/kubelet-config-x", "kubelet-config-y"]),
        "policy": st.sampled_from(["canary", "fast", "cautious", str(tmp / "policy.yaml")]),
        "deployment": st.just("kubelet-config-rollout/rollout"),
        "run_id": st.uuids().map(str),
        "approver": st.just("alice"), "by": st.just("bob"), "comment": st.just("looks good"),
        "time_scale": st.sampled_from(["1", "20", "40.5"]),
        "nodes": st.sampled_from(["2", "11"]),
        "workdir": st.just(str(tmp / "work")),
        "namespace": st.just("kube-system"),
        "kubeconfig": st.just(world["kubesim"] if real else str(tmp / "tripwire.kc")),
        "context": st.just(world["context"] if real else "tripwire"),
        "output": st.sampled_from(["table", "json", "yaml"]),
        "to": st.sampled_from(["previous", "local"]),
        "prometheus": st.just("http://127.0.0.1:9"),  # never asked: the run is refused before it starts
        "prometheus_token_file": st.just(str(tmp / "good.yaml")),
        "prometheus_ca_file": st.just(str(tmp / "good.yaml")),
        "fleet_name": st.sampled_from(["r1", "maxpods-80", "a_b"]),
        "wait": st.just(""), "watch": st.just(""), "offline": st.just(""), "three_clusters": st.just(""),
        "fix": st.just(""), "events": st.just(""),
        "fleet": st.just(str(ROOT / "docs" / "fleet-example.yaml")),
        "listen": st.just("127.0.0.1:0"),
        "timeout": st.sampled_from(["1", "120"]),
    }


def _argument(param: Param) -> bool:
    return bool(param.param_type_name == "argument")


def _good_key(command: str, param: Param) -> str:
    """A fleet rollout's name has rules of its own (no dots: it names each cluster's rollout)."""
    return FLEET_NAME if command.startswith("fleet ") and param.name == "name" else str(param.name)


FLEET_NAME = "fleet_name"


def _params(command: Any) -> list[Param]:
    return [p for p in command.params if p.name not in ("help",)]


def _args_for(param: Param, value: str) -> list[str]:
    """How a person gives ``value`` to ``param`` (a flag's bad value: ``--watch=1``)."""
    if _argument(param):
        return [value]
    flag = max(param.opts, key=len)
    if param.is_flag:
        if value:
            return [f"{param.opts[0] if param.opts[0].startswith('--') else flag}{value}"]
        return [param.opts[0]] if param.opts[0].startswith("--") else [flag]
    return [flag, value]


def _names(param: Param) -> list[str]:
    """What a message may call the option: its flags, or an argument's metavar."""
    if _argument(param):
        return [(param.name or "").upper()]
    return [*param.opts, *param.secondary_opts]


def test_every_option_of_every_command_has_bad_values(tmp_path: Path) -> None:
    known = set(bad_values({"tmp": tmp_path}))
    missing = {f"{c}: {p.name}" for c, cmd in COMMANDS.items() for p in _params(cmd) if p.name not in known}
    assert not missing, f"add bad values for {sorted(missing)}"


Drawn = tuple[list[str], list[tuple[Param, str]], bool]


@st.composite
def invocation(draw: st.DrawFn, command: Any, world: dict[str, Any], *, name: str) -> Drawn:
    params = _params(command)
    all_good = name not in STARTS_SOMETHING and draw(st.integers(0, 19)) == 0  # about one in twenty
    good, bad = good_values(world, real=all_good), bad_values(world)
    if all_good:
        chosen_bad: list[Param] = []
    else:
        chosen_bad = draw(st.lists(st.sampled_from(params), min_size=1, max_size=2, unique_by=lambda p: p.name))
    args: list[str] = []
    given: list[tuple[Param, str]] = []
    for param in params:
        required = param.required or _argument(param)
        if param in chosen_bad:
            value = draw(bad[_good_key(name, param)])
            given.append((param, value))
            args += _args_for(param, value)
        elif param.name in ("kubeconfig", "context") or required or draw(st.booleans()):
            # `status --watch` waits for a rollout that has not started yet: here, for ever
            never = all_good and param.name == "watch"
            if not _argument(param) and param.is_flag and (never or not draw(st.booleans())):
                continue
            args += _args_for(param, draw(good[_good_key(name, param)]))
    return args, given, all_good


# commands that serve until Ctrl-C: with every value good they would never return here
SERVE_UNTIL_STOPPED = {"prometheus", "prometheus sd"}


def _check(name: str, args: list[str], bad: list[tuple[Param, str]], all_good: bool,
           world: dict[str, Any]) -> None:
    if all_good and name in SERVE_UNTIL_STOPPED:
        INVOCATIONS.append((name, 0))
        return
    before = world["tripwire"].count
    result = runner.invoke(app, [*name.split(), *args], env={"KUBECONFIG": "", "COLUMNS": "400"})
    INVOCATIONS.append((name, result.exit_code))
    shown = result.output
    where = f"rollout {name} {args!r}: exit {result.exit_code}\n{shown[-2000:]}"
    assert result.exception is None or isinstance(result.exception, SystemExit), where + repr(result.exception)
    assert "Traceback" not in shown, where
    assert result.exit_code in EXIT_CODES, where
    if all_good:
        return
    assert result.exit_code == EXIT_INVALID, where
    # the option by its name, or (a file, or a value Click took for an option) the value itself
    named = [n for p, _ in bad for n in _names(p) if n] + [v for _, v in bad if len(v.strip()) > 1 and v.isprintable()]
    assert any(n in shown for n in named), f"the message names none of {named}: {where}"
    assert world["tripwire"].count == before, f"connected before refusing: {where}"


# the kubesim of `world` runs in this process: its kubelets' jitter moves the global `random` while
# Hypothesis draws, which it reports although no strategy here uses `random`
@pytest.mark.filterwarnings("ignore:Do not use the `random` module inside strategies")
@pytest.mark.parametrize("name", sorted(COMMANDS))
def test_bad_values_are_refused_before_anything_starts(name: str, world: dict[str, Any]) -> None:
    command = COMMANDS[name]

    @settings(max_examples=EXAMPLES_PER_COMMAND, deadline=None, database=None, derandomize=True,
              suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture,
                                     HealthCheck.filter_too_much, HealthCheck.data_too_large])
    @given(drawn=invocation(command, world, name=name))
    def check(drawn: Drawn) -> None:
        _check(name, *drawn, world)

    check()


def test_over_1000_invocations_and_every_exit_code_from_the_table() -> None:
    """The runs above (this file runs in order, in one worker)."""
    assert len(INVOCATIONS) >= 1000, len(INVOCATIONS)
    assert {code for _, code in INVOCATIONS} <= EXIT_CODES
    assert {name for name, _ in INVOCATIONS} == set(COMMANDS)


def _float_ok(text: str) -> bool:  # documents what NOT_SCALE holds: nothing a clock speed-up may be
    try:
        value = float(text)
    except ValueError:
        return False
    return math.isfinite(value) and 1 <= value <= 10_000


def test_the_bad_time_scales_are_bad() -> None:
    assert not any(_float_ok(v) for v in ["0", "-1", "0.5", "nan", "inf", "-inf", "1e9", "abc", ""])
