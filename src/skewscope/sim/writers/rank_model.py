"""The /metrics state of one DP rank (``RankModel``): its counters, histograms and the steps
its gauges read, fed in time slices or the whole run at once."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np
import polars as pl

from skewscope.catalogue import MetricType
from skewscope.sim.writers.event_arrays import Events, Observations
from skewscope.sim.writers.rank_events import (
    COUNTERS,
    HISTOGRAMS,
    STEP_COLUMNS,
    RequestEvents,
    StepEvents,
    counter_feeds,
    gauge_values,
    hist_feeds,
)
from skewscope.sim.writers.specs_devices import DEVICE_AVERAGE_S

if TYPE_CHECKING:
    from numpy.typing import NDArray

    from skewscope.sim.records import RankInfo, SimResult
    from skewscope.sim.writers.metric_spec import MetricSpec

    F64 = NDArray[np.float64]


def _col(df: pl.DataFrame, name: str) -> F64:
    return df.get_column(name).cast(pl.Float64).fill_null(np.nan).to_numpy()


@dataclass
class RankModel:
    """The /metrics state of one DP rank, fed in time slices (or the whole run at once).

    ``feed(requests, steps, upto)`` counts every event up to ``upto`` not counted before;
    ``value``/``gauge`` then answer for times in (previous ``upto``, ``upto``]. Counters and
    histograms carry running totals; the steps are kept only as far back as a gauge at those
    times reads (the last step started, ``DEVICE_AVERAGE_S`` of busy time)."""

    info: RankInfo
    counters: dict[str, Events] = field(default_factory=dict)
    hists: dict[str, Observations] = field(default_factory=dict)
    step_start: F64 = field(default_factory=lambda: np.empty(0))
    step_end: F64 = field(default_factory=lambda: np.empty(0))
    step_used: F64 = field(default_factory=lambda: np.empty(0))
    # steps held: STEP_COLUMNS rows, the busy time done before each (``done[k]``, one more
    # than rows), the end of the step before the first held one, how many held steps' start
    # and end events are counted, and the last ``upto``
    _held: F64 = field(default_factory=lambda: np.empty((0, len(STEP_COLUMNS))))
    _done: F64 = field(default_factory=lambda: np.zeros(1))
    _prev_end: float = math.nan
    _n_started: int = 0
    _n_ended: int = 0
    upto: float = -math.inf

    def __post_init__(self) -> None:
        self.counters = {k: Events() for k in COUNTERS}
        self.hists = {k: Observations() for k in HISTOGRAMS}

    @classmethod
    def build(cls, result: SimResult, info: RankInfo) -> RankModel:
        """The whole run at once (live mode, tests): every time is answerable."""
        req = result.requests.filter(
            (pl.col("instance") == info.instance) & (pl.col("dp_rank") == info.dp_rank)
        )
        st = result.steps.filter(
            (pl.col("instance") == info.instance) & (pl.col("dp_rank") == info.dp_rank)
        ).sort("start_s")
        arrival, sched = _col(req, "arrival_s"), _col(req, "first_scheduled_s")
        first, finish = _col(req, "first_token_s"), _col(req, "finish_s")
        accepted = (req.get_column("status") != "rejected").to_numpy()
        ev = RequestEvents(
            arrival,
            sched,
            first,
            finish,
            _col(req, "input_tokens"),
            _col(req, "output_tokens"),
            accepted,
            arrival,
            sched,
            first,
            finish,
        )
        m = cls(info)
        m.feed(ev, np.column_stack([_col(st, c) for c in STEP_COLUMNS]), math.inf)
        return m

    def feed(self, req: RequestEvents, steps: F64, upto: float) -> None:
        """Count the requests' events given now and the new steps' (rows of
        ``STEP_COLUMNS``, the rank's next steps in time order) up to ``upto``."""
        sev = self._feed_steps(steps, upto)
        for role, (_r, t, w) in counter_feeds(req, sev).items():
            self.counters[role].feed(t, w)
        for role, (_r, t, v, w) in hist_feeds(req, sev).items():
            self.hists[role].feed(t, v, w)

    def _feed_steps(self, steps: F64, upto: float) -> StepEvents:
        """Hold the new steps (what the gauges read) and give the step events up to ``upto``
        not counted yet (all of this one rank: rank id 0)."""
        self._trim()
        self.upto = upto
        if len(steps):
            done = np.cumsum(np.concatenate([self._done[-1:], steps[:, 1] - steps[:, 0]]))
            self._done = np.concatenate([self._done, done[1:]])
            self._held = np.concatenate([self._held, steps]) if len(self._held) else steps
        h = self._held
        start, end = h[:, 0], h[:, 1]
        s0, s1 = self._n_started, int(np.searchsorted(start, upto, side="right"))
        e0, e1 = self._n_ended, int(np.searchsorted(end, upto, side="right"))
        self._n_started, self._n_ended = s1, e1
        self.step_start, self.step_end, self.step_used = start, end, h[:, 7]
        ended = h[e0:e1]
        prev = np.concatenate([[self._prev_end], end[:-1]])[e0:e1]
        return StepEvents(
            np.zeros(e1 - e0, np.int64),
            ended[:, 1],
            prev,
            ended[:, 2],
            ended[:, 4],
            ended[:, 5],
            ended[:, 6],
            np.zeros(s1 - s0, np.int64),
            start[s0:s1],
            h[s0:s1, 3],
        )

    def _trim(self) -> None:
        """Drop held steps no later query reads: counted, ended ``DEVICE_AVERAGE_S`` (and a
        second) before the last ``upto``, and not the last step started by then."""
        if not math.isfinite(self.upto) or not len(self._held):
            return
        h = self._held
        k = min(
            self._n_started,
            self._n_ended,
            int(np.searchsorted(h[:, 1], self.upto - DEVICE_AVERAGE_S - 1.0, side="right")),
            max(int(np.searchsorted(h[:, 0], self.upto, side="right")) - 1, 0),
        )
        if k <= 0:
            return
        self._prev_end = float(h[k - 1, 1])
        self._held, self._done = h[k:], self._done[k:]
        self._n_started -= k
        self._n_ended -= k

    def gauge(self, role: str, t: F64) -> F64:
        i = self.info
        return gauge_values(
            role,
            t,
            lambda k: self.counters[k].at(t),
            self._used,
            self._busy,
            np.full(len(t), float(i.total_blocks)),
            i.block_size,
            i.max_running,
        )

    def _used(self, t: F64, running: F64) -> F64:
        """KV blocks used at ``t``: the last step started's (0 while nothing runs)."""
        used: F64 = np.zeros(len(t))
        if len(self.step_start):
            i = np.searchsorted(self.step_start, t, side="right") - 1
            used = np.where((i >= 0) & (running > 0), self.step_used[np.maximum(i, 0)], 0.0)
        return used

    def _busy(self, t: F64) -> F64:
        """Time spent in steps up to each of ``t`` (a rank's steps follow one another)."""
        start, end = self.step_start, self.step_end
        done = self._done  # busy time before each held step (and after the last)
        i = np.searchsorted(end, t, side="right")  # steps finished by t
        nxt = np.minimum(i, max(len(start) - 1, 0))
        partial = (
            np.where((i < len(start)) & (start[nxt] < t), t - start[nxt], 0.0)
            if len(start)
            else np.zeros(len(t))
        )
        busy: F64 = done[i] + partial
        return busy

    def value(self, spec: MetricSpec, t: F64) -> F64:
        if spec.kind is MetricType.COUNTER or (
            spec.kind is MetricType.GAUGE and spec.role in self.counters
        ):
            return self.counters[spec.role].at(t)
        return self.gauge(spec.role, t)
