"""``kubelet-rollout-agent``: run the node agent, or take it off a node.

The composition root of the agent: the only module that builds API clients and hosts from
flags. Three ways to run::

    kubelet-rollout-agent run                       # in the DaemonSet: in-cluster credentials,
                                                    # NODE_NAME from the downward API, host at /host
    kubelet-rollout-agent run --kubeconfig K --node N --host-root R --host-control kubesim
    kubelet-rollout-agent run --kubeconfig K --kubesim-fleet STATE_DIR   # one agent per node

Exit codes: 0 success, 2 invalid flags, 3 API or host problem.
"""

from __future__ import annotations

import logging
import os
import signal
import threading
import time
from dataclasses import replace
from datetime import timedelta
from enum import Enum
from pathlib import Path
from typing import Optional

import typer
from rollout.agent_clock import AgentClock
from rollout.errors import GatewayError
from rollout.gateway import TokenBucket
from rollout.kubeletconfig.values import parse_go_duration

from kubelet_rollout_agent import __version__, names
from kubelet_rollout_agent.agent import Agent, Timing
from kubelet_rollout_agent.api import NodeApi, RawApi, client_from_kubeconfig
from kubelet_rollout_agent.decide import Settings, agent_annotation
from kubelet_rollout_agent.fleet import NodeWatch, WatchedNodeApi
from kubelet_rollout_agent.host import Host, SystemdHost
from kubelet_rollout_agent.install import Layout, uninstall
from kubelet_rollout_agent.kubesim_host import NODE_KUBECONFIG, KubesimHost, kubesim_time_scale

logger = logging.getLogger("kubelet_rollout_agent")

app = typer.Typer(name="kubelet-rollout-agent", no_args_is_help=True, add_completion=False,
                  pretty_exceptions_enable=False,
                  help="Node agent of kubelet-rollout: applies kubelet config as a --config-dir drop-in.")


class HostControl(str, Enum):
    systemd = "systemd"
    kubesim = "kubesim"


class Backend(str, Enum):
    auto = "auto"
    dropin = "drop-in"
    main_file = "main-file"


NodeOpt = typer.Option(None, "--node", envvar="NODE_NAME", help="This node's name (DaemonSet: downward API).")
KubeconfigOpt = typer.Option(None, "--kubeconfig", envvar="KUBECONFIG", help="kubeconfig (default: in-cluster service account).")
HostRootOpt = typer.Option(None, "--host-root", envvar="HOST_ROOT", help="Where the host's / is mounted (default /host).")
HostControlOpt = typer.Option(HostControl.systemd, "--host-control", help="systemd (nsenter) or kubesim (HTTPS).")
ConfigDirOpt = typer.Option(names.DEFAULT_CONFIG_DIR, "--config-dir", help="The kubelet's --config-dir (host path).")
BaseConfigOpt = typer.Option(names.DEFAULT_BASE_CONFIG, "--base-config", help="The kubelet's --config (host path).")
StateDirOpt = typer.Option(names.DEFAULT_STATE_DIR, "--state-dir", help="The agent's state dir (host path, outside --config-dir).")
GuardPythonOpt = typer.Option(names.GUARD_PYTHON, "--guard-python", help="The host's python3 that runs the guard.")
BackendOpt = typer.Option(Backend.auto, "--backend",
                          help="auto: from the kubelet's unit and version on the host (a drop-in where it reads "
                               "--config-dir, else its whole --config file); or drop-in / main-file as given.")


def duration(text: str) -> timedelta:
    """A Go duration flag (``10m``, ``90s``) as a timedelta; typer reports a bad one."""
    try:
        return timedelta(microseconds=parse_go_duration(text) / 1000)
    except ValueError as exc:
        raise typer.BadParameter(str(exc)) from exc


def _layout(config_dir: str, base_config: str, state_dir: str, python: str,
            backend: Backend = Backend.auto) -> Layout:
    return Layout(config_dir=config_dir, state_dir=state_dir, base_config=base_config, python=python,
                  backend=backend.value)


def _node_raw(root: Path) -> RawApi:
    """Requests with a simulated host's own credentials, as a real agent on it would have."""
    return RawApi(client_from_kubeconfig(str(root / NODE_KUBECONFIG.lstrip("/"))))


def _kubesim_host(node: str, root: Path) -> KubesimHost:
    """A simulated host driven with the node's own credentials."""
    return KubesimHost(node, root=root, raw=_node_raw(root))


def _host_time_scale(kubeconfig: str | None, fleet: Path | None, host_root: Path | None,
                     control: HostControl) -> float:
    """How many times faster than the wall clock the hosts' clock runs: kubesim's factor on
    simulated hosts (their kubelets restart and crash on it), 1 on a real node."""
    if fleet is not None:
        return kubesim_time_scale(RawApi(client_from_kubeconfig(kubeconfig)))
    if control is HostControl.kubesim and host_root is not None:
        return kubesim_time_scale(_node_raw(host_root))
    return 1.0


