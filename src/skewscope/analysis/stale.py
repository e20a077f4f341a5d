"""The stale-load pattern: a balancer deciding on late counts makes bursts rotate over its units.

A balancer that picks the least-loaded unit on counts published every P seconds (vLLM's DP
coordinator: 100 ms to a few seconds; a router polling its workers' queues) sends every
request between two publishes to the unit that looked least loaded at the last one; at the
next publish that unit looks busiest and another takes the next burst. Window by window one
unit carries far more than its peers while the others carry less — the load moves, it is not
added, so each unit's load is anti-correlated with the sum of its peers' — and the busiest unit
changes every P seconds; over the range no unit is hot. Read window by window this is jitter,
or (bursts longer than the persistence run) a rank "persistent" in half the windows; it is one
finding of the group instead, and its units are not hot spots.

Added bursts (extra traffic on one unit) raise the total with the unit, and a diurnal ramp
raises every unit together: both correlate a unit with its peers positively, so the
anti-correlation is what tells a balancer moving load from load coming and going.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from skewscope.analysis.detect import UnitHeat, floors
from skewscope.analysis.matrix import Array, Flags, SignalMatrix
from skewscope.analysis.peers import peer_reference
from skewscope.config import Thresholds

# The load signals read for the pattern: the requests a unit got per window. Offline that is
# ``requests`` (arrivals); online ``requests`` counts finished requests, which a burst's service
# time spreads over the next windows (a 4 s rotation read 0.0 anti-correlation in finished
# counts, -0.77 in arrivals), so the arrivals are taken back from the held requests by
# conservation: arrived = finished + the change in held (running + waiting). Without requests,
# the requests it ran (a gauge).
ARRIVALS = "arrivals"


@dataclass(frozen=True)
class StaleLoad:
    """One group whose units take turns carrying its load."""

    group: str
    units: tuple[int, ...]  # column indices in the matrix
    signal: str  # the load signal the pattern was read on
    swing: Flags  # (W,) windows in which one unit ran hot_ratio over its peers
    judged: Flags  # (W,) windows judged (every unit of the group reported, group active)
    swing_share: float  # of the judged windows
    anticorrelation: float  # mean over units of corr(unit, sum of its peers) over the windows
    switch_every_s: float  # mean time the same unit stays the busiest in consecutive swings
    turns: tuple[int, ...]  # per unit (same order as ``units``): swing windows it was busiest
    range_ratio: float  # the highest unit's range total over the median of its peers'


def find_stale_load(
    m: SignalMatrix, heats: list[UnitHeat], th: Thresholds, *, finished: bool = False
) -> list[StaleLoad]:
    """Every group showing the pattern: in ``persist_share`` of its judged windows one unit
    runs ``hot_ratio`` over its peers, at least half of the units (two at least) take turns
    being that unit, their loads are anti-correlated (``stale_anticorrelation``), and over the
    range no unit reaches ``hot_ratio`` of its peers. ``finished``: the source counts finished
    requests (online), so the arrivals are worked out from them (``ARRIVALS``)."""
    sig, load = _load(m, finished)
    if load is None:
        return []
    out = []
    group_arr = np.array(m.groups)
    for g in dict.fromkeys(m.groups):
        cols = np.flatnonzero(group_arr == g)
        if cols.size < th.min_units:
            continue
        active = np.all(np.stack([heats[j].active for j in cols]), axis=0)
        found = _pattern(m, g, cols, sig, load[:, cols], active, th)
        if found is not None:
            out.append(found)
    return out


def _load(m: SignalMatrix, finished: bool) -> tuple[str, Array | None]:
    """The signal the pattern is read on and its (W, U) values (None: the source has none)."""
    if m.has("requests"):
        req = m.get("requests")
        if not (finished and m.has("running")):
            return "requests", req
        held = m.get("running") + np.where(np.isfinite(m.get("waiting")), m.get("waiting"), 0.0)
        arrived = np.full(req.shape, np.nan)
        arrived[1:] = np.maximum(req[1:] + np.diff(held, axis=0), 0.0)
        return ARRIVALS, arrived
    if m.has("running"):
        return "running", m.get("running")
    return "", None


def _pattern(
    m: SignalMatrix,
    group: str,
    cols: npt.NDArray[np.intp],
    sig: str,
    x_all: Array,
    active: Flags,
    th: Thresholds,
) -> StaleLoad | None:
    judged = active & np.isfinite(x_all).all(axis=1)
    if int(judged.sum()) < th.min_windows:
        return None
    x = x_all[judged]
    # over the range no unit is hot, on the signal read nor on tokens (heavier requests on one
    # unit at equal counts are a weight skew, not a rotation)
    range_ratio = _range_ratio(x)
    if m.has("total_tokens"):
        tokens = m.get("total_tokens")[:, cols][judged]
        if np.isfinite(tokens).all():
            range_ratio = max(range_ratio, _range_ratio(tokens))
    if not range_ratio < th.hot_ratio:
        return None  # a unit hot over the range is a hot spot, not a rotation
    floor = th.floor_running if sig == "running" else float(floors(m, m.window_s, th)["requests"])
    ref = peer_reference(x, tuple("" for _ in cols))
    with np.errstate(all="ignore"):
        ratio = x / np.maximum(ref, floor)
    # a swing is far beyond counting noise: Poisson counts of ~20 a window cross 1.3x their
    # peers' median every few windows by chance; a burst sent to one unit is many sigma away
    noise = th.stale_noise_sigmas * np.sqrt(np.maximum(ref, floor))
    hot = (ratio >= th.hot_ratio) & (x - np.maximum(ref, floor) >= noise)
    swing_rows: Flags = np.asarray(hot.any(axis=1), dtype=bool)
    swing_share = float(swing_rows.mean())
    top = np.argmax(np.where(np.isfinite(ratio), ratio, -np.inf), axis=1)
    turns = np.bincount(top[swing_rows], minlength=cols.size)
    takers = int((turns > 0).sum())
    anti = _anticorrelation(x)
    if (
        swing_share < th.persist_share
        or takers < max(2, math.ceil(cols.size / 2))
        or not anti <= -th.stale_anticorrelation
    ):
        return None
    swing = np.zeros(len(m.windows), dtype=bool)
    swing[np.flatnonzero(judged)[swing_rows]] = True
    return StaleLoad(
        group,
        tuple(int(c) for c in cols),
        sig,
        swing,
        judged,
        swing_share,
        anti,
        _switch_every(top, swing_rows) * m.window_s,
        tuple(int(t) for t in turns),
        range_ratio,
    )


def _range_ratio(x: Array) -> float:
    """The highest unit's total over the windows against the median of its peers' totals."""
    totals = x.sum(axis=0)
    ref = peer_reference(totals[None, :], tuple("" for _ in range(x.shape[1])))[0]
    with np.errstate(all="ignore"):
        return float(np.nanmax(np.where(ref > 0, totals / ref, np.inf)))


def _anticorrelation(x: Array) -> float:
    """Mean over units of the correlation of a unit's load with the sum of its peers' across
    windows (NaN when no unit's load varies)."""
    total = x.sum(axis=1)
    rs = []
    for u in range(x.shape[1]):
        a, b = x[:, u], total - x[:, u]
        if a.std() > 0 and b.std() > 0:
            rs.append(float(np.corrcoef(a, b)[0, 1]))
    return float(np.mean(rs)) if rs else math.nan


def _switch_every(top: npt.NDArray[np.intp], swing_rows: Flags) -> float:
    """Mean run length, in windows, of the same unit being the busiest in consecutive swing
    windows: how long a burst stays on one unit (about the publish period, when that is longer
    than a window; one window at most, when it is shorter)."""
    runs: list[int] = []
    prev, run = -1, 0
    for busy, t in zip(swing_rows.tolist(), top.tolist(), strict=True):
        if busy and t == prev:
            run += 1
            continue
        if run:
            runs.append(run)
        prev, run = (t, 1) if busy else (-1, 0)
    if run:
        runs.append(run)
    return float(np.mean(runs)) if runs else math.nan
