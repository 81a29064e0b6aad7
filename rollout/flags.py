"""The input boundary for values typed on a command line (and passed as a flow's parameters).

Files come in by ``rollout.inputs``; everything else a person types comes in here: rollout and
node names, label selectors, ``NAMESPACE/NAME`` references, a deployment, a flow run id, who asks
and why, a kubeconfig and its context, a time scale. Why a door of its own: a value the cluster
or Prefect would refuse late (a rollout name the API server answers with a 422 and its regex,
after Prefect has started) or that would crash deep inside (a selector clause raising
``ValueError`` in the planner) must be refused before anything starts, with one message that
names the flag, shows the value and says what a good one looks like.

Every function takes the value and the flag it came by, and returns the value to use or raises
:class:`FlagError` (exit code 2, like every ``InputError``). The rules themselves live where the
names live: a rollout name in ``rollout.names``, a selector in ``rollout.policy.selectors``.
Pure but for the kubeconfig's file, read through ``rollout.inputs``.
"""

from __future__ import annotations

import math
import os
import re
import urllib.parse
import uuid
from pathlib import Path
from typing import Any

from rollout.errors import FlagError, InputError
from rollout.fleet.plan import fleet_rollout_name_problem
from rollout.inputs import parse_document, read_input
from rollout.names import rollout_name_problem
from rollout.policy.selectors import LabelSelector

# Kubernetes object names (RFC 1123): a label is a namespace, a subdomain a ConfigMap or node name
_DNS_LABEL = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?")
_DNS_SUBDOMAIN = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")
DNS_LABEL_MAX = 63
DNS_SUBDOMAIN_MAX = 253
PERSON_MAX = 253  # who asks: a user name or an e-mail address
COMMENT_MAX = 400  # what the journal keeps of a reason (rollout.journal.MAX_REASON)
TIME_SCALE_MAX = 10_000.0
_SHOWN = 60  # characters of a bad value shown back


def shown(value: object) -> str:
    """A bad value as the message shows it: quoted, control characters escaped, cut when long."""
    text = repr(str(value))
    return text if len(text) <= _SHOWN else text[: _SHOWN - 4] + "...'"


def _refuse(flag: str, value: object, why: str) -> FlagError:
    return FlagError(f"{shown(value)}: {why}", source=flag)


def rollout_name(value: str, *, flag: str = "--name") -> str:
    """A rollout name: it names the journal ConfigMap and labels every node the rollout touches."""
    problem = rollout_name_problem(value)
    if problem:
        raise _refuse(flag, value, problem)
    return value


def fleet_rollout_name(value: str, *, flag: str = "--name") -> str:
    """A fleet rollout's name (each cluster's rollout is named after it: ``rollout.fleet``)."""
    problem = fleet_rollout_name_problem(value)
    if problem:
        raise _refuse(flag, value, problem)
    return value


def label_selector(value: str, *, flag: str = "--selector") -> str:
    """A label selector in kubectl's ``-l`` syntax (``zone=a,tier in (web,api),!legacy``)."""
    if len(value) > 4096:
        raise _refuse(flag, value, "is too long for a label selector (at most 4096 characters)")
    try:
        LabelSelector.parse(value)
    except ValueError as exc:
        raise _refuse(flag, value, f"not a label selector ({exc}); e.g. 'zone=a,tier in (web,api),!legacy'") from None
    return value


def _dns(value: str, *, subdomain: bool) -> str | None:
    """Why ``value`` is not a DNS label (or subdomain); None when it is one."""
    pattern, limit = (_DNS_SUBDOMAIN, DNS_SUBDOMAIN_MAX) if subdomain else (_DNS_LABEL, DNS_LABEL_MAX)
    if not value:
        return "is empty"
    if len(value) > limit:
        return f"is longer than {limit} characters"
    if pattern.fullmatch(value) is None:
        what = "lower-case letters, digits, '-' and '.'" if subdomain else "lower-case letters, digits and '-'"
        return f"may hold only {what}, and must start and end with a letter or digit"
    return None


