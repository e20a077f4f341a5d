"""Profiler reader, last stage: instances -> the common window grid -> (window x unit) frames.

Every instance shares one grid (window index ``floor(t / window_s)`` on the epoch axis). Totals
in a window without events are 0 for a unit whose file exists; a signal the unit cannot give is
null. Instance-level percentiles come from the requests themselves, not from DP rows.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import polars as pl

from skewscope.errors import InputError
from skewscope.frame import (
    SIGNAL_COLUMNS,
    TOTAL_SIGNALS,
    WINDOWS,
    Level,
    UnitFrame,
    WindowPolicy,
    conform,
    dp_unit_id,
)
from skewscope.sources import profiler_forward as pf
from skewscope.sources import profiler_partials as pp
from skewscope.sources import profiler_range as pr
from skewscope.sources.profiler_instance import REQUEST_SIGNALS, Instance
from skewscope.sources.profiler_read import ensure

# A unit whose source is present but had no event in a window did 0 of it; with no steps
# its decode batch (running) is empty too.
# A device with forward passes in the range but none in a window was idle in it.
ZERO_FILL: frozenset[str] = TOTAL_SIGNALS | {"running", pf.SIGNAL}
WI = "_wi"  # integer window index: floor(t / window_s), shared by every instance


def _total(col: str) -> pl.Expr:
    """Sum of a window's rows; with blank/N/A cells the mean of the known ones times the rows
    (a missing cell is unknown, not 0); null when no row has a value."""
    c = pl.col(col)
    return pl.when(c.null_count() == 0).then(c.sum()).otherwise(c.mean() * pl.len())


REQUEST_AGGS: dict[str, pl.Expr] = {
    "requests": pl.len().cast(pl.Float64),
    "prompt_tokens": _total("prompt_tokens"),
    "generation_tokens": _total("generation_tokens"),
    "queue_wait_mean_ms": pl.col("queue_wait_ms").mean(),
    "queue_wait_p95_ms": pl.col("queue_wait_ms").quantile(0.95, "linear"),
    "ttft_mean_ms": pl.col("ttft_ms").mean(),
    "ttft_p99_ms": pl.col("ttft_ms").quantile(0.99, "linear"),
    "e2e_mean_ms": pl.col("e2e_ms").mean(),
    "e2e_p99_ms": pl.col("e2e_ms").quantile(0.99, "linear"),
}
STEP_AGGS = pp.window_stats(pp.STEP_STATS)  # from (rank, tick) partials, see profiler_partials
KV_AGGS = pp.window_stats(pp.KV_STATS)
BUSY_AGGS = pp.window_stats(pp.BUSY_STATS)
# signal -> column counting the rows of its part in a window (null: the window had none)
PART_ROWS: dict[str, str] = {
    sig: f"_n_{part}"
    for part, aggs in (
        ("req", REQUEST_AGGS),
        ("step", STEP_AGGS),
        ("kv", KV_AGGS),
        ("busy", BUSY_AGGS),
    )
    for sig in aggs
} | {pf.SIGNAL: pf.ROWS}


@dataclass(frozen=True)
class Grid:
    """The common window grid: window index ``floor(t / window_s)`` from ``first`` to ``last``."""

    window_s: float
    first: int
    last: int

    @classmethod
    def spanning(cls, lo: float, hi: float, window_s: float) -> Grid:
        """Grid covering ``[lo, hi]``, computed with the same polars kernel as ``index`` (Python's
        float division can round the other way at a window edge and drop the last event)."""
        ends = pl.DataFrame({"start_s": [lo, hi]}).select(cls(window_s, 0, 0).index())[WI]
        return cls(window_s, int(ends[0]), int(ends[1]))

    def index(self) -> pl.Expr:
        """floor(t / window_s), exact at window edges: polars may divide by multiplying with
        the reciprocal on some frames and not others, so one rounding step is corrected by
        comparing q * window_s with t itself."""
        t, w = pl.col("start_s"), self.window_s
        q = (t / w).floor()
        q = pl.when(q * w > t).then(q - 1).when((q + 1) * w <= t).then(q + 1).otherwise(q)
        return q.cast(pl.Int64).alias(WI)

    def windows(self) -> pl.DataFrame:
        return pl.DataFrame({WI: pl.int_range(self.first, self.last + 1, eager=True)})


def span(instances: list[Instance]) -> tuple[float, float] | None:
    """First and last event time of the instances; None without any row."""
    spans = [s for i in instances if (s := i.span()) is not None]
    if not spans:
        return None
    return min(s[0] for s in spans), max(s[1] for s in spans)


def make_grid(
    instances: list[Instance], window_s: float | None, windows: WindowPolicy = WINDOWS
) -> Grid:
    """Window grid over the span of every instance's events (aligned to multiples of window),
    at most ``windows.max_windows`` long."""
    whole = span(instances)
    if whole is None:
        raise InputError("no data rows in any profiler file: nothing to analyse")
    lo, hi = whole
    if window_s is not None and window_s <= 0:
        raise InputError(f"window must be positive, got {window_s}")
    w = window_s or windows.choose(hi - lo)
    cap = windows.max_windows
    pr.check_window_count((hi - lo) / w + 1, w, hi - lo, cap)  # first: no int overflow below
    grid = Grid.spanning(lo, hi, w)
    pr.check_window_count(grid.last - grid.first + 1, w, hi - lo, cap)
    return grid


@dataclass(frozen=True)
class LevelSpec:
    """How one level groups rows: the key columns and which frames/availability to read."""

    level: Level
    keys: tuple[str, ...]


INSTANCE_LEVEL = LevelSpec(Level.INSTANCE, ("instance",))
DP_LEVEL = LevelSpec(Level.DP, ("instance", "dp_rank"))


def _long(instances: list[Instance], attr: str, dp: bool) -> pl.DataFrame | None:
    """One table across instances (``instance`` column added); DP level keeps ranked rows.

    Concatenated first, then labelled and filtered once: two queries per instance cost more
    than the rows of a tiny instance (10,000 folders)."""
    parts, names, heights = [], [], []
    for inst in instances:
        df: pl.DataFrame | None = getattr(inst, attr)
        if df is None or df.is_empty():
            continue
        parts.append(df)
        names.append(inst.name)
        heights.append(df.height)
    if not parts:
        return None
    label = pl.Series("instance", names, pl.Utf8).gather(np.repeat(np.arange(len(names)), heights))
    out = pl.concat(parts, how="diagonal_relaxed").with_columns(label)
    return out.filter(pl.col("dp_rank").is_not_null()) if dp else out


def _aggregate(
    df: pl.DataFrame | None, keys: Sequence[str], aggs: dict[str, pl.Expr], grid: Grid
) -> pl.DataFrame | None:
    """Window statistics of row tables (requests, waiting samples)."""
    if df is None:
        return None
    rows = {PART_ROWS[s]: pl.len() for s in aggs if s in PART_ROWS}  # one name per part
    return df.with_columns(grid.index()).group_by([*keys, WI]).agg(**aggs, **rows)


def _roll_up(
    df: pl.DataFrame | None,
    keys: Sequence[str],
    aggs: dict[str, pl.Expr],
    grid: Grid,
    tick_s: float,
) -> pl.DataFrame | None:
    """Window statistics of (rank, tick) partials (steps, KV, busy)."""
    if df is None:
        return None
    rows = {PART_ROWS[s]: pl.col(pp.ROWS).sum() for s in aggs if s in PART_ROWS}
    wi = pp.window_of_ticks(tick_s, grid.window_s).alias(WI)
    return df.with_columns(wi).group_by([*keys, WI]).agg(**aggs, **rows)


def _step_signals(
    df: pl.DataFrame | None, keys: Sequence[str], grid: Grid, dp: bool, tick_s: float
) -> pl.DataFrame | None:
    """Per-step signals of a window. At instance level ``running`` is the SUM of the ranks'
    mean batches (like ``waiting`` and the request counts), not the mean step of one rank."""
    per_rank = _roll_up(df, keys if dp else [*keys, "dp_rank"], STEP_AGGS, grid, tick_s)
    if dp or per_rank is None:
        return per_rank
    weighted = (pl.col("batch_size") * pl.col("steps")).sum() / pl.col("steps").sum()
    # sorted first: float sums must not depend on the hash order of the previous group_by
    ordered = per_rank.sort([*keys, WI, "dp_rank"], nulls_last=True)
    return ordered.group_by([*keys, WI], maintain_order=True).agg(
        pl.col("steps").sum(),
        weighted.alias("batch_size"),
        pl.col("scheduled_tokens").sum(),
        pl.col("running").sum(),
        pl.col(PART_ROWS["steps"]).sum(),
    )


def _waiting(df: pl.DataFrame | None, keys: Sequence[str], grid: Grid) -> pl.DataFrame | None:
    """Mean waiting per process and window; a window without a sample carries the process's
    last sample (the queue length holds until the next change). Summed over processes."""
    if df is None:
        return None
    aggs = {
        "waiting": pl.col("waiting").mean(),
        "_last": pl.col("waiting").sort_by("start_s").last(),
    }
    per_pid = _aggregate(df, [*keys, "pid"], aggs, grid)
    assert per_pid is not None
    procs = per_pid.select(*keys, "pid").unique()
    carried = pl.col("_last").forward_fill().shift(1).over([*keys, "pid"], order_by=WI)
    filled = (
        procs.join(grid.windows(), how="cross")
        .join(per_pid, on=[*keys, "pid", WI], how="left", nulls_equal=True)
        .with_columns(pl.coalesce(pl.col("waiting"), carried).alias("waiting"))
    )
    total = pl.when(pl.col("waiting").count() > 0).then(pl.col("waiting").sum())
    return filled.group_by([*keys, WI]).agg(total.alias("waiting"))


REQUEST_END = "_request_end_s"


def _units(instances: list[Instance], spec: LevelSpec) -> pl.DataFrame:
    """One row per unit with its identity and a ``_a_<signal>`` availability flag per signal."""
    rows = []
    for inst in instances:
        ranks: Sequence[int | None] = inst.ranks if spec.level is Level.DP else (None,)
        avail = inst.dp_available if spec.level is Level.DP else inst.available
        for rank in ranks:
            unit = inst.name if rank is None else dp_unit_id(inst.name, rank)
            flags = {f"_a_{s}": s in avail for s in SIGNAL_COLUMNS}
            rows.append(
                {
                    "unit": unit,
                    "instance": inst.name,
                    "dp_rank": rank,
                    REQUEST_END: inst.request_end_s,
                    **flags,
                }
            )
    schema = {"unit": pl.Utf8, "instance": pl.Utf8, "dp_rank": pl.Int64, REQUEST_END: pl.Float64}
    schema.update({f"_a_{s}": pl.Boolean for s in SIGNAL_COLUMNS})
    return pl.DataFrame(rows, schema=schema)


def build_frame(instances: list[Instance], spec: LevelSpec, grid: Grid) -> pl.DataFrame:
    """The (window x unit) table of one level, every unit on every window of the grid."""
    dp = spec.level is Level.DP
    keys = list(spec.keys)
    tick_s = next((i.tick_s for i in instances if i.tick_s is not None), grid.window_s)
    instances = [pp.reduce_instance(i, tick_s) for i in instances]
    base = _units(instances, spec).join(grid.windows(), how="cross")
    kv_attr = "steps" if dp else "kv"
    busy_attr = "dp_busy" if dp else "busy"
    parts = [
        _aggregate(_long(instances, "requests", dp), keys, REQUEST_AGGS, grid),
        _step_signals(_long(instances, "steps", dp), keys, grid, dp, tick_s),
        _roll_up(_long(instances, kv_attr, dp), keys, KV_AGGS, grid, tick_s),
        _roll_up(_long(instances, busy_attr, dp), keys, BUSY_AGGS, grid, tick_s),
        _waiting(_long(instances, "waiting", dp), keys, grid),
        pf.busy_share(_long(instances, "forward", dp), keys, grid.index(), grid.window_s, WI),
    ]
    for part in parts:
        if part is not None:
            base = base.join(part, on=[*keys, WI], how="left", nulls_equal=True)
    base = ensure(base, [*SIGNAL_COLUMNS, *set(PART_ROWS.values())])
    base = base.with_columns(
        (pl.col(WI) * grid.window_s).alias("window_start_s"),
        *(_mask(s) for s in SIGNAL_COLUMNS),
    )
    # A truncated request.csv says nothing about the windows it did not reach (or reached only
    # in part): those are unmeasured, not windows without requests.
    cut = (pl.col("window_start_s") + grid.window_s) > pl.col(REQUEST_END)
    return base.with_columns(
        pl.when(cut).then(None).otherwise(pl.col(s)).alias(s) for s in REQUEST_SIGNALS
    )


def _mask(signal: str) -> pl.Expr:
    """Null where the unit cannot provide the signal; 0 for totals in a window without rows,
    unless the unit's rows never carry a value of it (blank/N/A everywhere: unknown, not 0)."""
    value = pl.col(signal)
    if signal in ZERO_FILL:
        rows = pl.col(PART_ROWS[signal])
        never = rows.is_not_null().any().over("unit") & value.is_null().all().over("unit")
        value = pl.when(rows.is_null() & ~never).then(value.fill_null(0.0)).otherwise(value)
    return pl.when(pl.col(f"_a_{signal}")).then(value).otherwise(None).alias(signal)


def _aliases(instances: list[Instance]) -> dict[str, str]:
    merged: dict[str, list[str]] = {}
    for inst in instances:
        for sig, name in inst.aliases.items():
            if name not in merged.setdefault(sig, []):
                merged[sig].append(name)
    return {sig: " | ".join(names) for sig, names in merged.items()}


def unit_frame(
    instances: list[Instance], spec: LevelSpec, grid: Grid, notes: list[str]
) -> UnitFrame:
    """The UnitFrame of one level: the (window x unit) table plus provenance and notes."""
    df = conform(build_frame(instances, spec, grid))
    missing = tuple(s for s in SIGNAL_COLUMNS if df[s].null_count() == df.height)
    placed = None
    if spec.level is Level.DP:
        total = sum(i.requests.height for i in instances if i.requests is not None)
        placed = sum(i.placed for i in instances) / total if total else None
    return UnitFrame(
        df=df,
        level=spec.level,
        window_s=grid.window_s,
        source="profiler",
        aliases=_aliases(instances),
        missing=missing,
        notes=tuple(notes),
        placed_share=placed,
    )
