"""How monitoring code reads a Report: every level's units, and the hot ones with their kind.

Pure look-ups over the Report (with its drill-down), shared by the exporter, the live screen
and incident tracking so they agree on what "hot" means: the analysis' ``hot_units``.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from dataclasses import dataclass

from skewscope.catalogue import LOAD_SIGNALS, Kind
from skewscope.report import document
from skewscope.report.facts import StaleLoadFacts, StarvedFacts
from skewscope.report.model import Finding, Report, UnitReport

FLEET = "fleet"  # the unit an instance-level stale-load alarm names: the fleet's gateway


@dataclass(frozen=True)
class HotUnit:
    unit: str
    level: str  # a catalogue.Level (incidents key on it with levels read back from JSON)
    kind: Kind  # its finding's kind (unknown: none)
    ratio: float  # its load ratio, see ``load_ratio``
    summary: str  # the finding's one-paragraph summary
    report: UnitReport


def levels(report: Report) -> Iterator[Report]:
    """The report and its DP drill-downs, depth first."""
    yield report
    for d in report.drilldown:
        yield from levels(d)


def judged_units(report: Report) -> Iterator[tuple[str, UnitReport]]:
    """(level, unit) for every unit of every level of the report."""
    for r in levels(report):
        for u in r.units:
            yield r.level, u


def load_ratio(unit: UnitReport) -> float:
    """The unit's headline unit / peers ratio: the higher of requests and tokens; where the
    source has no per-unit request or token counts (SGLang DP ranks), the highest heat signal.
    NaN when the unit was not scored."""
    for keys in (LOAD_SIGNALS, tuple(unit.load_ratios)):
        finite = [
            unit.load_ratios[k]
            for k in keys
            if k in unit.load_ratios and math.isfinite(unit.load_ratios[k])
        ]
        if finite:
            return max(finite)
    return math.nan


def hot_units(report: Report) -> list[HotUnit]:
    """Every persistent hot unit of every level, in report order."""
    out = []
    for r in levels(report):
        by_unit = {u.unit: u for u in r.units}
        finding: dict[str, Finding] = {}
        for each in r.findings:  # a unit's own skew finding first (a kv_shortage one follows)
            for unit in each.units:
                finding.setdefault(unit, each)
        for name in r.hot_units:
            f = finding.get(name)
            u = by_unit[name]
            out.append(
                HotUnit(
                    unit=name,
                    level=r.level,
                    kind=f.kind if f else Kind.UNKNOWN,
                    ratio=load_ratio(u),
                    summary=document.summary(f) if f else "",
                    report=u,
                )
            )
    return out


@dataclass(frozen=True)
class Alarm:
    """What watch opens an incident for: a persistent hot unit (its finding's kind), a starved
    unit (``Kind.STARVED``) or a group whose units take turns carrying its load
    (``Kind.STALE_LOAD``, named by the group: the instance whose DP balancer decides on late
    counts, ``FLEET`` for the gateway)."""

    unit: str
    level: str
    kind: Kind
    ratio: float  # the hot or starved unit's load ratio; the stale group's range ratio
    summary: str


def alarms(report: Report) -> list[Alarm]:
    """Every alarm of every level, in report order: hot units, starved units, stale groups."""
    out = [Alarm(h.unit, h.level, h.kind, h.ratio, h.summary) for h in hot_units(report)]
    for r in levels(report):
        by_unit = {u.unit: u for u in r.units}
        for f in r.findings:
            if isinstance(f.facts, StaleLoadFacts):
                out.append(
                    Alarm(
                        f.facts.group or FLEET,
                        r.level,
                        Kind.STALE_LOAD,
                        f.facts.range_ratio,
                        document.summary(f),
                    )
                )
            elif isinstance(f.facts, StarvedFacts):
                out.extend(
                    Alarm(u, r.level, Kind.STARVED, load_ratio(by_unit[u]), document.summary(f))
                    for u in f.units
                    if u in by_unit
                )
    return out


def gateway_shares(report: Report) -> dict[tuple[str, str], tuple[str, float]]:
    """(unit, level) -> (gateway source, the gateway's share of requests to it), for every
    level whose report joined gateway evidence."""
    out: dict[tuple[str, str], tuple[str, float]] = {}
    for r in levels(report):
        if r.gateway is not None:
            for g in r.gateway.units:
                if g.unit is not None and math.isfinite(g.router_share):
                    out[g.unit, r.level] = (r.gateway.source, g.router_share)
    return out
