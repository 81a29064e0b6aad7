"""`rollout prometheus`: a Prometheus for the analysis checks in one command, and its node
discovery on its own (`rollout prometheus sd`) for a Prometheus of your own.

`rollout prometheus --kubeconfig KC` starts Debian's ``prometheus`` on loopback, scraping every
kubelet of the cluster through the API server's node proxy with the kubeconfig's credentials
(``deployments/prometheus/prometheus-http-sd.yml`` with this machine's values put in: see
``local_prometheus``), waits until it has scraped them, prints the URL to give ``rollout start``,
and runs until Ctrl-C or SIGTERM; then it stops Prometheus and removes its data. A rehearsal
(``--time-scale F``, or ``$KUBELET_ROLLOUT_TIME_SCALE``) scrapes F times more often than the
shipped 15 s, as the policies' checks measure F times more often: ``rollout start`` refuses a
check whose window holds fewer than two scrapes.

Prometheus runs in a session of its own: a terminal's Ctrl-C reaches only this command, which
stops it; a watchdog stops it if this command is killed.
"""

from __future__ import annotations

import signal
import socket
import time
from datetime import timedelta
from types import FrameType
from typing import Optional

import typer

from rollout import flags
from rollout.errors import FlagError, GatewayError
from rollout.policy import format_duration
from rollout_cli.help import RolloutTyper
from rollout_cli.base import EXIT_INTERRUPTED, ContextOpt, KubeconfigOpt, checked
from rollout_cli.console import fail, err, out

DEFAULT_PORT = 9090

app = RolloutTyper(name="prometheus", invoke_without_command=True, no_args_is_help=False,
                  subcommand_metavar="[sd [OPTIONS]]")


class _Stopped(Exception):
    """Ctrl-C or SIGTERM: stop what was started, and end."""


def _stop_on_signals() -> None:
    """SIGINT and SIGTERM end the wait (``_Stopped``); the stop itself is not interrupted again."""

    def stop(signum: int, frame: Optional[FrameType]) -> None:
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        raise _Stopped()

    signal.signal(signal.SIGINT, stop)
    signal.signal(signal.SIGTERM, stop)


def _port_free(port: int) -> bool:
    """Nothing listens on 127.0.0.1:PORT (a connection of a Prometheus stopped a moment ago, still in
    TIME_WAIT, does not count: Prometheus binds through it as this does)."""
    with socket.socket() as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


@app.callback()
def serve(
    ctx: typer.Context,
    kubeconfig: Optional[str] = KubeconfigOpt,
    context: Optional[str] = ContextOpt,
    port: int = typer.Option(DEFAULT_PORT, "--port", callback=checked(flags.port),
                             help="The loopback port Prometheus listens on (0: a free one)."),
    time_scale: Optional[float] = typer.Option(
        None, "--time-scale", envvar="KUBELET_ROLLOUT_TIME_SCALE", callback=checked(flags.time_scale),
        help="A rehearsal on kubesim at xF: scrape F times more often than the shipped 15s, as the policies' "
             "checks measure F times more often."),
) -> None:
    """A Prometheus on this machine scraping every kubelet of a cluster, for the analysis checks.

    Starts Debian's prometheus on 127.0.0.1:PORT scraping every kubelet through the API server's node proxy with
    the kubeconfig's credentials (they must list nodes and get nodes/proxy), prints the URL to export as
    KUBELET_ROLLOUT_PROMETHEUS_URL once it scraped them, and runs until Ctrl-C or SIGTERM (exit 0); then stops it
    and removes its data. `rollout prometheus sd`: only its node discovery, for a Prometheus of your own."""
    if ctx.invoked_subcommand is not None:
        return
    _serve(kubeconfig, context, port, time_scale)


