"""msServiceProfiler CSV folders, written exactly as the real tool writes them.

The readers must survive the real files, so this writer reproduces their quirks on purpose:
pandas-style CSV (empty cell for None, Python-repr lists with single quotes), datetimes with a
COLON before the microseconds in local time (Asia/Shanghai), ``start_time(ms)`` columns of
batch.csv holding microseconds, no DP column in request.csv / kvcache.csv, and the older header
generations.  Everything is built with vectorised polars expressions: a run can have millions of
batch members, so there is no per-row Python loop except over requests (for the rid suffix).
"""

from __future__ import annotations

import re
import zlib
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

import polars as pl

from skewscope.catalogue import Generation
from skewscope.sim.writers.profiler_headers import (
    BATCH_HEADERS,
    DEC2025_RENAMES,
    FORWARD_HEADERS,
    GENERATIONS,
    KV_COLUMNS,
    REQUEST_HEADERS,
    RES_KEYS_MINDIE,
    RES_KEYS_VLLM,
    STEP_NAMES,
)

if TYPE_CHECKING:
    from collections.abc import Sequence

    from skewscope.sim.records import RankInfo, SimResult


class StepTables(Protocol):
    """What the step-derived files read: a ``SimResult``, or one time chunk of it."""

    start_s: float
    ranks: list[RankInfo]
    steps: pl.DataFrame
    members: pl.DataFrame | None


# Asia/Shanghai has no DST: a fixed offset reproduces the profiler's local timestamps.
LOCAL_OFFSET_S = 8 * 3600

# A scheduling row covers the scheduler's own work at the start of a step; the contract has no
# separate scheduling time, so a short fixed slice is used (never longer than half the step).
SCHED_SLICE_S = 0.0002

_SAFE_RID = re.compile(r"^[A-Za-z0-9_.:\-]*$")


# ----------------------------------------------------------------------------- formatting
def datetime_expr(seconds: pl.Expr) -> pl.Expr:
    """Epoch seconds -> the profiler's local datetime text (``2025-04-23 08:52:13:123456``)."""
    us = (seconds * 1e6).round(0).cast(pl.Int64) + LOCAL_OFFSET_S * 1_000_000
    return pl.from_epoch(us, time_unit="us").dt.strftime("%Y-%m-%d %H:%M:%S:%6f")


def format_datetimes(seconds: Sequence[float]) -> list[str]:
    """List form of :func:`datetime_expr` (tests, small callers)."""
    s = pl.Series("t", list(seconds), dtype=pl.Float64)
    return pl.select(datetime_expr(pl.lit(s))).to_series().to_list()


def _us(seconds: pl.Expr) -> pl.Expr:
    return (seconds * 1e6).round(0).cast(pl.Int64)


def _ms(seconds: pl.Expr) -> pl.Expr:
    return (seconds * 1e3).round(3)


def rid_suffixes(rids: Sequence[str]) -> dict[str, str]:
    """vLLM >= 0.14 scheduler rids carry ``-xxxxxxxx`` (8 hex); derive one per rid, stably."""
    return {r: f"{r}-{zlib.crc32(r.encode()):08x}" for r in rids}


def _py_str(expr: pl.Expr, safe: bool) -> pl.Expr:
    """Python ``repr`` of a str column: plain single quotes when nothing needs escaping."""
    if safe:
        return pl.concat_str(pl.lit("'"), expr, pl.lit("'"))
    return expr.map_elements(repr, return_dtype=pl.Utf8)


