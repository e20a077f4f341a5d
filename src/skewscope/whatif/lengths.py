"""Request lengths drawn from a histogram, honestly: each bucket gets exactly its share of the
draws, and inside a bucket the density follows its neighbours (a frequency polygon on the log
scale: the density at a bucket edge is the mean of the two buckets' densities, zero past an
empty bucket), so a value sits nearer the side where the histogram is denser. Uniform inside the
wide 1-2-5 token buckets would overstate the spread, and with it how much KV a long-running batch
holds. The draws are then scaled toward the exact mean the token counters give, staying inside
their buckets (the bucket shares are evidence too).
"""

from __future__ import annotations

import math

import numpy as np

Buckets = dict[float, float]  # upper bound (le) -> count in the bucket (not cumulative)


def _edges(les: list[float]) -> tuple[np.ndarray, np.ndarray]:
    """Log-scale [a, b) of every bucket; the first starts at length 1, the +Inf bucket is as
    wide (on the log scale) as the one below it."""
    hi = [math.log(max(b, 1.0)) for b in les if math.isfinite(b)]
    lo = [0.0, *hi[:-1]]
    if len(hi) < len(les):  # +Inf
        width = hi[-1] - lo[-1] if hi else 1.0
        lo.append(hi[-1] if hi else 0.0)
        hi.append(lo[-1] + max(width, math.log(2.0)))
    return np.array(lo), np.array(hi)


def _trapezoid(u: np.ndarray, p: np.ndarray, q: np.ndarray) -> np.ndarray:
    """Inverse CDF on [0, 1] of the density rising linearly from ``p`` to ``q``."""
    slope = q - p
    flat = np.abs(slope) < 1e-9 * np.maximum(p + q, 1e-300)
    safe = np.where(flat, 1.0, slope)
    root = np.sqrt(np.maximum(p * p + slope * u * (p + q), 0.0))
    return np.where(flat, u, (root - p) / safe)


def draw_lengths(
    rng: np.random.Generator, n: int, buckets: Buckets | None, mean: float | None
) -> np.ndarray:
    """``n`` whole lengths >= 1: a bucket by its share, a value inside it from the bucket's
    frequency-polygon density, then scaled toward ``mean`` when given (the counters' exact
    mean) without leaving its bucket. Without a histogram: ``mean`` for every request."""
    if n == 0:
        return np.zeros(0, dtype=np.int64)
    if not buckets or sum(buckets.values()) <= 0:
        return np.full(n, max(round(mean or 1.0), 1), dtype=np.int64)
    les = sorted(buckets)
    count = np.array([buckets[b] for b in les], dtype=float)
    a, b = _edges(les)
    width = np.maximum(b - a, 1e-9)
    dens = count / width
    padded = np.concatenate([[0.0], dens, [0.0]])
    left = (padded[:-2] + padded[1:-1]) / 2  # density at each bucket's lower edge
    right = (padded[1:-1] + padded[2:]) / 2
    pick = rng.choice(len(les), size=n, p=count / count.sum())
    t = _trapezoid(rng.uniform(size=n), left[pick], right[pick])
    x = np.exp(a[pick] + t * (b[pick] - a[pick]))
    if mean is not None and mean > 0 and x.mean() > 0:
        x = x * (mean / x.mean())
    # whole numbers inside the bucket they were drawn for: (lo, hi] holds floor(lo)+1..floor(hi)
    le = np.array(les)
    lo = np.floor(np.concatenate([[0.0], le[:-1]]))[pick] + 1
    hi = np.where(np.isfinite(le[pick]), np.floor(np.where(np.isfinite(le), le, 0.0))[pick], np.inf)
    out: np.ndarray = np.clip(np.rint(x), np.maximum(lo, 1), np.maximum(hi, 1)).astype(np.int64)
    return out
