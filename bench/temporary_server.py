#!/usr/bin/env python
"""What a temporary Prefect server costs before it answers: the CPU of its process (its own, from
/proc) and the wall time from its start to its first healthy answer, as ``rollout start`` starts
one where no Prefect API is set (``rollout_cli.local.prefect_server.TemporaryServer``), each in a
fresh PREFECT_HOME seeded from the migrated template.

    .venv/bin/python bench/temporary_server.py [--starts 5]

Each start is measured twice in turn: as shipped, and with Prefect registering every block type
in the database as it starts (``PREFECT_SERVER_REGISTER_BLOCKS_ON_START=true``, Prefect's default).
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))
from proc_usage import cpu_seconds  # noqa: E402 - a sibling module of the benchmarks
from rollout_cli.local.prefect_home import template_db  # noqa: E402
from rollout_cli.local.prefect_server import REGISTER_BLOCKS, TemporaryServer  # noqa: E402


def one_start(register_blocks: bool) -> tuple[float, float]:
    """(CPU seconds, wall seconds) of one server, start to its first healthy answer."""
    saved = dict(os.environ)
    os.environ["PREFECT_HOME"] = tempfile.mkdtemp(prefix="bench-prefect-home-")
    for name in REGISTER_BLOCKS:
        os.environ.pop(name, None)
    if register_blocks:
        os.environ[REGISTER_BLOCKS[0]] = "true"
    try:
        began = time.monotonic()
        server = TemporaryServer()
        if not server.wait_ready():
            raise SystemExit("the temporary server did not start")
        wall = time.monotonic() - began
        assert server.process is not None
        cpu = cpu_seconds(server.process.pid)
        server.stop()
        return cpu, wall
    finally:
        os.environ.clear()
        os.environ.update(saved)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--starts", type=int, default=5)
    args = parser.parse_args()
    template_db()  # built once, outside the measurement
    runs: dict[bool, list[tuple[float, float]]] = {False: [], True: []}
    for _ in range(args.starts):
        for register in (False, True):
            runs[register].append(one_start(register))
    for register, label in ((False, "as shipped (no block registration)"), (True, "registering block types")):
        cpu = [c for c, _ in runs[register]]
        wall = [w for _, w in runs[register]]
        print(f"{label}: CPU median {statistics.median(cpu):.2f} s (min {min(cpu):.2f}, max {max(cpu):.2f}), "
              f"ready after median {statistics.median(wall):.2f} s (max {max(wall):.2f}), {len(cpu)} starts")
    return 0


if __name__ == "__main__":
    sys.exit(main())
