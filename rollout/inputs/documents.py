"""The one door every YAML/JSON input comes in by: config files, policies, configz JSON.

Why a boundary of its own: these files come from people and from other programs, and a parser
left to its defaults turns bad bytes into the wrong kind of failure. A 10 MB file is read whole,
a YAML alias bomb expands to billions of values (the process hangs), deep nesting overflows the
parser's stack (libyaml's composer crashes the process outright), an integer of 5,000 digits
raises ``ValueError`` from deep inside ``int()``, a list used as a mapping key raises
``TypeError``, and non-UTF-8 bytes raise ``UnicodeDecodeError``. Each of those reached the user
as a traceback. Here every one becomes an ``InputError`` (the caller picks the subclass:
``ConfigError``, ``PolicyError``) that names the file, the line when the parser knows it, and a
limit stated in the message, so the user knows what to change. Values typed on a command line
(names, selectors, references) come in by the boundary's other door, ``rollout.flags``.

What comes out is JSON-shaped data only (dicts with string keys, lists, strings, finite numbers,
booleans, None): YAML's extras (timestamps, ``!!binary``, ``!!set``, recursive aliases) either
become their text (timestamps) or are refused, so no consumer has to think about them.

The parser is PyYAML's libyaml scanner (fast, well kept) with PyYAML's own Python composer and
safe constructor on top, because only those can be bounded: libyaml's C composer recurses
without a limit. JSON goes through ``json`` with hooks for the same limits.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NoReturn

import humanize
import yaml
from yaml.composer import Composer
from yaml.events import AliasEvent
from yaml.nodes import MappingNode, Node, ScalarNode, SequenceNode

from rollout.errors import InputError
from rollout.inputs.flow_depth import flow_too_deep_at

Loc = tuple[str | int, ...]

_STR_TAG = "tag:yaml.org,2002:str"
_TAG_NAMES = {
    "tag:yaml.org,2002:int": "an integer",
    "tag:yaml.org,2002:float": "a number",
    "tag:yaml.org,2002:bool": "a boolean",
    "tag:yaml.org,2002:null": "null",
    "tag:yaml.org,2002:timestamp": "a date",
}


@dataclass(frozen=True)
class Limits:
    """How big an input may be. Real configs and policies are a few KiB with depth under 6."""

    max_bytes: int = 1024 * 1024  # a ConfigMap holds at most 1 MiB of data
    max_depth: int = 32
    max_aliases: int = 100
    max_values: int = 20_000  # values after expanding aliases: stops alias bombs and huge lists
    max_int_digits: int = 64  # an int64 has 19; Python refuses int() beyond 4,300


DEFAULT_LIMITS = Limits()


@dataclass(frozen=True)
class Document:
    """A parsed input: JSON-shaped ``data`` plus the 1-based line of each field path seen."""

    data: Any
    source: str
    lines: Mapping[Loc, int] = field(default_factory=dict, repr=False)

    def line_of(self, loc: Loc) -> int | None:
        """The line of ``loc`` or of its closest enclosing field; None when unknown."""
        for end in range(len(loc), 0, -1):
            line = self.lines.get(tuple(loc[:end]))
            if line is not None:
                return line
        return None


# ----------------------------------------------------------------------------- bytes -> text

# a file that is not there is no bad config or policy: the hint says what to fix
PATH_ADVICE = "check the path; nothing was started"



def read_input(
    path: str | Path, *, error: type[InputError] = InputError, limits: Limits = DEFAULT_LIMITS
) -> str:
    """The text of one input file, or ``error`` (no such file, too big, binary, not UTF-8...)."""
    p = Path(path)
    try:
        size = p.stat().st_size
        if not p.is_file():
            _fail(error, "is not a regular file", source=str(p), advice=PATH_ADVICE)
        if size > limits.max_bytes:  # checked before reading: a 10 GB file is not read at all
            _fail(error, _too_big(size, limits), source=str(p))
        data = p.read_bytes()
    except FileNotFoundError:
        _fail(error, "no such file", source=str(p), advice=PATH_ADVICE)
    except OSError as exc:
        _fail(error, f"cannot read the file: {exc.strerror or exc}", source=str(p), advice=PATH_ADVICE)
    return decode_input(data, source=str(p), error=error, limits=limits)


def decode_input(
    data: bytes | str, *, source: str, error: type[InputError] = InputError, limits: Limits = DEFAULT_LIMITS
) -> str:
    """UTF-8 text of ``data`` within the size limit, or ``error`` saying what is wrong."""
    raw = data.encode("utf-8", "surrogatepass") if isinstance(data, str) else bytes(data)
    if len(raw) > limits.max_bytes:
        _fail(error, _too_big(len(raw), limits), source=source)
    if raw.startswith((b"\xff\xfe", b"\xfe\xff")):
        _fail(error, "is UTF-16 or UTF-32 text; save it as UTF-8", source=source)
    _refuse_binary(raw, source=source, error=error)
    try:
        return raw.decode("utf-8").removeprefix("\ufeff")
    except UnicodeDecodeError as exc:
        line = raw.count(b"\n", 0, exc.start) + 1
        _fail(error, f"is not UTF-8 text (byte 0x{raw[exc.start]:02x})", source=source, line=line)


_CONTROL = bytes(c for c in range(32) if c not in (9, 10, 13))


def _refuse_binary(raw: bytes, *, source: str, error: type[InputError]) -> None:
    """A NUL or other C0 control byte: a binary file (YAML and JSON text never hold them raw)."""
    stripped = raw.translate(None, _CONTROL)
    if len(stripped) == len(raw):
        return
    at = next(i for i, b in enumerate(raw) if b in _CONTROL)
    line = raw.count(b"\n", 0, at) + 1
    _fail(error, f"looks like a binary file (control byte 0x{raw[at]:02x}), not YAML or JSON text",
          source=source, line=line)


def _too_big(size: int, limits: Limits) -> str:
    have = humanize.naturalsize(size, binary=True)
    limit = humanize.naturalsize(limits.max_bytes, binary=True)
    return f"is too large ({have}; the limit is {limit})"


# ------------------------------------------------------------------------------ text -> data


def parse_document(
    data: str | bytes,
    *,
    source: str,
    error: type[InputError] = InputError,
    limits: Limits = DEFAULT_LIMITS,
    allow_empty: bool = False,
) -> Document:
    """One YAML or JSON document as JSON-shaped data, or ``error`` naming file, line and limit.

    An empty text (or only comments) is an error unless ``allow_empty`` (then the data is None).
    """
    text = decode_input(data, source=source, error=error, limits=limits)
    if text.lstrip().startswith(("{", "[")):
        return _parse_json_or_flow_yaml(text, source=source, error=error, limits=limits)
    doc = _parse_yaml(text, source=source, error=error, limits=limits)
    if doc.data is None and not allow_empty and _is_blank(text):
        _fail(error, "is empty (no YAML or JSON document in it)", source=source)
    return doc


def _is_blank(text: str) -> bool:
    """Nothing but blank lines, comments and document markers (an explicit ``null`` is not blank)."""
    return all(not s or s.startswith("#") or s in ("---", "...") for s in map(str.strip, text.splitlines()))


def _fail(
    error: type[InputError], message: str, *, source: str, line: int | None = None, path: str = "",
    advice: str = "",
) -> NoReturn:
    raise error(message, source=source, line=line, path=path, advice=advice)


def format_loc(loc: Loc) -> str:
    """``("registerWithTaints", 0, "effect")`` -> ``registerWithTaints[0].effect``."""
    out = ""
    for part in loc:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out


# --------------------------------------------------------------------------------------- JSON


def _parse_json_or_flow_yaml(text: str, *, source: str, error: type[InputError], limits: Limits) -> Document:
    """JSON; failing that, YAML flow style (``{steps: [1, '100%']}`` is a fine policy). When
    both fail, the JSON error is the one shown: the text looked like JSON."""
    try:
        return _parse_json(text, source=source, error=error, limits=limits)
    except _NotJson as json_error:
        try:
            return _parse_yaml(text, source=source, error=error, limits=limits)
        except InputError:
            raise json_error.input_error from None


class _NotJson(Exception):
    def __init__(self, input_error: InputError) -> None:
        super().__init__(str(input_error))
        self.input_error = input_error


def _parse_json(text: str, *, source: str, error: type[InputError], limits: Limits) -> Document:
    def pairs(items: list[tuple[str, Any]]) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for key, value in items:
            if key in out:
                raise _JsonProblem(f"duplicate field {key!r}")
            out[key] = value
        return out

    def number(text: str) -> int:
        if len(text.lstrip("-")) > limits.max_int_digits:
            raise _JsonProblem(f"an integer has more than {limits.max_int_digits} digits")
        return int(text)

    def real(text: str) -> float:
        value = float(text)
        if not math.isfinite(value):
            raise _JsonProblem(f"number {text[:40]} is out of range")
        return value

    def constant(name: str) -> NoReturn:
        raise _JsonProblem(f"{name} is not a JSON number")

    try:
        data = json.loads(text, object_pairs_hook=pairs, parse_int=number, parse_float=real,
                          parse_constant=constant)
    except json.JSONDecodeError as exc:
        message = f"not valid JSON: {exc.msg} (column {exc.colno})"
        raise _NotJson(error(message, source=source, line=exc.lineno)) from None
    except _JsonProblem as exc:
        _fail(error, str(exc), source=source)
    except RecursionError:
        _fail(error, _too_deep(limits), source=source)
    _check_json_shape(data, source=source, error=error, limits=limits)
    return Document(data, source)


class _JsonProblem(ValueError):
    pass


def _too_deep(limits: Limits) -> str:
    return f"is nested too deeply (the limit is {limits.max_depth} levels)"


def _check_json_shape(data: Any, *, source: str, error: type[InputError], limits: Limits) -> None:
    """Depth and size of parsed JSON, walked without recursion."""
    stack: list[tuple[Any, int]] = [(data, 1)]
    seen = 0
    while stack:
        value, depth = stack.pop()
        seen += 1
        if depth > limits.max_depth:
            _fail(error, _too_deep(limits), source=source)
        if seen > limits.max_values:
            _fail(error, f"has too many values (the limit is {limits.max_values})", source=source)
        children = value.values() if isinstance(value, dict) else value if isinstance(value, list) else ()
        stack.extend((child, depth + 1) for child in children)


# --------------------------------------------------------------------------------------- YAML

_Base: type = yaml.CSafeLoader if yaml.__with_libyaml__ else yaml.SafeLoader


class _LimitError(yaml.YAMLError):
    def __init__(self, message: str, node_or_mark: Any) -> None:
        super().__init__(message)
        mark = getattr(node_or_mark, "start_mark", node_or_mark)
        self.line = mark.line + 1 if mark is not None else None
        self.node = node_or_mark if isinstance(node_or_mark, Node) else None


class _BoundedLoader(_Base):  # type: ignore[misc]
    """A safe loader that counts depth, aliases and values while it composes, and refuses
    non-string keys, duplicate keys, huge integers, non-finite floats and YAML-only types."""

    limits: Limits = DEFAULT_LIMITS
    locs: Mapping[int, Loc] = {}  # id(node) -> field path, set before construction

    def __init__(self, stream: str) -> None:
        super().__init__(stream)
        self.anchors: dict[str, Node] = {}  # libyaml's composer keeps its own; ours needs one
        self._depth = 0
        self._aliases = 0
        self._values = 0
        self._sizes: dict[int, int] = {}

    # Python's composer over libyaml's events, bounded (the C composer recurses without a limit)
    get_single_node = Composer.get_single_node
    compose_document = Composer.compose_document
    compose_scalar_node = Composer.compose_scalar_node
    compose_sequence_node = Composer.compose_sequence_node
    compose_mapping_node = Composer.compose_mapping_node

    def compose_node(self, parent: Node | None, index: Any) -> Node:
        if self.check_event(AliasEvent):
            return self._alias()
        self._depth += 1
        if self._depth > self.limits.max_depth:
            raise _LimitError(_too_deep(self.limits), self.peek_event().start_mark)
        before = self._values
        node = Composer.compose_node(self, parent, index)
        assert node is not None, "compose_node always builds a node"
        self._depth -= 1
        self._count(1, node)
        self._sizes[id(node)] = self._values - before
        return node

    def _alias(self) -> Node:
        event = self.get_event()
        node = self.anchors.get(event.anchor)
        if node is None:
            raise _LimitError(f"alias *{event.anchor} is not defined before it is used", event.start_mark)
        if id(node) not in self._sizes:
            raise _LimitError(f"alias *{event.anchor} refers to its own ancestor (recursive)", event.start_mark)
        self._aliases += 1
        if self._aliases > self.limits.max_aliases:
            raise _LimitError(f"uses more than {self.limits.max_aliases} aliases", event.start_mark)
        self._count(self._sizes[id(node)], event)
        return node

    def _count(self, values: int, where: Any) -> None:
        self._values += values
        if self._values > self.limits.max_values:
            raise _LimitError(
                f"has too many values after expanding aliases (the limit is {self.limits.max_values})", where
            )

    def construct_mapping(self, node: MappingNode, deep: bool = False) -> dict[str, Any]:
        own = {id(k) for k, _ in node.value}
        self.flatten_mapping(node)  # merge keys (<<) first; the mapping's own keys override them
        mapping: dict[str, Any] = {}
        owners: dict[str, bool] = {}
        for key_node, value_node in node.value:
            key = self._key(key_node)
            mine = id(key_node) in own
            if key in mapping and mine and owners[key]:
                raise _LimitError(f"duplicate field {key!r}", key_node)
            mapping[key] = self.construct_object(value_node, deep=deep)
            owners[key] = mine
        return mapping

    def _key(self, node: Node) -> str:
        if isinstance(node, ScalarNode) and node.tag == _STR_TAG:
            return str(node.value)
        if isinstance(node, ScalarNode):
            kind = _TAG_NAMES.get(node.tag, node.tag)
            raise _LimitError(f"the key {node.value!r} is read as {kind}; keys must be strings (quote it)", node)
        raise _LimitError("a key is a list or a mapping; keys must be strings", node)

    def construct_yaml_int(self, node: ScalarNode) -> int:
        digits = str(node.value).lstrip("+-").replace("_", "")
        if len(digits) > self.limits.max_int_digits:
            raise _LimitError(f"an integer has more than {self.limits.max_int_digits} digits", node)
        return int(super().construct_yaml_int(node))

    def construct_yaml_float(self, node: ScalarNode) -> float:
        value = float(super().construct_yaml_float(node))
        if not math.isfinite(value):
            raise _LimitError(f"{node.value!r} is not a finite number", node)
        return value

    def construct_yaml_timestamp(self, node: ScalarNode) -> str:
        # JSON has no dates: keep the text, and let the field's own type judge it
        return str(node.value)

    def construct_unsupported(self, node: Node) -> NoReturn:
        raise _LimitError(f"the YAML type {node.tag} is not allowed here (only JSON-like values)", node)


_BoundedLoader.add_constructor("tag:yaml.org,2002:int", _BoundedLoader.construct_yaml_int)
_BoundedLoader.add_constructor("tag:yaml.org,2002:float", _BoundedLoader.construct_yaml_float)
_BoundedLoader.add_constructor("tag:yaml.org,2002:timestamp", _BoundedLoader.construct_yaml_timestamp)
for _tag in ("binary", "set", "omap", "pairs"):
    _BoundedLoader.add_constructor(f"tag:yaml.org,2002:{_tag}", _BoundedLoader.construct_unsupported)


def _parse_yaml(text: str, *, source: str, error: type[InputError], limits: Limits) -> Document:
    deep_at = flow_too_deep_at(text, limits.max_depth)  # before the parser: see rollout.inputs.flow_depth
    if deep_at is not None:
        _fail(error, _too_deep(limits), source=source, line=deep_at)
    loader = _BoundedLoader(text)
    loader.limits = limits
    lines: dict[Loc, int] = {}
    try:
        node = loader.get_single_node()
        if node is None:
            return Document(None, source)
        lines, loader.locs = _index(node)
        data = loader.construct_document(node)
    except _LimitError as exc:
        path = format_loc(loader.locs.get(id(exc.node), ())) if exc.node is not None else ""
        _fail(error, str(exc), source=source, line=exc.line, path=path)
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        _fail(error, _yaml_message(exc), source=source, line=mark.line + 1 if mark else None)
    except yaml.YAMLError as exc:
        _fail(error, f"not valid YAML: {exc}", source=source)
    finally:
        loader.dispose()
    return Document(data, source, lines)


def _yaml_message(exc: yaml.MarkedYAMLError) -> str:
    if exc.problem and "expected a single document" in (exc.context or ""):
        return "holds more than one YAML document (---); put one document in the file"
    what = "; ".join(p for p in (exc.context, exc.problem) if p)
    return f"not valid YAML: {what}"


def _index(root: Node) -> tuple[dict[Loc, int], dict[int, Loc]]:
    """The 1-based line of every field path, and the path of every node (keys included), walked
    without recursion; the value count is already bounded, aliases included."""
    lines: dict[Loc, int] = {}
    locs: dict[int, Loc] = {}
    stack: list[tuple[Node, Loc]] = [(root, ())]
    while stack:
        node, loc = stack.pop()
        locs.setdefault(id(node), loc)
        if isinstance(node, MappingNode):
            for key_node, value_node in node.value:
                key = str(key_node.value) if isinstance(key_node, ScalarNode) else "?"
                here = (*loc, key)
                lines[here] = key_node.start_mark.line + 1  # after a merge (<<), own keys win
                locs.setdefault(id(key_node), here)
                stack.append((value_node, here))
        elif isinstance(node, SequenceNode):
            for i, item in enumerate(node.value):
                lines.setdefault((*loc, i), item.start_mark.line + 1)
                stack.append((item, (*loc, i)))
    return lines, locs
