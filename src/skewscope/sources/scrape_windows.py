"""Per-window reductions of one sampled series (pure; property-tested).

The /metrics samples of a series are reduced per window with the semantics PromQL gives the
same series: counters by increases with reset handling (a drop means the process restarted:
count from 0, as ``rate()`` does; a failed scrape makes the next sample a new baseline), gauges
by average/max/min of the samples, histograms by Prometheus' bucket interpolation. Windows are
anchored at the first scrape; window k covers (t0 + kW, t0 + (k+1)W] (the first scrape belongs
to window 0).
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Callable, Collection, Mapping, Sequence

from skewscope.frame import BOUND_LOWER, BOUND_UPPER

Point = tuple[float, float | None]  # (scrape time, value; None: series absent from that scrape)


def window_index(t: float, t0: float, window_s: float) -> int:
    """Index of the window (t0 + kW, t0 + (k+1)W] holding ``t``; the first scrape is window 0."""
    return max(0, math.ceil((t - t0) / window_s - 1e-6) - 1)


def counter_increases(
    points: Sequence[Point], t0: float, window_s: float, lost: Collection[float] = ()
) -> dict[int, float]:
    """Per-window increase of one counter series from its successive samples.

    ``points`` are (time, value) for every successful scrape of the target, value None when
    the series was absent. A series that appears after a successful scrape without it is new:
    its whole value is counted. A drop means a reset: the new value is counted from 0. A window
    in which the series has a sample but no increase gets 0, so the result is never negative.
    ``lost`` are times of failed scrapes: the increase across such a gap is unknown, so the
    next sample is a new baseline. A window with only non-finite samples is NaN (missing).
    """
    out: dict[int, float] = {}
    nonfinite: set[int] = set()
    prev: float | None = None
    seen_target = False
    after_loss = False
    gaps = sorted(lost)
    g = 0
    for t, v in points:
        while g < len(gaps) and gaps[g] < t:
            prev, seen_target, after_loss, g = None, False, True, g + 1
        if v is not None and not math.isfinite(v):
            nonfinite.add(window_index(t, t0, window_s))
            continue
        if v is not None:
            k = window_index(t, t0, window_s)
            if prev is None:  # first sample of a new series (or the baseline scrape)
                if not after_loss:
                    out[k] = out.get(k, 0.0) + (v if seen_target else 0.0)
            else:  # a drop is a reset: the counter restarted from 0
                out[k] = out.get(k, 0.0) + (v - prev if v >= prev else v)
            after_loss = False
        prev = v
        seen_target = True
    for k in nonfinite - out.keys():
        out[k] = math.nan
    return out


ACROSS: dict[str, Callable[[list[float]], float]] = {
    "sum": sum,
    "avg": lambda xs: sum(xs) / len(xs),
    "max": max,
    "min": min,
    "last": lambda xs: xs[-1],  # the gauge at the window's end (what-if arrivals)
}


def gauge_reduce(points: Sequence[Point], t0: float, window_s: float, how: str) -> dict[int, float]:
    """Per-window avg/max/min of one gauge series (of its finite samples)."""
    buckets: dict[int, list[float]] = defaultdict(list)
    for t, v in points:
        if v is not None:
            buckets[window_index(t, t0, window_s)].append(v)
    fn = ACROSS[how]
    out: dict[int, float] = {}
    for k, xs in buckets.items():
        finite = [x for x in xs if math.isfinite(x)]
        out[k] = fn(finite) if finite else math.nan  # only NaN/Inf: missing, said in a note
    return out


def bucket_quantile(q: float, buckets: Mapping[float, float]) -> float:
    """Quantile from cumulative bucket counts {upper bound: count}, as PromQL does it.

    Linear interpolation inside the bucket holding the rank; the +Inf bucket answers the
    highest finite bound; NaN when there are no observations.
    """
    bounds = sorted(buckets)
    if len(bounds) < 2 or not math.isinf(bounds[-1]):
        return math.nan
    counts: list[float] = []
    for b in bounds:  # enforce monotonic cumulative counts, like Prometheus
        counts.append(max(buckets[b], counts[-1] if counts else 0.0))
    total = counts[-1]
    if not total > 0 or math.isinf(total):  # no observations, or NaN/Inf counts: unknown
        return math.nan
    rank = q * total
    i = next(j for j, c in enumerate(counts) if c >= rank)
    if i == len(bounds) - 1:
        return bounds[-2]
    if i == 0 and bounds[0] <= 0:
        return bounds[0]
    lo = 0.0 if i == 0 else bounds[i - 1]
    below = 0.0 if i == 0 else counts[i - 1]
    return lo + (bounds[i] - lo) * ((rank - below) / (counts[i] - below))


def bucket_quantile_bound(q: float, buckets: Mapping[float, float]) -> float:
    """Whether ``bucket_quantile`` answers a bucket bound (frame.BOUND_UPPER: the rank is the
    cumulative count at a bound, the truth is at most it; frame.BOUND_LOWER: the rank is in the
    +Inf bucket, the truth is above the highest finite bound), else NaN (interpolated)."""
    value = bucket_quantile(q, buckets)
    if math.isnan(value):
        return math.nan
    bounds = sorted(buckets)
    counts = [max(buckets[b] for b in bounds[: i + 1]) for i in range(len(bounds))]
    if q * counts[-1] > counts[-2]:
        return BOUND_LOWER
    if any(math.isclose(value, b, rel_tol=1e-12) for b in bounds[:-1]):
        return BOUND_UPPER
    return math.nan
