"""When did it happen? Hot runs of a finding's unit, transient episodes with their impact, and
the per-window series the report carries (what the HTML report draws and ``compare`` reads).

Times are window bounds in epoch seconds. A window whose peer group carried too little load to
be judged neither extends nor breaks a run, exactly as the persistence rule counts runs.
"""

from __future__ import annotations

import math
from collections.abc import Collection

import numpy as np

from skewscope.analysis.detect import UnitHeat
from skewscope.analysis.matrix import Array, Flags, SignalMatrix, nanmean
from skewscope.catalogue import SERIES
from skewscope.config import Thresholds
from skewscope.report.model import Band, Episode, Run, Series, Timeline

# Impact of an episode: the unit against its peers' median over the episode's windows.
EPISODE_IMPACT: tuple[str, ...] = (
    "queue_wait_mean_ms",
    "queue_wait_p95_ms",
    "ttft_p99_ms",
    "waiting",
)


def hot_runs(m: SignalMatrix, hot: Flags, judged: Flags) -> tuple[Run, ...]:
    """Runs of hot windows among the judged ones (unjudged windows are skipped over)."""
    runs: list[Run] = []
    start = last = -1
    count = 0
    for i in np.flatnonzero(judged).tolist():
        if hot[i]:
            if count == 0:
                start = i
            last, count = i, count + 1
            continue
        if count:
            runs.append(_run(m, start, last, count))
        count = 0
    if count:
        runs.append(_run(m, start, last, count))
    return tuple(runs)


def _run(m: SignalMatrix, first: int, last: int, count: int) -> Run:
    return Run(float(m.windows[first]), float(m.windows[last] + m.window_s), count)


def timeline(m: SignalMatrix, hot: Flags, judged: Flags) -> Timeline:
    runs = hot_runs(m, hot, judged)
    if not runs:
        return Timeline((), 0)
    between = judged & (m.windows >= runs[0].start_s) & (m.windows < runs[-1].end_s)
    return Timeline(runs, int(between.sum()))


def episodes(
    m: SignalMatrix, heats: list[UnitHeat], persistent: set[int], th: Thresholds
) -> tuple[Episode, ...]:
    """Every hot run of a unit that is not a persistent hot spot, in time order."""
    out: list[Episode] = []
    for h in heats:
        if h.index in persistent or not h.hot.any():
            continue
        group = m.groups[h.index]
        peers = [k for k in range(len(m.units)) if k != h.index and m.groups[k] == group]
        for run in hot_runs(m, h.hot, h.active):
            mask = (m.windows >= run.start_s) & (m.windows < run.end_s) & h.active
            score = h.score[mask]
            peak = float(np.nanmax(score)) if np.isfinite(score).any() else math.nan
            impact = _impact(m, h.index, peers, mask, th.impact_floors)
            hurting = tuple(k for k, v in impact.items() if v >= th.impact_ratio)
            out.append(Episode(h.unit, run, peak, h.driver, impact, hurting))
    return tuple(sorted(out, key=lambda e: (e.run.start_s, e.unit)))


def _impact(
    m: SignalMatrix, j: int, peers: list[int], mask: Flags, floors: dict[str, float]
) -> dict[str, float]:
    out: dict[str, float] = {}
    for key in EPISODE_IMPACT:
        values = m.get(key)[mask]
        unit = nanmean(values[:, j])
        peer_means = [nanmean(values[:, k]) for k in peers]
        finite = [v for v in peer_means if math.isfinite(v)]
        ref = float(np.median(finite)) if finite else math.nan
        out[key] = (
            unit / max(ref, floors[key]) if math.isfinite(unit) and math.isfinite(ref) else math.nan
        )
    return out


def signal_values(m: SignalMatrix) -> dict[str, Array]:
    """(W, U) per ``catalogue.SERIES`` key; per-window totals become per-second rates."""
    req, tok = m.get("requests"), m.get("total_tokens")
    with np.errstate(all="ignore"):
        derived = {
            "requests_per_s": req / m.window_s,
            "tokens_per_s": tok / m.window_s,
            "tokens_per_request": np.where(req > 0, tok / req, np.nan),
        }
    return {s.key: derived[s.key] if s.key in derived else m.get(s.key) for s in SERIES}


def series(m: SignalMatrix, heats: list[UnitHeat]) -> Series:
    values = {
        key: {u: _tuple(grid[:, j]) for j, u in enumerate(m.units)}
        for key, grid in signal_values(m).items()
        if np.isfinite(grid).any()
    }
    return Series(
        window_starts=tuple(float(w) for w in m.windows),
        values=values,
        hot={h.unit: tuple(bool(x) for x in h.hot) for h in heats},
    )


def peer_bands(
    m: SignalMatrix, peers: list[int], keys: Collection[str] | None = None
) -> dict[str, Band]:
    """Median and range of the peers, per window and series signal (those of ``keys`` only,
    when given: the signals the finding charts)."""
    out: dict[str, Band] = {}
    if not peers:
        return out
    for key, grid in signal_values(m).items():
        if keys is not None and key not in keys:
            continue
        block = grid[:, peers]
        if not np.isfinite(block).any():
            continue
        have = np.isfinite(block).any(axis=1)
        med, low, high = (np.full(len(m.windows), np.nan) for _ in range(3))
        med[have] = np.nanmedian(block[have], axis=1)
        low[have] = np.nanmin(block[have], axis=1)
        high[have] = np.nanmax(block[have], axis=1)
        out[key] = Band(_tuple(med), _tuple(low), _tuple(high))
    return out


def _tuple(a: Array) -> tuple[float, ...]:
    return tuple(float(x) for x in a)
