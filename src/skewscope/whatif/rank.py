"""Pick the recommendation: skew first, then tail latency (docs/whatif.md, Ranking).

The diagnosis calls a run skewed by its load spread, so the ranking does too — the current
replay's persistent spread (``spread.persistent_spread``) against ``Thresholds.hot_ratio`` —
and only then compares TTFT P99. A balanced run is left alone unless a candidate's latency gain
is large, and the report then says it recommends for latency only.
"""

from __future__ import annotations

from skewscope.config import DEFAULT_THRESHOLDS, Thresholds, WhatIfSettings
from skewscope.report.whatif_model import (
    METRIC_KEYS,
    Metrics,
    PolicyResult,
    Ranking,
    RankingVerdict,
)


def _keeps(p: Metrics, cur: Metrics, s: WhatIfSettings, ttft_rise: float) -> bool:
    """Throughput within its tolerance, TTFT P99 at most ``ttft_rise`` (relative) above."""
    if (
        cur.throughput_rps
        and p.throughput_rps is not None
        and p.throughput_rps < cur.throughput_rps * (1 - s.throughput_tolerance)
    ):
        return False
    if cur.ttft_p99_ms is None:
        return True
    return p.ttft_p99_ms is not None and p.ttft_p99_ms <= cur.ttft_p99_ms * (1 + ttft_rise)


def _ttft(r: PolicyResult) -> tuple[float, float]:
    """The ranking key: TTFT P99 (the worse of plain and pinned when robustness was replayed),
    then the spread."""
    v, sp = r.predicted.ttft_p99_ms, r.spread.value
    pinned = r.robust.ttft_p99_ms if r.robust is not None else None
    if v is not None and pinned is not None:
        v = max(v, pinned)
    return (v if v is not None else float("inf"), sp if sp is not None else float("inf"))


def recommend(
    results: list[PolicyResult],
    s: WhatIfSettings,
    th: Thresholds = DEFAULT_THRESHOLDS,
    excluded: frozenset[str] = frozenset(),
) -> tuple[str, dict[str, float | None], Ranking]:
    """``results[0]`` is the current replay. Skewed (spread >= hot ratio): of the candidates
    that cut the spread by ``min_spread_gain`` and keep TTFT P99 within ``ttft_tolerance``, the
    lowest TTFT P99. Balanced: the lowest TTFT P99 of those that cut it by ``large_gain`` and
    stay under the hot ratio; else the current routing. ``excluded`` (a correlated placement's
    count-based candidates) are never picked."""
    current = results[0]
    cur, spread = current.predicted, current.spread.value
    skewed = spread is not None and spread >= th.hot_ratio
    offered = [r for r in results[1:] if r.name not in excluded]
    if skewed:
        assert spread is not None
        fits = [
            r
            for r in offered
            if r.spread.value is not None
            and r.spread.value < spread
            and r.spread.value <= spread * (1 - s.min_spread_gain)  # (inf: idle unit kept)
            and _keeps(r.predicted, cur, s, s.ttft_tolerance)
        ]
        verdict = RankingVerdict.FIXES_SKEW if fits else RankingVerdict.NO_FIX
    else:
        fits = [
            r
            for r in offered
            if cur.ttft_p99_ms is not None
            and r.spread.value is not None
            and r.spread.value < th.hot_ratio
            and _keeps(r.predicted, cur, s, -s.large_gain)
        ]
        verdict = RankingVerdict.LATENCY_ONLY if fits else RankingVerdict.BALANCED
    chosen = min(fits, key=_ttft) if fits else current
    gain: dict[str, float | None] = {}
    for key in METRIC_KEYS:
        a, b = cur.get(key), chosen.predicted.get(key)
        gain[key] = (b - a) / a if a and b is not None else None
    settings = (
        ("hot_ratio", float(th.hot_ratio)),
        ("persist_share", float(th.persist_share)),
        ("window_s", current.spread.window_s),
        ("min_spread_gain", s.min_spread_gain),
        ("ttft_tolerance", s.ttft_tolerance),
        ("large_gain", s.large_gain),
        ("throughput_tolerance", s.throughput_tolerance),
    )
    robust = any(r.robust is not None for r in results)
    return (
        chosen.name,
        gain,
        Ranking(verdict, spread, skewed, settings, tuple(sorted(excluded)), robust),
    )
