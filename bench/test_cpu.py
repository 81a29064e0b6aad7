"""Where the test suite's CPU goes, by file: the sums of a run's per-test log.

    ROLLOUT_TEST_CPU_LOG=/tmp/cpu.jsonl make test
    .venv/bin/python bench/test_cpu.py /tmp/cpu.jsonl

CI has two CPUs and 20 minutes for the whole run, so the suite's CPU, not its wall time under six
workers, is what has to fit (about 2,400 s of it at most).
"""

from __future__ import annotations

import argparse
import collections
import json


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("log", help="the JSON lines ROLLOUT_TEST_CPU_LOG named")
    parser.add_argument("--top", type=int, default=30, help="files (and tests) to list")
    args = parser.parse_args()
    tests = [json.loads(line) for line in open(args.log)]
    by_file: dict[str, list[float]] = collections.defaultdict(lambda: [0.0, 0.0, 0])
    for test in tests:
        row = by_file[test["test"].split("::")[0]]
        row[0] += test["cpu"]
        row[1] += test["wall"]
        row[2] += 1
    total = sum(t["cpu"] for t in tests)
    print(f"{len(tests)} tests, {total:,.0f} s of CPU, {sum(t['wall'] for t in tests):,.0f} s of wall in all")
    print(f"{'cpu s':>8} {'share':>6} {'wall s':>8} {'tests':>6}  file")
    for name, (cpu, wall, count) in sorted(by_file.items(), key=lambda kv: -kv[1][0])[: args.top]:
        print(f"{cpu:8.0f} {cpu / total:6.1%} {wall:8.0f} {count:6d}  {name}")
    print(f"\n{'cpu s':>8} {'wall s':>8}  test")
    for test in sorted(tests, key=lambda t: -t["cpu"])[: args.top]:
        print(f"{test['cpu']:8.0f} {test['wall']:8.0f}  {test['test']}")


if __name__ == "__main__":
    main()
