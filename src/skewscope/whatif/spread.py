"""The load spread a replay leaves, measured as the diagnosis judges skew — per window, smoothed,
and held for a share of the windows — from the replay's own per-unit loads (``whatif`` does not
import the analysis). A burst that passes is not a spread; a unit hot all run is.
"""

from __future__ import annotations

import math

import numpy as np

from skewscope.config import Thresholds
from skewscope.report.whatif_model import Spread


def window_loads(
    rank: np.ndarray,
    arrival: np.ndarray,
    leave: np.ndarray,
    n_ranks: int,
    duration: float,
    window_s: float,
) -> np.ndarray:
    """Time-average requests in the system per rank and window (ranks x windows): each request
    counts from its arrival to its leaving, split over the windows it spans (a difference array
    for the whole windows, so O(requests + windows))."""
    n_win = max(1, math.ceil(duration / window_s))
    ok = rank >= 0
    r, a = rank[ok], np.clip(arrival[ok], 0.0, duration)
    b = np.clip(np.minimum(leave[ok], duration), 0.0, duration)
    b = np.maximum(a, b)
    k0 = np.minimum((a // window_s).astype(np.int64), n_win - 1)
    k1 = np.minimum((b // window_s).astype(np.int64), n_win - 1)
    size = n_ranks * (n_win + 1)
    same = k0 == k1
    area = np.bincount(
        r[same] * (n_win + 1) + k0[same], weights=b[same] - a[same], minlength=size
    ).astype(float)  # (an empty bincount is integer)
    d = ~same
    rd, k0d, k1d = r[d], k0[d], k1[d]
    area += np.bincount(rd * (n_win + 1) + k0d, weights=(k0d + 1) * window_s - a[d], minlength=size)
    area += np.bincount(rd * (n_win + 1) + k1d, weights=b[d] - k1d * window_s, minlength=size)
    full = np.bincount(rd * (n_win + 1) + k0d + 1, minlength=size).astype(float)
    full -= np.bincount(rd * (n_win + 1) + k1d, minlength=size)
    grid = area.reshape(n_ranks, n_win + 1) + window_s * np.cumsum(
        full.reshape(n_ranks, n_win + 1), axis=1
    )
    return grid[:, :n_win] / window_s


def persistent_spread(loads: np.ndarray, window_s: float, th: Thresholds) -> Spread:
    """``loads``: units in the pool x windows. Each unit's load is smoothed over
    ``th.smooth_windows`` windows (a centred mean) and divided by the units' median in each
    window with any load; the hottest unit's ratio reached in ``th.persist_share`` of those
    windows is ``high``, the coldest unit's, kept below as long, ``low``."""
    if loads.shape[0] < 2 or loads.shape[1] == 0:
        return Spread(None, None, window_s)
    w = max(1, min(int(th.smooth_windows), loads.shape[1]))
    kernel = np.ones(w) / w
    smooth = np.array([np.convolve(row, kernel, mode="same") for row in loads])
    med = np.median(smooth, axis=0)
    active = med > 0
    if not active.any():
        return Spread(None, None, window_s)
    ratio = smooth[:, active] / med[active]
    q = float(th.persist_share)
    high = float(np.max(np.quantile(ratio, 1.0 - q, axis=1)))
    low = float(np.min(np.quantile(ratio, q, axis=1)))
    return Spread(high, low, window_s)
