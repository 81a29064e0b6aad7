"""kubelet-rollout's node agent: applies the orchestrator's kubelet config as a drop-in file.

Why a separate package: Dynamic Kubelet Config is gone from Kubernetes 1.24+, so on today's
clusters something on the node itself must write the kubelet's ``--config-dir`` drop-in,
restart the kubelet, prove the config took effect and roll it back when it does not. That
program runs on every node, next to the kubelet, so it stays small: it imports only the pure
core of the rollout (``rollout.model``, ``rollout.kubeletconfig``) and the gateway's retry and
rate-limit values, never ``flows``, ``prefect`` or ``kubesim``.

Layout (pure first, effects last)::

    names.py       annotation keys, file names, event reasons (one home for each spelling)
    merge.py       the kubelet's drop-in merge (RFC 7386 over the base, lexical file order)
    readback.py    proof that a drop-in is in effect (configz contains every field it sets)
    stage.py       a downloaded payload -> a validated drop-in, or the reason it is refused
    state.py       the agent's persistent state as a frozen value with ``with_*`` transitions
    decide.py      decide(state, observation, now=...) -> Decision   (pure; the agent's core)
    atomic.py      atomic file writes (temp name without ``.conf``, fsync, rename)
    guard.py       the host-side guard program (stdlib only; copied onto the host)
    install.py     installs/uninstalls the guard and its systemd unit drop-in, idempotently
    host.py        Host protocol + SystemdHost; kubesim_host.py: KubesimHost
    api.py         the agent's API access (raw JSON, tenacity retries, token bucket)
    agent.py       the thin loop: observe -> decide -> act -> persist
    cli.py         ``kubelet-rollout-agent``
"""

__version__ = "0.1.0"
