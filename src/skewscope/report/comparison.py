"""The Comparison (``skewscope compare BEFORE AFTER``): frozen data every renderer reads; no
words (its notes are facts): ``document.compare_document`` builds its JSON contract
(docs/json-report.md, *compare*) from it, renderers only format."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from skewscope.catalogue import CompareVerdict
from skewscope.report.facts import Note
from skewscope.report.model import _clean, utc


@dataclass(frozen=True)
class Figures:
    """One signal on one side: how unequal the units are, and its fleet tail."""

    hot_peer_ratio: float  # the focus unit over its peers' median, per window, median over them
    worst_ratio: float  # the same for the most unequal unit (max of r and 1/r; latency: r), >= 1
    max_median: float  # highest unit mean over the median unit mean
    cv: float  # coefficient of variation of the unit means
    p95: float  # over every (window, unit) value
    p99: float

    def to_dict(self) -> dict[str, Any]:
        return _clean(  # type: ignore[no-any-return]
            {
                "hot_peer_ratio": self.hot_peer_ratio,
                "worst_ratio": self.worst_ratio,
                "max_median": self.max_median,
                "cv": self.cv,
                "p95": self.p95,
                "p99": self.p99,
            }
        )


@dataclass(frozen=True)
class SignalComparison:
    signal: str  # a catalogue.SERIES key
    before: Figures
    after: Figures
    verdict: CompareVerdict

    def to_dict(self) -> dict[str, Any]:
        return {
            "signal": self.signal,
            "before": self.before.to_dict(),
            "after": self.after.to_dict(),
            "verdict": self.verdict,
        }


@dataclass(frozen=True)
class Side:
    """What one side of the comparison was: the report it came from, in brief."""

    label: str  # the path or range given on the command line
    verdict: str  # as the report's JSON document says (a saved report is read back too)
    level: str
    source: str
    window_s: float
    windows: int
    start_s: float
    end_s: float
    hot_units: tuple[str, ...]
    starved_units: tuple[str, ...]
    units: tuple[str, ...]

    def to_dict(self) -> dict[str, Any]:
        return _clean(  # type: ignore[no-any-return]
            {
                "label": self.label,
                "verdict": self.verdict,
                "level": self.level,
                "source": self.source,
                "window_s": self.window_s,
                "windows": self.windows,
                "start_s": self.start_s,
                "end_s": self.end_s,
                "start": utc(self.start_s),
                "end": utc(self.end_s),
                "hot_units": list(self.hot_units),
                "starved_units": list(self.starved_units),
                "units": list(self.units),
            }
        )


@dataclass(frozen=True)
class GatewayShare:
    """A followed unit's share of the gateway's requests on each side (NaN: that side has no
    gateway evidence or the gateway did not list the unit): did the router change?"""

    unit: str
    before: float
    after: float
    source_before: str | None
    source_after: str | None

    def to_dict(self) -> dict[str, Any]:
        return _clean(  # type: ignore[no-any-return]
            {
                "unit": self.unit,
                "before": self.before,
                "after": self.after,
                "source_before": self.source_before,
                "source_after": self.source_after,
            }
        )


@dataclass(frozen=True)
class Comparison:
    verdict: CompareVerdict
    before: Side
    after: Side
    focus_units: tuple[str, ...]  # the units whose hot/peer ratio is followed
    signals: tuple[SignalComparison, ...]
    notes: tuple[Note, ...] = ()
    gateway: tuple[GatewayShare, ...] = ()  # per followed unit, when either side had a gateway
