"""Scoring alert episodes against a day's truth.json (docs: notes/contract-day.md): an alert
episode is a true positive when it names the episode's unit (the instance; at the DP level the
rank too) and overlaps [start, end + grace]; one matching no truth episode is a false alert;
delay = first matching firing - start. A group rule (no unit named) matches every unit of its
group. Pure functions.
"""

from __future__ import annotations

import json
import math
import statistics
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from alert_eval import Fired
from skewscope.report.backtest_model import TruthEpisode as Episode  # the backtest's own episode


@dataclass(frozen=True)
class Truth:
    t0: float
    t1: float
    step_s: float
    dialect: str
    window_s: float  # the window the day's episodes are sized for
    episodes: tuple[Episode, ...]
    noise: tuple[dict[str, Any], ...]


def read_truth(path: Path) -> Truth:
    d = json.loads(path.read_text())
    eps = tuple(
        Episode(
            e["id"],
            e["level"],
            e["instance"],
            None if e.get("dp_rank") is None else str(e["dp_rank"]),
            e["kind"],
            float(e["start"]),
            float(e["end"]),
        )
        for e in d["episodes"]
    )
    return Truth(
        float(d["t0"]),
        float(d["t1"]),
        float(d["step_s"]),
        d["dialect"],
        float(d.get("window_s", 300)),
        eps,
        tuple(d.get("noise", ())),
    )


def names(f: Fired, e: Episode) -> bool:
    """Whether the alert names the episode's unit (a group alert: its group holds it)."""
    if f.level != e.level:
        return False
    if f.instance is not None and f.instance != e.instance:
        return False
    # an episode of a whole instance's ranks (dp_rank None) is named by any of its ranks
    return not (
        e.level == "dp"
        and f.dp_rank is not None
        and e.dp_rank is not None
        and f.dp_rank != e.dp_rank
    )


def matches(f: Fired, e: Episode, grace_s: float) -> bool:
    return names(f, e) and f.start <= e.end + grace_s and f.end >= e.start


@dataclass(frozen=True)
class Score:
    source: str
    level: str
    episodes: int
    alerts: int
    tp: int  # truth episodes found
    misses: int
    false_alerts: int  # alert episodes matching no truth episode
    precision: float
    recall: float
    f1: float
    delay_median_s: float
    delay_p90_s: float
    false_per_day: float
    false_time_share: float  # of the day, with some alert firing that matches no episode
    kind_correct: int | None  # None: the source names no kind
    names_unit: bool
    missed: tuple[str, ...]
    delays: tuple[tuple[str, float], ...]
    kinds: tuple[tuple[str, str], ...]  # (episode id, kind of the first alert naming one)


def _p90(xs: list[float]) -> float:
    if not xs:
        return float("nan")
    s = sorted(xs)
    return s[min(len(s) - 1, round(0.9 * (len(s) - 1)))]


def _union(spans: list[tuple[float, float]]) -> float:
    total, end = 0.0, -math.inf
    for a, b in sorted(spans):
        if b > end:
            total += b - max(a, end)
            end = b
    return total


def _outside(f: Fired, windows: list[tuple[float, float]]) -> list[tuple[float, float]]:
    """The parts of ``f``'s firing outside ``windows`` (sorted, may overlap)."""
    out, cur = [], f.start
    for a, b in sorted(windows):
        if b < cur or a > f.end:
            continue
        if a > cur:
            out.append((cur, a))
        cur = max(cur, b)
    if cur < f.end:
        out.append((cur, f.end))
    return out


def false_time(alerts: list[Fired], eps: list[Episode], grace_s: float) -> float:
    """Seconds of the day during which some alert fires outside [start, end + grace] of every
    episode it could name: a rule that fires all day is charged for the quiet hours."""
    spans: list[tuple[float, float]] = []
    for f in alerts:
        spans += _outside(f, [(e.start, e.end + grace_s) for e in eps if names(f, e)])
    return _union(spans)


def score(source: str, level: str, fired: list[Fired], truth: Truth, grace_s: float) -> Score:
    eps = [e for e in truth.episodes if e.level == level]
    alerts = [f for f in fired if f.level == level]
    found, delays, kinds = [], [], []
    for e in eps:
        hits = sorted((f for f in alerts if matches(f, e, grace_s)), key=lambda f: f.start)
        if hits:
            found.append(e)
            first = hits[0]
            delays.append((e.id, max(0.0, first.start - e.start)))
            # the kind the first alert naming one says: a trend alert (the DP gap widening)
            # that fires first names none, which is no wrong kind
            named = next((f.kind for f in hits if f.kind is not None), None)
            if named is not None:
                kinds.append((e.id, named))
    false = [f for f in alerts if not any(matches(f, e, grace_s) for e in eps)]
    true_alerts = len(alerts) - len(false)
    precision = true_alerts / len(alerts) if alerts else float("nan")
    recall = len(found) / len(eps) if eps else float("nan")
    f1 = (
        2 * precision * recall / (precision + recall)
        if alerts and eps and precision + recall > 0
        else 0.0
    )
    by_id = {e.id: e for e in eps}
    kind_ok = (
        sum(by_id[i].kind == k for i, k in kinds)
        if any(f.kind is not None for f in alerts) or not alerts
        else None
    )
    ds = [d for _, d in delays]
    days = (truth.t1 - truth.t0) / 86400.0
    return Score(
        source,
        level,
        len(eps),
        len(alerts),
        len(found),
        len(eps) - len(found),
        len(false),
        precision,
        recall,
        f1,
        statistics.median(ds) if ds else float("nan"),
        _p90(ds),
        len(false) / days,
        false_time(alerts, eps, grace_s) / (truth.t1 - truth.t0),
        kind_ok,
        all(f.names_unit for f in alerts) if alerts else True,
        tuple(e.id for e in eps if e not in found),
        tuple(delays),
        tuple(kinds),
    )
