"""Workload from the evidence: the observed requests as a replayable simulator workload, which
units were in the pool when, and what the current routing looks like.

Arrivals are the observed ones, request by request (no Poisson smoothing: bursts stay bursts);
lengths are each request's own. Where the evidence placed a request (instance, DP rank) goes
along as a hint, so the current routing replays exactly.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import polars as pl

from skewscope.config import WHATIF, WhatIfSettings
from skewscope.frame import dp_unit_id
from skewscope.notes import Note
from skewscope.notes import WhatifNoteCode as W
from skewscope.sim.workload import Workload
from skewscope.sources.workload import RequestLog


@dataclass(frozen=True)
class Layout:
    """The fleet's shape: instance names in index order and DP ranks per instance.

    The simulator runs an instances x ``dp_ranks`` grid (``dp_ranks`` = the largest DP size);
    with ``sizes`` (a mixed fleet: one instance DP=2, the others DP=4) the grid slots at or past
    an instance's size are not engine processes: they get no request and no metric.
    """

    instances: tuple[str, ...]
    dp_ranks: int
    sizes: tuple[int, ...] = ()  # per instance DP size; () = dp_ranks everywhere

    def size(self, i: int) -> int:
        return self.sizes[i] if self.sizes else self.dp_ranks

    @property
    def mixed(self) -> bool:
        return len(set(self.sizes)) > 1

    def present(self) -> list[bool]:
        """Per grid slot (the simulator's global rank order): is it an engine process."""
        return [d < self.size(i) for i in range(len(self.instances)) for d in range(self.dp_ranks)]

    def grid_units(self) -> list[str]:
        """Unit ids of every grid slot, in the simulator's global rank order."""
        if self.dp_ranks == 1:
            return list(self.instances)
        return [dp_unit_id(i, d) for i in self.instances for d in range(self.dp_ranks)]

    def rank_units(self) -> list[str]:
        """Unit ids of every engine process (grid slots present), in grid order."""
        return [u for u, ok in zip(self.grid_units(), self.present(), strict=True) if ok]


@dataclass(frozen=True)
class Observed:
    """The evidence, ready to replay."""

    layout: Layout
    workload: Workload
    duration_s: float
    availability: tuple[tuple[float, float], ...]  # per instance [join, fail) in run seconds
    instance_share: tuple[float, ...]  # share of requests per instance while in the pool
    rank_share: tuple[float, ...]  # share of placed requests per DP rank index (all instances)
    inferred: tuple[tuple[str, Note], ...]  # level -> what the current routing looks like
    equal_instances: bool
    equal_ranks: bool
    has_sessions: bool
    notes: tuple[Note, ...]
    # Online evidence gives latencies as histograms: metric -> the bucket upper bounds (ms) the
    # replay is read through for the calibration check (the same instrument on both sides).
    through: tuple[tuple[str, tuple[float, ...]], ...] = ()


def layout_of(log: RequestLog) -> Layout:
    sizes = tuple(len(r) for r in log.ranks.values())
    return Layout(tuple(log.ranks), max(sizes), sizes)


def _equal(counts: np.ndarray, s: WhatIfSettings, expected: np.ndarray | None = None) -> bool:
    """Counts consistent with the ``expected`` shares (default: equal): each within
    ``equal_share_z`` binomial sd."""
    n, k = float(counts.sum()), counts.shape[0]
    if k < 2 or n == 0:
        return True
    p = np.full(k, 1.0 / k) if expected is None else expected / expected.sum()
    sd = np.sqrt(n * p * (1 - p))
    return bool(np.all(np.abs(counts - n * p) <= s.equal_share_z * sd))


def rank_weights(counts: np.ndarray, layout: Layout, s: WhatIfSettings) -> tuple[np.ndarray, bool]:
    """Per DP rank index, its relative weight in its instance's dispatcher (1 = a fair share),
    and whether the counts are consistent with equal weights. ``counts``: instances x grid
    placed requests. A rank's share is judged within its own instance, so a DP=2 instance's
    ranks are not called hot beside a DP=4 instance's."""
    n_i = counts.sum(axis=1)
    sizes = np.array([layout.size(i) for i in range(len(layout.instances))], dtype=float)
    present = np.array(layout.present()).reshape(counts.shape)
    rel = np.divide(
        counts * sizes[:, None], n_i[:, None], out=np.zeros_like(counts), where=n_i[:, None] > 0
    )
    weight = (rel * n_i[:, None] * present).sum(axis=0)
    norm = (n_i[:, None] * present).sum(axis=0)
    w = np.divide(weight, norm, out=np.ones(layout.dp_ranks), where=norm > 0)
    expected = (present * np.divide(n_i, sizes)[:, None]).sum(axis=0)
    return w, _equal(counts.sum(axis=0), s, expected)


def _availability(
    arrivals: np.ndarray, inst: np.ndarray, n: int, duration: float, s: WhatIfSettings
) -> tuple[list[tuple[float, float]], list[Note]]:
    """Per instance the interval it was in the pool: the whole run, unless the fleet's requests
    before its first or after its last one would, at its share of the fleet's traffic, have
    brought it at least ``absent_expected_requests`` (a failed health check, a late join). The
    gap is counted in the fleet's requests, not in time: an idle tail (or head) of the whole
    range is no unit leaving (or joining) the pool."""
    out: list[tuple[float, float]] = []
    notes: list[Note] = []
    fleet = np.sort(arrivals)
    for i in range(n):
        mine = arrivals[inst == i]
        if mine.shape[0] == 0:
            out.append((duration, math.inf))
            notes.append(Note(W.NEVER_IN_POOL, {"instance": i}))
            continue
        first, last = float(mine[0]), float(mine[-1])
        before = int(np.searchsorted(fleet, first, side="left"))
        after = fleet.shape[0] - int(np.searchsorted(fleet, last, side="right"))
        share = mine.shape[0] / max(fleet.shape[0] - before - after, 1)
        join = first if before * share >= s.absent_expected_requests else 0.0
        fail = last if after * share >= s.absent_expected_requests else math.inf
        out.append((join, fail))
    return out, notes


def extract(log: RequestLog, s: WhatIfSettings = WHATIF) -> Observed:
    """Turn a RequestLog into a replayable workload plus the current routing's shape."""
    layout = layout_of(log)
    index = {name: k for k, name in enumerate(layout.instances)}
    req = log.requests.sort("arrival_s")
    arrivals = (req["arrival_s"].to_numpy() - log.start_s).astype(np.float64)
    inst = req["instance"].replace_strict(index, return_dtype=pl.Int64).to_numpy()
    rank = req["dp_rank"].fill_null(-1).to_numpy().astype(np.int64)
    n = arrivals.shape[0]
    duration = log.end_s - log.start_s
    rank = _place_unplaced(req, inst, rank, len(layout.instances), layout.dp_ranks)
    outputs, n_guessed = _outputs(req, inst, rank, log, layout.instances, s)
    wl = Workload(
        arrival_s=arrivals,
        input_tokens=req["prompt_tokens"].to_numpy().astype(np.int64),
        output_tokens=outputs,
        tag=np.zeros(n, dtype=np.int64),
        session=np.full(n, -1, dtype=np.int64),
        instance_hint=inst.astype(np.int64),
        rank_hint=rank,
    )
    notes: list[Note] = []
    unplaced = int(req["dp_rank"].is_null().sum()) if layout.dp_ranks > 1 else 0
    if unplaced:
        notes.append(Note(W.UNPLACED, {"requests": unplaced}))
    if n_guessed:
        notes.append(Note(W.UNFINISHED, {"requests": n_guessed}))
    notes.append(Note(W.NO_SESSIONS))
    return observe(layout, wl, duration, notes, s)


def observe(
    layout: Layout,
    wl: Workload,
    duration: float,
    notes: list[Note],
    s: WhatIfSettings = WHATIF,
    has_sessions: bool = False,
    through: tuple[tuple[str, tuple[float, ...]], ...] = (),
) -> Observed:
    """The current routing's shape from a placed workload (``instance_hint``/``rank_hint``):
    who was in the pool when, the request shares per instance and per DP rank, and what the
    routing looks like. Shared by the offline and online sources."""
    assert wl.instance_hint is not None and wl.rank_hint is not None
    arrivals, inst, rank = wl.arrival_s, wl.instance_hint, wl.rank_hint
    avail, pool_notes = _availability(arrivals, inst, len(layout.instances), duration, s)
    counts = np.bincount(inst, minlength=len(layout.instances)).astype(float)
    in_pool = np.array([max(min(hi, duration) - lo, 0.0) for lo, hi in avail])
    rates = np.divide(counts, in_pool, out=np.zeros_like(counts), where=in_pool > 0)
    inst_share = rates / rates.sum() if rates.sum() > 0 else np.full_like(rates, 1 / len(rates))
    placed = np.zeros((len(layout.instances), layout.dp_ranks))
    np.add.at(placed, (inst[rank >= 0], rank[rank >= 0]), 1.0)
    weights, eq_rank = rank_weights(placed, layout, s)
    rank_share = weights / weights.sum()
    # equal shares judged on counts over the same interval (the pool's common time)
    eq_inst = _equal(np.rint(inst_share * counts.sum()), s)
    inferred = [("instance", _describe(eq_inst, inst_share, layout.instances))]
    if layout.dp_ranks > 1:
        inferred.append(
            ("dp", _describe(eq_rank, rank_share, tuple(f"dp{d}" for d in range(layout.dp_ranks))))
        )
    for i, (lo, hi) in enumerate(avail):
        name = layout.instances[i]
        if 0 < lo < duration:
            pool_notes.append(Note(W.JOINED_LATE, {"instance": name, "at_s": lo}))
        if math.isfinite(hi) and hi > lo:
            pool_notes.append(Note(W.LEFT_EARLY, {"instance": name, "at_s": hi}))
    return Observed(
        layout,
        wl,
        duration,
        tuple(avail),
        tuple(inst_share.tolist()),
        tuple(rank_share.tolist()),
        tuple(inferred),
        eq_inst,
        eq_rank,
        has_sessions,
        tuple(pool_notes + notes),
        through,
    )


def _place_unplaced(
    req: pl.DataFrame, inst: np.ndarray, rank: np.ndarray, n_inst: int, n_dp: int
) -> np.ndarray:
    """A request never scheduled while profiled has no DP rank; it waited, so it goes to the
    rank of its instance whose requests waited longest (mean queue wait)."""
    if n_dp == 1:
        return np.zeros_like(rank)
    if not (rank < 0).any():
        return rank
    waits = req.with_columns(pl.Series("_i", inst)).filter(pl.col("dp_rank").is_not_null())
    worst = (
        waits.group_by("_i", "dp_rank")
        .agg(pl.col("queue_wait_ms").mean().alias("w"))
        .sort("w", descending=True)
        .unique("_i", keep="first")
    )
    target = np.zeros(n_inst, dtype=np.int64)
    for i, d, _ in worst.iter_rows():
        target[i] = d
    out = rank.copy()
    miss = out < 0
    out[miss] = target[inst[miss]]
    return out


def _step_ms(
    steps: pl.DataFrame, inst: np.ndarray, rank: np.ndarray, names: tuple[str, ...]
) -> np.ndarray:
    """Per request, the median step time of its unit (the fleet's where the unit has none)."""
    out = np.full(inst.shape[0], np.nan)
    timed = steps.drop_nulls("exec_ms").filter(pl.col("exec_ms") > 0)
    if timed.is_empty():
        return out
    fleet = float(timed["exec_ms"].median())  # type: ignore[arg-type]
    out[:] = fleet
    for (name, d), rows in timed.group_by(["instance", "dp_rank"]):
        if name in names:
            mine = (inst == names.index(str(name))) & (rank == int(d))
            out[mine] = float(rows["exec_ms"].median())  # type: ignore[arg-type]
    return out


def _outputs(
    req: pl.DataFrame,
    inst: np.ndarray,
    rank: np.ndarray,
    log: RequestLog,
    names: tuple[str, ...],
    s: WhatIfSettings,
) -> tuple[np.ndarray, int]:
    """Output lengths: a finished request's own. An unfinished one shows no length. One that
    started had been decoding since its first token until the end of the capture: at its
    unit's median step time that is some tokens already, so its length is drawn from the
    finished requests *of the same unit* at least that long (the fleet's when the unit has
    none) — those that arrived before its first unfinished one, all finished, when there are
    ``min_length_sample`` of them. The unit matters: when long requests are pinned to a unit,
    its running unfinished ones are the long ones (issue 22: the replay's queue). One that
    never started is a stratified draw from the fleet's finished requests (measured against
    ground truth, drawing it from its unit's overshot the candidates' TTFT P99, plain draws
    scattered it: docs/whatif.md)."""
    out = req["output_tokens"].to_numpy().astype(np.int64).copy()
    unfinished = req["e2e_ms"].is_null().to_numpy()
    if not unfinished.any() or not (~unfinished).any():
        return out, 0
    step = _step_ms(log.steps, inst, rank, names)
    arrival = req["arrival_s"].to_numpy()
    ttft = req["ttft_ms"].fill_null(0.0).to_numpy()
    decoding = np.where(ttft > 0, (log.end_s - arrival) * 1000.0 - ttft, 0.0)
    so_far = np.where(np.isfinite(step) & (step > 0), np.floor(decoding / step), 0.0)
    floor = np.maximum(out, so_far.astype(np.int64))
    unit = inst * 4096 + rank
    rng = np.random.default_rng(s.seed)
    fleet = np.sort(out[~unfinished])
    # the unit's uncensored sample: requests that arrived before its first unfinished one all
    # finished, so their lengths are not biased short (a long request is likelier unfinished)
    first_open = {
        u: float(arrival[unfinished & (unit == u)].min()) for u in np.unique(unit[unfinished])
    }
    never = np.flatnonzero(unfinished & (ttft <= 0))
    # never started: no sign of its length beyond the fleet's. Stratified (each of the m draws
    # from its own 1/m of the fleet's lengths, then shuffled): the draws hold as many long
    # requests as the fleet does, which near saturation is what moves a candidate's tail
    strata = (np.arange(never.shape[0]) + rng.uniform(size=never.shape[0])) / max(never.shape[0], 1)
    drawn = fleet[np.minimum((strata * fleet.shape[0]).astype(np.int64), fleet.shape[0] - 1)]
    rng.shuffle(drawn)
    for k, v in zip(never, drawn, strict=True):
        pool = fleet[fleet >= floor[k]]
        out[k] = (
            v
            if v >= floor[k]
            else (pool[int(rng.integers(pool.shape[0]))] if pool.shape[0] else floor[k])
        )
    for k in np.flatnonzero(unfinished & (ttft > 0)):
        done = ~unfinished & (unit == unit[k])
        early = done & (arrival < first_open[unit[k]])
        mine = np.sort(out[early if early.sum() >= s.min_length_sample else done])
        pool = mine[mine >= floor[k]]
        if pool.shape[0] == 0:
            pool = fleet[fleet >= floor[k]]
        out[k] = pool[int(rng.integers(pool.shape[0]))] if pool.shape[0] else floor[k]
    return out, int(unfinished.sum())


def _describe(equal: bool, share: np.ndarray, names: tuple[str, ...]) -> Note:
    if equal:
        return Note(W.ROUTING_EQUAL)
    return Note(
        W.ROUTING_WEIGHTED, {"shares": [[n, float(v)] for n, v in zip(names, share, strict=True)]}
    )