def res_list_frame(
    members: pl.DataFrame,
    *,
    keys: Sequence[str] = RES_KEYS_VLLM,
    suffix: bool = False,
) -> pl.DataFrame:
    """``step_id, res_list``: each step's members as the Python repr of a list of dicts.

    Members are joined per step in their recorded order with string expressions only.
    """
    rid = pl.col("rid")
    if suffix:
        uniq = members.get_column("rid").unique().to_list()
        mapping = rid_suffixes(uniq)
        rid = rid.replace_strict(mapping, return_dtype=pl.Utf8)
    safe = bool(members.get_column("rid").str.contains(_SAFE_RID.pattern).all())
    parts: list[pl.Expr] = [pl.lit("{")]
    for i, key in enumerate(keys):
        value = _py_str(rid, safe) if key == "rid" else pl.col(key).cast(pl.Utf8)
        parts += [pl.lit(("" if i == 0 else ", ") + f"'{key}': "), value]
    parts.append(pl.lit("}"))
    return (
        members.select(pl.col("step_id"), pl.concat_str(parts).alias("_item"))
        .group_by("step_id", maintain_order=True)
        .agg(pl.col("_item").str.join(", "))
        .select(
            "step_id", pl.concat_str(pl.lit("["), pl.col("_item"), pl.lit("]")).alias("res_list")
        )
    )


# ----------------------------------------------------------------------------- tables
def _rank_table(result: StepTables, instance: str) -> pl.DataFrame:
    ranks = [r for r in result.ranks if r.instance == instance]
    dp = len(ranks) > 1
    return pl.DataFrame(
        {
            "dp_rank": [r.dp_rank for r in ranks],
            "prof_id": [r.prof_id for r in ranks],
            "hostname": [r.hostname for r in ranks],
            "pid": [r.pid for r in ranks],
            "dp_text": [str(r.dp_rank) if dp else None for r in ranks],
        },
        schema={
            "dp_rank": pl.Int64,
            "prof_id": pl.Utf8,
            "hostname": pl.Utf8,
            "pid": pl.Int64,
            "dp_text": pl.Utf8,
        },
    )


def request_table(result: SimResult, instance: str, generation: str) -> pl.DataFrame:
    """request.csv rows of one instance (whole process group: no DP column)."""
    req = result.requests.filter(pl.col("instance") == instance).sort("arrival_s", "rid")
    a = pl.col("arrival_s")
    cols = {
        "http_rid": pl.col("rid"),
        "start_datetime": datetime_expr(a),
        "recv_token_size": pl.col("input_tokens"),
        # the real column is float as soon as one value is missing: prints ``128.0``
        "reply_token_size": pl.when(pl.col("finish_s").is_not_null()).then(
            pl.col("output_tokens").cast(pl.Float64)
        ),
        "execution_time(ms)": _ms(pl.col("finish_s") - a),
        "queue_wait_time(ms)": _ms(pl.col("first_scheduled_s") - a).fill_null(0.0),
        "first_token_latency(ms)": _ms(pl.col("first_token_s") - a).fill_null(0.0),
        "cache_hit_rate": pl.when(pl.col("first_scheduled_s").is_null())
        .then(pl.lit("N/A"))
        .otherwise(pl.lit("0.0")),
        "start_time(ms)": _ms(a),
        "start_time": _ms(a),
    }
    return req.select(cols[c].alias(c) for c in REQUEST_HEADERS[generation])


def _batch_type() -> pl.Expr:
    p, d = pl.col("prefill_batch_size") > 0, pl.col("decode_batch_size") > 0
    return (
        pl.when(p & d)
        .then(pl.lit("Prefill,Decode"))
        .when(p)
        .then(pl.lit("Prefill"))
        .otherwise(pl.lit("Decode"))
    )


def _instance_steps(result: StepTables, instance: str) -> pl.DataFrame:
    return (
        result.steps.filter(pl.col("instance") == instance)
        .join(_rank_table(result, instance), on="dp_rank", how="left")
        .sort("start_s", "step_id")
    )


