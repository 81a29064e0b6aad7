"""The ``kubesim`` command: ``kubesim up`` (serve a cluster), ``kubesim fault`` (switch faults) and
``kubesim token`` (a kubeconfig for a ServiceAccount).

``kubesim up`` prints exactly one line on stdout once the API serves and every node is Ready::

    kubesim ready: server=https://127.0.0.1:PORT kubeconfig=PATH nodes=N

so scripts can wait for it; logs go to stderr. A node whose kubelet cannot start makes it say
which and why on stderr and exit 1 (unless ``--allow-failed-nodes``), as does a timeout.
Usage errors exit with status 2 (argparse).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any, Sequence

from kubesim.clusterfile import ClusterFileError
from kubesim.timing import Timings, parse_duration
from kubesim.versions import VersionError

if TYPE_CHECKING:
    from kubesim.faultclient import FaultClient


def _duration(text: str) -> float:
    try:
        return parse_duration(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _positive_float(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"invalid number {text!r}") from None
    if value <= 0:
        raise argparse.ArgumentTypeError("must be > 0")
    return value


def _non_negative_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"invalid integer {text!r}") from None
    if value < 0:
        raise argparse.ArgumentTypeError("must be >= 0")
    return value


def _feature_gates(text: str) -> dict[str, bool]:
    gates: dict[str, bool] = {}
    for part in filter(None, (p.strip() for p in text.split(","))):
        name, sep, value = part.partition("=")
        if not sep or value.lower() not in ("true", "false"):
            raise argparse.ArgumentTypeError(f"invalid feature gate {part!r} (expected Name=true|false)")
        if name != "DynamicKubeletConfig":
            raise argparse.ArgumentTypeError(f"unrecognized feature gate: {name} (kubesim knows DynamicKubeletConfig)")
        gates[name] = value.lower() == "true"
    return gates


def _add_up(sub: Any) -> None:
    up = sub.add_parser("up", help="serve a simulated cluster until SIGINT/SIGTERM")
    up.add_argument("--nodes", type=_non_negative_int, default=3, help="worker nodes (plus one control-plane node)")
    up.add_argument("--kubeconfig", type=Path, required=True, help="where to write the kubeconfig")
    up.add_argument("--state-dir", type=Path, help="durable state (objects, PKI, kubelet checkpoints)")
    up.add_argument("--cluster", type=Path, help="cluster file (pools, host facts); overrides --nodes")
    up.add_argument("--port", type=_non_negative_int, default=0, help="HTTPS port on 127.0.0.1 (0: pick a free one)")
    up.add_argument("--audit-log", type=Path, help="audit.k8s.io/v1 events, one JSON line per request")
    up.add_argument(
        "--kubernetes-version",
        default=None,
        help="1.23 (DKC, the default) or a modern minor such as 1.31 (drop-ins on simulated hosts)",
    )
    up.add_argument("--feature-gates", type=_feature_gates, default={}, help="e.g. DynamicKubeletConfig=false")
    up.add_argument("--time-scale", type=_positive_float, default=1.0, help="divide every period by this")
    up.add_argument("--ready-timeout", type=_duration, default=600.0, help="give up if nodes are not Ready by then")
    up.add_argument(
        "--allow-failed-nodes",
        action="store_true",
        help="nodes whose kubelet cannot start are expected: be ready without them (default: exit 1)",
    )
    up.add_argument(
        "--pods-per-node",
        type=int,
        default=None,
        metavar="N",
        help="about N API pods on every node: ReplicaSets of 10 replicas, each under a budget of maxUnavailable 1 "
        "(overrides the cluster file's podsPerNode)",
    )
    up.add_argument("-v", "--verbose", action="store_true", help="debug logging on stderr")
    defaults = Timings()
    for flag in Timings.flag_names():
        default = getattr(defaults, flag.replace("-", "_"))
        up.add_argument(f"--{flag}", type=_duration, default=None, help=f"duration (default {default:g}s)")


def _add_fault(sub: Any) -> None:
    fault = sub.add_parser("fault", help="switch faults of a running kubesim")
    fault.add_argument("--kubeconfig", type=Path, default=_env_kubeconfig(),
                       required=_env_kubeconfig() is None,
                       help="the kubeconfig of a running kubesim (default: $KUBECONFIG)")
    actions = fault.add_subparsers(dest="action", required=True, metavar="ACTION")
    actions.add_parser("show", help="print the current faults")
    actions.add_parser("reset", help="clear every fault")
    for name, helptext in (
        ("partition", "cut a node off the API"),
        ("heal", "end a partition"),
        ("never-return", "the node's kubelet does not come back after its next exit"),
    ):
        actions.add_parser(name, help=helptext).add_argument("node")
    slow = actions.add_parser("slow-restart", help="add seconds to every restart of a node's kubelet")
    slow.add_argument("node")
    slow.add_argument("seconds", type=_duration)
    errors = actions.add_parser("api-errors", help="fail a fraction of API requests with 500/429")
    errors.add_argument("--rate", type=float, required=True)
    errors.add_argument("--codes", default="500,429", help="comma-separated HTTP codes")
    errors.add_argument("--retry-after", type=int, default=1)
    errors.add_argument("--include-nodes", action="store_true", help="also fault kubelet requests")
    latency = actions.add_parser("latency", help="add latency to every API request")
    latency.add_argument("seconds", type=_duration)
    drop = actions.add_parser("drop-watches", help="close open watch streams (and new ones after a moment)")
    drop.add_argument("--off", action="store_true", help="stop dropping watches")
    blackhole = actions.add_parser(
        "blackhole", help="silence open connections and new requests, closing nothing (--off: serve new connections)")
    blackhole.add_argument("--off", action="store_true", help="serve new connections again")
    blackhole.add_argument("--include-nodes", action="store_true", default=None, help="also silence clients with node credentials (agents)")
    shift = actions.add_parser(
        "shift", help="shift every node's workload alike for a while (pod starts, memory, CPU, churn)")
    shift.add_argument("--for", dest="for_", type=_duration, help="how long (simulated time), e.g. 10m")
    shift.add_argument("--at", type=_duration, default=0.0, help="from this long after now (default: now)")
    shift.add_argument("--pod-start", type=_positive_float, default=1.0, help="pod start durations times this")
    shift.add_argument("--memory", type=_positive_float, default=1.0, help="pods' memory use times this")
    shift.add_argument("--cpu", type=_positive_float, default=1.0, help="pods' CPU use times this")
    shift.add_argument("--churn", type=float, default=1.0, help="pod arrivals and completions times this")
    shift.add_argument("--end", action="store_true", help="end every shift injected at run time")
    for parser in (errors, latency, drop):
        parser.add_argument(
            "--include-control-plane",
            action="store_true",
            default=None,
            help="also fault kubesim's own node-lifecycle controller (spared by default)",
        )


def _add_token(sub: Any) -> None:
    token = sub.add_parser("token", help="print (or write) a kubeconfig for a ServiceAccount, creating it if needed")
    token.add_argument("service_account", metavar="SA")
    token.add_argument("-n", "--namespace", default="default")
    where = token.add_mutually_exclusive_group(required=_env_kubeconfig() is None)
    where.add_argument("--kubeconfig", type=Path, help="the admin kubeconfig of a running kubesim (default: $KUBECONFIG)")
    where.add_argument("--state-dir", type=Path, help="the state dir of a running kubesim (its admin kubeconfig)")
    token.add_argument("-o", "--output", type=Path, help="write the kubeconfig here (mode 0600) instead of stdout")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="kubesim", description="A simulated Kubernetes 1.23 cluster with DKC (or 1.24+ with simulated hosts)."
    )
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    _add_up(sub)
    _add_fault(sub)
    _add_token(sub)
    return parser


def _up(args: argparse.Namespace, parser: argparse.ArgumentParser) -> int:
    from kubesim.cluster import ClusterConfig, run_cluster
    from kubesim.heap import no_full_collections

    overrides = {f.replace("-", "_"): getattr(args, f.replace("-", "_")) for f in Timings.flag_names()}
    try:
        timings = Timings().with_overrides(time_scale=args.time_scale, **overrides)
    except ValueError as exc:
        parser.error(str(exc))
    if args.cluster is not None and not args.cluster.exists():
        parser.error(f"--cluster: {args.cluster}: no such file")
    config = ClusterConfig(
        nodes=args.nodes,
        kubeconfig=args.kubeconfig.resolve(),
        state_dir=args.state_dir,
        cluster_file=args.cluster,
        port=args.port,
        audit_log=args.audit_log,
        gate_enabled=args.feature_gates.get("DynamicKubeletConfig", True),
        timings=timings,
        ready_timeout=args.ready_timeout,
        allow_failed_nodes=args.allow_failed_nodes,
        kubernetes_version=args.kubernetes_version,
        pods_per_node=args.pods_per_node,
    )
    if args.pods_per_node is not None and args.pods_per_node < 0:
        parser.error("--pods-per-node: must be 0 or more")
    try:
        config.node_specs()
    except (ClusterFileError, VersionError) as exc:
        parser.error(str(exc))

    def announce(running: Any) -> None:
        print(
            f"kubesim ready: server={running.url} kubeconfig={running.kubeconfig} nodes={len(running.specs)}",
            flush=True,
        )

    no_full_collections()  # this process's heap is the simulator's own (kubesim.heap)
    try:
        asyncio.run(run_cluster(config, on_ready=announce))
    except (OSError, RuntimeError) as exc:  # a node cannot start, not Ready in time, port taken, ...
        print(f"kubesim: {exc}", file=sys.stderr)
        return 1
    return 0


def _env_kubeconfig() -> Path | None:
    """$KUBECONFIG, as kubectl reads it (the first file of a list)."""
    first = os.environ.get("KUBECONFIG", "").split(os.pathsep)[0]
    return Path(first) if first else None


def _fault(args: argparse.Namespace, parser: argparse.ArgumentParser) -> int:
    from kubesim.faultclient import FaultClient, FaultError

    try:
        client = FaultClient(args.kubeconfig)
        result = _fault_action(client, args, parser)
    except (ValueError, FaultError) as exc:
        print(f"kubesim fault: {exc}", file=sys.stderr)
        return 1
    print(json.dumps(result, indent=2, sort_keys=True))
    return 0


def _fault_action(client: FaultClient, args: argparse.Namespace, parser: argparse.ArgumentParser) -> dict[str, Any]:
    action = args.action
    if action == "show":
        return client.get()
    if action == "reset":
        return client.reset()
    if action in ("partition", "heal", "never-return"):
        per_node = {"partition": client.partition, "heal": client.heal, "never-return": client.never_return}
        return per_node[action](args.node)
    if action == "slow-restart":
        return client.slow_restart(args.node, args.seconds)
    if action == "api-errors":
        try:
            codes = [int(c) for c in args.codes.split(",") if c.strip()]
        except ValueError:
            parser.error(f"--codes: invalid list {args.codes!r}")
        if not 0 <= args.rate <= 1:
            parser.error("--rate must be between 0 and 1")
        return client.api_errors(
            args.rate,
            codes,
            include_nodes=args.include_nodes,
            retry_after=args.retry_after,
            include_control_plane=bool(args.include_control_plane),
        )
    if action == "latency":
        return client.latency(args.seconds, include_control_plane=args.include_control_plane)
    if action == "shift":
        if args.end:
            return client.end_shifts()
        if args.for_ is None:
            parser.error("shift: --for is required (or --end)")
        return client.shift(pod_start=args.pod_start, memory=args.memory, cpu=args.cpu, churn=args.churn,
                            for_=args.for_, at=args.at)
    if action == "blackhole":
        return client.blackhole(not args.off, include_nodes=args.include_nodes)
    return client.drop_watches(not args.off, include_control_plane=args.include_control_plane)


def _token(args: argparse.Namespace, parser: argparse.ArgumentParser) -> int:
    from kubesim import kubeconfig as kubeconfig_mod
    from kubesim.tokens import TokenError, service_account_kubeconfig

    admin: Path | None = args.kubeconfig or (args.state_dir / "kubeconfig" if args.state_dir else _env_kubeconfig())
    if admin is None:  # only when $KUBECONFIG is unset, and then the parser already asked for one
        parser.error("one of the arguments --kubeconfig --state-dir is required")
    try:
        text = service_account_kubeconfig(admin, args.namespace, args.service_account)
    except (ValueError, TokenError) as exc:
        print(f"kubesim token: {exc}", file=sys.stderr)
        return 1
    if args.output is None:
        sys.stdout.write(text)
    else:
        kubeconfig_mod.write_text(args.output, text)
    return 0


def main(argv: Sequence[str] | None = None) -> None:
    parser = build_parser()
    args = parser.parse_args(argv)
    level = logging.DEBUG if getattr(args, "verbose", False) else logging.WARNING
    logging.basicConfig(level=level, stream=sys.stderr, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    handler = {"up": _up, "fault": _fault, "token": _token}[args.command]
    sys.exit(handler(args, parser))
