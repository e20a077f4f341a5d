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
from skewscope.sim.writers.rank_events import (
    COUNTERS,
    HISTOGRAMS,
    RequestEvents,
    StepEvents,
    counter_feeds,
    gauge_values,
    hist_feeds,
)
from skewscope.sim.writers.specs_devices import DEVICE_AVERAGE_S

if TYPE_CHECKING:
    from collections.abc import Collection

    from numpy.typing import NDArray

    from skewscope.sim.records import RankInfo

    F64 = NDArray[np.float64]
    I64 = NDArray[np.int64]


class _GroupEvents:
    """``Events`` of ``n`` ranks: weighted event counts at or before each queried time."""

    def __init__(self, n: int) -> None:
        self.n = n
        self.base: F64 = np.zeros(n)  # each rank's total of the slices before the current one
        self.total: F64 = np.zeros(n)  # the current slice's total
        self.rank: I64 = np.zeros(0, dtype=np.int64)
        self.times: F64 = np.zeros(0)
        self.weights: F64 | None = None  # None: one each
        self._cache: tuple[F64, F64] | None = None

    def feed(self, rank: I64, times: F64, weights: F64 | None) -> None:
        self.base = self.base + self.total
        ok = np.isfinite(times)
        if not ok.all():
            rank, times = rank[ok], times[ok]
            weights = None if weights is None else weights[ok]
        self.rank, self.times = rank, times
        self.weights = None if weights is None else np.asarray(weights, dtype=np.float64)
        self.total = np.bincount(self.rank, weights=self.weights, minlength=self.n).astype(
            np.float64
        )
        self._cache = None

    def at(self, t: F64) -> F64:
        """[rank, time] counts (times within the current slice)."""
        if self._cache is not None and _same(self._cache[0], t):
            return self._cache[1]
        m = len(t)
        seg = np.searchsorted(t, self.times, side="left")  # counted from t[seg] on
        bins = np.bincount(
            self.rank * (m + 1) + seg, weights=self.weights, minlength=self.n * (m + 1)
        ).reshape(self.n, m + 1)[:, :m]
        out: F64 = self.base[:, None] + np.cumsum(bins, axis=1)
        self._cache = (t, out)
        return out


class _GroupObservations:
    """``Observations`` of ``n`` ranks: cumulative buckets, count and sum at queried times."""

    def __init__(self, n: int) -> None:
        self.n = n
        self.rank: I64 = np.zeros(0, dtype=np.int64)
        self.times: F64 = np.zeros(0)
        self.values: F64 = np.zeros(0)
        self.weights: F64 | None = None  # None: one each
        # per bucket layout: ([rank, bucket] counts incl. +Inf, [rank] sum) before this slice,
        # and at its last queried time (promoted by the next ``feed``)
        self._base: dict[tuple[float, ...], tuple[F64, F64]] = {}
        self._last: dict[tuple[float, ...], tuple[F64, F64]] = {}
        self._cache: dict[tuple[float, ...], tuple[F64, tuple[F64, F64, F64]]] = {}

    def feed(
        self, rank: I64, times: F64, values: F64, weights: F64 | None, by_rank: bool = False
    ) -> None:
        """``by_rank``: each rank's observations are in time order already (the steps: a
        rank's steps end one after another; ``_GroupSteps`` gives them in the engine's
        order). A (rank, scrape interval) bin adds its observations in the order given, so
        only each rank's own order matters; the requests are sorted by time (stable: ties in
        request order, as ``RankModel`` adds them)."""
        self._base.update(self._last)
        self._cache = {}
        ok = np.isfinite(times) & np.isfinite(values)
        if weights is not None:
            ok &= weights > 0
        w = weights
        if not ok.all():
            rank, times, values = rank[ok], times[ok], values[ok]
            w = None if w is None else w[ok]
        if not by_rank:
            order = np.argsort(times, kind="stable")
            rank, times, values = rank[order], times[order], values[order]
            w = None if w is None else w[order]
        self.rank, self.times, self.values = rank, times, values
        self.weights = None if w is None else np.asarray(w, dtype=np.float64)

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
        wv = self.values if self.weights is None else self.weights * self.values
        per = (
            np.bincount(cell, weights=wv, minlength=n * (m + 1))
            .astype(np.float64)
            .reshape(n, m + 1)[:, :-1]
        )
        sums: F64 = np.concatenate([base_sum[:, None], per], axis=1).cumsum(axis=1)[:, 1:]
        if m:
            self._last[bounds] = (np.diff(grid[:, -1], axis=1, prepend=0.0), sums[:, -1].copy())
        out = (grid[:, :, :-1], grid[:, :, -1], sums)
        self._cache[bounds] = (t, out)
        return out


def _same(a: F64, b: F64) -> bool:
    """The same query times (every rank asks for the ones of its sink's chunk)."""
    return a is b or (a.shape == b.shape and bool(np.array_equal(a, b)))


