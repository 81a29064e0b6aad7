"""The README's Permissions table is the manifest, row for row: a rule added to or taken out of
``deployments/kubernetes/rbac.yaml`` without its explanation (or the reverse) fails here."""

from __future__ import annotations

import re
from pathlib import Path

from rbac_rig import Permission, manifest_permissions

README = Path(__file__).resolve().parents[2] / "README.md"


def readme_permissions() -> list[tuple[str, str, str]]:
    """``(verb, resource, namespace)`` of each row of the table under "### Permissions"."""
    section = README.read_text().split("### Permissions", 1)[1].split("\n## ", 1)[0]
    rows = []
    for line in section.splitlines():
        cells = [c.strip().strip("`") for c in line.strip().strip("|").split("|")]
        if len(cells) == 4 and re.fullmatch(r"[a-z]+", cells[0]) and cells[0] != "verb":
            rows.append((cells[0], cells[1], "" if cells[2] == "(cluster)" else cells[2]))
    return rows


def _row(p: Permission) -> tuple[str, str, str]:
    return (p.verb, p.qualified, p.namespace)


def test_the_readme_explains_every_permission_of_the_manifest_and_no_other() -> None:
    rows = readme_permissions()
    assert len(rows) == len(set(rows)), "a permission is explained twice"
    assert sorted(rows) == sorted(_row(p) for p in manifest_permissions())


def test_every_row_says_why() -> None:
    section = README.read_text().split("### Permissions", 1)[1].split("\n## ", 1)[0]
    reasons = [line.rsplit("|", 2)[-2].strip() for line in section.splitlines()
               if line.startswith("| `")]
    assert len(reasons) == len(manifest_permissions()) and all(len(r) > 20 for r in reasons)
