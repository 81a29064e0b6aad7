"""The kubelet's drop-in merge (``--config-dir``), for the orchestrator and the node agent alike.

The kubelet (``mergeKubeletConfigurations`` in cmd/kubelet/app/server.go) walks ``--config-dir``
with ``filepath.WalkDir``: each directory's entries sorted by name, depth first, subdirectories
entered (symlinks are not), and every file whose ``filepath.Ext`` is ``.conf`` applied as an
RFC 7386 JSON merge patch over the JSON of the base config, in that order: maps merge key by key,
lists are replaced whole, ``null`` deletes a key. So a file that sorts after ours wins over ours.

A drop-in is only valid together with what it is merged over, and only takes effect where no
later file changes it again. The orchestrator (reviewing a drop-in against a node's running
config and the files its agent advertises as read after ours) and the agent (before it writes
one) apply the same rules, from here. Pure.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from rollout.names import ANN_SET_ASIDE_OVERRIDES

DROPIN_EXTENSION = ".conf"
# The agent's advertisement (``kubelet-rollout.io/agent``) lists the files read after its own
# drop-in under this key; past this many bytes of JSON their bodies are left out (annotations
# share 256 KiB per object) and the agent's own check on the node is the only one.
ADVERTISED_AFTER = "dropinsAfter"
ADVERTISE_LIMIT = 16 * 1024
_TYPE_META = frozenset({"apiVersion", "kind"})
_MASKED = ("staticPodURLHeader",)  # header values may be credentials; annotations are widely readable


def merge_patch(target: Any, patch: Any) -> Any:
    """RFC 7386: ``patch`` applied to ``target`` (neither is modified; a new value is returned)."""
    if not isinstance(patch, Mapping):
        return copy.deepcopy(patch)
    result: dict[str, Any] = dict(copy.deepcopy(target)) if isinstance(target, Mapping) else {}
    for key, value in patch.items():
        if value is None:
            result.pop(key, None)
        else:
            result[key] = merge_patch(result.get(key), value)
    return result


def merge_dropins(base: Mapping[str, Any], dropins: Iterable[Mapping[str, Any]]) -> dict[str, Any]:
    """The base config with every drop-in applied in the order given."""
    merged: dict[str, Any] = copy.deepcopy(dict(base))
    for doc in dropins:
        merged = merge_patch(merged, doc)
    return merged


# -- which files, in which order ---------------------------------------------------------------


def is_dropin_name(name: str) -> bool:
    """Go's ``filepath.Ext(name) == ".conf"``: the text from the last dot, so ``x.conf`` and
    ``.conf`` count, ``x.conf.bak`` and ``x.conf~`` do not."""
    return name.endswith(DROPIN_EXTENSION)


def kubelet_order(path: str) -> tuple[str, ...]:
    """Sort key of a file's path relative to ``--config-dir`` (``/``-separated): WalkDir's order
    (each directory's entries by name, a directory's files before the next entry) is the order of
    the paths' components. Names compare as Go compares them: UTF-8 bytes, i.e. code points."""
    return tuple(path.split("/"))


@dataclass(frozen=True)
class DropinFile:
    """One ``*.conf`` file of ``--config-dir``: its path relative to the directory and its body.

    ``problem`` says why the body is not known (unreadable, or too large to advertise); the
    document is then empty.
    """

    path: str
    document: Mapping[str, Any] = field(default_factory=dict)
    problem: str = ""


def in_kubelet_order(files: Iterable[DropinFile]) -> list[DropinFile]:
    return sorted(files, key=lambda f: kubelet_order(f.path))


def read_after(ours: str, files: Iterable[DropinFile]) -> list[DropinFile]:
    """The files the kubelet applies after the one at ``ours``, in its order: they win over it."""
    key = kubelet_order(ours)
    return [f for f in in_kubelet_order(files) if kubelet_order(f.path) > key]


def merge_in_kubelet_order(base: Mapping[str, Any], files: Iterable[DropinFile]) -> dict[str, Any]:
    """``base`` with every file applied in the kubelet's order."""
    return merge_dropins(base, (f.document for f in in_kubelet_order(files)))


def merged_over_running(running: Mapping[str, Any], ours: Mapping[str, Any],
                        after: Sequence[DropinFile]) -> dict[str, Any]:
    """What a node's kubelet runs once ``ours`` is written, from what it runs now.

    ``running`` (its configz) already holds the base and every drop-in merged; applying ours and
    then the files read after ours once more gives the kubelet's result: a merge patch applied
    twice is applied once, so only their precedence over ours changes.
    """
    return merge_dropins(running, [ours, *(f.document for f in after)])


# -- what a later file takes away from ours ----------------------------------------------------


@dataclass(frozen=True)
class Override:
    """A field of our drop-in that a file read after it sets to something else (or deletes)."""

    path: tuple[str, ...]  # keys from the top (a map key may hold dots: memory.available)
    file: str  # the later file that has the last word on it
    ours: Any
    theirs: Any  # None: deleted (the kubelet then runs the default)

    @property
    def field(self) -> str:
        """The path as diffs and messages spell it: ``featureGates.MemoryQoS``."""
        return ".".join(self.path)

    def value_in(self, doc: Mapping[str, Any]) -> Any:
        """This field's value in ``doc`` (None when absent)."""
        value = _at(doc, self.path)
        return None if value is _ABSENT else value

    def __str__(self) -> str:
        how = "deleted" if self.theirs is None else f"set to {json.dumps(self.theirs)}"
        return (f"{self.field} is {how} by {self.file}, read after the drop-in (which sets "
                f"{json.dumps(self.ours)}): the drop-in's value would not take effect")