class _GroupSteps:
    """The steps of ``n`` ranks that the gauges and step events still read, in the engine's
    order (by start, then rank; a rank's steps follow one another, so each rank's are in time
    order too): what ``RankModel`` holds for one rank, with the same event times, the same
    busy-time sums (added rank by rank in time order) and the same previous step ends."""

    _FIELDS = (
        "start",
        "end",
        "used",
        "preempted",
        "decode",
        "prefill",
        "batch",
        "waiting",
        "prev",
        "done",
    )

    def __init__(self, n: int) -> None:
        self.n = n
        self.rank: I64 = np.zeros(0, dtype=np.int64)
        self.col: dict[str, F64] = {k: np.zeros(0) for k in self._FIELDS}  # "done": busy
        # time before the step, "prev": the end of the rank's step before it
        self.done_last: F64 = np.zeros(n)  # busy time after each rank's last step
        self.last_end: F64 = np.full(n, np.nan)
        self.upto = -np.inf  # events up to here are counted
        self.order: I64 = np.zeros(0, dtype=np.int64)  # held rows by rank, then time
        self.off: I64 = np.zeros(n + 1, dtype=np.int64)  # each rank's first in ``order``
        self._cache: dict[str, tuple[F64, F64]] = {}

    def feed(self, rank: I64, rows: F64, upto: float) -> StepEvents:
        """Hold the new ``rows`` (engine step rows, ``rank.STEP_FIELDS``, of ranks ``rank``,
        in the engine's order) and give the step events in (last ``upto``, ``upto``]."""
        self._append(self._keep(), rank, rows)
        c, r, before = self.col, self.rank, self.upto
        start, end = c["start"], c["end"]
        p0, p1 = np.searchsorted(start, [before, upto], side="right").tolist()
        ended = (end > before) & (end <= upto)
        self.upto, self._cache = upto, {}
        self.order = np.argsort(r.astype(np.int16), kind="stable")  # radix: ranks < 2**15
        self.off[1:] = np.cumsum(np.bincount(r, minlength=self.n))
        return StepEvents(
            r[ended],
            end[ended],
            c["prev"][ended],
            c["decode"][ended],
            c["prefill"][ended],
            c["batch"][ended],
            c["waiting"][ended],
            r[p0:p1],
            start[p0:p1],
            c["preempted"][p0:p1],
        )

    def _append(self, keep: NDArray[np.bool_] | None, rank: I64, rows: F64) -> None:
        """The held steps ``keep`` (None: all) and the new ``rows``, each column written once
        into its new array."""
        h = len(self.rank) if keep is None else int(np.count_nonzero(keep))
        col = {k: np.empty(h + len(rows)) for k in self._FIELDS}
        for k, v in self.col.items():
            if keep is None:
                col[k][:h] = v
            else:
                np.compress(keep, v, out=col[k][:h])
        held_rank = self.rank if keep is None else self.rank[keep]
        self.rank, self.col = np.concatenate([held_rank, rank]), col
        if not len(rows):
            return
        new = {k: c[h:] for k, c in col.items()}  # views
        start, end = new["start"], new["end"]
        np.add(rows[:, 1], START_S, out=start)  # epoch s, as the table's
        np.add(rows[:, 2], START_S, out=end)
        np.add(rows[:, 3], rows[:, 4], out=new["batch"])
        for name, f in (
            ("used", 8),
            ("preempted", 11),
            ("decode", 4),
            ("prefill", 5),
            ("waiting", 7),
        ):
            new[name][:] = rows[:, f]
        # rank by rank (time order within): the previous step's end, the busy time before
        order = np.argsort(rank.astype(np.int16), kind="stable")
        fed = np.bincount(rank, minlength=self.n)
        off = np.concatenate([[0], np.cumsum(fed)])
        end_r, dur_r = end[order], (end - start)[order]
        prev_r, done_r = np.empty(len(rows)), np.empty(len(rows))
        prev_r[1:] = end_r[:-1]
        for r in np.flatnonzero(fed).tolist():
            a, b = int(off[r]), int(off[r + 1])
            prev_r[a] = self.last_end[r]
            self.last_end[r] = end_r[b - 1]
            seg = dur_r[a:b].copy()
            seg[0] += self.done_last[r]
            cum = np.cumsum(seg)  # as RankModel's cumsum from its last busy time
            done_r[a] = self.done_last[r]
            done_r[a + 1 : b] = cum[:-1]
            self.done_last[r] = cum[-1]
        new["prev"][order], new["done"][order] = prev_r, done_r

    def _keep(self) -> NDArray[np.bool_] | None:
        """The held steps a later query still reads (None: all), as ``RankModel._trim``
        keeps them: all but those counted, ended ``DEVICE_AVERAGE_S`` (and a second) before
        the last ``upto`` and not the last step their rank started by then."""
        if not np.isfinite(self.upto) or not len(self.rank):
            return None
        drop = self.col["end"] <= self.upto - DEVICE_AVERAGE_S - 1.0
        if not drop.any():
            return None
        last = self._last_started(np.array([self.upto]))[:, 0]
        drop[last[last >= 0]] = False
        return ~drop

    def _count(self, times: F64, t: F64) -> I64:
        """[rank, time]: held steps of each rank whose ``times`` are at or before each of t."""
        m = len(t)
        seg = np.searchsorted(t, times, side="left")  # counted from t[seg] on
        bins = np.bincount(self.rank * (m + 1) + seg, minlength=self.n * (m + 1))
        return np.cumsum(bins.reshape(self.n, m + 1)[:, :m], axis=1)

    def _row(self, i: I64) -> I64:
        """The held row of each rank's ``i``-th step (clipped into range)."""
        at = np.clip(self.off[:-1, None] + i, 0, max(len(self.order) - 1, 0))
        return self.order[at] if len(self.order) else np.zeros(at.shape, dtype=np.int64)

    def _last_started(self, t: F64) -> I64:
        """[rank, time]: the held row of the last step each rank started by each of t (-1:
        none)."""
        i = self._count(self.col["start"], t) - 1
        return np.where(i >= 0, self._row(i), -1)

    def used(self, t: F64, running: F64) -> F64:
        """[rank, time] KV blocks in use: the last step started's (0 while nothing runs)."""
        hit = self._cache.get("used")
        if hit is not None and _same(hit[0], t):
            return hit[1]
        last = self._last_started(t)
        used = self.col["used"] if len(self.rank) else np.zeros(1)
        out: F64 = np.where((last >= 0) & (running > 0), used[np.maximum(last, 0)], 0.0)
        self._cache["used"] = (t, out)
        return out

    def busy(self, t: F64) -> F64:
        """[rank, time] time spent in steps up to each of t (``RankModel._busy``)."""
        i = self._count(self.col["end"], t)  # steps finished by t
        held = (self.off[1:] - self.off[:-1])[:, None]
        nxt = self._row(np.minimum(i, np.maximum(held - 1, 0)))  # the step after those
        c = self.col if len(self.rank) else {k: np.zeros(1) for k in self._FIELDS}
        before = np.where(i < held, c["done"][nxt], self.done_last[:, None])
        start = c["start"][nxt]
        partial = np.where((i < held) & (start < t), t - start, 0.0)
        out: F64 = before + partial
        return out