def _serve(kubeconfig: Optional[str], context: Optional[str], port: int, time_scale: Optional[float]) -> None:
    from rollout_cli.local.prometheus import SHIPPED_SCRAPE_INTERVAL, ClusterAccess, LocalPrometheus, LocalPrometheusError

    if port and not _port_free(port):
        raise FlagError(f"port {port} of 127.0.0.1 is taken (a Prometheus runs there already?)", source="--port",
                        advice="give another --port (0: a free one), or use the Prometheus that runs there")
    interval = SHIPPED_SCRAPE_INTERVAL / (time_scale or 1)
    access = ClusterAccess(kubeconfig, context)
    try:
        nodes = access.check()
    finally:
        access.close()
    _stop_on_signals()
    prometheus = LocalPrometheus(kubeconfig, context=context, scrape_interval_s=interval.total_seconds(), port=port)
    ready = False
    try:
        prometheus.start()
        health = prometheus.wait_scraped(nodes)
        ready = True  # from here a Ctrl-C is the way it ends, even one typed as the URL is printed
        _say_ready(prometheus.url, access.server, nodes, health, interval, SHIPPED_SCRAPE_INTERVAL, time_scale)
        while prometheus.process is not None and prometheus.process.poll() is None:
            time.sleep(0.5)
        assert prometheus.process is not None
        raise LocalPrometheusError(f"prometheus exited ({prometheus.process.returncode}): {prometheus.log_tail()}")
    except _Stopped:
        pass
    except LocalPrometheusError as exc:
        fail(1, str(exc))
    finally:
        prometheus.stop()
    err.print(f"stopped: the Prometheus at {prometheus.url} and its data are gone", highlight=False, soft_wrap=True)
    if not ready:
        raise typer.Exit(EXIT_INTERRUPTED)


def _say_ready(url: str, server: str, nodes: int, health: dict[str, tuple[str, str]], interval: timedelta,
               shipped: timedelta, time_scale: Optional[float]) -> None:
    from rollout.prometheus import ENV_URL

    up = sorted(node for node, (state, _) in health.items() if state == "up")
    failing = sorted((node, error) for node, (state, error) in health.items() if state == "down")
    if nodes and not up and failing:
        node, error = failing[0]
        raise GatewayError(f"Prometheus could scrape none of the {nodes} kubelets of {server} ({node}: {error})",
                           advice="the kubeconfig's credentials must get nodes/proxy: use the ServiceAccount of "
                                  "deployments/kubernetes/prometheus-rbac.yaml, or your own")
    scaled = time_scale and time_scale != 1
    every = format_duration(interval) + (f" ({format_duration(shipped)} / {time_scale:g})" if scaled else "")
    out.print(f"prometheus ready: url={url} kubelets={nodes} up={len(up)} scrape_interval={format_duration(interval)} "
              f"server={server}", highlight=False, soft_wrap=True)
    out.print(f"  scrapes every kubelet every {every} through the API server's node proxy; the analysis asks it with\n"
              f"  export {ENV_URL}={url}    (or: rollout start --prometheus {url} ...)\n"
              "  Ctrl-C stops it and removes its data", highlight=False, soft_wrap=True)
    if failing:
        node, error = failing[0]
        err.print(f"warning: {len(failing)} of {nodes} kubelets not scraped yet ({node}: {error})", highlight=False,
                  soft_wrap=True)


@app.command("sd")
def sd(
    kubeconfig: Optional[str] = KubeconfigOpt,
    context: Optional[str] = ContextOpt,
    listen: str = typer.Option("127.0.0.1:9101", "--listen",
                               help="HOST:PORT to serve the targets on (GET /targets); the shipped "
                                    "prometheus-http-sd.yml asks 127.0.0.1:9101."),
) -> None:
    """Serve Prometheus' HTTP service discovery (http_sd_configs) of the cluster's nodes, labelled as
    kubernetes_sd_configs role node labels them, for deployments/prometheus/prometheus-http-sd.yml; runs until
    Ctrl-C or SIGTERM (exit 0). The nodes are listed with the kubeconfig's credentials."""
    _serve_sd(kubeconfig, context, listen)


def _serve_sd(kubeconfig: Optional[str], context: Optional[str], listen: str) -> None:
    from rollout_cli.local.prometheus import ClusterAccess, NodeTargets

    host, port = flags.listen_address(listen)
    access = ClusterAccess(kubeconfig, context)
    try:
        nodes = access.check()
        try:
            targets = NodeTargets(access.list_nodes, host=host, port=port)
        except OSError as exc:
            raise FlagError(f"cannot listen on {listen}: {exc.strerror or exc}", source="--listen",
                            advice="give another HOST:PORT (port 0: a free one)") from None
        _stop_on_signals()
        try:
            targets.start()
            out.print(f"node discovery ready: url={targets.url} nodes={nodes} server={access.server}",
                      highlight=False, soft_wrap=True)
            out.print("  Prometheus asks it with http_sd_configs (deployments/prometheus/prometheus-http-sd.yml); "
                      "Ctrl-C stops it", highlight=False, soft_wrap=True)
            while True:
                time.sleep(3600)
        except _Stopped:
            pass
        finally:
            targets.stop()
    finally:
        access.close()
    err.print("stopped", highlight=False)

