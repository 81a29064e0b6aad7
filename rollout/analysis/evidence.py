"""The evidence of a batch's analysis: every measurement's query, values, control value, verdict
and time, bounded, and its ConfigMap form.

Why apart from the journal: the journal is the rollout's state, written before every action and
kept well under the API server's 1 MiB object limit; measurements pile up at every interval of
every check of every batch. So each batch's evidence is an object of its own
(``kubelet-rollout-analysis-<rollout>-<batch>``, written when a measurement is taken, by
compare-and-swap) and the journal records only the verdict. Bounded: per check the counts of
every outcome and the last ``KEPT_MEASUREMENTS`` measurements (as Argo Rollouts'
``measurementRetention``), each with at most 20 values, the worst first, and for a ``compare:``
check its test and estimate (``comparison``: a few hundred bytes; written only when there is one,
so evidence written before it existed reads as it did, and older readers skip it).
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from datetime import datetime
from types import MappingProxyType
from typing import Any

from rollout.analysis.rules import (
    CheckStatus,
    Comparison,
    Measurement,
    MeasurementVerdict,
    check_verdict,
)
from rollout.analysis.stats import Direction, Summary
from rollout.policy import AnalysisCheck

EVIDENCE_FORMAT = "kubelet-rollout-analysis/v1"
EVIDENCE_KEY = "evidence.json"
KEPT_MEASUREMENTS = 10


@dataclass(frozen=True)
class CheckEvidence:
    """One check's measurements in one batch: counts of every outcome, the last few kept."""

    name: str
    query: str
    condition: str  # with a compare: check's test, confidence and effect: "<= control (mann-whitney at 0.98, effect 20%)"
    no_data: str
    dry_run: bool
    taken: int = 0
    failures: int = 0
    inconclusive: int = 0
    skipped: int = 0
    measurements: tuple[Measurement, ...] = ()

    @classmethod
    def of(cls, check: AnalysisCheck) -> CheckEvidence:
        compared = f" ({check.compare.describe()})" if check.compare is not None else ""
        return cls(check.name, check.query, check.condition + compared, check.no_data.value, check.dry_run)

    def with_measurement(self, m: Measurement) -> CheckEvidence:
        return replace(
            self,
            taken=self.taken + 1,
            failures=self.failures + (m.verdict is MeasurementVerdict.FAIL),
            inconclusive=self.inconclusive + (m.verdict is MeasurementVerdict.INCONCLUSIVE),
            skipped=self.skipped + (m.verdict is MeasurementVerdict.SKIPPED),
            measurements=(*self.measurements, m)[-KEPT_MEASUREMENTS:],
        )

    def status(self, check: AnalysisCheck) -> CheckStatus:
        last = self.measurements[-1] if self.measurements else None
        return check_verdict(check, taken=self.taken, failures=self.failures, inconclusive=self.inconclusive,
                             skipped=self.skipped, last=last)


@dataclass(frozen=True)
class BatchEvidence:
    """A batch's analysis: when its window began, its cohorts, each check's evidence."""

    rollout: str
    batch: int
    label: str
    started_at: datetime
    nodes: tuple[str, ...]
    control: tuple[str, ...]
    checks: Mapping[str, CheckEvidence] = field(default_factory=lambda: MappingProxyType({}))
    verdict: str = ""  # the batch's verdict once it has one, and why

    def with_measurement(self, m: Measurement) -> BatchEvidence:
        checks = dict(self.checks)
        checks[m.check] = checks[m.check].with_measurement(m)
        return replace(self, checks=MappingProxyType(checks))

    def with_verdict(self, verdict: str) -> BatchEvidence:
        return replace(self, verdict=verdict)


# -- the ConfigMap form ---------------------------------------------------------------------


def _measurement_to_json(m: Measurement) -> dict[str, Any]:
    out: dict[str, Any] = {"at": m.at.isoformat(), "verdict": m.verdict.value, "reason": m.reason, "query": m.query,
                           "values": [[k, v] for k, v in m.values]}
    if m.control_query:
        out["controlQuery"] = m.control_query
    for key, value in (("control", m.control), ("bound", m.bound)):
        if value is not None:
            out[key] = value
    if m.nodes:
        out["nodes"] = list(m.nodes)
    if m.no_data:
        out["noData"] = True
    if m.comparison is not None:
        out["comparison"] = comparison_to_json(m.comparison)
    return out


