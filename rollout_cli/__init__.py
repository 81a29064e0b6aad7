"""The `rollout` command: the composition root, the one place that wires the core (``rollout``),
the Prefect flows (``flows``) and, for the demo, the simulated cluster (``kubesim``) together."""
