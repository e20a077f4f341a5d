"""Incidents from consecutive runs: a unit (at a level) hot in run N and not in run N+1 ends its
incident at run N+1. A failed run changes nothing (the last good state stands).

Onset is the time of the first run that found the unit hot: the heat itself began up to
``--last`` earlier (a unit is hot only once it runs hot in most of the range).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

from skewscope.monitor.units import hot_units
from skewscope.report.model import Report

COOLED = "cooled"  # a later run no longer found the unit hot
STOPPED = "watch stopped"  # watch stopped (or died) while the unit was still hot


@dataclass(frozen=True)
class Incident:
    unit: str
    level: str
    kind: str  # kind at onset
    onset_s: float
    last_seen_s: float  # last run that found it hot
    peak_ratio: float
    summary: str  # the finding's summary at the peak
    source: str = ""
    end_s: float | None = None
    end_reason: str = ""
    id: int | None = None  # assigned by the history store

    @property
    def key(self) -> tuple[str, str]:
        return self.unit, self.level


def _higher(new: float, old: float) -> bool:
    return math.isfinite(new) and (not math.isfinite(old) or new > old)


class IncidentTracker:
    """Open incidents by (unit, level); ``update`` returns the incidents that changed."""

    def __init__(self, source: str = "") -> None:
        self.source = source
        self.open: dict[tuple[str, str], Incident] = {}

    def update(self, report: Report, at_s: float) -> list[Incident]:
        changed: list[Incident] = []
        seen: set[tuple[str, str]] = set()
        for h in hot_units(report):
            key = (h.unit, h.level)
            seen.add(key)
            cur = self.open.get(key)
            if cur is None:
                cur = Incident(h.unit, h.level, h.kind, at_s, at_s, h.ratio, h.summary,
                               source=self.source)
            elif _higher(h.ratio, cur.peak_ratio):
                cur = replace(cur, last_seen_s=at_s, peak_ratio=h.ratio, summary=h.summary)
            else:
                cur = replace(cur, last_seen_s=at_s)
            self.open[key] = cur
            changed.append(cur)
        for key in [k for k in self.open if k not in seen]:
            changed.append(replace(self.open.pop(key), end_s=at_s, end_reason=COOLED))
        return changed

    def assign(self, incident: Incident) -> None:
        """Record the store id of a still-open incident."""
        if incident.end_s is None and incident.key in self.open:
            self.open[incident.key] = incident

    def close_all(self) -> list[Incident]:
        """At shutdown: end every open incident at the last run that saw it hot."""
        out = [replace(i, end_s=i.last_seen_s, end_reason=STOPPED) for i in self.open.values()]
        self.open.clear()
        return out
