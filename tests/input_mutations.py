"""Structured mutations of YAML/JSON inputs, for the fuzz tests of the input boundary.

Why structured and not only random bytes: random bytes are refused at the first character and
never reach the validator. Each mutation here keeps most of a real document and breaks one thing
the way people and programs do (a deleted key, a list where a map goes, a 5,000-digit number,
an alias bomb, a file saved as Latin-1 or truncated), so the bad value travels deep into
parsing, the schema, the 1.23 rules and the policy model.

Every mutation is a function ``(rng, seed_doc, seed_text) -> bytes``; ``mutate`` picks one.
"""

from __future__ import annotations

import copy
import json
import random
from collections.abc import Callable
from typing import Any

import yaml

Mutation = Callable[[random.Random, dict[str, Any], str], bytes]


# ------------------------------------------------------------------------------- JSON values

def huge_int(rng: random.Random) -> int:
    return rng.choice([2**31, 2**63, -(2**63) - 1, 10**30, 10**60 + 7])


def json_value(rng: random.Random, depth: int = 0) -> Any:
    """Any JSON-shaped value, including the awkward ones (huge ints, floats, empty containers)."""
    kinds = ["none", "bool", "int", "huge", "float", "str", "weird-str"]
    if depth < 3:
        kinds += ["list", "map", "map"]
    kind = rng.choice(kinds)
    if kind == "none":
        return None
    if kind == "bool":
        return rng.random() < 0.5
    if kind == "int":
        return rng.randint(-70000, 70000)
    if kind == "huge":
        return huge_int(rng)
    if kind == "float":
        return rng.choice([0.5, -1.5, 1e308, -0.0, 1e-300, 3.0])
    if kind == "str":
        return rng.choice(["", "x", "10Mi", "1m", "-1", "100%", "systemd", "none", "0-3", "*/5 * * * *"])
    if kind == "weird-str":
        return rng.choice(["\u00e9\u00df", "a" * 5000, "1e999999", "9" * 5000, "NaN", "inf", "1.5e3Mi", "\t"])
    if kind == "list":
        return [json_value(rng, depth + 1) for _ in range(rng.randint(0, 3))]
    return {rng.choice(["a", "memory", "key", "effect", "1"]): json_value(rng, depth + 1)
            for _ in range(rng.randint(0, 3))}


# ---------------------------------------------------------------------------- tree mutations

