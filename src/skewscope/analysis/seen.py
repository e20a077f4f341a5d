"""Requests seen: what the volume gates count, finished requests plus those held.

Finished requests alone call a rank busy with long generations idle (30 running and 19 waiting
at full KV, a handful finished in the range), so both gates — the range's
``min_requests_total`` and the per-window ``min_requests_per_window`` — count the requests a
unit holds (running + waiting) as well. Held requests count only in windows in which the unit
makes progress (steps, else finished requests, at least ``stalled_max_progress``): the gauges
of a unit that progresses not at all are a hung engine (``stall.py``'s own path, judged apart
from the gates) or frozen metrics, not traffic it serves.
"""

from __future__ import annotations

import numpy as np

from skewscope.analysis.matrix import Array, SignalMatrix
from skewscope.config import Thresholds


def held(m: SignalMatrix, th: Thresholds) -> Array:
    """(W, U) requests each unit holds (running + waiting) in each window it progresses in;
    0 elsewhere, NaN where it reported neither gauge."""
    run, wait = m.get("running"), m.get("waiting")
    out = np.nan_to_num(run) + np.nan_to_num(wait)
    out[np.isnan(run) & np.isnan(wait)] = np.nan
    steps, done = m.get("steps"), m.get("requests")
    has_steps = np.asarray(np.isfinite(steps).any(axis=0), dtype=bool)
    progress = np.where(has_steps[None, :], steps, done)
    with np.errstate(invalid="ignore"):
        moving = np.isfinite(progress) & (progress >= th.stalled_max_progress)
    out[~moving & np.isfinite(out)] = 0.0
    return out


def requests_seen(m: SignalMatrix, th: Thresholds) -> float:
    """The range's volume: requests finished plus those each unit still holds in its last
    reported window (counted as ``held``).

    It is the requests held at the start plus those that arrived, so a lower bound on the
    distinct requests the range saw, each counted once: a request still held has not finished.
    The peak of running + waiting is not used, as requests held at the peak may finish later
    in the range and be counted twice. A near-idle service holds next to nothing and stays
    under the gate."""
    h = held(m, th)
    at_end = 0.0
    for j in range(len(m.units)):
        rows = np.flatnonzero(np.isfinite(h[:, j]))
        if rows.size:
            at_end += float(h[rows[-1], j])
    return float(np.nansum(m.get("requests"))) + at_end
