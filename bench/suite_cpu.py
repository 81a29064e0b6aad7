"""Where the test suite's CPU goes, by file: the sums of a run's per-test log.

    ROLLOUT_TEST_CPU_LOG=/tmp/cpu.jsonl make test
    .venv/bin/python bench/suite_cpu.py /tmp/cpu.jsonl

CI has two CPUs and 20 minutes for the whole run, so the suite's CPU, not its wall time under six
workers, is what has to fit (about 2,400 s of it at most). A file's sum is firmer than a test's
figure: a subprocess dropped without a wait is reaped at a later Popen, and its CPU lands there.
"""

from __future__ import annotations

import argparse
import collections
import json
from dataclasses import dataclass
from typing import Any


@dataclass
class FileTotals:
    cpu: float = 0.0
    wall: float = 0.0
    tests: int = 0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("log", help="the JSON lines ROLLOUT_TEST_CPU_LOG named")
    parser.add_argument("--top", type=int, default=30, help="files (and tests) to list")
    args = parser.parse_args()
    with open(args.log) as log:
        tests = [json.loads(line) for line in log]
    by_file: dict[str, FileTotals] = collections.defaultdict(FileTotals)
    for test in tests:
        totals = by_file[test["test"].split("::")[0]]
        totals.cpu += test["cpu"]
        totals.wall += test["wall"]
        totals.tests += 1
    total = sum(t["cpu"] for t in tests)
    print(f"{len(tests)} tests, {total:,.0f} s of CPU, {sum(t['wall'] for t in tests):,.0f} s of wall in all")
    print(f"{'cpu s':>8} {'share':>6} {'wall s':>8} {'tests':>6}  file")
    for name, t in sorted(by_file.items(), key=lambda kv: -kv[1].cpu)[: args.top]:
        print(f"{t.cpu:8.0f} {t.cpu / total:6.1%} {t.wall:8.0f} {t.tests:6d}  {name}")
    print(f"\n{'cpu s':>8} {'wall s':>8}  test")
    for test in sorted(tests, key=lambda t: -t["cpu"])[: args.top]:
        print(f"{test['cpu']:8.0f} {test['wall']:8.0f}  {test['test']}")
    if all("end" in t for t in tests):
        timeline(tests)


def timeline(tests: list[dict[str, Any]]) -> None:
    """Each worker's span, from the suite's first test to its own last, and its last file: where
    one worker's long file goes on after the others are done, the CPUs idle."""
    began = min(t["end"] - t["wall"] for t in tests)
    workers: dict[str, list[dict[str, Any]]] = collections.defaultdict(list)
    for test in tests:
        workers[test["worker"]].append(test)
    print(f"\n{'ends at s':>9} {'busy s':>7} {'tests':>6}  worker: its last file")
    for name, own in sorted(workers.items(), key=lambda kv: max(t["end"] for t in kv[1])):
        last = max(own, key=lambda t: t["end"])
        print(f"{last['end'] - began:9.0f} {sum(t['wall'] for t in own):7.0f} {len(own):6d}  "
              f"{name or '-'}: {last['test'].split('::')[0]}")


if __name__ == "__main__":
    main()
