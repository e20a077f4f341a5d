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

from skewscope.sim.writers.exposition import (
    COUNTERS,
    HISTOGRAMS,
    RankModel,
    RequestEvents,
    StepEvents,
    _Events,
    _Observations,
    counter_feeds,
    hist_feeds,
)

if TYPE_CHECKING:
    from numpy.typing import NDArray

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


class _EventsView(_Events):
    """One rank's row of a ``_GroupEvents`` (fed by the group, not by the rank)."""

    def __init__(self, group: _GroupEvents, rank: int) -> None:
        super().__init__()
        self.group, self.rank = group, rank

    def at(self, t: F64) -> F64:
        row: F64 = self.group.at(t)[self.rank]
        return row


class _ObservationsView(_Observations):
    """One rank's row of a ``_GroupObservations``."""

    def __init__(self, group: _GroupObservations, rank: int) -> None:
        super().__init__()
        self.group, self.rank = group, rank

    def at(self, bounds: tuple[float, ...], t: F64) -> tuple[F64, F64, F64]:
        b, c, s = self.group.at(bounds, t)
        return b[self.rank], c[self.rank], s[self.rank]


class RankGroup:
    """The ranks ``models`` (a sink's, in rank order), their counting done here at once."""

    def __init__(self, models: list[RankModel]) -> None:
        n = len(models)
        self.models = models
        self.counters = {k: _GroupEvents(n) for k in COUNTERS}
        self.hists = {k: _GroupObservations(n) for k in HISTOGRAMS}
        for r, m in enumerate(models):
            m.counters = {k: _EventsView(g, r) for k, g in self.counters.items()}
            m.hists = {k: _ObservationsView(g, r) for k, g in self.hists.items()}

    def feed(self, req: RequestEvents, steps: list[F64], upto: float) -> None:
        """``RankModel.feed`` for every rank: ``req`` holds the group's requests (``rank``:
        the index in ``models``), ``steps`` each rank's new steps."""
        sevs = [m.feed_steps(st, upto, r)
                for r, (m, st) in enumerate(zip(self.models, steps, strict=True))]
        sev = StepEvents(*(np.concatenate([getattr(e, f) for e in sevs]) for f in (
            "end_rank", "ended", "prev_end", "start_rank", "start", "preempted")))
        for role, (r, t, w) in counter_feeds(req, sev).items():
            self.counters[role].feed(r, t, w)
        for role, (r, t, v, w) in hist_feeds(req, sev).items():
            self.hists[role].feed(r, t, v, w, ordered=r is sev.end_rank)