def _chosen_time_scale(given: float | None, host: float) -> float:
    """``--time-scale``, or the host's own clock; never faster than the host's clock."""
    if given is None:
        return host
    if given > host:
        clock = "a real node's clock (x1)" if host == 1 else f"kubesim's clock (x{host:g})"
        raise typer.BadParameter(f"x{given:g} is faster than {clock}: the agent would give its kubelet less "
                                 f"time than a real one gets; give {host:g} or less, or leave it out",
                                 param_hint="--time-scale")
    return given


def _wall_clock(settings: Settings, timing: Timing, time_scale: float, *, config_dir: str) -> tuple[Settings, Timing]:
    """The flags' durations as wall-clock waits, and the advertisement that tells them."""
    settings, timing = settings.on_clock(time_scale), timing.on_clock(time_scale)
    clock = AgentClock(health_wait=settings.health_wait, trial=settings.trial, tick=timing.tick, time_scale=time_scale)
    if time_scale != 1:
        logger.info("on the hosts' clock, x%g: --trial %gs, --health-deadline %gs, --health-wait %gs, --tick %gs and "
                    "--resync %gs of wall-clock time", time_scale, *(d.total_seconds() for d in (
                        settings.trial, settings.health_deadline, settings.health_wait, timing.tick, timing.resync)))
    annotation = agent_annotation(version=__version__, config_dir=config_dir, clock=clock)
    return replace(settings, agent_annotation=annotation), timing


def _host(node: str, root: Path | None, control: HostControl, api: NodeApi | None) -> Host:
    if control is HostControl.kubesim:
        if root is None:
            raise typer.BadParameter("--host-control kubesim needs --host-root")
        return _kubesim_host(node, root)
    return SystemdHost(node, root=root or Path("/host"), configz=api.configz if api else lambda: None)


def _agent(api: NodeApi, host: Host, layout: Layout, settings: Settings, timing: Timing) -> Agent:
    return Agent(api=api, host=host, layout=layout, settings=settings, timing=timing)


def _fleet_nodes(state_dir: Path) -> dict[str, Path]:
    """kubesim's host roots: ``<state-dir>/nodes/<node>/host``."""
    hosts = {p.parent.name: p for p in sorted((state_dir / "nodes").glob("*/host")) if p.is_dir()}
    if not hosts:
        raise typer.BadParameter(f"no simulated hosts under {state_dir}/nodes/*/host", param_hint="--kubesim-fleet")
    return hosts


def _stop_on_signals() -> threading.Event:
    stop = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: stop.set())
    return stop


# After SIGTERM the agents get this long in all to finish their step; then the process ends (a
# kubelet's stop timeout is 5 s too). An agent still waiting on its Node watch (up to --resync) or
# mid-step ends with the process: it writes its state ahead of every action, so the next start
# carries on as after a kill -9 (tests/agent kill it at every step).
STOP_WITHIN_S = 4.0


def _run_all(agents: list[Agent], stop: threading.Event) -> None:
    """Each agent in its own thread until ``stop`` (SIGINT/SIGTERM)."""
    threads = [threading.Thread(target=a.run, args=(stop,), name=f"agent-{a.node}", daemon=True)
               for a in agents]
    for thread in threads:
        thread.start()
    while any(t.is_alive() for t in threads) and not stop.wait(1.0):
        pass
    stop.set()
    deadline = time.monotonic() + STOP_WITHIN_S  # in all: a thousand agents share it
    for thread in threads:
        thread.join(timeout=max(0.0, deadline - time.monotonic()))


def _fleet(hosts: dict[str, Path], kubeconfig: str | None, shared_watch: bool, stop: threading.Event,
           layout: Layout, settings: Settings, timing: Timing) -> list[Agent]:
    """One agent per simulated host, sharing one client (its rate limit grows with the fleet)."""
    client = client_from_kubeconfig(kubeconfig, pool_size=min(len(hosts), 128))
    raw = RawApi(client, rate_limiter=TokenBucket(qps=2.0 * len(hosts), burst=4 * len(hosts)))
    if not shared_watch:
        return [_agent(NodeApi(raw, name), _kubesim_host(name, root), layout, settings, timing)
                for name, root in hosts.items()]
    watch = NodeWatch(raw, timeout_s=max(60.0, timing.resync.total_seconds()))
    watch.start(stop)
    return [_agent(WatchedNodeApi(raw, name, watch), _kubesim_host(name, root), layout, settings, timing)
            for name, root in hosts.items()]