def _number(value: float) -> float | str:
    """JSON has no infinity: a ratio against a control of zeros is "inf" (float() reads it back)."""
    return value if math.isfinite(value) else str(value)


def comparison_to_json(c: Comparison) -> dict[str, Any]:
    """A compared measurement's test and estimate: the evidence's form, and status -o json's."""
    def summary(s: Summary) -> dict[str, Any]:
        return {"n": s.n, "median": _number(s.median), "p95": _number(s.p95)}

    return {"test": c.test, "method": c.method, "harmful": c.harmful.value, "u": _number(c.u), "p": c.p_value,
            "confidence": c.confidence, "relative": c.relative, "shift": _number(c.shift),
            "interval": [_number(c.low), _number(c.high)], "intervalConfidence": c.interval_confidence,
            "band": _number(c.band), "batch": summary(c.batch), "control": summary(c.control),
            "drivers": list(c.drivers)}


def _comparison_from_json(body: Mapping[str, Any] | None) -> Comparison | None:
    if body is None:
        return None

    def summary(s: Mapping[str, Any]) -> Summary:
        return Summary(int(s["n"]), float(s["median"]), float(s["p95"]))

    low, high = body["interval"]
    # a journal written before the interval's confidence was always written left it out where it
    # was the confidence's
    interval_confidence = float(body.get("intervalConfidence", body["confidence"]))
    return Comparison(body["test"], body["method"], Direction(body["harmful"]), float(body["u"]),
                      float(body["p"]), float(body["confidence"]), bool(body["relative"]), float(body["shift"]),
                      float(low), float(high), interval_confidence, float(body["band"]), summary(body["batch"]),
                      summary(body["control"]), tuple(body.get("drivers", ())))


def _measurement_from_json(check: str, body: Mapping[str, Any]) -> Measurement:
    return Measurement(
        check=check, at=datetime.fromisoformat(body["at"]), verdict=MeasurementVerdict(body["verdict"]),
        reason=body["reason"], query=body["query"], values=tuple((k, float(v)) for k, v in body.get("values", ())),
        control_query=body.get("controlQuery", ""), control=body.get("control"), bound=body.get("bound"),
        nodes=tuple(body.get("nodes", ())), no_data=bool(body.get("noData", False)),
        comparison=_comparison_from_json(body.get("comparison")),
    )


def evidence_to_json(e: BatchEvidence) -> dict[str, Any]:
    return {
        "format": EVIDENCE_FORMAT, "rollout": e.rollout, "batch": e.batch, "label": e.label,
        "startedAt": e.started_at.isoformat(), "nodes": list(e.nodes), "control": list(e.control),
        "verdict": e.verdict,
        "checks": [
            {"name": c.name, "query": c.query, "condition": c.condition, "noData": c.no_data, "dryRun": c.dry_run,
             "taken": c.taken, "failures": c.failures, "inconclusive": c.inconclusive, "skipped": c.skipped,
             "measurements": [_measurement_to_json(m) for m in c.measurements]}
            for c in e.checks.values()
        ],
    }


def evidence_to_data(e: BatchEvidence) -> dict[str, str]:
    return {EVIDENCE_KEY: json.dumps(evidence_to_json(e), separators=(",", ":"))}


def evidence_from_data(data: Mapping[str, str]) -> BatchEvidence:
    body = json.loads(data[EVIDENCE_KEY])
    if body.get("format") != EVIDENCE_FORMAT:
        raise ValueError(f"not {EVIDENCE_FORMAT} evidence: {body.get('format')!r}")
    checks = {
        c["name"]: CheckEvidence(c["name"], c["query"], c["condition"], c["noData"], c["dryRun"], c["taken"],
                                 c["failures"], c["inconclusive"], c["skipped"],
                                 tuple(_measurement_from_json(c["name"], m) for m in c["measurements"]))
        for c in body["checks"]
    }
    return BatchEvidence(body["rollout"], body["batch"], body["label"], datetime.fromisoformat(body["startedAt"]),
                         tuple(body["nodes"]), tuple(body["control"]), MappingProxyType(checks), body["verdict"])
