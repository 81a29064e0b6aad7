"""The input boundary: every way a YAML/JSON input can be wrong is one ``InputError`` naming the
file, the line when the parser knows it, the field path and the limit, never a traceback or a
hang. Each row is a rule of ``rollout.inputs``."""

from __future__ import annotations

from pathlib import Path

import pytest

from rollout.errors import ConfigError, InputError, PolicyError
from rollout.inputs import Limits, parse_document, read_input


def _bomb(levels: int) -> str:
    lines = ['a0: &a0 ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]']
    lines += [f"a{i}: &a{i} [" + ",".join([f"*a{i - 1}"] * 9) + "]" for i in range(1, levels + 1)]
    return "\n".join(lines) + "\n"


REFUSED = [
    ("size", b"a: " + b"x" * (10 * 1024 * 1024), None, "", "is too large (10.0 MiB; the limit is 1.0 MiB)"),
    ("empty", b"", None, "", "is empty"),
    ("only comments", b"# nothing here\n---\n", None, "", "is empty"),
    ("binary", b"\x7fELF\x02\x01\x01\x00\x00", 1, "", "looks like a binary file (control byte 0x02)"),
    ("NUL on line 3", b"a: 1\nb: 2\nc: \x00\n", 3, "", "looks like a binary file"),
    ("Latin-1", "a: 1\nb: caf\u00e9\n".encode("latin-1"), 2, "", "is not UTF-8 text (byte 0xe9)"),
    ("UTF-16", "a: 1\n".encode("utf-16"), None, "", "is UTF-16 or UTF-32 text; save it as UTF-8"),
    ("multi-document", b"a: 1\n---\nb: 2\n", 2, "", "holds more than one YAML document"),
    ("deep YAML", b"a: " + b"[" * 200_000 + b"]" * 200_000, 1, "", "nested too deeply (the limit is 32 levels)"),
    ("deep JSON", b'{"a": ' + b"[" * 200_000 + b"]" * 200_000 + b"}", None, "", "nested too deeply"),
    ("alias bomb", _bomb(9).encode(), 5, "", "too many values after expanding aliases (the limit is 20000)"),
    ("recursive alias", b"a: &a [*a]\n", 1, "", "refers to its own ancestor"),
    ("undefined alias", b"a: *nothing\n", 1, "", "alias *nothing is not defined"),
    ("huge YAML int", b"a:\n  b: " + b"9" * 5000 + b"\n", 2, "a.b", "an integer has more than 64 digits"),
    ("huge JSON int", b'{"a": ' + b"9" * 5000 + b"}", None, "", "an integer has more than 64 digits"),
    ("infinite YAML float", b"a: [1, .inf]\n", 1, "a[1]", "'.inf' is not a finite number"),
    ("NaN in JSON", b'{"a": NaN}', None, "", "NaN is not a JSON number"),
    ("list as a key", b"? [a, b]\n: 1\n", 1, "?", "a key is a list or a mapping; keys must be strings"),
    ("map as a key", b"x:\n  ? {a: 1}\n  : 2\n", 2, "x.?", "keys must be strings"),
    ("int key", b"x:\n  1: a\n", 2, "x.1", "the key '1' is read as an integer; keys must be strings"),
    ("duplicate key", b"a: 1\nb: 2\na: 3\n", 3, "a", "duplicate field 'a'"),
    ("duplicate JSON key", b'{"a": 1, "a": 2}', None, "", "duplicate field 'a'"),
    ("!!binary", b"a: !!binary aGVsbG8=\n", 1, "a", "the YAML type tag:yaml.org,2002:binary is not allowed"),
    ("!!set", b"a: !!set {x, y}\n", 1, "a", "the YAML type tag:yaml.org,2002:set is not allowed"),
    ("python tag", b"a: !!python/object:os.system x\n", 1, "", "could not determine a constructor"),
    ("syntax", b"a: [1, 2\nb: 3\n", 2, "", "not valid YAML"),
    ("JSON syntax", b'{"a": 1,,}', 1, "", "not valid JSON"),
]


@pytest.mark.parametrize(
    ("data", "line", "path", "expected"),
    [pytest.param(d, ln, p, e, id=name) for name, d, ln, p, e in REFUSED],
)
def test_bad_input_is_one_input_error_naming_file_line_and_field(
    data: bytes, line: int | None, path: str, expected: str
) -> None:
    with pytest.raises(ConfigError) as info:
        parse_document(data, source="k.yaml", error=ConfigError)
    err = info.value
    assert expected in err.reason
    assert (err.line, err.path) == (line, path)
    head = str(err).splitlines()[0]
    assert head.startswith(f"k.yaml:{line}: " if line else "k.yaml: ")
    assert len(str(err)) < 500, "the message never echoes a huge input back"


ACCEPTED = [
    ("YAML", "a: 1\nb: [x, 'y']\nc: {d: null}\n", {"a": 1, "b": ["x", "y"], "c": {"d": None}}),
    ("JSON", '{"a": 1.5, "b": [true]}', {"a": 1.5, "b": [True]}),
    ("merge keys: own keys win", "b: &b {x: 1, y: 2}\nm:\n  <<: *b\n  x: 3\n",
     {"b": {"x": 1, "y": 2}, "m": {"x": 3, "y": 2}}),
    ("a few aliases", "d: &d 10Mi\ne: {memory: *d, storage: *d}\n",
     {"d": "10Mi", "e": {"memory": "10Mi", "storage": "10Mi"}}),
    ("dates stay text", "start: 2026-11-23\n", {"start": "2026-11-23"}),
    ("UTF-8 BOM", "\ufeffa: 1\n", {"a": 1}),
    ("a leading document marker", "---\na: 1\n", {"a": 1}),
    ("unicode text", "a: caf\u00e9 \u2603\n", {"a": "caf\u00e9 \u2603"}),
]


