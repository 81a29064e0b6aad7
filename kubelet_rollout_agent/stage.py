"""From a downloaded ConfigMap to a drop-in the agent may write, or the reason it may not.

Why before any write: the kubelet validates only at start-up (there is no ``kubelet --check``),
so a bad drop-in is discovered by a crash loop. The agent checks what the orchestrator already
checked, but *per node*: the drop-in merged over this node's own base config and the other
drop-ins in ``--config-dir``, every file where the kubelet applies it (someone else's slot may
make a valid drop-in invalid here, and a file that sorts after ours wins over it). A field of ours
that a later file changes again would never take effect: that refuses it too, naming the file,
unless the ConfigMap takes precedence (``rollout.kubeletconfig.dropin.takes_precedence``, what
`rollout drift --fix` publishes): then the files that override ours are set aside
(``Staged.set_aside``) and the config is judged without them.

The validator knows the 1.23 rules and fields, while a 1.31 node's base may hold newer fields
and gates. So a drop-in is refused only for problems it *introduces*: errors of the merged
config that the base alone does not already have.

Pure: the caller reads the ConfigMap and the base documents.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from rollout.kubeletconfig import Problem, validate_config
from rollout.kubeletconfig.decode import check_type_meta, parse_text
import yaml
from rollout.kubeletconfig.dropin import (DropinFile, merge_in_kubelet_order, merge_patch, overrides,
                                         overriding_files, read_after, takes_precedence)
from rollout.model import ConfigRef

from kubelet_rollout_agent import names


@dataclass(frozen=True)
class Staged:
    """A payload that passed: its exact text (written byte for byte), parsed form and hash, and
    the files of --config-dir to move out of the kubelet's way before it is written."""

    ref: ConfigRef
    text: str
    document: Mapping[str, Any]
    sha: str
    set_aside: tuple[str, ...] = ()


@dataclass(frozen=True)
class Refused:
    """A payload the agent will not write; ``message`` goes to the error annotation."""

    ref: ConfigRef
    message: str


def content_sha(data: bytes | str) -> str:
    """The identity of a drop-in's bytes (what the guard and the state compare)."""
    raw = data.encode() if isinstance(data, str) else data
    return hashlib.sha256(raw).hexdigest()


def _identity_problem(ref: ConfigRef, configmap: Mapping[str, Any]) -> str | None:
    meta = configmap.get("metadata") or {}
    uid, rv = meta.get("uid"), meta.get("resourceVersion")
    if uid != ref.uid or rv != ref.resource_version:
        return (f"ConfigMap {ref.namespace}/{ref.name} is not the one assigned: it has uid {uid}, "
                f"resourceVersion {rv}; the assignment names uid {ref.uid}, resourceVersion "
                f"{ref.resource_version} (it was replaced or edited in place; publish a new one)")
    return None


def _payload(ref: ConfigRef, configmap: Mapping[str, Any]) -> tuple[str | None, str | None]:
    data = configmap.get("data") or {}
    if ref.kubelet_config_key not in data:
        keys = ", ".join(sorted(data)) or "none"
        return None, (f"ConfigMap {ref.namespace}/{ref.name} has no key "
                      f"{ref.kubelet_config_key!r} (keys: {keys})")
    return str(data[ref.kubelet_config_key]), None


def _errors(doc: Mapping[str, Any]) -> set[tuple[str, str]]:
    return {(p.path, p.message) for p in validate_config(json.dumps(doc)).errors}


def introduced_problems(base: Mapping[str, Any], merged: Mapping[str, Any]) -> list[str]:
    """Errors the merged config has and the base alone has not, as ``path: message``."""
    before = _errors(base)
    return [Problem(path, message).__str__() for path, message in sorted(_errors(merged) - before)]


def stage(ref: ConfigRef, configmap: Mapping[str, Any], *, base: Mapping[str, Any],
          other_dropins: Sequence[DropinFile] = (), ours: str = names.DROPIN_NAME) -> Staged | Refused:
    """Check identity, decode, merge over base and the other drop-ins in the kubelet's order
    (ours at ``ours``, its path in ``--config-dir``), validate, and check nothing overrides it
    (or, for a ConfigMap that takes precedence, set aside what does)."""
    if problem := _identity_problem(ref, configmap):
        return Refused(ref, problem)
    text, problem = _payload(ref, configmap)
    if text is None:
        return Refused(ref, problem or "no payload")
    doc, decode_problems = parse_text(text)
    problems = [str(p) for p in (*decode_problems, *(check_type_meta(doc) if doc else ()))]
    if doc is None or problems:
        return Refused(ref, "refused: the drop-in cannot be loaded: " + "; ".join(problems))
    unreadable = [f"{f.path or 'the drop-in directory'} {f.problem}" for f in other_dropins if f.problem]
    if unreadable:  # the kubelet would not start, whatever our drop-in says
        return Refused(ref, "refused: another file in --config-dir would stop the kubelet: " + "; ".join(unreadable))
    aside = overriding_files(doc, read_after(ours, other_dropins)) if takes_precedence(configmap) else ()
    kept = [f for f in other_dropins if f.path not in aside]
    without_ours = merge_in_kubelet_order(base, other_dropins)  # what the kubelet runs now
    with_ours = merge_in_kubelet_order(base, [*kept, DropinFile(ours, doc)])
    reasons = [str(o) for o in overrides(doc, read_after(ours, kept))]
    introduced = introduced_problems(without_ours, with_ours)
    if introduced:
        reasons.append("invalid merged KubeletConfiguration: " + "; ".join(introduced))
    if reasons:
        return Refused(ref, "refused: " + "; ".join(reasons))
    return Staged(ref, text, doc, content_sha(text), aside)


MAIN_FILE_HEADER = "# Written by kubelet-rollout-agent: {ref} over this node's base config, kept in {original}.\n"


def as_main_file(staged: Staged, *, base: Mapping[str, Any], original: str) -> Staged:
    """Main-file backend: the whole ``--config`` file the kubelet will read, the drop-in merged
    over the node's base config the kubelet's way (RFC 7386). The header comment names the
    assignment, and keeps the file's bytes apart from the base's (which the agent reads as "ours
    absent") even for a drop-in that changes nothing."""
    merged = merge_patch(dict(base), dict(staged.document))
    text = MAIN_FILE_HEADER.format(ref=staged.ref, original=original) + yaml.safe_dump(merged, sort_keys=False)
    return Staged(staged.ref, text, merged, content_sha(text), staged.set_aside)
