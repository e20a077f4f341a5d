"""Steps 3 and 4: does the hot unit hurt the service, and is it stuck on a resource?"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from skewscope.analysis.matrix import Array, Flags, SignalMatrix, safe_ratio
from skewscope.config import Thresholds
from skewscope.report.facts import Note, NoteCode


@dataclass(frozen=True)
class Impact:
    ratios: dict[str, float]  # hot / reference per impact metric (NaN = not measured)
    hurting: tuple[str, ...]  # metrics at or above impact_ratio
    kv_exhausted: bool
    kv_filling: bool  # blocks allocated keep exceeding blocks freed
    waiting_growth_per_window: float  # slope of the hot unit's waiting queue
    queue_growing: bool
    resource_notes: tuple[Note, ...]


def impact(
    m: SignalMatrix,
    j: int,
    hot: dict[str, float],
    ref: dict[str, float],
    mask: Flags,
    th: Thresholds,
    bounded: frozenset[str] = frozenset(),
    ref_cols: tuple[int, ...] = (),
) -> Impact:
    """``bounded``: metrics whose hot or reference value is only a histogram bucket bound; no
    ratio is formed from them (a bound over a bound says nothing about how far apart they are).
    ``ref_cols``: the reference units, to tell a service short of KV from a peer's KV spike."""
    ratios: dict[str, float] = {}
    for key, floor in th.impact_floors.items():
        h, r = hot.get(key, math.nan), ref.get(key, math.nan)
        ok = math.isfinite(r) and key not in bounded
        ratios[key] = safe_ratio(h, max(r, floor)) if ok else math.nan
    hurting = tuple(k for k, v in ratios.items() if math.isfinite(v) and v >= th.impact_ratio)

    notes: list[Note] = []
    kv_peak = hot.get("kv_usage_max", math.nan)
    preempt = hot.get("preemptions", math.nan)
    ref_peak = ref.get("kv_usage_max", math.nan)
    kv_high = math.isfinite(kv_peak) and kv_peak >= th.kv_high
    peers_high = math.isfinite(ref_peak) and ref_peak >= th.kv_high
    if peers_high and ref_cols:
        # the whole service is short of KV only if the peers sit near exhaustion persistently,
        # not when one of them touched it in a window or two
        peers_high = _high_kv_share(m, ref_cols, mask, th) >= th.persist_share
    kv_exhausted = kv_high and not peers_high  # exhaustion is a skew finding only if it is local
    if kv_exhausted:
        notes.append(Note(NoteCode.KV_EXHAUSTED, {"kv_peak": kv_peak, "kv_high": th.kv_high}))
    elif kv_high:
        notes.append(
            Note(NoteCode.KV_SERVICE_WIDE, {"kv_peak": kv_peak, "reference_peak": ref_peak})
        )
    if math.isfinite(preempt) and preempt > 0 and not (ref.get("preemptions", 0.0) or 0.0) > 0:
        notes.append(Note(NoteCode.PREEMPTED_HERE_ONLY, {"preemptions": preempt}))
        kv_exhausted = True
    alloc_free = hot.get("alloc_free_ratio", math.nan)
    kv_filling = math.isfinite(alloc_free) and alloc_free >= th.alloc_over_free
    if kv_filling:
        notes.append(Note(NoteCode.KV_FILLING, {"alloc_free_ratio": alloc_free}))
    slope = trend_slope(m.get("waiting")[mask, j], th.trend_min_points)
    queue_growing = math.isfinite(slope) and slope > th.queue_growth_per_window
    if queue_growing:
        notes.append(Note(NoteCode.QUEUE_GROWING, {"per_window": slope}))
    return Impact(
        ratios=ratios,
        hurting=hurting,
        kv_exhausted=kv_exhausted,
        kv_filling=kv_filling,
        waiting_growth_per_window=slope,
        queue_growing=queue_growing,
        resource_notes=tuple(notes),
    )


def _high_kv_share(m: SignalMatrix, cols: tuple[int, ...], mask: Flags, th: Thresholds) -> float:
    """Median over ``cols`` of the share of measured windows with peak KV at or above kv_high."""
    peak = m.get("kv_usage_max")[mask][:, list(cols)]
    measured = np.isfinite(peak)
    with np.errstate(invalid="ignore"):
        shares = (measured & (peak >= th.kv_high)).sum(axis=0) / np.maximum(measured.sum(0), 1)
    return float(np.median(shares))


def trend_slope(y: Array, min_points: int) -> float:
    """Least-squares slope per window over the finite points (NaN when fewer than
    ``min_points``)."""
    x = np.arange(y.size, dtype=np.float64)
    ok = np.isfinite(y)
    if ok.sum() < min_points:
        return math.nan
    return float(np.polyfit(x[ok], y[ok], 1)[0])


@dataclass(frozen=True)
class Trend:
    gap_slope_share: float  # slope of the hot-minus-reference load gap, relative to its mean
    tail_slope_share: float  # slope of the service's worst p99 latency, relative to its mean
    widening: bool


def gap_trend(m: SignalMatrix, j: int, ref_cols: list[int], mask: Flags, th: Thresholds) -> Trend:
    """The case documents' rule: the gap keeps widening while the service's P95/P99 rises."""
    signal = "running" if m.has("running") else "requests"
    vals = m.get(signal)[mask]
    if not ref_cols:
        return Trend(math.nan, math.nan, False)
    ref = vals[:, ref_cols]
    measured = np.isfinite(ref).any(axis=1)  # a window no peer measured has no gap, not a warning
    ref_median = np.full(len(ref), np.nan)
    if measured.any():
        ref_median[measured] = np.nanmedian(ref[measured], axis=1)
    gap = vals[:, j] - ref_median
    tail_sig = "e2e_p99_ms" if m.has("e2e_p99_ms") else "ttft_p99_ms"
    tail_vals = m.get(tail_sig)[mask]
    with np.errstate(all="ignore"):
        tail = np.where(
            np.isfinite(tail_vals).any(axis=1),
            np.nanmax(np.where(np.isfinite(tail_vals), tail_vals, -np.inf), axis=1),
            np.nan,
        )
    gap_share = _relative_slope(gap, th.trend_min_points)
    tail_share = _relative_slope(tail, th.trend_min_points)
    widening = (
        math.isfinite(gap_share)
        and math.isfinite(tail_share)
        and gap_share >= th.trend_min_slope_share
        and tail_share >= th.trend_min_slope_share
    )
    return Trend(gap_share, tail_share, widening)


def _relative_slope(y: Array, min_points: int) -> float:
    slope = trend_slope(y, min_points)
    finite = y[np.isfinite(y)]
    mean = float(np.abs(finite).mean()) if finite.size else math.nan
    return slope / mean if math.isfinite(slope) and mean > 0 else math.nan
