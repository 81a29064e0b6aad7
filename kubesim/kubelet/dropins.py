"""A modern kubelet's start-up config: ``--config`` file, ``--config-dir`` drop-ins, flags.

Why a module of its own: which file broke a start, and with which message, is what a node agent
reads from the journal to decide between "my drop-in is bad" (revert) and "the node is sick". So
each stage fails with the wording of ``cmd/kubelet/app/server.go`` (Kubernetes 1.28-1.31):

* ``loadConfigFile`` decodes the base strictly-then-leniently with v1beta1 defaults
  ("failed to load kubelet config file, path: P, error: ...").
* ``mergeKubeletConfigurations`` marshals the defaulted base to v1beta1 JSON, walks the drop-in
  directory with ``filepath.WalkDir`` (lexical order, subdirectories too, only names whose
  ``filepath.Ext`` is ``.conf``), turns each file into JSON without typed decoding
  (``LoadIntoJSON``: an empty file, bad YAML or a missing/unknown apiVersion/kind fails) and applies
  it as an RFC 7386 JSON merge patch (``jsonpatch.MergePatch``: maps merge per key, lists are
  replaced whole, ``null`` deletes). The result is unmarshalled with ``encoding/json`` (unknown
  fields are ignored, wrong types fail) and defaulted again ("failed to merge kubelet configs: ...").
* ``kubeletConfigFlagPrecedence`` re-parses the command line over the result: a flag wins over
  every file, ``--feature-gates`` win per gate and file gates not named on the command line are
  added back.
* ``ValidateKubeletConfiguration`` runs on the merged object
  ("failed to validate kubelet configuration, error: ...").
"""

from __future__ import annotations

import json
import os
import shlex
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping

from kubesim.kubelet import nodeobject
from kubesim.kubelet.gates import FeatureGates, GateError
from kubesim.kubelet.kubeletconfig import (
    Config,
    FlagError,
    LoadError,
    apply_flags,
    decode_body,
    decode_payload,
    parse_document,
    parse_flags,
    resolve_relative_paths,
)
from kubesim.kubelet.validation import ValidationError, validate

DROPIN_EXTENSION = ".conf"
# kubernetes#126630 (fixed in 1.32 by #127421): fields whose Go name differs from their JSON name
# were dropped from drop-ins; resolvConf (Go: ResolverConfig) is the one users hit
_IGNORED_IN_DROPINS_BEFORE_132 = ("resolvConf",)
DROPIN_ALPHA_ENV = "KUBELET_CONFIG_DROPIN_DIR_ALPHA"


class StartError(Exception):
    """The kubelet process exits 1 with this message (logged as ``"command failed" err=...``)."""


@dataclass(frozen=True)
class CommandLine:
    """What the kubelet was started with (the unit's ExecStart plus kubeadm-flags.env)."""

    config: Path | None  # --config, already under the host root
    config_dir: Path | None  # --config-dir, already under the host root
    flags: dict[str, str] = field(default_factory=dict)  # other flags, e.g. {"--max-pods": "90"}
    feature_gates: dict[str, bool] = field(default_factory=dict)  # --feature-gates
    environment: Mapping[str, str] = field(default_factory=dict)  # the unit's Environment=


@dataclass(frozen=True)
class StartConfig:
    """The outcome of a successful start: the running config and its gates."""

    config: Config
    gates: FeatureGates
    warnings: list[str]
    skipped: list[str]


def parse_kubeadm_args(text: str) -> tuple[dict[str, str], dict[str, bool]]:
    """``KUBELET_KUBEADM_ARGS="--max-pods=90 --feature-gates=A=true"`` -> (flags, gates)."""
    value = ""
    for line in text.splitlines():
        line = line.strip()
        if line.startswith("KUBELET_KUBEADM_ARGS="):
            value = line.split("=", 1)[1]
    words = [word for word in shlex.split(value) if word]
    flags: dict[str, str] = {}
    i = 0
    while i < len(words):
        word = words[i]
        if "=" in word:
            name, arg = word.split("=", 1)
        elif i + 1 < len(words) and not words[i + 1].startswith("--"):
            name, arg = word, words[i + 1]
            i += 1
        else:
            name, arg = word, "true"
        flags[name] = arg
        i += 1
    gates = _parse_gates(flags.pop("--feature-gates", ""))
    return flags, gates


