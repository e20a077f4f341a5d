"""The Report: frozen data every renderer reads. ``to_dict`` is the JSON contract
(docs/json-report.md, ``schema_version`` 1); renderers never compute, they only format."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, NamedTuple

SCHEMA_VERSION = 1
Verdict = str  # "imbalanced" | "balanced" | "insufficient_data"


JSON_DECIMALS = 6  # floats in the JSON report; the tables format these same rounded values


def rounded(value: float) -> float:
    """A finite float as the JSON report carries it (renderers format this, so a ratio in a
    table is always the JSON's number at fewer digits)."""
    return round(value, JSON_DECIMALS)


def _clean(value: Any) -> Any:
    """JSON has no NaN or infinity: a value that was not measured is null, an infinite ratio
    (the reference did none of it) is the string ``"inf"``, as the tables print ``∞x``."""
    if isinstance(value, float):
        if math.isinf(value):
            return "inf" if value > 0 else "-inf"
        return None if not math.isfinite(value) else rounded(value)
    if isinstance(value, dict):
        return {k: _clean(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_clean(v) for v in value]
    return value


@dataclass(frozen=True)
class UnitReport:
    unit: str
    instance: str
    dp_rank: int | None
    role: str  # "hot" | "stalled" | "starved" | "normal"
    hot_share: float  # share of judged windows in which the unit was hot
    longest_hot_run: int  # consecutive hot windows
    metrics: dict[str, float]
    # Heat signal -> unit / peers: median over the judged windows of the ratio step 1 scores
    # (smoothed signal over the floored peer median); empty when the unit was not scored.
    load_ratios: dict[str, float] = field(default_factory=dict)
    # Per window of the report: the highest of those ratios (NaN where not judged).
    heat_by_window: tuple[float, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        return _clean(  # type: ignore[no-any-return]
            {
                "unit": self.unit,
                "instance": self.instance,
                "dp_rank": self.dp_rank,
                "role": self.role,
                "hot_share": self.hot_share,
                "longest_hot_run": self.longest_hot_run,
                "load_ratios": self.load_ratios,
                "heat_by_window": list(self.heat_by_window),
                **self.metrics,
            }
        )


@dataclass(frozen=True)
class RootCauseRef:
    key: str
    title: str

    def to_dict(self) -> dict[str, str]:
        return {"key": self.key, "title": self.title}


class SideBySide(NamedTuple):
    """One metric of a finding, hot against the median of its peers. ``ratio`` is computed by
    the analysis (inf when the peers did none of it, NaN when not measured): renderers print
    it, they never divide."""

    metric: str
    hot: float
    reference: float
    ratio: float


@dataclass(frozen=True)
class Finding:
    kind: str  # "count" | "weight" | "capability" | "unknown" | "stalled"
    units: tuple[str, ...]
    reference_units: tuple[str, ...]  # the idle/normal peers they were compared against
    severity: str  # "high" | "medium" | "low"
    summary: str
    evidence: dict[str, Any]
    actions: tuple[str, ...]
    root_causes: tuple[RootCauseRef, ...]
    weight_side: str | None = None
    side_by_side: tuple[SideBySide, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        return _clean(  # type: ignore[no-any-return]
            {
                "kind": self.kind,
                "weight_side": self.weight_side,
                "units": list(self.units),
                "reference_units": list(self.reference_units),
                "severity": self.severity,
                "summary": self.summary,
                "root_causes": [c.to_dict() for c in self.root_causes],
                "actions": list(self.actions),
                "evidence": self.evidence,
                "side_by_side": [row._asdict() for row in self.side_by_side],
            }
        )


@dataclass(frozen=True)
class Report:
    verdict: Verdict
    level: str  # "instance" | "dp"
    source: str
    window_s: float
    windows: int
    start_s: float
    end_s: float
    hot_units: tuple[str, ...]
    starved_units: tuple[str, ...]
    units: tuple[UnitReport, ...]
    findings: tuple[Finding, ...]
    transient: tuple[str, ...] = ()  # short bursts seen and dismissed as jitter
    notes: tuple[str, ...] = ()
    missing: tuple[str, ...] = ()
    placed_share: float | None = None
    drilldown: tuple[Report, ...] = ()  # DP-level reports of hot instances (auto level)
    aliases: dict[str, str] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return _clean(  # type: ignore[no-any-return]
            {
                "schema_version": SCHEMA_VERSION,
                "verdict": self.verdict,
                "level": self.level,
                "source": self.source,
                "window_s": self.window_s,
                "windows": self.windows,
                "start_s": self.start_s,
                "end_s": self.end_s,
                "hot_units": list(self.hot_units),
                "starved_units": list(self.starved_units),
                "units": [u.to_dict() for u in self.units],
                "findings": [f.to_dict() for f in self.findings],
                "transient": list(self.transient),
                "notes": list(self.notes),
                "missing": list(self.missing),
                "placed_share": self.placed_share,
                "aliases": self.aliases,
                "drilldown": [d.to_dict() for d in self.drilldown],
            }
        )

    def all_findings(self) -> list[Finding]:
        """Findings of this level and of every drill-down, in report order."""
        out = list(self.findings)
        for d in self.drilldown:
            out.extend(d.all_findings())
        return out