@pytest.mark.parametrize(("text", "data"), [pytest.param(t, d, id=n) for n, t, d in ACCEPTED])
def test_good_input_becomes_json_shaped_data(text: str, data: object) -> None:
    assert parse_document(text.encode(), source="x.yaml").data == data


def test_lines_are_known_for_every_field_path() -> None:
    doc = parse_document("a:\n  b:\n    - x\n    - c: 1\n", source="x.yaml")
    assert doc.line_of(("a", "b", 1, "c")) == 4
    assert doc.line_of(("a", "b", 0)) == 3
    assert doc.line_of(("a", "missing")) == 1, "an unknown field takes the line of its parent"


def test_empty_may_mean_defaults_when_the_caller_says_so() -> None:
    assert parse_document("# defaults\n", source="p.yaml", allow_empty=True).data is None


def test_limits_are_values_the_caller_may_tighten() -> None:
    with pytest.raises(InputError, match="nested too deeply"):
        parse_document("a: {b: {c: 1}}\n", source="x", limits=Limits(max_depth=2))
    with pytest.raises(InputError, match="more than 1 aliases"):
        parse_document("a: &a 1\nb: [*a, *a]\n", source="x", limits=Limits(max_aliases=1))


@pytest.mark.parametrize(
    ("make", "expected"),
    [
        pytest.param(lambda d: d / "missing.yaml", "no such file", id="missing file"),
        pytest.param(lambda d: d, "is not a regular file", id="a directory"),
    ],
)
def test_reading_a_file_that_is_not_there_is_an_input_error(tmp_path: Path, make, expected: str) -> None:
    with pytest.raises(PolicyError, match=expected) as info:
        read_input(make(tmp_path), error=PolicyError)
    assert str(make(tmp_path)) in str(info.value)


def test_a_huge_file_is_refused_without_reading_it(tmp_path: Path) -> None:
    big = tmp_path / "big.yaml"
    with big.open("wb") as f:  # sparse: 2 GiB on paper, nothing on disk
        f.truncate(2 * 1024**3)
    with pytest.raises(ConfigError, match=r"is too large \(2.0 GiB; the limit is 1.0 MiB\)"):
        read_input(big, error=ConfigError)


def test_yaml_flow_style_is_not_mistaken_for_broken_json() -> None:
    assert parse_document("{steps: [1, '100%']}", source="p.yaml").data == {"steps": [1, "100%"]}


def test_a_message_lists_fifty_problems_and_keeps_all_of_them() -> None:
    err = PolicyError("invalid", source="p.yaml", problems=[f"f{i}: bad" for i in range(120)])
    assert len(err.problems) == 120
    assert str(err).splitlines()[-1] == "  ... and 70 more (fix these first)"
    assert len(str(err).splitlines()) == 52


# Flow depth is measured before the parser runs (libyaml's scanner has a nesting limit of its own
# in newer releases, and would answer a run of '[' in its words): brackets that YAML reads as text
# must not count, and brackets nested in a multi-line flow collection must.
BRACKETS_AS_TEXT = [
    ("plain scalar", "a: x" + "[" * 40 + "\n"),
    ("quoted scalars", "a: '" + "[" * 40 + "'\nb: \"[[[[\\\"" + "[" * 40 + "\"\n"),
    ("comment", "a: 1 # " + "[" * 40 + "\n"),
    ("block scalar", "a: |\n  " + "[" * 40 + "\n  more\nb: [1]\n"),
    ("a quote inside a flow scalar", "a: [it's, " + "[" * 30 + "]" * 31 + "\n"),
]


@pytest.mark.parametrize("text", [pytest.param(t, id=name) for name, t in BRACKETS_AS_TEXT])
def test_brackets_that_yaml_reads_as_text_are_not_nesting(text: str) -> None:
    parse_document(text.encode(), source="k.yaml", error=ConfigError)


def test_flow_collections_one_after_another_are_not_nesting() -> None:
    """40 lists of a line each, and PromQL in plain scalars after them: depth 1 at most (the
    pre-scan counted every collection ever opened, so a policy or config with more than 32 of
    them was refused as nested too deeply)."""
    lists = "".join(f"f{i}: [{i}, {{a: [x]}}]\n" for i in range(40))
    query = 'q: sum by (node) (x{node=~"{{nodes}}"}[{{window}}]) / clamp_min(y{a="b"}, 1)\n'
    doc = parse_document((lists + query).encode(), source="k.yaml", error=ConfigError)
    assert doc.data["f39"] == [39, {"a": ["x"]}] and doc.data["q"].startswith("sum by")


@pytest.mark.parametrize(("text", "line"), [
    ("a: [\n" + "[\n" * 40, 33),
    ("a: |\n  x\nb: " + "[" * 40 + "\n", 3),
    ("- " + "{a: " * 40 + "1" + "}" * 40 + "\n", 1),
])
def test_flow_nesting_is_refused_at_its_line(text: str, line: int) -> None:
    with pytest.raises(ConfigError) as info:
        parse_document(text.encode(), source="k.yaml", error=ConfigError)
    assert "nested too deeply (the limit is 32 levels)" in info.value.reason
    assert info.value.line == line