def namespace(value: str, *, flag: str = "--namespace") -> str:
    problem = _dns(value, subdomain=False)
    if problem:
        raise _refuse(flag, value, f"not a namespace: {problem}")
    return value


def node_name(value: str, *, flag: str = "NODE") -> str:
    problem = _dns(value, subdomain=True)
    if problem:
        raise _refuse(flag, value, f"not a node name: {problem}")
    return value


def configmap_ref(value: str, *, flag: str = "--configmap") -> str:
    """``NAMESPACE/NAME`` of a published ConfigMap (``NAME`` alone: in kube-system)."""
    parts = value.split("/")
    if len(parts) > 2:
        raise _refuse(flag, value, "give NAMESPACE/NAME, e.g. kube-system/kubelet-config-5d8b9c6f7k")
    *ns, name = parts
    problem = None
    if ns and (why := _dns(ns[0], subdomain=False)):
        problem = f"namespace {shown(ns[0])} {why}"
    elif why := _dns(name, subdomain=True):
        problem = f"name {shown(name)} {why}"
    if problem:
        raise _refuse(flag, value, f"not a ConfigMap reference: {problem}")
    return value


def deployment(value: str, *, flag: str = "--deployment") -> str:
    """``FLOW/DEPLOYMENT``, as ``prefect deployment ls`` names them."""
    flow, slash, name = value.partition("/")
    if not slash or not flow.strip() or not name.strip() or "/" in name or len(value) > 512:
        raise _refuse(flag, value, "give FLOW/DEPLOYMENT, e.g. kubelet-config-rollout/rollout")
    return value


def run_id(value: str, *, flag: str = "--run") -> str:
    """A flow run id (a UUID, as `rollout approve` lists them)."""
    try:
        return str(uuid.UUID(value))
    except ValueError:
        raise _refuse(flag, value, "not a flow run id (a UUID; `rollout approve` lists them)") from None


def _printable(value: str, *, newlines: bool) -> bool:
    allowed = "\n\t" if newlines else ""
    return all(c.isprintable() or c in allowed for c in value)


def person(value: str, *, flag: str = "--by") -> str:
    """Who asks: recorded in the journal and the report."""
    if not value.strip():
        raise _refuse(flag, value, "is empty; give a name (default: $USER)")
    if len(value) > PERSON_MAX or not _printable(value, newlines=False):
        raise _refuse(flag, value, f"give a name of printable characters, at most {PERSON_MAX}")
    return value


def comment(value: str, *, flag: str = "--comment") -> str:
    if len(value) > COMMENT_MAX:
        raise _refuse(flag, value, f"is longer than {COMMENT_MAX} characters (what the journal keeps)")
    if not _printable(value, newlines=True):
        raise _refuse(flag, value, "holds control characters")
    return value


def time_scale(value: float, *, flag: str = "--time-scale") -> float:
    """A speed-up of a simulated clock: finite, at least 1."""
    if not math.isfinite(value) or value < 1 or value > TIME_SCALE_MAX:
        raise _refuse(flag, value, f"give a number from 1 to {TIME_SCALE_MAX:g} (how many times faster the clock runs)")
    return value


def count(value: int, *, flag: str, low: int, high: int) -> int:
    if not low <= value <= high:
        raise _refuse(flag, value, f"give a whole number from {low} to {high}")
    return value


def work_dir(value: Path, *, flag: str = "--workdir") -> Path:
    """A directory to keep state in: an existing directory, or a path whose parent is one."""
    if value.exists() and not value.is_dir():
        raise _refuse(flag, value, "exists and is not a directory")
    parent = value if value.exists() else value.parent
    if not parent.is_dir() or not os.access(parent, os.W_OK):
        raise _refuse(flag, value, f"cannot create it: {parent} is not a writable directory")
    return value