def paths(doc: Any, prefix: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    """Every path into ``doc`` (keys and list indices)."""
    found = [prefix] if prefix else []
    if isinstance(doc, dict):
        for key, value in doc.items():
            found += paths(value, (*prefix, key))
    elif isinstance(doc, list):
        for i, value in enumerate(doc):
            found += paths(value, (*prefix, i))
    return found


def _parent(doc: Any, path: tuple[Any, ...]) -> Any:
    for part in path[:-1]:
        doc = doc[part]
    return doc


def _dump(rng: random.Random, doc: Any) -> bytes:
    if rng.random() < 0.3:
        return json.dumps(doc).encode()
    return yaml.safe_dump(doc, sort_keys=False).encode()


def delete_key(rng: random.Random, doc: dict[str, Any], text: str) -> bytes:
    doc = copy.deepcopy(doc)
    if ps := paths(doc):
        path = rng.choice(ps)
        del _parent(doc, path)[path[-1]]
    return _dump(rng, doc)


def swap_type(rng: random.Random, doc: dict[str, Any], text: str) -> bytes:
    doc = copy.deepcopy(doc)
    for _ in range(rng.randint(1, 3)):
        if ps := paths(doc):
            path = rng.choice(ps)
            _parent(doc, path)[path[-1]] = json_value(rng)
    return _dump(rng, doc)


def add_key(rng: random.Random, doc: dict[str, Any], text: str) -> bytes:
    doc = copy.deepcopy(doc)
    doc[rng.choice(["maxPods", "stpes", "cron", "Kind", "x" * 300, "evictionHard"])] = json_value(rng)
    return _dump(rng, doc)


EXTREME_SCALARS = [
    "1e999999999", "1E2147483648", "-1e-999999999", "9" * 5000 + "Mi", "0." + "0" * 400 + "1Ki",
    "9" * 30 + "h", "." + "9" * 500 + "s", "-" + "9" * 25 + "ns", "1h" * 2000, "0-999999999",
    "0-3,\u0663", "1-0", "100.5%", "-5%", "1" + "0" * 400 + "%", "", " ", "\u00b5s", "1\u03bcs",
    "x" * 100_000, "none", "None", "*/0 * * * *", "0 0 31 2 *", "@daily", "@reboot", "a=b,c in (d",
    "mon-fri", "24:00", "23:59", "9" * 70, "-0", "+1", "0x1F", "1_000", "Infinity", "999999999d",
    "@monthly", "0 0 L * fri", "30 2 * * *",
]


def extreme_scalar(rng: random.Random, doc: dict[str, Any], text: str) -> bytes:
    """A well-typed but extreme string where one value was: it passes the schema and reaches the rules."""
    doc = copy.deepcopy(doc)
    for _ in range(rng.randint(1, 3)):
        leaves = [p for p in paths(doc) if not isinstance(_parent(doc, p)[p[-1]], (dict, list))]
        if leaves:
            path = rng.choice(leaves)
            _parent(doc, path)[path[-1]] = rng.choice(EXTREME_SCALARS)
    return _dump(rng, doc)


def huge_number(rng: random.Random, doc: dict[str, Any], text: str) -> bytes:
    if not (ps := paths(doc)):
        return text.encode()
    path = rng.choice(ps)
    digits = rng.choice([20, 70, 400, 4301, 20000])
    number = rng.choice(["9" * digits, "-" + "9" * digits, "1" + "0" * digits + ".5", f"1e{digits}",
                         "0x" + "f" * digits, ".inf", "-.inf", ".nan"])
    body = _dump(random.Random(0), _set(doc, path, "__HOLE__")).decode()
    return body.replace('"__HOLE__"', number).replace("__HOLE__", number).encode()


def _set(doc: dict[str, Any], path: tuple[Any, ...], value: Any) -> dict[str, Any]:
    doc = copy.deepcopy(doc)
    _parent(doc, path)[path[-1]] = value
    return doc


def deep_nesting(rng: random.Random, doc: dict[str, Any], text: str) -> bytes:
    depth = rng.choice([20, 40, 100, 5000, 200000])
    key = rng.choice(list(doc) or ["a"])
    if rng.random() < 0.5:
        return f"{key}: {'[' * depth}1{']' * depth}\n".encode()
    if rng.random() < 0.5:
        return ("{" + f'"{key}": ' + '{"a": ' * depth + "1" + "}" * depth + "}").encode()
    return "".join(f"{'  ' * i}a{i}:\n" for i in range(min(depth, 2000))).encode() + b"  " * 2000 + b"x: 1\n"


def alias_bomb(rng: random.Random, doc: dict[str, Any], text: str) -> bytes:
    levels = rng.choice([3, 6, 9])
    lines = ['a0: &a0 ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]']
    for i in range(1, levels + 1):
        refs = ",".join([f"*a{i - 1}"] * 9)
        lines.append(f"a{i}: &a{i} [{refs}]")
    key = rng.choice(list(doc) or ["a"])
    lines.append(f"{key}: *a{levels}")
    rest = yaml.safe_dump({k: v for k, v in doc.items() if k != key}, sort_keys=False)
    return (rest + "\n".join(lines) + "\n").encode()


def anchors_and_merges(rng: random.Random, doc: dict[str, Any], text: str) -> bytes:
    variants = [
        "base: &b {maxPods: 10}\nother:\n  <<: *b\n  maxPods: 20\n",
        "a: &a [*a]\n",
        "a: *nothing\n",
        "x: &x 1\nx: &x 2\n",
        "<<: {kind: KubeletConfiguration}\n",
        "<<: [1, 2]\n",
    ]
    return (text + "\n" + rng.choice(variants)).encode()


def complex_keys(rng: random.Random, doc: dict[str, Any], text: str) -> bytes:
    variants = ["? [a, b]\n: 1\n", "? {a: 1}\n: 2\n", "1: x\n", "null: y\n", "true: z\n",
                "evictionHard:\n  ? [memory.available]\n  : 100Mi\n", "2024-01-01: d\n",
                "dup: 1\ndup: 2\n"]
    return (text.rstrip("\n") + "\n" + rng.choice(variants)).encode()


def yaml_types(rng: random.Random, doc: dict[str, Any], text: str) -> bytes:
    key = rng.choice(list(doc) or ["a"])
    value = rng.choice(["!!binary aGVsbG8=", "!!set {a, b}", "!!omap [a: 1]", "!!python/object:os.system x",
                        "!custom x", "2024-01-01", "2024-01-01T10:00:00Z", "09:00", "0o17", "1_000",
                        "!!int 12", "!!float 1", "!!str 5"])
    return (_dump(random.Random(0), {k: v for k, v in doc.items() if k != key}).decode()
            + f"{key}: {value}\n").encode()


def binary(rng: random.Random, doc: dict[str, Any], text: str) -> bytes:
    choice = rng.random()
    if choice < 0.3:
        return bytes(rng.randrange(256) for _ in range(rng.randint(1, 4000)))
    if choice < 0.6:
        data = bytearray(text.encode())
        for _ in range(rng.randint(1, 10)):
            data[rng.randrange(len(data))] = rng.randrange(256)
        return bytes(data)
    return b"\x7fELF\x02\x01\x01\x00" + bytes(range(256)) * 4


def not_utf8(rng: random.Random, doc: dict[str, Any], text: str) -> bytes:
    choice = rng.random()
    if choice < 0.4:
        return (text + "\n# caf\u00e9 \u00fc\n").encode("latin-1", "replace")
    if choice < 0.7:
        return text.encode("utf-16")
    return text.encode()[: len(text) // 2] + b"\xc3\x28\xff\xfe" + text.encode()[len(text) // 2:]


def empty(rng: random.Random, doc: dict[str, Any], text: str) -> bytes:
    return rng.choice([b"", b"\n\n", b"   ", b"# only a comment\n", b"---\n", b"...\n", b"null\n",
                       b"~", b"[]", b"{}", b"\xef\xbb\xbf", b"\t\n"])


def multi_document(rng: random.Random, doc: dict[str, Any], text: str) -> bytes:
    return rng.choice([f"{text}\n---\n{text}", f"---\n{text}\n---\n", f"{text}\n...\n---\nx: 1\n",
                       f"{text}\n---\n"]).encode()


def truncate(rng: random.Random, doc: dict[str, Any], text: str) -> bytes:
    data = text.encode()
    return data[: rng.randrange(len(data) + 1)]


def scalar_document(rng: random.Random, doc: dict[str, Any], text: str) -> bytes:
    return rng.choice([b"42", b"'just a string'", b"[1, 2, 3]", b"- a\n- b\n", b"true", b"\"x\"",
                       b"123456789012345678901234567890", b"{\"a\": NaN}", b"{\"a\": Infinity}",
                       b"[" * 3000, b"{\"a\": 1, \"a\": 2}", b"{\"a\": " + b"9" * 5000 + b"}"])


def big_file(rng: random.Random, doc: dict[str, Any], text: str) -> bytes:
    size = rng.choice([1024 * 1024 + 1, 10 * 1024 * 1024])
    return (text + "\n# " + "x" * size + "\n").encode()


def many_values(rng: random.Random, doc: dict[str, Any], text: str) -> bytes:
    key = rng.choice(list(doc) or ["a"])
    count = rng.choice([1000, 30000])
    rest = yaml.safe_dump({k: v for k, v in doc.items() if k != key}, sort_keys=False)
    return (rest + f"{key}: [" + ",".join([json.dumps(json_value(rng))] * count) + "]\n").encode()


def many_unknown_keys(rng: random.Random, doc: dict[str, Any], text: str) -> bytes:
    """Thousands of near-miss field names: every one is a problem, and a "did you mean" each
    would cost seconds."""
    names = [k for k in doc if isinstance(k, str)] or ["steps"]
    extra = "".join(f"{rng.choice(names)}z{i}: 1\n" for i in range(rng.choice([300, 3000])))
    return (text.rstrip("\n") + "\n" + extra).encode()


MUTATIONS: dict[str, Mutation] = {
    "delete-key": delete_key,
    "swap-type": swap_type,
    "extreme-scalar": extreme_scalar,
    "add-key": add_key,
    "huge-number": huge_number,
    "deep-nesting": deep_nesting,
    "alias-bomb": alias_bomb,
    "anchors-and-merges": anchors_and_merges,
    "complex-keys": complex_keys,
    "yaml-types": yaml_types,
    "binary": binary,
    "not-utf8": not_utf8,
    "empty": empty,
    "multi-document": multi_document,
    "truncate": truncate,
    "scalar-document": scalar_document,
    "many-values": many_values,
    "many-unknown-keys": many_unknown_keys,
}
RARE: dict[str, Mutation] = {"big-file": big_file}  # slow to build: a few per corpus


def mutate(rng: random.Random, doc: dict[str, Any], text: str) -> tuple[str, bytes]:
    """One mutation of ``doc`` (whose text is ``text``), named."""
    name = rng.choice(sorted(MUTATIONS))
    return name, MUTATIONS[name](rng, doc, text)


def corpus(seeds: list[tuple[dict[str, Any], str]], count: int, *, seed: int) -> list[tuple[str, bytes]]:
    """``count`` mutated inputs from the seed documents, reproducible from ``seed``; every
    mutation kind appears, and the rare (slow to build) ones a few times."""
    rng = random.Random(seed)
    out: list[tuple[str, bytes]] = []
    for name, fn in sorted(MUTATIONS.items()) + sorted(RARE.items()):
        doc, text = seeds[len(out) % len(seeds)]
        out.append((name, fn(rng, doc, text)))
    out.append(("big-file", big_file(random.Random(1), *seeds[0])))
    while len(out) < count:
        doc, text = rng.choice(seeds)
        out.append(mutate(rng, doc, text))
    return out
