"""Per-rank event arrays the simulated exposition reads: counters as step functions of
event times, histograms as observations, both fed in time slices and queried at sorted times."""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    from numpy.typing import NDArray

    F64 = NDArray[np.float64]


class Events:
    """A step function: the weighted count of events at or before each queried time.

    Fed in time slices (``feed``): a slice's events come after every earlier slice's, and
    ``at`` answers for times up to the slice's end; the running total is carried over."""

    def __init__(self) -> None:
        self.base = 0.0  # total of the slices before the current one
        self.times: F64 = np.empty(0)
        self.cum: F64 = np.zeros(1)

    def feed(self, times: F64, weights: F64 | None = None) -> None:
        self.base += float(self.cum[-1])
        ok = np.isfinite(times)
        order = np.argsort(times[ok], kind="stable")
        self.times = times[ok][order]
        w = np.ones(len(self.times)) if weights is None else weights[ok][order]
        self.cum = np.concatenate([[0.0], np.cumsum(w, dtype=np.float64)])

    def at(self, t: F64) -> F64:
        out: F64 = self.base + self.cum[np.searchsorted(self.times, t, side="right")]
        return out


class Observations:
    """Histogram observations (time, value, weight), evaluated at many times in one pass.

    Fed in time slices like ``Events``: the queried times of a slice cover all its
    observations, and the buckets, count and sum at its last time carry over (the sum adds
    slice after slice in time order, so the result does not depend on the slicing)."""

    def __init__(self) -> None:
        self.times: F64 = np.empty(0)
        self.values: F64 = np.empty(0)
        self.weights: F64 = np.empty(0)
        # per bucket layout: (cumulative bucket counts incl. +Inf, sum) before this slice,
        # and at its last queried time (promoted by the next ``feed``)
        self._base: dict[tuple[float, ...], tuple[F64, float]] = {}
        self._last: dict[tuple[float, ...], tuple[F64, float]] = {}

    def feed(self, times: F64, values: F64, weights: F64 | None = None) -> None:
        self._base.update(self._last)
        ok = np.isfinite(times) & np.isfinite(values)
        if weights is not None:
            ok &= weights > 0
        order = np.argsort(times[ok], kind="stable")
        self.times = times[ok][order]
        self.values = values[ok][order]
        self.weights = (
            np.ones(len(self.times)) if weights is None else weights[ok][order].astype(np.float64)
        )

    def at(self, bounds: tuple[float, ...], t: F64) -> tuple[F64, F64, F64]:
        """(cumulative ``le`` bucket counts [len(t), len(bounds)], count, sum) at times t."""
        idx = np.searchsorted(np.asarray(bounds), self.values, side="left").astype(np.int64)
        nb = len(bounds) + 1
        seg = np.searchsorted(t, self.times, side="left")  # first query time >= obs time
        flat = np.bincount(seg * nb + idx, weights=self.weights, minlength=(len(t) + 1) * nb)
        base, base_sum = self._base.get(bounds, (np.zeros(nb), 0.0))
        grid: F64 = flat.astype(np.float64).reshape(len(t) + 1, nb)[:-1]
        grid = np.concatenate([base[None, :], grid]).cumsum(axis=0)[1:].cumsum(axis=1)
        per = np.bincount(seg, weights=self.weights * self.values, minlength=len(t) + 1).astype(
            np.float64
        )[:-1]
        sums: F64 = np.concatenate([[base_sum], per]).cumsum()[1:]
        if len(t):
            self._last[bounds] = (np.diff(grid[-1], prepend=0.0), float(sums[-1]))
        return grid[:, :-1], grid[:, -1], sums
