"""Profiler reader: forward.csv, the model's forward passes on each device.

msServiceProfiler writes one row per forward pass and device (``prof_id`` names the device,
``forward_iter`` counts its forwards from 1, ``during_time(ms)`` is the pass, ``batch_size`` the
requests in it). Two things come from it that no other file gives:

* **device busy share** (``device_util``): the share of a window a device spent in forward
  passes, the offline counterpart of a device exporter's utilisation (method step 4, "is the
  device full?"); a unit's share is the mean over its devices;
* **per-step loads** (``step_loads``): each rank's batch per forward iteration, from which the
  price of DP skew is taken per step (ranks stepping in lockstep wait for the busiest in every
  step, so ``1 − mean/max`` of the per-step load is the idle share, not the per-window
  figure). The batch, not the pass duration, is the load: in lockstep a rank's pass lasts as long
  as the slowest rank's (it waits inside the collective), so durations hide the skew.

Rows are checked like every profiler file (``profiler_read``: located one-line errors for cells
that are no number, impossible values read as missing with a note); here a device's repeated
``forward_iter`` is counted once, with a note.
"""

from __future__ import annotations

from collections.abc import Sequence

import polars as pl

from skewscope.sources.profiler_ranks import RankMap, with_rank
from skewscope.sources.profiler_read import Table, ensure

SIGNAL = "device_util"
ALIAS = "forward.csv:during_time(ms)"
ROWS = "_n_fwd"  # forward rows of a unit in a window (null: none)
DEVICE = "_device"
COLUMNS = ("start_s", "dp_rank", DEVICE, "during_ms", "batch_size", "forward_iter")
STEP_COLUMNS = ("instance", "dp_rank", "step", "start_s", "load", "step_ms")


def forward_rows(table: Table, ranks: RankMap | None) -> tuple[pl.DataFrame, list[str]]:
    """The forward rows with their DP rank (own ``dp_rank``, else the process's) and device.

    Rows without a duration are dropped (one note); a device's repeated ``forward_iter`` is
    counted once (one note), as a repeated request is."""
    notes: list[str] = []
    df = ensure(table.df, ["prof_id", "batch_size", "forward_iter", "dp_rank"])
    procs = (
        ranks.procs
        if ranks is not None
        else pl.DataFrame(schema={"prof_id": pl.Utf8, "r": pl.Int64})
    )
    df = with_rank(df, procs).with_columns(
        pl.col("prof_id").cast(pl.Utf8).fill_null("").alias(DEVICE)
    )
    blank = int(df["during_ms"].null_count())
    if blank:
        notes.append(
            f"forward.csv: {blank} of {df.height} row(s) have no during_time(ms) (blank, N/A or "
            "impossible) — not counted as device time"
        )
        df = df.filter(pl.col("during_ms").is_not_null())
    it = pl.col("forward_iter")
    dup = it.is_not_null() & ~pl.struct(DEVICE, it).is_first_distinct()
    n = int(df.select(dup.sum()).item())
    if n:
        notes.append(
            f"forward.csv: {n} row(s) repeat a device's forward_iter of an earlier row — "
            "dropped (each forward counted once)"
        )
        df = df.filter(~dup)
    return df.select(*COLUMNS), notes


def busy_share(
    df: pl.DataFrame | None, keys: Sequence[str], index: pl.Expr, window_s: float, wi: str
) -> pl.DataFrame | None:
    """Per unit (``keys``) and window: the mean over the unit's devices of the share of the
    window each spent in forward passes (a pass counts in the window it starts in; a device's
    share is capped at 1).

    A unit's devices are those with any forward row in the range, so an idle device counts 0."""
    if df is None or df.is_empty():
        return None
    devices = df.group_by(keys).agg(pl.col(DEVICE).n_unique().alias("_devices"))
    per_device = (
        df.with_columns(index)
        .group_by([*keys, DEVICE, wi])
        .agg(
            (pl.col("during_ms").sum() / (window_s * 1000.0)).clip(upper_bound=1.0).alias("_s"),
            pl.len().alias(ROWS),
        )
    )
    per_window = per_device.group_by([*keys, wi]).agg(pl.col("_s").sum(), pl.col(ROWS).sum())
    return (
        per_window.join(devices, on=list(keys), nulls_equal=True)
        .with_columns((pl.col("_s") / pl.col("_devices")).alias(SIGNAL))
        .drop("_s", "_devices")
    )


def step_loads(named: Sequence[tuple[str, pl.DataFrame | None]]) -> pl.DataFrame | None:
    """Per instance, rank and forward iteration: the step's load (its batch; the largest over
    the rank's devices, which all run the same batch), start and duration (the longest pass).

    None when no instance has two ranks with ``forward_iter`` and ``batch_size``."""
    parts = []
    for instance, df in named:
        if df is None:
            continue
        ranked = df.filter(
            pl.col("dp_rank").is_not_null()
            & pl.col("forward_iter").is_not_null()
            & pl.col("batch_size").is_not_null()
        )
        if ranked["dp_rank"].n_unique() < 2:
            continue
        parts.append(
            ranked.group_by("dp_rank", pl.col("forward_iter").alias("step"))
            .agg(
                pl.col("start_s").min(),
                pl.col("batch_size").max().alias("load"),
                pl.col("during_ms").max().alias("step_ms"),
            )
            .with_columns(pl.lit(instance).alias("instance"))
            .select(*STEP_COLUMNS)
        )
    if not parts:
        return None
    return pl.concat(parts).sort("instance", "dp_rank", "step")
