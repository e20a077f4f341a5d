"""PromQL's ``histogram_quantile`` over classic ``le`` buckets, for many rows at once.

The Prometheus source fetches each histogram's per-rank bucket increases once and works out the
rank and the instance percentiles from them here, instead of asking the server for
``histogram_quantile`` at each level (the bucket selection is the costly part of those queries,
and it was done twice). The arithmetic is Prometheus' own
(``promql/quantile.go``, ``bucketQuantile``, 2.42): buckets sorted by bound, equal bounds
merged, counts made monotonic (a running maximum from the first count that leaves NaN counts
alone), the rank found by Go's ``sort.Search`` over all buckets but +Inf, the same operations
in the same order for the interpolation, so the floats are the same to the last bit or two (Go
may fuse the multiply-add), property-tested against a real Prometheus in
tests/integration/test_prom_quantile_live.py.
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

Floats = npt.NDArray[np.float64]


def merged_bounds(bounds: Floats, counts: Floats) -> tuple[Floats, Floats]:
    """(sorted distinct bounds, counts [rows, bounds] summed over equal bounds): Prometheus'
    sort and ``coalesceBuckets`` (``le="1"`` and ``le="1.0"`` are one bucket)."""
    order = np.argsort(bounds, kind="stable")
    bounds, counts = bounds[order], counts[:, order]
    distinct, start = np.unique(bounds, return_index=True)
    if distinct.size == bounds.size:
        return bounds, counts
    return distinct, np.add.reduceat(counts, start, axis=1)


def histogram_quantile(q: float, bounds: Floats, counts: Floats) -> Floats:
    """``histogram_quantile(q, ...)`` of each row of ``counts`` [rows, buckets], cumulative
    bucket counts at ``bounds`` (sorted, distinct: ``merged_bounds``); NaN where Prometheus
    answers NaN (no +Inf bucket, fewer than two buckets, no observations)."""
    rows = counts.shape[0]
    if np.isnan(q):
        return np.full(rows, np.nan)
    if q < 0 or q > 1:
        return np.full(rows, -np.inf if q < 0 else np.inf)
    n = bounds.size
    if n < 2 or not np.isposinf(bounds[-1]):
        return np.full(rows, np.nan)
    with np.errstate(invalid="ignore", divide="ignore"):
        # ensureMonotonic (2.42): max starts at the first count; a NaN count is neither above
        # nor below it, so a NaN first count leaves its row as it is
        running = np.fmax.accumulate(counts, axis=1)
        counts = np.where(np.isnan(counts) | np.isnan(counts[:, :1]), counts, running)
        observations = counts[:, -1]
        rank = q * observations
        # sort.Search(n - 1, counts[i] >= rank): Go's binary search, step by step (the same
        # answer as a scan on monotonic counts; with NaN counts only the search's own path)
        lo, hi = np.zeros(rows, dtype=np.intp), np.full(rows, n - 1, dtype=np.intp)
        every = np.arange(rows)
        while True:
            open_ = lo < hi
            if not open_.any():
                break
            mid = (lo + hi) // 2
            found = counts[every, np.minimum(mid, n - 1)] >= rank
            lo = np.where(open_ & ~found, mid + 1, lo)
            hi = np.where(open_ & found, mid, hi)
        b = lo
        prev = np.maximum(b - 1, 0)
        has_prev = b > 0
        start = np.where(has_prev, bounds[prev], 0.0)
        end = bounds[np.minimum(b, n - 1)]
        below = np.where(has_prev, counts[every, prev], 0.0)
        count = counts[every, np.minimum(b, n - 1)] - np.where(has_prev, below, 0.0)
        part = np.where(has_prev, rank - below, rank)
        out = start + (end - start) * (part / count)
        out = np.where((b == 0) & (bounds[0] <= 0), bounds[0], out)
        out = np.where(b == n - 1, bounds[n - 2], out)
        return np.where(observations == 0, np.nan, out)