def _parse_gates(text: str) -> dict[str, bool]:
    gates: dict[str, bool] = {}
    for item in filter(None, (part.strip() for part in text.split(","))):
        name, _, value = item.partition("=")
        if value.lower() not in ("true", "false"):
            raise StartError(
                f'failed to parse kubelet flag: invalid argument "{text}" for "--feature-gates" flag: '
                f"invalid value of {name}: {value}, err: strconv.ParseBool: parsing \"{value}\": invalid syntax"
            )
        gates[name.strip()] = value.lower() == "true"
    return gates


def format_kubeadm_args(flags: Mapping[str, str], gates: Mapping[str, bool]) -> str:
    """The inverse of :func:`parse_kubeadm_args` (what provisioning writes)."""
    words = [f"{name if name.startswith('--') else '--' + name}={value}" for name, value in flags.items()]
    if gates:
        words.append("--feature-gates=" + ",".join(f"{k}={'true' if v else 'false'}" for k, v in sorted(gates.items())))
    return f'KUBELET_KUBEADM_ARGS="{" ".join(words)}"\n'


# ----------------------------------------------------------------------------------------- start
def load_start_config(cmd: CommandLine, kubelet_minor: int, host_root: Path) -> StartConfig:
    """Everything the kubelet does with files and flags before it runs; raises :class:`StartError`."""
    try:
        flag_values = parse_flags(cmd.flags)
    except FlagError as exc:
        raise StartError(f"failed to parse kubelet flag: {exc}") from exc
    _check_config_dir_flag(cmd, kubelet_minor)
    process_gates = _initial_gates(cmd.feature_gates, kubelet_minor)
    base, warnings = (_load_base(cmd.config, kubelet_minor, host_root) if cmd.config
                      else (decode_body({}, kubelet_minor)[0], []))
    skipped: list[str] = []
    if cmd.config_dir is not None:
        base, skipped = merge_dropins(base, cmd.config_dir, kubelet_minor, host_root)
    cfg = apply_flags(base, flag_values, cmd.feature_gates)
    try:
        gates = validate(cfg, process_gates, kubelet_minor=kubelet_minor)
    except ValidationError as exc:
        # the real message ends in ", path: " plus a Go struct dump: left out
        raise StartError(f"failed to validate kubelet configuration, error: {exc}") from exc
    return StartConfig(cfg, gates, warnings, skipped)


def _check_config_dir_flag(cmd: CommandLine, minor: int) -> None:
    """``--config-dir`` exists from 1.28; 1.28/1.29 (alpha) also need an environment variable."""
    if cmd.config_dir is None:
        return
    if minor < 28:
        raise StartError("failed to parse kubelet flag: unknown flag: --config-dir")
    if minor < 30 and DROPIN_ALPHA_ENV not in cmd.environment:
        raise StartError(
            f"flag --config-dir specified but environment variable {DROPIN_ALPHA_ENV} not set, cannot start kubelet"
        )


def _initial_gates(flag_gates: Mapping[str, bool], minor: int) -> FeatureGates:
    try:
        return FeatureGates(kubelet_minor=minor).with_overrides(flag_gates)
    except GateError as exc:
        raise StartError(f"failed to set feature gates from initial flags-based config: {exc}") from exc


def _host_path(path: Path, host_root: Path) -> str:
    """The path as the kubelet on the host names it (messages name host paths, not ours)."""
    try:
        return "/" + str(path.relative_to(host_root))
    except ValueError:
        return str(path)


def _load_base(path: Path, minor: int, host_root: Path) -> tuple[Config, list[str]]:
    """``loadConfigFile``: strict-then-lenient decode with v1beta1 defaults."""
    shown = _host_path(path, host_root)
    prefix = f"failed to load kubelet config file, path: {shown}, error: failed to load Kubelet config file {shown}, error"
    try:
        text = path.read_text()
    except OSError as exc:
        raise StartError(f"{prefix} failed to read kubelet config file \"{shown}\", error: {exc.strerror}") from exc
    if not text.strip():
        raise StartError(f'{prefix} kubelet config file "{shown}" was empty')
    try:
        cfg, warnings = decode_payload(text, minor)
    except LoadError as exc:
        raise StartError(f"{prefix} {exc}") from exc
    # relative paths in the file are resolved against the file's directory (host view)
    resolve_relative_paths(cfg, os.path.dirname(shown))
    return cfg, warnings