class RankGroup:
    """The ranks ``infos`` of a sink (instance-major, DP ranks in order), counted at once;
    a ``families.RankSource``."""

    def __init__(
        self, infos: list[RankInfo], roles: Collection[str] = COUNTERS + HISTOGRAMS
    ) -> None:
        """``roles``: the counters and histograms read (the others are not counted); the
        gauges' request counters always are."""
        self.n = n = len(infos)
        read = {*roles, "arrived", "scheduled", "finished"}
        self.counters = {k: _GroupEvents(n) for k in COUNTERS if k in read}
        self.hists = {k: _GroupObservations(n) for k in HISTOGRAMS if k in read}
        self.steps = _GroupSteps(n)
        self.total: F64 = np.array([float(i.total_blocks) for i in infos])[:, None]
        self.block_size: I64 = np.array([i.block_size for i in infos])[:, None]
        self.max_running: I64 = np.array([i.max_running for i in infos])[:, None]

    def feed(self, req: RequestEvents, rank: I64, rows: F64, upto: float) -> None:
        """``RankModel.feed`` for every rank: ``req`` holds the group's requests (``rank``:
        the index in the group), ``rows`` the new engine step rows of ranks ``rank``."""
        sev = self.steps.feed(rank, rows, upto)
        for role, (r, t, w) in counter_feeds(req, sev).items():
            if role in self.counters:
                self.counters[role].feed(r, t, w)
        for role, (r, t, v, w) in hist_feeds(req, sev).items():
            if role in self.hists:
                self.hists[role].feed(r, t, v, w, by_rank=r is sev.end_rank)

    def is_counter(self, role: str) -> bool:
        return role in COUNTERS

    def counter(self, role: str, t: F64) -> F64:
        return self.counters[role].at(t)

    def hist(self, role: str, bounds: tuple[float, ...], t: F64) -> tuple[F64, F64, F64]:
        return self.hists[role].at(bounds, t)

    def gauge(self, role: str, t: F64) -> F64:
        return gauge_values(
            role,
            t,
            lambda k: self.counters[k].at(t),
            self.steps.used,
            self.steps.busy,
            np.repeat(self.total, len(t), axis=1),
            self.block_size,
            self.max_running,
        )
