"""The one place a diagnosis ``Report`` is put together (``judge`` decides what it holds).

Every report of a frame carries the frame's facts (``FrameFacts``: what was read, the range
judged, the thresholds); the verdict follows from how the judging ended: judged (imbalanced
when anything was found), a hung unit in data too thin to judge skew, or not judged at all.
The per-unit rows are built here too, in full or as identity and role only.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

import numpy as np

from skewscope.analysis.detect import UnitHeat
from skewscope.analysis.findings import stall_findings
from skewscope.analysis.matrix import Flags, SignalMatrix, median
from skewscope.analysis.stall import Stall
from skewscope.analysis.summary import unit_bounds, unit_summary
from skewscope.catalogue import Role, Verdict
from skewscope.config import Thresholds
from skewscope.frame import Level, UnitFrame
from skewscope.report.facts import Note, NoteCode
from skewscope.report.model import (
    Episode,
    Finding,
    FleetSummary,
    Report,
    Series,
    SkewPrice,
    UnitReport,
)


@dataclass(frozen=True)
class FrameFacts:
    """What every report of one frame carries, whatever was found: the frame's identity, the
    range judged (no windows and NaN times until its matrix is built: ``spanning``) and the
    thresholds it was judged with."""

    level: Level
    source: str
    window_s: float
    missing: tuple[str, ...]
    placed_share: float | None
    aliases: dict[str, str]
    thresholds: dict[str, float]
    thresholds_overridden: tuple[str, ...]
    windows: int = 0
    start_s: float = math.nan
    end_s: float = math.nan

    @classmethod
    def of(cls, frame: UnitFrame, th: Thresholds) -> FrameFacts:
        return cls(
            level=frame.level,
            source=frame.source,
            window_s=frame.window_s,
            missing=frame.missing,
            placed_share=frame.placed_share,
            aliases=dict(frame.aliases),
            thresholds=th.as_dict(),
            thresholds_overridden=th.overridden(),
        )

    def spanning(self, m: SignalMatrix) -> FrameFacts:
        """The same facts over the windows of the frame's matrix."""
        return replace(
            self,
            windows=len(m.windows),
            start_s=float(m.windows[0]),
            end_s=float(m.windows[-1] + self.window_s),
        )


def judged_report(
    facts: FrameFacts,
    *,
    findings: tuple[Finding, ...],
    hot_units: tuple[str, ...],
    starved_units: tuple[str, ...],
    units: tuple[UnitReport, ...],
    notes: tuple[Note, ...],
    transient: tuple[Note, ...],
    episodes: tuple[Episode, ...],
    series: Series | None,
    fleet: FleetSummary | None,
    skew_price: tuple[SkewPrice, ...],
) -> Report:
    """A judged frame: imbalanced when anything was found, else balanced."""
    return _report(
        facts,
        Verdict.IMBALANCED if findings else Verdict.BALANCED,
        hot_units=hot_units,
        starved_units=starved_units,
        units=units,
        findings=findings,
        notes=notes,
        transient=transient,
        episodes=episodes,
        series=series,
        fleet=fleet,
        skew_price=skew_price,
    )


def stalled_report(
    m: SignalMatrix,
    facts: FrameFacts,
    notes: tuple[Note, ...],
    reason: Note,
    stalls: list[Stall],
) -> Report:
    """Too little finished traffic to judge skew, but a unit is hung: that is the finding."""
    stalled = {s.index for s in stalls}
    every = np.ones(len(m.windows), dtype=bool)
    units = tuple(
        unit_report(m, j, None, Role.STALLED if j in stalled else Role.NORMAL, every)
        for j in range(len(m.units))
    )
    return _report(
        facts,
        Verdict.IMBALANCED,
        hot_units=tuple(s.unit for s in stalls),
        starved_units=(),
        units=units,
        findings=tuple(stall_findings(m, stalls)),
        notes=(*notes, Note(NoteCode.SKEW_NOT_JUDGED, {"reason": reason})),
    )


def insufficient_report(
    facts: FrameFacts,
    notes: tuple[Note, ...],
    reason: Note,
    units: tuple[UnitReport, ...] = (),
) -> Report:
    """Not judged: the first note says why."""
    return _report(
        facts,
        Verdict.INSUFFICIENT_DATA,
        hot_units=(),
        starved_units=(),
        units=units,
        findings=(),
        notes=(reason, *notes),
    )


def _report(
    facts: FrameFacts,
    verdict: Verdict,
    *,
    hot_units: tuple[str, ...],
    starved_units: tuple[str, ...],
    units: tuple[UnitReport, ...],
    findings: tuple[Finding, ...],
    notes: tuple[Note, ...],
    transient: tuple[Note, ...] = (),
    episodes: tuple[Episode, ...] = (),
    series: Series | None = None,
    fleet: FleetSummary | None = None,
    skew_price: tuple[SkewPrice, ...] = (),
) -> Report:
    return Report(
        verdict=verdict,
        level=facts.level,
        source=facts.source,
        window_s=facts.window_s,
        windows=facts.windows,
        start_s=facts.start_s,
        end_s=facts.end_s,
        hot_units=hot_units,
        starved_units=starved_units,
        units=units,
        findings=findings,
        transient=transient,
        notes=notes,
        missing=facts.missing,
        placed_share=facts.placed_share,
        aliases=facts.aliases,
        episodes=episodes,
        series=series,
        skew_price=skew_price,
        fleet=fleet,
        thresholds=facts.thresholds,
        thresholds_overridden=facts.thresholds_overridden,
    )


def unit_report(
    m: SignalMatrix, j: int, heat: UnitHeat | None, role: Role, mask: Flags
) -> UnitReport:
    return UnitReport(
        unit=m.units[j],
        instance=m.instances[j],
        dp_rank=m.dp_ranks[j],
        role=role,
        hot_share=heat.hot_share if heat else math.nan,
        longest_hot_run=heat.hot_run if heat else 0,
        metrics=unit_summary(m, j, mask),
        load_ratios=_load_ratios(heat) if heat else {},
        heat_by_window=tuple(np.where(heat.active, heat.score, np.nan).tolist()) if heat else (),
        bounds=unit_bounds(m, j, mask),
        pool=m.pools[j] or None if m.pools else None,
    )


def unit_identity(
    m: SignalMatrix, j: int, heat: UnitHeat | None, role: Role, mask: Flags
) -> UnitReport:
    """A unit's identity and role only (``detail=False``: a drill that may be dropped)."""
    return UnitReport(
        unit=m.units[j],
        instance=m.instances[j],
        dp_rank=m.dp_ranks[j],
        role=role,
        hot_share=heat.hot_share if heat else math.nan,
        longest_hot_run=heat.hot_run if heat else 0,
        metrics={},
        pool=m.pools[j] or None if m.pools else None,
    )


def _load_ratios(heat: UnitHeat) -> dict[str, float]:
    """Unit / peers per heat signal: the median of the scored ratio over the judged windows."""
    out: dict[str, float] = {}
    for sig, ratio in heat.ratios.items():
        vals = ratio[heat.active & np.isfinite(ratio)]
        out[sig] = median(vals) if vals.size else math.nan
    return out