# ------------------------------------------------------------------------------------ merging
def dropin_files(config_dir: Path) -> tuple[list[Path], list[str]]:
    """``filepath.WalkDir`` order: entries of each directory sorted by name, depth first; a
    symlink is never entered (its ``DirEntry`` is no directory), one named ``*.conf`` is read."""
    files: list[Path] = []
    skipped: list[str] = []
    try:
        entries = sorted(os.scandir(config_dir), key=lambda e: e.name)
    except OSError:
        return files, skipped
    for entry in entries:
        if entry.is_dir(follow_symlinks=False):
            sub_files, sub_skipped = dropin_files(Path(entry.path))
            files += sub_files
            skipped += sub_skipped
        elif _go_ext(entry.name) == DROPIN_EXTENSION:
            files.append(Path(entry.path))
        else:
            skipped.append(entry.path)
    return files, skipped


def _go_ext(name: str) -> str:
    """``filepath.Ext``: from the last dot (so ``.conf`` itself counts, ``x.conf.bak`` does not)."""
    dot = name.rfind(".")
    return name[dot:] if dot >= 0 else ""


def merge_dropins(base: Config, config_dir: Path, minor: int, host_root: Path) -> tuple[Config, list[str]]:
    """``mergeKubeletConfigurations``: JSON merge patches over the base, then decode + default."""
    shown_dir = _host_path(config_dir, host_root)
    if not config_dir.is_dir():
        raise StartError(
            f'failed to merge kubelet configs: failed to walk through kubelet dropin directory "{shown_dir}": '
            f"lstat {shown_dir}: no such file or directory"
        )
    merged: Any = nodeobject.render(base)
    files, skipped = dropin_files(config_dir)
    for path in files:
        patch = _load_dropin(path, minor, host_root, shown_dir)
        merged = merge_patch(merged, patch)
    try:
        cfg, _unknown = decode_body(merged if isinstance(merged, dict) else {}, minor)
    except LoadError as exc:
        detail = str(exc).removeprefix("failed to decode: ")
        raise StartError(
            f"failed to merge kubelet configs: failed to unmarshal merged JSON into kubelet configuration: {detail}"
        ) from exc
    return cfg, [_host_path(Path(p), host_root) for p in skipped]


def _load_dropin(path: Path, minor: int, host_root: Path, shown_dir: str) -> dict[str, Any]:
    """``loadDropinConfigFileIntoJSON``: YAML/JSON -> JSON object, type meta checked, untyped."""
    shown = _host_path(path, host_root)
    walk = f'failed to merge kubelet configs: failed to walk through kubelet dropin directory "{shown_dir}": '
    prefix = f"{walk}failed to load kubelet dropin file, path: {shown}, error: "
    try:
        text = path.read_text()
    except OSError as exc:
        raise StartError(f"{prefix}failed to read drop-in kubelet config file \"{shown}\", error: {exc.strerror}") from exc
    if not text.strip():
        raise StartError(f'{prefix}kubelet config file "{shown}" was empty')
    try:
        obj = parse_document(text)
    except LoadError as exc:
        raise StartError(prefix + str(exc).removeprefix("failed to decode: ")) from exc
    body = {k: v for k, v in obj.items() if k not in ("apiVersion", "kind")}
    if minor < 32:
        for name in _IGNORED_IN_DROPINS_BEFORE_132:
            body.pop(name, None)
    return body


def merge_patch(target: Any, patch: Any) -> Any:
    """RFC 7386 JSON merge patch (as ``jsonpatch.MergePatch``)."""
    if not isinstance(patch, dict):
        return json.loads(json.dumps(patch))
    out = dict(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if value is None:
            out.pop(key, None)
        else:
            out[key] = merge_patch(out.get(key), value)
    return out