@app.command()
def run(
    node: Optional[str] = NodeOpt,
    kubeconfig: Optional[str] = KubeconfigOpt,
    host_root: Optional[Path] = HostRootOpt,
    host_control: HostControl = HostControlOpt,
    kubesim_fleet: Optional[Path] = typer.Option(None, "--kubesim-fleet", help="kubesim state dir: one agent per simulated host, in this process."),
    config_dir: str = ConfigDirOpt,
    base_config: str = BaseConfigOpt,
    state_dir: str = StateDirOpt,
    guard_python: str = GuardPythonOpt,
    backend: Backend = BackendOpt,
    trial: str = typer.Option("10m", "--trial", help="Soak before a config becomes last-known-good."),
    health_deadline: str = typer.Option("2m", "--health-deadline", help="Restart -> healthy and proven, or roll back."),
    health_wait: str = typer.Option("30s", "--health-wait", help="Proven -> up this long without a restart before it is reported active."),
    crash_threshold: int = typer.Option(3, "--crash-threshold", min=1, help="Failed kubelet starts in a trial that mean a crash loop."),
    tick: str = typer.Option("5s", "--tick", help="How often a restart is checked."),
    resync: str = typer.Option("5m", "--resync", help="Longest wait on the Node watch when idle."),
    shared_watch: bool = typer.Option(True, "--shared-watch/--watch-per-agent",
                                      help="With --kubesim-fleet: one Node watch for the whole fleet (cheap at "
                                           "1,000 nodes) or one per agent, as on real nodes."),
    time_scale: Optional[float] = typer.Option(
        None, "--time-scale", min=1.0, max=10_000.0,
        help="How many times faster than the wall clock the durations above pass: by default the hosts' clock "
             "(kubesim's own on simulated hosts, 1 on a real node); 1 takes them as wall-clock time."),
    verbose: bool = typer.Option(False, "--verbose", "-v"),
) -> None:
    """Run the agent for one node (or for every node of a kubesim fleet)."""
    logging.basicConfig(level=logging.DEBUG if verbose else logging.INFO,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    layout = _layout(config_dir, base_config, state_dir, guard_python, backend)
    wait = duration(health_wait)
    if wait <= timedelta(0):
        raise typer.BadParameter("must be longer than 0s: active means the kubelet stayed up through it",
                                 param_hint="--health-wait")
    given = Settings(trial=duration(trial), health_deadline=duration(health_deadline), health_wait=wait,
                     crash_threshold=crash_threshold)
    given_timing = Timing(tick=duration(tick), resync=duration(resync))
    hosts = _fleet_nodes(kubesim_fleet) if kubesim_fleet is not None else None
    stop = _stop_on_signals()
    try:
        scale = _chosen_time_scale(time_scale, _host_time_scale(kubeconfig, kubesim_fleet, host_root, host_control))
        settings, timing = _wall_clock(given, given_timing, scale, config_dir=config_dir)
        if hosts is not None:
            agents = _fleet(hosts, kubeconfig, shared_watch, stop, layout, settings, timing)
        elif node:
            api = NodeApi(RawApi(client_from_kubeconfig(kubeconfig)), node)
            agents = [_agent(api, _host(node, host_root, host_control, api), layout, settings, timing)]
        else:
            raise typer.BadParameter("--node (or NODE_NAME) is required without --kubesim-fleet")
        _run_all(agents, stop)
    except (GatewayError, OSError) as exc:
        typer.echo(f"kubelet-rollout-agent: {exc}", err=True)
        raise typer.Exit(3) from exc


@app.command("uninstall")
def uninstall_command(
    node: Optional[str] = NodeOpt,
    kubeconfig: Optional[str] = KubeconfigOpt,
    host_root: Optional[Path] = HostRootOpt,
    host_control: HostControl = HostControlOpt,
    config_dir: str = ConfigDirOpt,
    base_config: str = BaseConfigOpt,
    state_dir: str = StateDirOpt,
) -> None:
    """Remove the guard, its unit drop-in and our kubelet drop-in; restart onto the base config."""
    layout = _layout(config_dir, base_config, state_dir, names.GUARD_PYTHON)
    node = node or os.uname().nodename
    in_pod = bool(os.environ.get("KUBERNETES_SERVICE_HOST"))
    api = NodeApi(RawApi(client_from_kubeconfig(kubeconfig)), node) if kubeconfig or in_pod else None
    host = _host(node, host_root, host_control, api)
    for line in uninstall(host, layout):
        typer.echo(line)
    if api is not None:
        _clear_annotations(api)


def _clear_annotations(api: NodeApi) -> None:
    """The node stops claiming a config: the orchestrator must not read stale status."""
    try:
        api.patch_annotations({key: None for key in (*names.STATUS_ANNOTATIONS, names.ANN_AGENT)})
        typer.echo("cleared the node's kubelet-rollout status annotations")
    except GatewayError as exc:
        typer.echo(f"could not clear the node's annotations: {exc}", err=True)


def main() -> None:
    app()


if __name__ == "__main__":
    main()
