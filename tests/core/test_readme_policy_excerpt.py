"""The README's excerpt of the shipped canary's checks says "as canary.yaml writes them": it must.

It went stale once (an old evictions query with a 0 outside the sum, pod starts at 0.98) while the
shipped file moved on; a reader copying it got the checks the benchmark had measured as worse.
"""

from __future__ import annotations

import re
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[2]
LEAD = "Two of them, as `canary.yaml` writes them"


def readme_excerpt() -> dict:
    text = (ROOT / "README.md").read_text()
    start = text.index(LEAD)
    block = re.search(r"```yaml\n(.*?)```", text[start:], re.S)
    assert block, "the excerpt's yaml block is gone"
    return yaml.safe_load(block.group(1))


def test_the_readme_excerpt_of_the_canary_checks_is_the_shipped_file() -> None:
    excerpt = readme_excerpt()["analysis"]
    shipped = yaml.safe_load((ROOT / "policies" / "canary.yaml").read_text())["analysis"]
    checks = {c["name"]: c for c in shipped["checks"]}
    assert excerpt["checks"], "the excerpt shows no check"
    for check in excerpt["checks"]:
        assert check == checks[check["name"]], f"README's {check['name']} is not canary.yaml's"
    assert excerpt["onInconclusive"] == shipped["onInconclusive"]
    for key, value in excerpt["prometheus"].items():
        assert shipped["prometheus"][key] == value, f"README's prometheus.{key} is not canary.yaml's"
