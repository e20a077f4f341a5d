"""The price of DP skew: ranks that step in lockstep idle while the slowest finishes.

With DP attention or expert parallelism every rank of an instance joins each step's collective,
so a step lasts as long as its busiest rank and the others wait: the idle share of the ranks'
time is ``1 − mean/max`` of the per-step load (vLLM's expert-balance "balancedness" is the same
``mean/max``). Where the source recorded each rank's load per step (offline forward.csv: the
batch of every forward iteration, ``UnitFrame.step_loads``) the share is taken per step and
weighted by the step's time; otherwise the evidence holds per-window loads only, and the share
is taken per window (busy time, else scheduled tokens, else tokens) and averaged over the
windows — which understates it, since ranks even out over a window while differing step by step.
Either is turned into device-hours over the range. Ranks that do not step together (plain DP of
a dense model) do not wait for each other: there the same figure is the capacity the fleet
keeps idle by being sized for its busiest rank.
"""

from __future__ import annotations

from dataclasses import fields, replace
from typing import TYPE_CHECKING

import numpy as np

from skewscope.analysis.matrix import SignalMatrix
from skewscope.report.facts import Note, NoteCode
from skewscope.report.model import SkewPrice

if TYPE_CHECKING:
    import polars as pl

BASES = ("busy_ms", "scheduled_tokens", "total_tokens")
STEP_BASIS = "forward_batch"


def skew_price(
    m: SignalMatrix,
    steps: pl.DataFrame | None = None,
    devices_per_rank: float = 1.0,
    lockstep: bool | None = None,
) -> list[SkewPrice]:
    """One price per instance with at least two ranks (DP matrices: groups are instances):
    per step where ``steps`` holds the instance's per-step loads, else per window.
    ``lockstep``: whether the ranks step together (UnitFrame.lockstep), carried on each price so
    the note says which reading holds."""
    return [replace(p, lockstep=lockstep) for p in _prices(m, steps, devices_per_rank)]


def _prices(
    m: SignalMatrix, steps: pl.DataFrame | None, devices_per_rank: float
) -> list[SkewPrice]:
    stepped = set() if steps is None else set(steps["instance"].unique().to_list())
    basis = next((b for b in BASES if m.has(b)), "")
    load = m.get(basis) if basis else None
    groups = np.array(m.groups)
    out = []
    for inst in sorted(set(m.groups)):
        cols = np.flatnonzero(groups == inst)
        if cols.size < 2:
            continue
        if steps is not None and inst in stepped:
            price = step_price(steps, inst, m.window_s, devices_per_rank)
            if price is not None:
                out.append(price)
                continue
        if load is None:
            continue
        block = load[:, cols]
        ok = np.isfinite(block).all(axis=1) & (np.nanmax(block, axis=1, initial=0.0) > 0)
        if not ok.any():
            continue
        share = 1.0 - block[ok].mean(axis=1) / block[ok].max(axis=1)
        hours = float(share.sum()) * cols.size * m.window_s / 3600.0 * devices_per_rank
        out.append(
            SkewPrice(
                instance=inst,
                ranks=int(cols.size),
                basis=basis,
                idle_share=float(share.mean()),
                worst_window_idle_share=float(share.max()),
                windows=int(ok.sum()),
                device_hours=hours,
                devices_per_rank=devices_per_rank,
            )
        )
    return out


def step_price(
    steps: pl.DataFrame, instance: str, window_s: float, devices_per_rank: float = 1.0
) -> SkewPrice | None:
    """The price from per-step loads: steps every rank ran (same forward iteration), each
    ``1 − mean/max`` of the ranks' batches, weighted by the step's time (its longest pass);
    the worst window is the worst step-time-weighted share among the windows the steps start
    in. None when no step has a rank with load."""
    import polars as pl

    mine = steps.filter(pl.col("instance") == instance)
    ranks = mine["dp_rank"].n_unique()
    if ranks < 2:
        return None
    per_step = (
        mine.group_by("step")
        .agg(
            pl.len().alias("n"),
            (1.0 - pl.col("load").mean() / pl.col("load").max()).alias("share"),
            pl.col("load").max().alias("peak"),
            pl.col("step_ms").max().alias("ms"),
            pl.col("start_s").min().alias("start"),
        )
        .filter((pl.col("n") == ranks) & (pl.col("peak") > 0) & pl.col("ms").is_not_null())
    )
    if per_step.is_empty() or float(per_step["ms"].sum()) <= 0:
        return None
    weighted = (pl.col("share") * pl.col("ms")).sum() / pl.col("ms").sum()
    by_window = per_step.group_by((pl.col("start") / window_s).floor().alias("w")).agg(weighted)
    share = float(per_step.select(weighted).item())
    idle_ms = float(per_step.select((pl.col("share") * pl.col("ms")).sum()).item())
    return SkewPrice(
        instance=instance,
        ranks=int(ranks),
        basis=STEP_BASIS,
        idle_share=share,
        worst_window_idle_share=float(by_window["share"].max()),  # type: ignore[arg-type]
        windows=by_window.height,
        device_hours=idle_ms / 1000 * ranks / 3600 * devices_per_rank,
        devices_per_rank=devices_per_rank,
        steps=per_step.height,
    )


def price_note(p: SkewPrice) -> Note:
    """The price as a note every renderer shows (phrased by report/phrases.py)."""
    return Note(NoteCode.SKEW_PRICE, {f.name: getattr(p, f.name) for f in fields(p)})
