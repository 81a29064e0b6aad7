"""The local process stack the CLI, the demos, the benchmarks and the tests run on one machine:
``processes`` (free ports, stops, a session of its own and a watchdog for every helper),
``prefect_server`` and ``prefect_home`` (a temporary or private Prefect API), ``postgres`` and
``prometheus`` (real servers on loopback), ``fleet_stack`` (a fleet's Prefect side and kubesim
clusters)."""