def prometheus_url(value: str, *, flag: str = "--prometheus") -> str:
    """Where a policy's analysis checks ask: an http(s) URL with a host (and a valid port)."""
    parsed = urllib.parse.urlsplit(value)
    try:
        port_ok = parsed.port is None or 0 < parsed.port
    except ValueError:
        port_ok = False
    if parsed.scheme not in ("http", "https") or not parsed.hostname or not port_ok or any(c.isspace() for c in value):
        raise _refuse(flag, value, "not the http(s) URL of a Prometheus, e.g. http://prometheus.monitoring:9090")
    return value


def port(value: int, *, flag: str = "--port") -> int:
    """A TCP port to listen on: 1-65535, or 0 for a free one."""
    if not 0 <= value <= 65535:
        raise _refuse(flag, value, "give a port from 1 to 65535 (0: a free one)")
    return value


def listen_address(value: str, *, flag: str = "--listen") -> tuple[str, int]:
    """``HOST:PORT`` to listen on (an IPv6 host in brackets); port 0: a free one."""
    parsed = urllib.parse.urlsplit(f"//{value}")
    try:
        number = parsed.port
    except ValueError:
        number = None
    if not parsed.hostname or number is None or parsed.path or parsed.query or any(c.isspace() for c in value):
        raise _refuse(flag, value, "give HOST:PORT, e.g. 127.0.0.1:9101")
    return parsed.hostname, number


def readable_file(value: str, *, flag: str) -> str:
    """A file read at every use (a bearer token, a CA bundle): it must exist and be readable now."""
    path = Path(value)
    if not path.is_file():
        raise _refuse(flag, value, "no such file" if not path.exists() else "not a file")
    if not os.access(path, os.R_OK):
        raise _refuse(flag, value, "cannot be read")
    return value


# ------------------------------------------------------------------------------- kubeconfig


def kubeconfig_paths(value: str | None) -> list[Path]:
    """The files a kubeconfig value names: ``--kubeconfig`` or ``$KUBECONFIG`` (``:``-separated,
    as kubectl merges them); none given: ``~/.kube/config`` when it exists."""
    if value:
        return [Path(p).expanduser() for p in value.split(os.pathsep) if p]
    default = Path.home() / ".kube" / "config"
    return [default] if default.is_file() else []


def kubeconfig(value: str, *, flag: str = "--kubeconfig") -> str:
    """Every file ``value`` names exists and reads as a kubeconfig (a YAML mapping)."""
    paths = kubeconfig_paths(value)
    if not paths:
        raise _refuse(flag, value, "names no file")
    for path in paths:
        _kubeconfig_document(path, flag=flag)
    return value


def context(value: str, *, kubeconfig_value: str | None, flag: str = "--context") -> str:
    """A context of the kubeconfig (the merged contexts of every file it names)."""
    if not value.strip():
        raise _refuse(flag, value, "is empty")
    paths = kubeconfig_paths(kubeconfig_value)
    if not paths:
        raise _refuse(flag, value, "there is no kubeconfig to find it in (give --kubeconfig or set $KUBECONFIG)")
    known: list[str] = []
    for path in paths:
        known += [str(c.get("name")) for c in _kubeconfig_document(path, flag="--kubeconfig").get("contexts") or []
                  if isinstance(c, dict)]
    if value not in known:
        listed = ", ".join(known) if known else "none"
        raise _refuse(flag, value, f"no such context in {os.pathsep.join(map(str, paths))} (contexts: {listed})")
    return value


def _kubeconfig_document(path: Path, *, flag: str) -> dict[str, Any]:
    try:
        doc = parse_document(read_input(path, error=FlagError), source=str(path), error=FlagError).data
    except InputError as exc:
        raise FlagError(f"not a readable kubeconfig: {exc}", source=flag) from None
    if not isinstance(doc, dict):
        raise FlagError(f"{path}: not a kubeconfig (a YAML mapping with clusters, users and contexts)", source=flag)
    return doc
