"""Incidents from consecutive runs: a unit (at a level) hot (or starved, or a group whose
units take turns carrying its load: ``monitor.units.alarms``) in ``open_runs`` good runs in a
row opens an incident at the first of them (a unit that alarms in one run alone is a blip:
Prometheus' ``for:``), and it ends only after ``calm_runs`` consecutive good runs no longer
find it hot (hysteresis: one calm run between hot runs does not split one hot period in two),
at the first of those calm runs. A failed run changes nothing (the last good state stands,
calm runs are not counted), and so does a run that judged nothing (insufficient data: a
look-back that holds one window too few when the runs and the window grid fall out of step).

Onset is the time of the first run that found the unit hot: the heat itself began up to
``--last`` earlier (a unit is hot only once it runs hot in most of the range).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

from skewscope.catalogue import Kind, Verdict

if TYPE_CHECKING:  # the watch command's parser reads CALM_RUNS: kept light to import
    from skewscope.report.model import Report

COOLED = "cooled"  # a later run no longer found the unit hot
STOPPED = "watch stopped"  # watch stopped (or died) while the unit was still hot
CALM_RUNS = 2  # default of ``watch --calm-runs``: calm runs in a row that end an incident
OPEN_RUNS = 2  # default of ``watch --open-runs``: alarming runs in a row that open one


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
    writer: str = ""  # the watch process that owns it (set by the history store)
    # the run that opened it (``open_runs`` alarming runs in a row): when it first showed, as
    # an alert fires after its ``for:``; None in rows written before it was kept
    confirmed_s: float | None = None
    id: int | None = None  # assigned by the history store

    @property
    def key(self) -> tuple[str, str]:
        return self.unit, self.level


def _worse(new: float, old: float, kind: str) -> bool:
    """The peak of a starved unit is its lowest share, of any other alarm its highest ratio."""
    if not math.isfinite(new):
        return False
    return not math.isfinite(old) or (new < old if kind == Kind.STARVED else new > old)


class IncidentTracker:
    """Open incidents by (unit, level); ``update`` returns the incidents that changed."""

    def __init__(
        self, source: str = "", calm_runs: int = CALM_RUNS, open_runs: int = OPEN_RUNS
    ) -> None:
        if calm_runs < 1 or open_runs < 1:
            raise ValueError("calm_runs and open_runs must be at least 1")
        self.source = source
        self.calm_runs, self.open_runs = calm_runs, open_runs
        self.open: dict[tuple[str, str], Incident] = {}
        self.calm: dict[tuple[str, str], tuple[int, float]] = {}  # (calm runs, first at)
        self.pending: dict[tuple[str, str], tuple[int, float]] = {}  # (hot runs, first at)

    def update(self, report: Report, at_s: float) -> list[Incident]:
        from skewscope.monitor.units import alarms

        if report.verdict == Verdict.INSUFFICIENT_DATA:
            return []  # judged nothing (too few windows or too little load): no alarm, no calm
        changed: list[Incident] = []
        seen: set[tuple[str, str]] = set()
        for h in alarms(report):
            key = (h.unit, h.level)
            seen.add(key)
            self.calm.pop(key, None)
            cur = self.open.get(key)
            if cur is None:
                runs, first = self.pending.pop(key, (0, at_s))
                if runs + 1 < self.open_runs:
                    self.pending[key] = (runs + 1, first)
                    continue
                cur = Incident(
                    h.unit,
                    h.level,
                    h.kind,
                    first,
                    at_s,
                    h.ratio,
                    h.summary,
                    source=self.source,
                    confirmed_s=at_s,
                )
            elif _worse(h.ratio, cur.peak_ratio, cur.kind):
                cur = replace(cur, last_seen_s=at_s, peak_ratio=h.ratio, summary=h.summary)
            else:
                cur = replace(cur, last_seen_s=at_s)
            self.open[key] = cur
            changed.append(cur)
        for key in [k for k in self.pending if k not in seen]:
            del self.pending[key]  # not alarming in a row: a blip, never an incident
        for key in [k for k in self.open if k not in seen]:
            runs, first = self.calm.get(key, (0, at_s))
            if runs + 1 < self.calm_runs:
                self.calm[key] = (runs + 1, first)
                continue
            self.calm.pop(key, None)
            changed.append(replace(self.open.pop(key), end_s=first, end_reason=COOLED))
        return changed

    def assign(self, incident: Incident) -> None:
        """Record the store id of a still-open incident."""
        if incident.end_s is None and incident.key in self.open:
            self.open[incident.key] = incident

    def close_all(self) -> list[Incident]:
        """At shutdown: end every open incident at the last run that saw it hot."""
        out = [replace(i, end_s=i.last_seen_s, end_reason=STOPPED) for i in self.open.values()]
        self.open.clear()
        self.calm.clear()
        self.pending.clear()
        return out