def batch_table(
    result: StepTables,
    instance: str,
    generation: str,
    *,
    rid_suffix: bool = False,
) -> pl.DataFrame:
    """batch.csv rows: a scheduling row and an execution row per step, in time order."""
    steps = _instance_steps(result, instance)
    keys = RES_KEYS_MINDIE if generation == Generation.MINDIE else RES_KEYS_VLLM
    if result.members is not None:
        ids = steps.get_column("step_id")
        res = res_list_frame(
            result.members.filter(pl.col("step_id").is_in(ids.implode())),
            keys=keys,
            suffix=rid_suffix,
        )
        steps = steps.join(res, on="step_id", how="left")
    else:
        steps = steps.with_columns(pl.lit(None, dtype=pl.Utf8).alias("res_list"))
    sched_name, exec_name = STEP_NAMES[generation]
    sched_end = pl.col("start_s") + pl.min_horizontal(
        pl.lit(SCHED_SLICE_S), (pl.col("end_s") - pl.col("start_s")) * 0.5
    )
    cann = generation == Generation.CANN2025

    def rows(kind: int, name: str, start: pl.Expr, end: pl.Expr) -> pl.DataFrame:
        kv = kind == 0
        zero = pl.lit(0, dtype=pl.Int64)
        cols: dict[str, pl.Expr] = {
            "name": pl.lit(name),
            "res_list": pl.col("res_list").fill_null("[]"),
            "start_datetime": datetime_expr(start),
            "end_datetime": datetime_expr(end),
            "during_time(ms)": _ms(end - start),
            "batch_type": _batch_type(),
            "prof_id": pl.col("prof_id"),
            "batch_size": pl.col("batch_size"),
            "kvcache_usage_rate": (pl.col("used_blocks") / pl.col("total_blocks")).round(6)
            if kv
            else pl.lit(0.0),
            "prefill_batch_size": pl.col("prefill_batch_size"),
            "decode_batch_size": pl.col("decode_batch_size"),
            "prefill_scheduled_tokens": pl.col("prefill_tokens"),
            "decode_scheduled_tokens": pl.col("decode_tokens"),
            "total_scheduled_tokens": pl.col("prefill_tokens") + pl.col("decode_tokens"),
            "dp_rank": pl.col("dp_text"),
            # UNCONFIRMED unit in the real tool: the current code writes µs; the CANN 2025
            # generation is written in ms so readers meet both magnitudes.
            "start_time(ms)": _ms(start) if cann else _us(start),
            "end_time(ms)": _ms(end) if cann else _us(end),
        }
        for c in KV_COLUMNS[:-1]:
            cols[c] = pl.col(c) if kv else zero
        for new, old in DEC2025_RENAMES.items():
            cols[old] = cols[new]
        for c in (
            "prefill_batch_size",
            "decode_batch_size",
            "prefill_scheduled_tokens",
            "decode_scheduled_tokens",
        ):
            cols[c[0].upper() + c[1:]] = cols[c]
        cols["total_batch_size"] = cols["batch_size"]
        return steps.select(
            [pl.col("start_s").alias("_t"), pl.lit(kind).alias("_k")]
            + [cols[c].alias(c) for c in BATCH_HEADERS[generation]]
        )

    out = pl.concat(
        [
            rows(0, sched_name, pl.col("start_s"), sched_end),
            rows(1, exec_name, pl.col("start_s"), pl.col("end_s")),
        ]
    )
    return out.sort("_t", "_k", maintain_order=True).drop("_t", "_k")


def kvcache_table(result: StepTables, instance: str, generation: str) -> pl.DataFrame:
    """kvcache.csv: pool snapshots of the instance after each scheduling step (no DP column)."""
    steps = _instance_steps(result, instance)
    usage = (pl.col("used_blocks") / pl.col("total_blocks")).round(6)
    if generation != Generation.MINDIE:
        return steps.select(
            pl.lit("KVCacheStatus").alias("name"),
            datetime_expr(pl.col("start_s")).alias("start_time"),
            *[pl.col(c) for c in KV_COLUMNS[:-1]],
            usage.alias("kvcache_usage_rate"),
        )
    if result.members is not None:
        first = result.members.group_by("step_id", maintain_order=True).agg(pl.col("rid").first())
        steps = steps.join(first, on="step_id", how="left")
    else:
        steps = steps.with_columns(pl.lit(None, dtype=pl.Utf8).alias("rid"))
    return steps.select(
        pl.col("rid"),
        pl.lit("Allocate").alias("name"),
        datetime_expr(pl.col("start_s")).alias("start_time"),
        pl.col("free_blocks").alias("device_kvcache_left"),
        usage.alias("kvcache_usage_rate"),
    )


