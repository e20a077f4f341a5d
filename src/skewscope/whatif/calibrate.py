"""Service model per engine process, calibrated from the steps it was seen to run.

One step-time law for the fleet, ``fixed + a * prefill tokens + b * decode sequences`` (the
simulator's), fitted by least squares over every observed step; then each rank's ``speed`` is
the median of its steps' observed / fitted time, so a slow device stays slow in every replay.
KV capacity per rank from its free blocks and usage; the batch ceiling and token budget from the
highest batch and step seen in the fleet (a ceiling nobody reached is not in the evidence).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import numpy as np
import polars as pl

from skewscope.config import WHATIF, WhatIfSettings
from skewscope.notes import Note
from skewscope.notes import WhatifNoteCode as W
from skewscope.sim.spec import RankSpec
from skewscope.sources.workload import RequestLog
from skewscope.whatif.extract import Layout

DEFAULT = RankSpec()


@dataclass(frozen=True)
class ServiceModel:
    base: RankSpec  # the fleet's fitted step law and limits (speed 1)
    ranks: tuple[RankSpec, ...]  # per engine process in the simulator's rank order
    calibrated: bool
    notes: tuple[Note, ...] = ()
    light_load: Note | None = None  # online: fitted on light load (whatif_light_load)


FIT_ROUNDS = 5  # law <-> per-rank speed alternations (converges in 2-3 on simulator data)


def _fit(steps: pl.DataFrame, y: np.ndarray) -> tuple[float, float, float]:
    """Non-negative least squares on three terms by dropping any term fitted negative."""
    cols = [np.ones_like(y), steps["prefill_tokens"].to_numpy(), steps["decode_seqs"].to_numpy()]
    keep = [0, 1, 2]
    while True:
        x = np.column_stack([cols[k] for k in keep])
        coef, *_ = np.linalg.lstsq(x, y, rcond=None)
        neg = [k for k, c in zip(keep, coef, strict=True) if c < 0 and k != 0]
        if not neg:
            break
        keep.remove(neg[0])
    out = dict.fromkeys((0, 1, 2), 0.0)
    out.update({k: float(c) for k, c in zip(keep, coef, strict=True)})
    return max(out[0], 1e-3), out[1], out[2]


def _round_up(seen: float) -> int:
    """A limit the evidence only bounds from below (token budget, batch ceiling): the next power
    of two at or above the highest value seen — engines use round limits (16, 256, 2048)."""
    return int(2 ** np.ceil(np.log2(max(seen, 1.0))))


def _law_and_speeds(steps: pl.DataFrame) -> tuple[tuple[float, float, float], pl.DataFrame]:
    """Fit the fleet's step law and each rank's speed factor in turn: a slow rank's steps, once
    divided by its speed, no longer bend the shared law (one joint fit would)."""
    y = steps["exec_ms"].to_numpy()
    speed = np.ones_like(y)
    law = (1.0, 0.0, 0.0)
    ranks = pl.DataFrame()
    for _ in range(FIT_ROUNDS):
        law = _fit(steps, y / speed)
        fitted = law[0] + law[1] * pl.col("prefill_tokens") + law[2] * pl.col("decode_seqs")
        ranks = steps.group_by("instance", "dp_rank").agg(
            (pl.col("exec_ms") / fitted).median().alias("speed")
        )
        speed = steps.join(ranks, on=["instance", "dp_rank"], how="left")["speed"].to_numpy()
    return law, ranks


def uncalibrated(layout: Layout, why: W) -> ServiceModel:
    """The simulator's default ranks, flagged: a replay on them is not calibrated."""
    grid = len(layout.present())
    return ServiceModel(DEFAULT, tuple(DEFAULT for _ in range(grid)), False, (Note(why),))


