"""Profiler reader: per-step rows summed into (tick, rank) partials as soon as an instance is read.

The window grid is only known once every instance is read (its span sets the default window),
but every window is a whole number of ticks: the ``--window`` given, else the default, which
is a whole number of seconds (``WindowPolicy.choose``), so one-second ticks add up exactly to
it (``floor(floor(t) / w) == floor(t / w)`` for a whole ``w``). An instance's step, KV and busy
rows are therefore reduced to one row per (rank, tick) right after it is read and its rows are
released: memory then grows with ticks x ranks, not with the steps of a fleet. What is kept
per tick is what the window statistics need (row count, sum and count of known values, min,
max); request rows stay whole (their percentiles do not add up) and so do waiting samples.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Literal

import polars as pl

from skewscope.sources.profiler_instance import Instance

TICK = "_tick"  # floor(t / tick_s): the window index on the tick grid
ROWS = "_n"  # rows of the tick
Agg = Literal["len", "mean", "total", "max", "min"]


@dataclass(frozen=True)
class Stat:
    """One window statistic: how it combines a column's rows (``total``: the sum, or with
    blank cells the mean of the known ones times the rows, null when none is known)."""

    agg: Agg
    column: str | None = None


STEP_STATS: dict[str, Stat] = {
    "steps": Stat("len"),
    "batch_size": Stat("mean", "batch_size"),
    "scheduled_tokens": Stat("total", "scheduled_tokens"),
    "running": Stat("mean", "running"),
}
KV_STATS: dict[str, Stat] = {
    "kv_usage": Stat("mean", "kvcache_usage_rate"),
    "kv_usage_max": Stat("max", "kvcache_usage_rate"),
    "free_blocks_min": Stat("min", "free_blocks"),
    "blocks_allocated": Stat("total", "blocks_allocated"),
    "blocks_freed": Stat("total", "blocks_freed"),
}
BUSY_STATS: dict[str, Stat] = {"busy_ms": Stat("total", "busy_ms")}


def _partial_columns(stats: dict[str, Stat]) -> list[pl.Expr]:
    """Per-tick partials of the columns ``stats`` read: rows, sum and count of known values,
    and the max/min where a statistic asks for them."""
    out = [pl.len().alias(ROWS)]
    seen: set[str] = set()
    for stat in stats.values():
        c = stat.column
        if c is None:
            continue
        if c not in seen:
            seen.add(c)
            out += [pl.col(c).sum().alias(f"_s_{c}"), pl.col(c).count().alias(f"_c_{c}")]
        if stat.agg == "max":
            out.append(pl.col(c).max().alias(f"_max_{c}"))
        if stat.agg == "min":
            out.append(pl.col(c).min().alias(f"_min_{c}"))
    return out


def window_stats(stats: dict[str, Stat]) -> dict[str, pl.Expr]:
    """The window statistics from the partials of its ticks (as the same statistic over the
    rows would give them, up to float summation order)."""
    n = pl.col(ROWS).sum()
    out: dict[str, pl.Expr] = {}
    for signal, stat in stats.items():
        c = stat.column
        if stat.agg == "len" or c is None:
            out[signal] = n.cast(pl.Float64)
            continue
        total, known = pl.col(f"_s_{c}").sum(), pl.col(f"_c_{c}").sum()
        if stat.agg == "mean":
            out[signal] = pl.when(known > 0).then(total / known)
        elif stat.agg == "total":
            out[signal] = pl.when(known == n).then(total).when(known > 0).then(total / known * n)
        else:
            out[signal] = (
                pl.col(f"_{stat.agg}_{c}").max()
                if stat.agg == "max"
                else pl.col(f"_{stat.agg}_{c}").min()
            )
    return out


def tick_index(tick_s: float) -> pl.Expr:
    """floor(start_s / tick_s), exact at tick edges (see ``Grid.index``)."""
    t = pl.col("start_s")
    q = (t / tick_s).floor()
    q = pl.when(q * tick_s > t).then(q - 1).when((q + 1) * tick_s <= t).then(q + 1).otherwise(q)
    return q.cast(pl.Int64).alias(TICK)


def _reduce(
    df: pl.DataFrame | None, keys: list[str], stats: dict[str, Stat], tick_s: float
) -> pl.DataFrame | None:
    if df is None:
        return None
    present = {s: st for s, st in stats.items() if st.column is None or st.column in df.columns}
    return (
        df.with_columns(tick_index(tick_s))
        .group_by([*keys, TICK])
        .agg(_partial_columns(present))
        .sort([*keys, TICK], nulls_last=True)
    )


def reduce_instance(inst: Instance, tick_s: float) -> Instance:
    """``inst`` with its step, KV and busy rows replaced by (rank, tick) partials; its event
    span is kept exact. Idempotent for the same tick."""
    if inst.tick_s is not None:
        if inst.tick_s != tick_s:
            raise ValueError(f"instance reduced at {inst.tick_s} s, asked {tick_s} s")
        return inst
    ranked = ["dp_rank"]
    busy = _reduce(inst.busy, ranked, BUSY_STATS, tick_s)
    same = inst.dp_busy is inst.busy
    # request rows stay whole (percentiles) but their rid texts were only for placement
    requests = inst.requests.drop("rid", strict=False) if inst.requests is not None else None
    return replace(
        inst,
        requests=requests,
        steps=_reduce(inst.steps, ranked, {**STEP_STATS, **KV_STATS}, tick_s),
        kv=_reduce(inst.kv, [], KV_STATS, tick_s),
        busy=busy,
        dp_busy=busy if same else _reduce(inst.dp_busy, ranked, BUSY_STATS, tick_s),
        tick_s=tick_s,
        bounds=inst.span(),
    )


def window_of_ticks(tick_s: float, window_s: float) -> pl.Expr:
    """The window index of a tick: the tick itself when they are equal, else floor of the
    tick's start over the window (exact for one-second ticks and a whole-second window)."""
    if tick_s == window_s:
        return pl.col(TICK)
    if tick_s != 1.0 or window_s != int(window_s):
        raise ValueError(f"{window_s} s windows are not whole {tick_s} s ticks")
    return pl.col(TICK).floordiv(int(window_s))