def forward_table(
    result: StepTables, instance: str, generation: str = Generation.CURRENT
) -> pl.DataFrame:
    """forward.csv: one forward pass per step and device, times really in ms.

    As ms_service_profiler/exporters/exporter_forward.py writes it: ``forward_iter`` counts each
    device's forwards from 1, ``bubble_time(ms)`` is the gap to the device's NEXT forward (empty
    on its last), and the header follows the generation (``FORWARD_HEADERS``)."""
    steps = _instance_steps(result, instance).sort("dp_rank", "start_s")
    next_start = pl.col("start_s").shift(-1).over("dp_rank")
    cols = {
        "name": pl.lit("forward"),
        "relative_start_time(ms)": _ms(pl.col("start_s") - result.start_s),
        "start_datetime": datetime_expr(pl.col("start_s")),
        "end_datetime": datetime_expr(pl.col("end_s")),
        "during_time(ms)": _ms(pl.col("end_s") - pl.col("start_s")),
        "bubble_time(ms)": _ms(next_start - pl.col("end_s")),
        "batch_size": pl.col("batch_size"),
        "batch_type": _batch_type(),
        "forward_iter": pl.int_range(1, pl.len() + 1).over("dp_rank"),
        "dp_rank": pl.col("dp_text"),
        "prof_id": pl.col("prof_id"),
        "hostname": pl.col("hostname"),
        "start_time(ms)": _ms(pl.col("start_s")),
        "end_time(ms)": _ms(pl.col("end_s")),
    }
    if generation == Generation.DEC2025:  # FORWARD_REMAME_COLUMNS: datetimes under the epoch names
        cols["start_time"], cols["end_time"] = cols["start_datetime"], cols["end_datetime"]
    header = FORWARD_HEADERS[generation]
    out = steps.select(*(cols[c].alias(c) for c in header), pl.col("start_s").alias("_t"))
    return out.sort("_t", maintain_order=True).drop("_t")


def request_status_table(result: StepTables, instance: str) -> pl.DataFrame:
    """request_status.csv: queue gauges per step, one of waiting/running set per row."""
    steps = _instance_steps(result, instance)
    base = [
        pl.col("hostname").alias("hostuid"),
        pl.col("pid"),
        datetime_expr(pl.col("start_s")).alias("start_datetime"),
        _ms(pl.col("start_s") - result.start_s).alias("relative_timestamp(ms)"),
    ]
    none = pl.lit(None, dtype=pl.Int64)
    tail = [_ms(pl.col("start_s")).alias("timestamp(ms)"), pl.col("start_s").alias("_t")]
    waiting = steps.select(
        *base, pl.col("waiting"), none.alias("running"), none.alias("swapped"), *tail
    )
    running = steps.select(
        *base, none.alias("waiting"), pl.col("running"), none.alias("swapped"), *tail
    )
    return pl.concat([running, waiting]).sort("_t", maintain_order=True).drop("_t")


# ----------------------------------------------------------------------------- writer
def write_profiler(
    result: SimResult,
    out_dir: Path,
    generation: str = Generation.CURRENT,
    *,
    rid_suffix: bool = False,
) -> list[Path]:
    """Write one msServiceProfiler output folder per instance: ``out_dir/<instance>/*.csv``.

    ``rid_suffix`` adds vLLM >= 0.14's ``-xxxxxxxx`` suffix to the rids inside ``res_list``
    (request.csv keeps the bare rid, as the real profiler does), so readers must strip it.
    Returns the written files.
    """
    if generation not in GENERATIONS:
        raise ValueError(f"unknown profiler generation {generation!r}; expected {GENERATIONS}")
    written: list[Path] = []
    for instance in result.instances:
        folder = Path(out_dir) / instance
        folder.mkdir(parents=True, exist_ok=True)
        tables = {
            "request.csv": request_table(result, instance, generation),
            "batch.csv": batch_table(result, instance, generation, rid_suffix=rid_suffix),
            "kvcache.csv": kvcache_table(result, instance, generation),
        }
        tables["forward.csv"] = forward_table(result, instance, generation)
        if generation == Generation.CURRENT:
            tables["request_status.csv"] = request_status_table(result, instance)
        for name, table in tables.items():
            path = folder / name
            table.write_csv(path, quote_style="necessary", null_value="")
            written.append(path)
    return written