def calibrate(log: RequestLog, layout: Layout, s: WhatIfSettings = WHATIF) -> ServiceModel:
    steps = log.steps.drop_nulls(["exec_ms", "prefill_tokens", "decode_seqs"]).filter(
        pl.col("exec_ms") > 0
    )
    if steps.height < 10:
        return uncalibrated(layout, W.FEW_TIMED_STEPS)
    kv = steps.group_by("instance", "dp_rank").agg(
        (pl.col("free_blocks") / (1 - pl.col("kv_usage")))
        .filter(pl.col("kv_usage") < 0.98)
        .median()
        .alias("total_blocks")
    )
    blocks = {(r["instance"], r["dp_rank"]): r["total_blocks"] for r in kv.iter_rows(named=True)}
    max_batch = int(log.steps["batch_size"].max() or DEFAULT.max_running)  # type: ignore[arg-type]
    max_tokens = float(np.max(steps["prefill_tokens"].to_numpy() + steps["decode_seqs"].to_numpy()))
    return fit_model(steps, blocks, (max_batch, max_tokens), layout, s)


def fit_model(
    steps: pl.DataFrame,
    blocks: dict[tuple[str, int], float | None],
    seen: tuple[float, float],
    layout: Layout,
    s: WhatIfSettings = WHATIF,
    budget: str = "",
) -> ServiceModel:
    """The service model from timed steps (``instance``, ``dp_rank``, ``exec_ms``,
    ``prefill_tokens``, ``decode_seqs``: one row per step, or per window's mean step online),
    each rank's KV blocks, and the highest batch and step tokens seen (rounded up to limits)."""
    units = [(i, d) for i in layout.instances for d in range(layout.dp_ranks)]  # the grid
    present = layout.present()
    (fixed, a, b), speeds_df = _law_and_speeds(steps)
    look = {(r["instance"], r["dp_rank"]): r["speed"] for r in speeds_df.iter_rows(named=True)}
    max_batch, max_tokens = seen
    base = RankSpec(
        max_running=_round_up(max_batch),
        token_budget=_round_up(max_tokens),
        block_size=s.block_size,
        total_blocks=DEFAULT.total_blocks,
        fixed_ms=fixed,
        per_prefill_token_ms=a,
        per_decode_seq_ms=b,
    )
    notes = [
        Note(
            W.SERVICE_MODEL,
            {
                "fixed_ms": fixed,
                "per_prefill_token_ms": a,
                "per_decode_seq_ms": b,
                "max_running": base.max_running,
                "token_budget": base.token_budget,
                "max_batch_seen": max_batch,
                "max_tokens_seen": max_tokens,
                "block_size": s.block_size,
                "budget": budget,
                "default_budget": DEFAULT.token_budget,
            },
        )
    ]
    speeds = [float(look[u]) if look.get(u) else 1.0 for u in units]
    # normalise so the median rank has speed 1 (the fit absorbs the fleet's common scale)
    real = [sp for sp, ok in zip(speeds, present, strict=True) if ok]
    med = float(np.median(real)) if real else 1.0
    ranks = []
    no_kv = []
    for u, sp, ok in zip(units, speeds, present, strict=True):
        total = blocks.get(u)
        if total is None or not np.isfinite(total) or total <= 0:
            if ok:
                no_kv.append(u)
            total = DEFAULT.total_blocks
        ranks.append(
            RankSpec(
                max_running=base.max_running,
                token_budget=base.token_budget,
                block_size=base.block_size,
                total_blocks=round(total),
                fixed_ms=fixed * med,
                per_prefill_token_ms=a * med,
                per_decode_seq_ms=b * med,
                speed=sp / med,
            )
        )
    if no_kv:
        notes.append(Note(W.NO_KV, {"ranks": len(no_kv), "blocks": DEFAULT.total_blocks}))
    missing = [u for u, ok in zip(units, present, strict=True) if ok and u not in look]
    if missing:
        notes.append(Note(W.NO_TIMED_STEP, {"ranks": len(missing)}))
    base = dataclasses.replace(
        base, fixed_ms=fixed * med, per_prefill_token_ms=a * med, per_decode_seq_ms=b * med
    )
    return ServiceModel(base, tuple(ranks), True, tuple(notes))