_ABSENT = object()


def _leaves(doc: Mapping[str, Any], prefix: tuple[str, ...] = ()) -> Iterator[tuple[tuple[str, ...], Any]]:
    """Each path ours decides: maps are walked (they merge key by key), anything else is a leaf."""
    for key, value in doc.items():
        if not prefix and key in _TYPE_META:
            continue
        path = (*prefix, str(key))
        if isinstance(value, Mapping):
            yield from _leaves(value, path)  # an empty map changes nothing
        else:
            yield path, value


def _at(doc: Any, path: tuple[str, ...]) -> Any:
    for part in path:
        if not isinstance(doc, Mapping) or part not in doc:
            return _ABSENT
        doc = doc[part]
    return doc


def _touches(doc: Mapping[str, Any], path: tuple[str, ...]) -> bool:
    """Does this patch set, replace or delete ``path`` (or a map above it)?"""
    node: Any = doc
    for part in path:
        if not isinstance(node, Mapping) or part not in node:
            return False
        node = node[part]
        if not isinstance(node, Mapping):
            return True
    return True


def _same(a: Any, b: Any) -> bool:
    """JSON equality: 50 is 50.0, but true is never 1 (Python's ``True == 1``)."""
    if isinstance(a, bool) or isinstance(b, bool):
        return a is b
    if isinstance(a, Mapping) and isinstance(b, Mapping):
        return a.keys() == b.keys() and all(_same(a[k], b[k]) for k in a)
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(map(_same, a, b))
    return bool(a == b)


def overrides(ours: Mapping[str, Any], after: Sequence[DropinFile]) -> list[Override]:
    """The fields of ``ours`` the kubelet would not run with our value, because files read after
    ours (``after``, in the kubelet's order) change them; each names the last file that does."""
    if not after:
        return []
    body = {k: v for k, v in ours.items() if k not in _TYPE_META}
    final = merge_dropins(body, (f.document for f in after))
    found: list[Override] = []
    for path, value in _leaves(body):
        result = _at(final, path)
        if (result is _ABSENT and value is None) or (result is not _ABSENT and _same(result, value)):
            continue
        last = next(f for f in reversed(after) if _touches(f.document, path))
        found.append(Override(path, last.path, value, None if result is _ABSENT else result))
    return found


def takes_precedence(configmap: Mapping[str, Any]) -> bool:
    """A published config whose drop-in wins over the files read after it
    (``ANN_SET_ASIDE_OVERRIDES``, what `rollout drift --fix` publishes): on each node its agent
    sets aside those that override a field of it (``overriding_files``)."""
    annotations = (configmap.get("metadata") or {}).get("annotations") or {}
    return bool(annotations.get(ANN_SET_ASIDE_OVERRIDES) == "true")


def overriding_files(ours: Mapping[str, Any], after: Sequence[DropinFile]) -> tuple[str, ...]:
    """The files read after ``ours`` that override a field of it: what a drop-in that takes
    precedence (``rollout drift --fix``) has its agent set aside, and nothing more."""
    return tuple(sorted({o.file for o in overrides(ours, after)}))


# -- the agent's advertisement of the files read after its own ---------------------------------


def _masked(doc: Mapping[str, Any]) -> dict[str, Any]:
    out = dict(doc)
    for key in _MASKED:
        if isinstance(out.get(key), Mapping):
            out[key] = {name: ["<masked>"] for name in out[key]}
    return out


def advertise_after(after: Sequence[DropinFile]) -> list[dict[str, Any]]:
    """The agent's list of the files read after its drop-in: ``{"file", "config"}`` each, or
    ``{"file", "problem"}`` for a file it cannot read or that does not fit the annotation."""
    entries = [{"file": f.path, "problem": f.problem} if f.problem else {"file": f.path, "config": _masked(f.document)}
               for f in after]
    size = len(json.dumps(entries))
    if size <= ADVERTISE_LIMIT:
        return entries
    note = f"too large to advertise ({size} bytes of JSON); the agent checks it on the node"
    return [{"file": e["file"], "problem": e.get("problem") or note} for e in entries]


def _advertised_file(entry: Any) -> DropinFile:
    if not isinstance(entry, Mapping) or not isinstance(entry.get("file"), str):
        raise ValueError(f"an entry without a file name: {entry!r}")
    config = entry.get("config")
    if isinstance(config, Mapping):
        return DropinFile(entry["file"], config)
    return DropinFile(entry["file"], {}, str(entry.get("problem") or "no body advertised"))


def advertised_after(annotation: str | None) -> list[DropinFile]:
    """The files a node's agent advertises as read after its drop-in (none from an agent that
    does not advertise them); an unreadable advertisement is one nameless file with a problem."""
    if not annotation:
        return []
    try:
        doc = json.loads(annotation)
        entries = doc.get(ADVERTISED_AFTER) if isinstance(doc, dict) else None
        return [_advertised_file(e) for e in entries or ()]
    except (ValueError, TypeError) as exc:
        return [DropinFile("", {}, f"the agent's advertisement cannot be read: {exc}")]
