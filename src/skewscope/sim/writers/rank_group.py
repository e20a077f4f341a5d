"""The counters and histograms of a history sink's ranks, counted for all of them at once.

``RankModel`` counts one rank: per time chunk some 18 feeds and, per family, a bincount per
rank — hundreds of small numpy calls per rank, which at 256 ranks a worker cost as much CPU as
the engine. Here each counter and histogram is one bincount over the group, keyed by (rank,
scrape interval); each ``RankModel`` reads its row through a view, so ``InstanceModel`` is
unchanged. The numbers are the ones ``RankModel`` gives alone: counts are whole numbers (exact
in float64 whatever the order), and a histogram's sum adds each (rank, interval) bin's
observations in the order ``RankModel`` adds them (by time, ties in request or step order).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from skewscope.sim.records import START_S
from skewscope.sim.writers.exposition import (
    COUNTERS,
    HISTOGRAMS,
    RequestEvents,
    StepEvents,
    counter_feeds,
    gauge_values,
    hist_feeds,
)
from skewscope.sim.writers.metric_specs import DEVICE_AVERAGE_S

if TYPE_CHECKING:
    from numpy.typing import NDArray

    from skewscope.sim.records import RankInfo

    F64 = NDArray[np.float64]
    I64 = NDArray[np.int64]


class _GroupEvents:
    """``_Events`` of ``n`` ranks: weighted event counts at or before each queried time."""

    def __init__(self, n: int) -> None:
        self.n = n
        self.base: F64 = np.zeros(n)  # each rank's total of the slices before the current one
        self.total: F64 = np.zeros(n)  # the current slice's total
        self.rank: I64 = np.zeros(0, dtype=np.int64)
        self.times: F64 = np.zeros(0)
        self.weights: F64 = np.zeros(0)
        self._cache: tuple[F64, F64] | None = None

    def feed(self, rank: I64, times: F64, weights: F64 | None) -> None:
        self.base = self.base + self.total
        ok = np.isfinite(times)
        self.rank, self.times = rank[ok], times[ok]
        self.weights = (np.ones(len(self.times)) if weights is None
                        else weights[ok].astype(np.float64))
        self.total = np.bincount(self.rank, weights=self.weights,
                                 minlength=self.n).astype(np.float64)
        self._cache = None

    def at(self, t: F64) -> F64:
        """[rank, time] counts (times within the current slice)."""
        if self._cache is not None and _same(self._cache[0], t):
            return self._cache[1]
        m = len(t)
        seg = np.searchsorted(t, self.times, side="left")  # counted from t[seg] on
        bins = np.bincount(self.rank * (m + 1) + seg, weights=self.weights,
                           minlength=self.n * (m + 1)).reshape(self.n, m + 1)[:, :m]
        out: F64 = self.base[:, None] + np.cumsum(bins, axis=1)
        self._cache = (t, out)
        return out


class _GroupObservations:
    """``_Observations`` of ``n`` ranks: cumulative buckets, count and sum at queried times."""

    def __init__(self, n: int) -> None:
        self.n = n
        self.rank: I64 = np.zeros(0, dtype=np.int64)
        self.times: F64 = np.zeros(0)
        self.values: F64 = np.zeros(0)
        self.weights: F64 = np.zeros(0)
        # per bucket layout: ([rank, bucket] counts incl. +Inf, [rank] sum) before this slice,
        # and at its last queried time (promoted by the next ``feed``)
        self._base: dict[tuple[float, ...], tuple[F64, F64]] = {}
        self._last: dict[tuple[float, ...], tuple[F64, F64]] = {}
        self._cache: dict[tuple[float, ...], tuple[F64, tuple[F64, F64, F64]]] = {}

    def feed(self, rank: I64, times: F64, values: F64, weights: F64 | None,
             ordered: bool = False) -> None:
        """``ordered``: likely by rank, then time already (the steps: a rank's end one
        another); checked, not trusted."""
        self._base.update(self._last)
        self._cache = {}
        ok = np.isfinite(times) & np.isfinite(values)
        if weights is not None:
            ok &= weights > 0
        w = weights
        if not ok.all():
            rank, times, values = rank[ok], times[ok], values[ok]
            w = None if w is None else w[ok]
        if not (ordered and _in_order(rank, times)):
            order = np.lexsort((times, rank))  # by rank, then time; stable
            rank, times, values = rank[order], times[order], values[order]
            w = None if w is None else w[order]
        self.rank, self.times, self.values = rank, times, values
        self.weights = np.ones(len(times)) if w is None else w.astype(np.float64)

    def at(self, bounds: tuple[float, ...], t: F64) -> tuple[F64, F64, F64]:
        """([rank, time, bucket] cumulative ``le`` counts, [rank, time] count and sum)."""
        hit = self._cache.get(bounds)
        if hit is not None and _same(hit[0], t):
            return hit[1]
        n, m, nb = self.n, len(t), len(bounds) + 1
        idx = np.searchsorted(np.asarray(bounds), self.values, side="left").astype(np.int64)
        cell = self.rank * (m + 1) + np.searchsorted(t, self.times, side="left")
        flat = np.bincount(cell * nb + idx, weights=self.weights, minlength=n * (m + 1) * nb)
        base, base_sum = self._base.get(bounds, (np.zeros((n, nb)), np.zeros(n)))
        grid: F64 = flat.astype(np.float64).reshape(n, m + 1, nb)[:, :-1]
        grid = np.concatenate([base[:, None, :], grid], axis=1).cumsum(axis=1)[:, 1:]
        grid = grid.cumsum(axis=2)
        per = np.bincount(cell, weights=self.weights * self.values,
                          minlength=n * (m + 1)).astype(np.float64).reshape(n, m + 1)[:, :-1]
        sums: F64 = np.concatenate([base_sum[:, None], per], axis=1).cumsum(axis=1)[:, 1:]
        if m:
            self._last[bounds] = (np.diff(grid[:, -1], axis=1, prepend=0.0), sums[:, -1].copy())
        out = (grid[:, :, :-1], grid[:, :, -1], sums)
        self._cache[bounds] = (t, out)
        return out


def _same(a: F64, b: F64) -> bool:
    """The same query times (every rank asks for the ones of its sink's chunk)."""
    return a is b or (a.shape == b.shape and bool(np.array_equal(a, b)))


def _in_order(rank: I64, times: F64) -> bool:
    """Sorted by rank, then time (what a stable sort would leave as it is)?"""
    dr, dt = np.diff(rank), np.diff(times)
    return bool(np.all((dr > 0) | ((dr == 0) & (dt >= 0))))


# the engine's step-row fields (``rank.STEP_FIELDS``) a group holds, in this order
_START, _END, _PF_BS, _DEC_BS, _PF_TOK, _WAITING, _USED, _PREEMPTED = range(8)
_FIELDS = (1, 2, 3, 4, 5, 7, 8, 11)


class _GroupSteps:
    """The steps of ``n`` ranks that the gauges still read, as ``RankModel`` holds them for
    one rank (same trimming, same busy-time sums), for all of them in one array: the held
    rows sorted by rank, then time (a rank's steps follow one another)."""

    def __init__(self, n: int) -> None:
        self.n = n
        self.rank: I64 = np.zeros(0, dtype=np.int64)
        self.rows: F64 = np.zeros((0, len(_FIELDS)))  # [row, field]
        self.off: I64 = np.zeros(n + 1, dtype=np.int64)  # each rank's first row
        self.done: F64 = np.zeros(0)  # busy time before each held row
        self.done_last: F64 = np.zeros(n)  # ... and after each rank's last
        self.prev_end: F64 = np.full(n, np.nan)  # end of the step before a rank's first held
        self.n_started: I64 = np.zeros(n, dtype=np.int64)  # held rows whose start is counted
        self.n_ended: I64 = np.zeros(n, dtype=np.int64)
        self.upto = -np.inf
        self._cache: dict[str, tuple[F64, F64]] = {}

    def feed(self, rank: I64, rows: F64, upto: float) -> StepEvents:
        """Hold the new ``rows`` (engine step rows of ranks ``rank``, in time order) and give
        the step events up to ``upto`` not counted yet, by rank then time."""
        self._trim()
        self.upto, self._cache = upto, {}
        if len(rows):
            every = np.concatenate([self.rank, rank])
            order = np.argsort(every.astype(np.int16), kind="stable")  # radix: ranks < 2**15
            held = len(self.rank)
            self.rank = every[order]
            fresh = np.take(rows, _FIELDS, axis=1)
            fresh[:, :2] += START_S  # run s -> epoch s, as the step table holds them
            self.rows = np.concatenate([self.rows, fresh]).take(order, axis=0)  # whole rows
            self.off[1:] = np.cumsum(np.bincount(self.rank, minlength=self.n))
            self._add_done(order >= held)
        c, r, off = self.rows, self.rank, self.off
        start, end = c[:, _START], c[:, _END]
        pos = np.arange(len(r)) - off[r]
        started = (pos >= self.n_started[r]) & (start <= upto)
        ended = (pos >= self.n_ended[r]) & (end <= upto)
        self.n_started = np.bincount(r[start <= upto], minlength=self.n)
        self.n_ended = np.bincount(r[end <= upto], minlength=self.n)
        prev = np.empty(len(r))
        prev[1:] = end[:-1]
        has = off[1:] > off[:-1]
        prev[off[:-1][has]] = self.prev_end[has]
        e = c[ended]
        return StepEvents(r[ended], e[:, _END], prev[ended], e[:, _DEC_BS], e[:, _PF_TOK],
                          e[:, _PF_BS] + e[:, _DEC_BS], e[:, _WAITING], r[started],
                          start[started], c[started, _PREEMPTED])

    def _add_done(self, new: NDArray[np.bool_]) -> None:
        """The busy time before each new row: its rank's step times summed one after another
        from the rank's first step (``RankModel``'s ``np.cumsum``, rank by rank)."""
        dur = self.rows[:, _END] - self.rows[:, _START]
        done = np.empty(len(dur))
        done[~new] = self.done
        fed = np.bincount(self.rank[new], minlength=self.n)
        first = self.off[:-1] + np.bincount(self.rank[~new], minlength=self.n)  # a rank's new rows
        for r in np.flatnonzero(fed).tolist():
            a, b = int(first[r]), int(self.off[r + 1])
            seg = dur[a:b].copy()
            seg[0] += self.done_last[r]
            cum = np.cumsum(seg)
            done[a] = self.done_last[r]
            done[a + 1:b] = cum[:-1]
            self.done_last[r] = cum[-1]
        self.done = done

    def _trim(self) -> None:
        """Drop what no later query reads (``RankModel._trim`` for every rank)."""
        if not np.isfinite(self.upto) or not len(self.rank):
            return
        c, r, n = self.rows, self.rank, self.n
        k = np.minimum(np.minimum(self.n_started, self.n_ended), np.minimum(
            np.bincount(r[c[:, _END] <= self.upto - DEVICE_AVERAGE_S - 1.0], minlength=n),
            np.maximum(np.bincount(r[c[:, _START] <= self.upto], minlength=n) - 1, 0)))
        if not k.any():
            return
        cut = k > 0
        self.prev_end[cut] = c[self.off[:-1][cut] + k[cut] - 1, _END]
        keep = np.arange(len(r)) - self.off[r] >= k[r]
        self.rank, self.rows, self.done = r[keep], c[keep], self.done[keep]
        self.off[1:] -= np.cumsum(k)
        self.n_started -= k
        self.n_ended -= k

    def _count(self, field: int, t: F64) -> I64:
        """[rank, time]: held rows of each rank whose ``field`` is at or before each of t."""
        out = np.empty((self.n, len(t)), dtype=np.int64)
        col, off = np.ascontiguousarray(self.rows[:, field]), self.off.tolist()
        for r in range(self.n):
            out[r] = np.searchsorted(col[off[r]:off[r + 1]], t, side="right")
        return out

    def used(self, t: F64, running: F64) -> F64:
        """[rank, time] KV blocks in use: the last step started's (0 while nothing runs)."""
        hit = self._cache.get("used")
        if hit is not None and _same(hit[0], t):
            return hit[1]
        i = self._count(_START, t) - 1
        at = np.minimum(self.off[:-1, None] + np.maximum(i, 0), max(len(self.rank) - 1, 0))
        col = self.rows[:, _USED] if len(self.rank) else np.zeros(1)
        out: F64 = np.where((i >= 0) & (running > 0), col[at], 0.0)
        self._cache["used"] = (t, out)
        return out

    def busy(self, t: F64) -> F64:
        """[rank, time] time spent in steps up to each of t (``RankModel._busy``)."""
        i = self._count(_END, t)  # steps finished by t
        held = (self.off[1:] - self.off[:-1])[:, None]
        last = max(len(self.rank) - 1, 0)
        at = np.minimum(self.off[:-1, None] + i, last)
        nxt = np.minimum(self.off[:-1, None] + np.minimum(i, np.maximum(held - 1, 0)), last)
        start = self.rows[:, _START] if len(self.rank) else np.zeros(1)
        done = self.done if len(self.rank) else np.zeros(1)
        before = np.where(i < held, done[at], self.done_last[:, None])
        partial = np.where((i < held) & (start[nxt] < t), t - start[nxt], 0.0)
        out: F64 = before + partial
        return out


class RankGroup:
    """The ranks ``infos`` of a sink (instance-major, DP ranks in order), counted at once;
    a ``families.RankSource``."""

    def __init__(self, infos: list[RankInfo]) -> None:
        self.n = n = len(infos)
        self.counters = {k: _GroupEvents(n) for k in COUNTERS}
        self.hists = {k: _GroupObservations(n) for k in HISTOGRAMS}
        self.steps = _GroupSteps(n)
        self.total: F64 = np.array([float(i.total_blocks) for i in infos])[:, None]
        self.block_size: I64 = np.array([i.block_size for i in infos])[:, None]
        self.max_running: I64 = np.array([i.max_running for i in infos])[:, None]

    def feed(self, req: RequestEvents, rank: I64, rows: F64, upto: float) -> None:
        """``RankModel.feed`` for every rank: ``req`` holds the group's requests (``rank``:
        the index in the group), ``rows`` the new engine step rows of ranks ``rank``."""
        sev = self.steps.feed(rank, rows, upto)
        for role, (r, t, w) in counter_feeds(req, sev).items():
            self.counters[role].feed(r, t, w)
        for role, (r, t, v, w) in hist_feeds(req, sev).items():
            self.hists[role].feed(r, t, v, w, ordered=r is sev.end_rank)

    def is_counter(self, role: str) -> bool:
        return role in self.counters

    def counter(self, role: str, t: F64) -> F64:
        return self.counters[role].at(t)

    def hist(self, role: str, bounds: tuple[float, ...], t: F64) -> tuple[F64, F64, F64]:
        return self.hists[role].at(bounds, t)

    def gauge(self, role: str, t: F64) -> F64:
        return gauge_values(role, t, lambda k: self.counters[k].at(t), self.steps.used,
                            self.steps.busy, np.repeat(self.total, len(t), axis=1),
                            self.block_size, self.max_running)
