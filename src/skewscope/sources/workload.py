"""Offline source for replays: per-request rows and per-step rows from msServiceProfiler folders.

``diagnose`` needs windowed signals; a what-if replay needs the requests themselves (arrival,
prompt and output length, where each went, what it waited) and the steps each rank ran (how long
a step of so many prefill tokens and decode sequences took, how full its KV pool was). Both come
from the profiler reader's per-instance model (``profiler_instance.load_instance``: header
generations, dirty cells, time zones, DP placement by res_list), which this module only reads.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import polars as pl

from skewscope.errors import InputError
from skewscope.sources import profiler_range as pr
from skewscope.sources.profiler_instance import Instance
from skewscope.sources.profiler_layout import discover_all
from skewscope.sources.profiler_pool import READ_BUDGET, Progress, ReadBudget, read_all

REQUEST_COLUMNS: tuple[str, ...] = (
    "instance",
    "dp_rank",
    "arrival_s",
    "prompt_tokens",
    "output_tokens",
    "queue_wait_ms",
    "ttft_ms",
    "e2e_ms",
)
STEP_COLUMNS: tuple[str, ...] = (
    "instance",
    "dp_rank",
    "start_s",
    "exec_ms",
    "prefill_tokens",
    "decode_seqs",
    "batch_size",
    "kv_usage",
    "free_blocks",
)


@dataclass(frozen=True)
class RequestLog:
    """What the evidence shows request by request and step by step.

    ``requests``: ``REQUEST_COLUMNS`` (``dp_rank`` is null where a request could not be placed;
    latencies null where not recorded). ``steps``: ``STEP_COLUMNS``, one row per scheduling step
    of a rank (``exec_ms`` null when no execution row matches; an instance without DP is rank 0).
    ``ranks``: instance -> its DP ranks (``(0,)`` without DP). Times are epoch seconds.
    """

    requests: pl.DataFrame
    steps: pl.DataFrame
    ranks: dict[str, tuple[int, ...]]
    start_s: float
    end_s: float
    notes: tuple[str, ...] = ()

    @property
    def instances(self) -> list[str]:
        return list(self.ranks)


def _requests(inst: Instance) -> pl.DataFrame:
    assert inst.requests is not None
    rank = pl.col("dp_rank") if inst.has_dp else pl.lit(0, dtype=pl.Int64)
    return inst.requests.select(
        pl.lit(inst.name).alias("instance"),
        rank.cast(pl.Int64).alias("dp_rank"),
        pl.col("start_s").alias("arrival_s"),
        pl.col("prompt_tokens").fill_null(1.0).clip(1).cast(pl.Int64),
        pl.col("generation_tokens").fill_null(1.0).clip(1).cast(pl.Int64).alias("output_tokens"),
        pl.col("queue_wait_ms"),
        pl.col("ttft_ms"),
        pl.col("e2e_ms"),
    ).filter(pl.col("arrival_s").is_not_null())


def _steps(inst: Instance) -> pl.DataFrame:
    """Scheduling rows with the execution time of the step they scheduled: the first execution
    row of the same rank starting at or after the scheduling row (an as-of join)."""
    assert inst.steps is not None
    rank = pl.col("dp_rank").fill_null(0).cast(pl.Int64) if inst.has_dp else pl.lit(0, pl.Int64)
    sched = (
        inst.steps.select(
            pl.col("start_s"),
            rank.alias("dp_rank"),
            (pl.col("scheduled_tokens") - pl.col("running").fill_null(0))
            .clip(0)
            .alias("prefill_tokens"),
            pl.col("running").fill_null(0).alias("decode_seqs"),
            pl.col("batch_size").cast(pl.Float64),
            pl.col("kvcache_usage_rate").alias("kv_usage"),
            pl.col("free_blocks").cast(pl.Float64),
        )
        .drop_nulls("start_s")
        .sort("dp_rank", "start_s")
    )
    busy = inst.dp_busy if inst.has_dp else inst.busy
    if busy is None or busy.is_empty():
        joined = sched.with_columns(pl.lit(None, pl.Float64).alias("exec_ms"))
    else:
        b = (
            busy.select(
                pl.col("start_s").alias("_exec_start"),
                (
                    pl.col("dp_rank").fill_null(0).cast(pl.Int64)
                    if inst.has_dp
                    else pl.lit(0, pl.Int64)
                ).alias("dp_rank"),
                pl.col("busy_ms").alias("exec_ms"),
            )
            .drop_nulls("_exec_start")
            .sort("dp_rank", "_exec_start")
        )
        joined = (
            sched.sort("start_s")
            .join_asof(
                b.sort("_exec_start"),
                left_on="start_s",
                right_on="_exec_start",
                by="dp_rank",
                strategy="forward",
                check_sortedness=False,
            )
            .drop("_exec_start")
        )
    return joined.select(pl.lit(inst.name).alias("instance"), *STEP_COLUMNS[1:])


@dataclass(frozen=True)
class ReplayRows:
    """What a replay keeps of one instance (its rows are dropped as soon as it is read)."""

    name: str
    requests: pl.DataFrame | None
    steps: pl.DataFrame | None  # None: no scheduling step
    ranks: tuple[int, ...]
    notes: tuple[str, ...]


def replay_rows(inst: Instance) -> ReplayRows:
    """An instance's request and step rows for a replay (module level: the fleet reader may run
    it in a worker process)."""
    stepped = inst.steps is not None and not inst.steps.is_empty()
    return ReplayRows(
        inst.name,
        _requests(inst) if inst.requests is not None else None,
        _steps(inst) if stepped else None,
        inst.ranks if inst.has_dp else (0,),
        tuple(f"{inst.name}: {n}" for n in (*inst.notes, *inst.dp_notes)),
    )


def load_request_log(
    specs: Sequence[str], *, budget: ReadBudget = READ_BUDGET, progress: Progress | None = None
) -> RequestLog:
    """Read profiler folders (``PATH`` or ``NAME=PATH``) into a RequestLog, several at once as
    for ``diagnose`` (``profiler_pool``: a fleet of tiny folders in worker processes);
    ``progress(done, total)`` is told the CSV bytes read.

    Raises InputError when no instance has request.csv (a replay needs the requests).
    """
    rows = read_all(discover_all(specs), pr.CLOCKS, replay_rows, budget, progress)
    notes = [n for r in rows for n in r.notes]
    with_requests = [r.requests for r in rows if r.requests is not None]
    if not with_requests:
        raise InputError(
            "whatif: no request.csv in any instance folder (a replay needs the "
            "requests: arrival times and lengths)"
        )
    requests = pl.concat(with_requests).sort("arrival_s")
    stepped = [r.steps for r in rows if r.steps is not None]
    steps = (
        pl.concat(stepped)
        if stepped
        else pl.DataFrame(schema=dict.fromkeys(STEP_COLUMNS, pl.Float64))
    )
    if not stepped:
        notes.append("no batch.csv steps: the service model cannot be calibrated")
    ranks = {r.name: r.ranks for r in rows}
    del rows
    times = [requests["arrival_s"].min(), requests["arrival_s"].max()]
    if not steps.is_empty():
        times += [steps["start_s"].min(), steps["start_s"].max()]
    ends = requests.select(pl.col("arrival_s") + pl.col("e2e_ms").fill_null(0) / 1000.0).max()
    times.append(ends.item())
    vals = [float(t) for t in times if isinstance(t, (int, float))]
    return RequestLog(requests, steps, ranks, min(vals), max(vals), tuple(notes))
