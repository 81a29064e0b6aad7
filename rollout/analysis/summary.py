"""The evidence as people read it: a table, markdown, a few lines for an event or a gate.

One shape for every place the evidence shows (the approval gate's description, the Prefect batch
artifacts, the final report, the ``batch.failed`` event, ``rollout status``): per check its
verdict so far, the counts, and the last measurement's values against its bound (for a
``compare:`` check, per node its median, and the estimated shift, its interval and the p-value).
"""

from __future__ import annotations

from typing import Any

from rollout.analysis.evidence import BatchEvidence, CheckEvidence, comparison_to_json
from rollout.analysis.rules import Measurement

VALUES_SHOWN = 5


def _values(c: CheckEvidence) -> str:
    if not c.measurements:
        return ""
    m = c.measurements[-1]
    shown = ", ".join(f"{k}={v:.4g}" for k, v in m.values[:VALUES_SHOWN])
    more = f" (+{len(m.values) - VALUES_SHOWN})" if len(m.values) > VALUES_SHOWN else ""
    control = f"; control {m.control:.4g}" if m.control is not None else ""
    t = m.comparison
    compared = "" if t is None else \
        f"; shift {t.amount(t.shift)} [{t.amount(t.low)}..{t.amount(t.high)}], p={t.p_value:.2g}"
    return f"{shown}{more}{control}{compared}"


def check_rows(e: BatchEvidence) -> list[dict[str, Any]]:
    """One row per check (a Prefect table artifact, ``rollout status``)."""
    rows = []
    for c in e.checks.values():
        last = c.measurements[-1] if c.measurements else None
        rows.append({
            "check": c.name + (" (dry run)" if c.dry_run else ""),
            "condition": c.condition,
            "measured": c.taken,
            "failed": c.failures,
            "inconclusive": c.inconclusive,
            "last": f"{last.verdict.value}: {last.reason}" if last else "",
            "values": _values(c),
            "at": last.at.isoformat(timespec="seconds") if last else "",
        })
    return rows


def evidence_lines(e: BatchEvidence) -> list[str]:
    """A few lines: the verdict, then per check its counts and last measurement."""
    head = f"analysis of {e.label}: {e.verdict or 'measuring'} ({len(e.nodes)} node(s), control cohort " \
        f"of {len(e.control)}, since {e.started_at.isoformat(timespec='seconds')})"
    lines = [head]
    for c in e.checks.values():
        last = c.measurements[-1] if c.measurements else None
        dry = " [dry run]" if c.dry_run else ""
        said = f": last {last.verdict.value}: {last.reason}" if last else ""
        lines.append(f"check {c.name}{dry} `{c.condition}`: {c.taken} measured, {c.failures} failed, "
                     f"{c.inconclusive} inconclusive{said}")
    return lines


def evidence_markdown(e: BatchEvidence) -> str:
    """A markdown table of the checks with the queries as run (the report, the gate)."""
    lines = [f"**{evidence_lines(e)[0]}**", "", "| check | condition | measured | failed | inconclusive | last |",
             "|---|---|---|---|---|---|"]
    for row in check_rows(e):
        last = f"{row['last']}".replace("|", "\\|")
        lines.append(f"| {row['check']} | `{row['condition']}` | {row['measured']} | {row['failed']} | "
                     f"{row['inconclusive']} | {last} |")
    queries = [f"* `{c.name}`: `{c.measurements[-1].query}`" for c in e.checks.values() if c.measurements]
    return "\n".join(lines + (["", "Queries as run:", *queries] if queries else []))


def evidence_event(e: BatchEvidence) -> dict[str, Any]:
    """What a Prefect event carries: the verdict and per check the last measurement."""
    return {
        "verdict": e.verdict,
        "checks": {c.name: {"dryRun": c.dry_run, "measured": c.taken, "failed": c.failures,
                            "inconclusive": c.inconclusive,
                            "last": _last(c.measurements[-1]) if c.measurements else None}
                   for c in e.checks.values()},
    }


def _last(m: Measurement) -> dict[str, Any]:
    out = {"verdict": m.verdict.value, "reason": m.reason, "query": m.query, "values": dict(m.values),
           "control": m.control, "nodes": list(m.nodes)}
    if m.comparison is not None:
        out["comparison"] = comparison_to_json(m.comparison)
    return out
