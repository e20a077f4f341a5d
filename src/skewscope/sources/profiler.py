"""Offline source: msServiceProfiler output folders -> Evidence (instance and DP UnitFrames).

One folder per instance (the profiler records no instance identity). Per instance:

* request.csv gives the request-side signals. It has no DP column, so a request is put on a DP
  rank by joining its ``http_rid`` to the rids inside batch.csv ``res_list`` (first appearance).
* batch.csv scheduling rows (``batchFrameworkProcessing``/``BatchSchedule``) count the steps and
  carry batch sizes, tokens and KV; execution rows carry the execution time. A row's DP rank is
  its ``dp_rank`` or, when no process has one, its process (``prof_id``) in sorted order.
* kvcache.csv gives the instance's KV level; request_status.csv the waiting queue.

Large batch.csv files are scanned lazily and collected with the streaming engine in small chunks;
res_list strings are only ever touched by vectorised regex (never ``ast.literal_eval`` per row)
and never kept: the rid -> first row reduction runs inside the stream (see ``read_batch``).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import polars as pl

from skewscope.errors import InputError
from skewscope.frame import (
    SIGNAL_COLUMNS,
    TOTAL_SIGNALS,
    WINDOWS,
    Evidence,
    Level,
    UnitFrame,
    WindowPolicy,
    conform,
    dp_unit_id,
)
from skewscope.sources import profiler_range as pr
from skewscope.sources import profiler_schema as ps
from skewscope.sources import profiler_validate as pv
from skewscope.sources.profiler_layout import InstanceFiles, discover_all

SCHED_NAMES: tuple[str, ...] = ("batchFrameworkProcessing", "BatchSchedule")
# Execution row names, in preference order: one name is used per instance so nested or
# repeated execution records are not added twice.
EXEC_NAMES: tuple[str, ...] = ("modelExec", "modelRunnerExec", "Execute", "specDecoding")
RID_PATTERN = r"""'rid': (?:'[^']*'|"[^"]*"|[^,}\s]+)"""
RID_SUFFIX = r"-[0-9a-f]{8}$"  # vLLM >= 0.14 scheduler rids; the profiler strips it
KV_SOURCE_COLUMNS: dict[str, str] = {  # KV signal -> canonical column that feeds it
    "kv_usage": "kvcache_usage_rate",
    "kv_usage_max": "kvcache_usage_rate",
    "free_blocks_min": "free_blocks",
    "blocks_allocated": "blocks_allocated",
    "blocks_freed": "blocks_freed",
}
TOKENS: tuple[str, ...] = ("prompt_tokens", "generation_tokens")
REQUEST_SIGNALS: tuple[str, ...] = (
    "requests",
    "prompt_tokens",
    "generation_tokens",
    "queue_wait_mean_ms",
    "queue_wait_p95_ms",
    "ttft_mean_ms",
    "ttft_p99_ms",
    "e2e_mean_ms",
    "e2e_p99_ms",
)
# A unit whose source is present but had no event in a window did 0 of it; with no steps
# its decode batch (running) is empty too.
ZERO_FILL: frozenset[str] = TOTAL_SIGNALS | {"running"}
WI = "_wi"  # integer window index: floor(t / window_s), shared by every instance


# =========================================================================== res_list
def rid_value(match: pl.Expr) -> pl.Expr:
    """The rid of one ``RID_PATTERN`` match (``'rid': 'x'``, ``'rid': "x"`` or ``'rid': x``)."""
    value = match.str.strip_prefix("'rid': ")
    quoted = value.str.starts_with("'") | value.str.starts_with('"')
    return pl.when(quoted).then(value.str.slice(1, value.str.len_chars() - 2)).otherwise(value)


def extract_rids(res_list: pl.Expr) -> pl.Expr:
    """List of the ``rid`` values in a Python-repr res_list cell (quoted or bare)."""
    return res_list.str.extract_all(RID_PATTERN).list.eval(rid_value(pl.element()))


def prefill_count(res_list: pl.Expr) -> pl.Expr:
    """Prefill entries of a res_list: ``type`` 0 (vLLM) or, without ``type`` (MindIE), iter 0."""
    typed = res_list.str.contains("'type': ", literal=True)
    by_type = res_list.str.count_matches(r"'type': 0\b")
    by_iter = res_list.str.count_matches(r"'iter': 0\b")
    return pl.when(typed).then(by_type).otherwise(by_iter).cast(pl.Float64)


def strip_rid_suffix(rid: pl.Expr) -> pl.Expr:
    return rid.str.replace(RID_SUFFIX, "")


# =========================================================================== file reading
@dataclass
class Table:
    """One file read into canonical columns, plus how its times must be placed."""

    df: pl.DataFrame
    res: ps.Resolved
    local_time: bool  # its time columns are local wall-clock datetimes
    tz_offset_s: float | None  # local - UTC learnt from this file, if it can tell
    truncated: bool = False  # rows after the last complete one were never written


def _collect(path: Path, query: pl.LazyFrame) -> pl.DataFrame:
    return query.collect(engine="streaming")  # polars errors: see pv.guard in _read_files


def _open(path: Path, schema: ps.FileSchema, notes: list[str]) -> tuple[ps.Prepared, ps.Resolved]:
    """Prepare and resolve a file; raises _Empty for a 0-byte file (skipped with a note)."""
    prep = ps.prepare(path)
    if prep is None:
        raise _Empty
    notes.extend(prep.notes)
    return prep, ps.resolve(prep, schema)


class _Empty(Exception):
    """A 0-byte file: skipped with a note."""


def _table(prep: ps.Prepared, res: ps.Resolved, df: pl.DataFrame, notes: list[str]) -> Table:
    ps.raise_first_bad(df, prep, res)
    df = ps.finish(df.drop(ps.BAD), res)
    df, dropped = pv.drop_impossible(df, res.schema.file, res.raw, ps.ROW)
    notes.extend(dropped)
    if res.schema is ps.REQUEST:
        df, dropped = pv.drop_duplicate_requests(df)
        notes.extend(dropped + pv.missing_value_notes(df, res.schema.file, res.raw, TOKENS))
    if df.is_empty():
        notes.append(f"{prep.path.name}: no data rows")
    local = any(ts.is_datetime for ts in res.times.values())
    return Table(df, res, local, ps.tz_offset_s(prep, res), prep.truncated)


def read_simple(path: Path, schema: ps.FileSchema, notes: list[str]) -> Table:
    """Read a whole small-row file (request, kvcache, forward, request_status)."""
    prep, res = _open(path, schema, notes)
    return _table(prep, res, _collect(path, ps.scan(prep, res)), notes)


@dataclass
class BatchRead:
    steps: Table
    first_rows: pl.DataFrame  # rid, _row of the scheduling row where it first appears


def first_rows(lf: pl.LazyFrame) -> pl.LazyFrame:
    """rid -> first (lowest) row of a scheduling step whose res_list holds it.

    Streams: each row's rid matches are exploded and reduced by a group-by on the raw match text
    (one row per distinct match is all that is kept, never a per-row list), and the few distinct
    matches are unquoted afterwards (quoting variants of one rid meet in the second group-by).
    """
    matches = pl.col("res_list").str.extract_all(RID_PATTERN).alias("_match")
    return (
        lf.filter(pl.col("name").is_in(list(SCHED_NAMES)))
        .select(ps.ROW, matches)
        .explode("_match")
        .drop_nulls("_match")
        .group_by("_match")
        .agg(pl.col(ps.ROW).min())
        .select(rid_value(pl.col("_match")).alias("rid"), ps.ROW)
        .group_by("rid")
        .agg(pl.col(ps.ROW).min())
    )


def _unread_columns(res: ps.Resolved) -> list[str]:
    """batch.csv columns no step, KV or busy signal reads (see ``_read_columns``)."""
    unread = ["prefill_batch_size", "total_blocks", "used_blocks"]
    if "total_scheduled_tokens" in res.raw:
        unread += ["prefill_scheduled_tokens", "decode_scheduled_tokens"]
    return unread


def read_batch(path: Path, notes: list[str]) -> BatchRead:
    """batch.csv in two streamed passes, neither keeping a res_list string or a rid list:

    1. the rid -> first scheduling row reduction (``first_rows``), whose output is small;
    2. every row's canonical columns (res_list only reduced to prefill/decode counts, and only
       when ``decode_batch_size`` is missing: they stand in for it, see ``_step_rows``).

    The res_list pass goes first: the memory its chunks used is then reused for the rows kept
    by the second (the other order peaks about 50 MB higher on an 800 MB batch.csv). A single
    pass would carry every row's rid list to the end of the query (about the file's size in
    memory), and one scan shared by both outputs buffers the chunks of the faster one.
    """
    prep, res = _open(path, ps.BATCH, notes)
    lf = ps.scan(prep, res)
    if "res_list" in res.raw:
        rids = _collect(path, first_rows(lf))
        if "decode_batch_size" not in res.raw:
            lf = lf.with_columns(
                prefill_count(pl.col("res_list")).alias("res_prefill"),
                pl.col("res_list").str.count_matches("'rid': ", literal=True).alias("res_n"),
            )
        lf = lf.drop("res_list")
    else:
        rids = pl.DataFrame(schema={"rid": pl.Utf8, ps.ROW: pl.UInt32})
    # repeated short texts as categoricals: 4 bytes a row instead of a 16-byte view (+ the text)
    texts = [c for c in ("name", "prof_id") if c in res.raw] + [ps.BAD]
    lf = lf.with_columns(pl.col(c).cast(pl.Categorical) for c in texts)
    # columns never read after the bad-cell check (their cells are still cast and checked)
    lf = lf.drop(c for c in _unread_columns(res) if c in res.raw)
    return BatchRead(_table(prep, res, _collect(path, lf), notes), rids)


# =========================================================================== instance model
@dataclass
class Instance:
    """Everything read for one instance, on the epoch-seconds axis, with DP ranks resolved."""

    name: str
    requests: pl.DataFrame | None = None  # start_s, tokens, latencies, dp_rank (placed or null)
    steps: pl.DataFrame | None = None  # scheduling rows: start_s, dp_rank, step and KV columns
    busy: pl.DataFrame | None = None  # start_s, busy_ms (instance level)
    dp_busy: pl.DataFrame | None = None  # start_s, dp_rank, busy_ms (ranked rows)
    kv: pl.DataFrame | None = None  # instance-level KV rows (kvcache.csv and/or batch rollup)
    waiting: pl.DataFrame | None = None  # start_s, pid, dp_rank, waiting
    ranks: tuple[int, ...] = ()
    available: set[str] = field(default_factory=set)  # signals at instance level
    dp_available: set[str] = field(default_factory=set)  # signals at DP level
    placed: int = 0
    request_end_s: float | None = None  # request.csv was cut here: later windows are unmeasured
    notes: list[str] = field(default_factory=list)
    dp_notes: list[str] = field(default_factory=list)
    aliases: dict[str, str] = field(default_factory=dict)

    @property
    def has_dp(self) -> bool:
        return len(self.ranks) >= 2


def _read_files(inst: InstanceFiles, notes: list[str]) -> dict[str, Table | BatchRead]:
    out: dict[str, Table | BatchRead] = {}
    with ps.small_csv_chunks():  # every read, header peeks included (they prefetch chunks too)
        for file, path in inst.files.items():
            try:
                with pv.guard(path):  # any parser failure: one line naming file and line
                    if file == "batch.csv":
                        out[file] = read_batch(path, notes)
                    else:
                        out[file] = read_simple(path, ps.SCHEMAS[file], notes)
            except _Empty:
                notes.append(f"{file} is empty (0 bytes) — skipped")
    return out


def _align_times(tables: list[Table], notes: list[str]) -> None:
    """Put local-datetime tables on the epoch axis using the instance's time-zone offset.

    The offset is learnt from a file holding both an epoch and a datetime column; failing that,
    guessed from the first timestamps of epoch and datetime files (same run, same start).
    """
    local = [t for t in tables if t.local_time and not t.df.is_empty()]
    if not local:
        return
    learnt = [t.tz_offset_s for t in tables if t.tz_offset_s is not None]
    epoch = [t for t in tables if not t.local_time and not t.df.is_empty()]
    if learnt:
        offset = learnt[0]
    elif epoch:
        offset = round((_first_time(local) - _first_time(epoch)) / 900.0) * 900.0
        notes.append(
            f"datetime columns aligned to epoch columns by a guessed offset of "
            f"{offset / 3600:+.2f} h (no file holds both)"
        )
    else:
        offset = 0.0
        notes.append("only local datetimes, no epoch column: times read as UTC")
    for t in local:
        cols = [c for c, ts in t.res.times.items() if ts.is_datetime and c in t.df.columns]
        t.df = t.df.with_columns(pl.col(c) - offset for c in cols)
        t.local_time = False


def _first_time(tables: list[Table]) -> float:
    firsts = [t.df["start_s"].min() for t in tables]
    return min(float(v) for v in firsts if isinstance(v, (int, float)))


# --------------------------------------------------------------------------- DP ranks
def _as_int(col: str) -> pl.Expr:
    return pl.col(col).round(0).cast(pl.Int64)


def rank_map(sched: pl.DataFrame, notes: list[str]) -> pl.DataFrame:
    """prof_id -> rank ``r`` of the scheduling processes.

    A process with a ``dp_rank`` keeps it. When no process has one and several processes
    schedule, their sorted prof_ids become ranks 0..k-1; a single unranked process is no DP.
    """
    procs = (
        sched.select(pl.col("prof_id").cast(pl.Utf8).fill_null(""), _as_int("dp_rank").alias("r"))
        .group_by("prof_id")
        .agg(pl.col("r").drop_nulls().first())
        .sort("prof_id")
    )
    explicit = procs.filter(pl.col("r").is_not_null())
    unranked = procs.filter(pl.col("r").is_null())
    if explicit.is_empty():
        if unranked.height < 2:
            return procs.with_columns(pl.lit(None, dtype=pl.Int64).alias("r"))
        return unranked.with_columns(pl.int_range(pl.len(), dtype=pl.Int64).alias("r"))
    if not unranked.is_empty():
        notes.append(
            f"batch.csv: {unranked.height} scheduling process(es) without dp_rank — "
            "counted at instance level only"
        )
    return explicit


def with_rank(df: pl.DataFrame, ranks: pl.DataFrame) -> pl.DataFrame:
    """Row rank = its own dp_rank, else its process's rank from ``rank_map``."""
    df = _ensure(df, ["dp_rank"])
    # a null prof_id is the process "" (as in rank_map)
    unnamed = ranks.filter(pl.col("prof_id") == "")["r"]
    no_id = pl.lit(unnamed[0] if len(unnamed) else None, dtype=pl.Int64)
    if "prof_id" in df.columns:
        # a lookup, not a join: a join would gather a copy of every column of batch.csv's rows;
        # prof_id may be categorical (batch.csv), looked up without a per-row text copy
        pid = pl.col("prof_id")
        found = pid.replace_strict(
            ranks["prof_id"], ranks["r"], default=None, return_dtype=pl.Int64
        )
        proc_rank = pl.when(pid.is_null()).then(no_id).otherwise(found)
    else:
        proc_rank = no_id
    return df.with_columns(pl.coalesce(_as_int("dp_rank"), proc_rank).alias("dp_rank"))


def _ensure(df: pl.DataFrame, cols: Sequence[str]) -> pl.DataFrame:
    missing = [pl.lit(None, dtype=pl.Float64).alias(c) for c in cols if c not in df.columns]
    return df.with_columns(missing) if missing else df


# --------------------------------------------------------------------------- batch.csv
def _read_columns(found: set[str]) -> list[str]:
    """The batch.csv columns ``_load_batch`` reads (missing ones become null columns)."""
    cols = ["name", "prof_id", "dp_rank", "start_s", "end_s", "during_ms", "batch_size"]
    if "total_scheduled_tokens" in found:
        cols.append("total_scheduled_tokens")
    else:
        cols += ["prefill_scheduled_tokens", "decode_scheduled_tokens"]
    cols += ["decode_batch_size"] if "decode_batch_size" in found else ["res_n", "res_prefill"]
    return cols + sorted(set(KV_SOURCE_COLUMNS.values()))


def _step_rows(df: pl.DataFrame, found: set[str]) -> tuple[pl.DataFrame, dict[str, str]]:
    """Scheduling rows with step signals; the aliases say where each came from."""
    aliases = {"steps": "batch.csv:name", "batch_size": "batch.csv:batch_size"}
    if "total_scheduled_tokens" in found:
        tokens = pl.col("total_scheduled_tokens")
        aliases["scheduled_tokens"] = "batch.csv:total_scheduled_tokens"
    else:
        tokens = pl.col("prefill_scheduled_tokens") + pl.col("decode_scheduled_tokens")
        aliases["scheduled_tokens"] = "batch.csv:prefill+decode_scheduled_tokens"
    if "decode_batch_size" in found:
        running = pl.col("decode_batch_size")
        aliases["running"] = "batch.csv:decode_batch_size"
    else:
        running = pl.col("res_n") - pl.col("res_prefill")
        aliases["running"] = "batch.csv:res_list decode entries"
    # only the columns read later (STEP_AGGS, KV, busy fallback, request placement)
    rows = df.filter(pl.col("name").is_in(list(SCHED_NAMES))).select(
        ps.ROW,
        "start_s",
        "end_s",
        "during_ms",
        "dp_rank",
        "batch_size",
        tokens.alias("scheduled_tokens"),
        running.cast(pl.Float64).alias("running"),
        *sorted(set(KV_SOURCE_COLUMNS.values())),
    )
    return rows, aliases


def _sched_busy(rows: pl.DataFrame) -> pl.DataFrame:
    """Scheduling rows' own duration, used when no execution rows were recorded."""
    span = (pl.col("end_s") - pl.col("start_s")) * 1000.0
    busy = pl.coalesce(span, pl.col("during_ms")).alias("busy_ms")
    return rows.select("start_s", "dp_rank", busy)


def _exec_busy(df: pl.DataFrame) -> tuple[pl.DataFrame | None, str | None]:
    names = set(df["name"].drop_nulls().unique().to_list())
    chosen = next((n for n in EXEC_NAMES if n in names), None)
    if chosen is None:
        return None, None
    busy = df.select("start_s", "dp_rank", pl.col("during_ms").alias("busy_ms"))
    return busy.filter(df["name"] == chosen), chosen


def _load_batch(inst: Instance, batch: BatchRead, forward: Table | None) -> pl.DataFrame:
    """Fill the steps, busy rows and ranks of ``inst`` from batch.csv; returns the process ->
    rank map. The full row table is released on return (``inst.steps`` keeps lean columns).
    """
    found = set(batch.steps.res.raw)
    df = _ensure(batch.steps.df, _read_columns(found))
    batch.steps.df = df.clear()  # the only full-table reference is now ``df``
    df = df.with_columns(_usage_fraction(df, "kvcache_usage_rate", inst.notes))
    sched = df.select("name", "prof_id", "dp_rank").filter(pl.col("name").is_in(list(SCHED_NAMES)))
    if sched.is_empty():
        inst.notes.append("batch.csv: no scheduling rows (batchFrameworkProcessing/BatchSchedule)")
    ranks = rank_map(sched, inst.dp_notes)
    df = with_rank(df, ranks)
    rows, aliases = _step_rows(df, found)
    inst.aliases.update(aliases)
    inst.steps = rows
    inst.ranks = tuple(sorted(rows["dp_rank"].drop_nulls().unique().to_list()))
    step_signals = {"steps", "batch_size", "running"}
    if "total_scheduled_tokens" in found or {"prefill_scheduled_tokens",
                                             "decode_scheduled_tokens"} <= found:
        step_signals.add("scheduled_tokens")
    kv = {sig for sig, col in KV_SOURCE_COLUMNS.items() if col in found}
    inst.available |= step_signals | {"busy_ms"}
    inst.dp_available |= step_signals | kv | {"busy_ms"}
    _load_busy(inst, df, rows, forward, ranks)
    return ranks


def _load_busy(
    inst: Instance, df: pl.DataFrame, rows: pl.DataFrame, forward: Table | None, ranks: pl.DataFrame
) -> None:
    """busy_ms rows: execution rows, else forward.csv, else the scheduling rows' durations."""
    busy, name = _exec_busy(df)
    if busy is not None:
        inst.aliases["busy_ms"] = f"batch.csv:{name} during_time(ms)"
    elif forward is not None and not forward.df.is_empty():
        busy = with_rank(forward.df, ranks).select(
            "start_s", "dp_rank", pl.col("during_ms").alias("busy_ms")
        )
        inst.aliases["busy_ms"] = "forward.csv:during_time(ms)"
    else:
        busy = _sched_busy(rows)
        inst.aliases["busy_ms"] = "batch.csv:scheduling rows end-start"
    inst.busy = busy
    # every row ranked (the usual case): the same rows, not a filtered copy
    ranked = busy["dp_rank"].null_count() == 0
    inst.dp_busy = busy if ranked else busy.filter(pl.col("dp_rank").is_not_null())
    if inst.has_dp and inst.dp_busy.is_empty() and not busy.is_empty():
        inst.dp_notes.append("execution rows carry no DP rank — DP busy_ms from scheduling rows")
        inst.dp_busy = _sched_busy(rows).filter(pl.col("dp_rank").is_not_null())


def _usage_fraction(df: pl.DataFrame, col: str, notes: list[str]) -> pl.Expr:
    """KV usage as a fraction; a column whose values exceed 1 was written in percent."""
    peak = df[col].max()
    if isinstance(peak, (int, float)) and peak > 1.0:
        notes.append(f"{col} above 1 (max {peak}): read as percent")
        return pl.col(col) / 100.0
    return pl.col(col)


# --------------------------------------------------------------------------- other files
def _load_kv(inst: Instance, kvcache: Table | None) -> None:
    """Instance-level KV rows: kvcache.csv columns first, batch scheduling rows for the rest."""
    cols = sorted(set(KV_SOURCE_COLUMNS.values()))
    from_file = [c for c in cols if kvcache is not None and c in kvcache.res.raw]
    batch_found = set() if inst.steps is None else _batch_kv_columns(inst)
    from_batch = [c for c in cols if c not in from_file and c in batch_found]
    parts = []
    if kvcache is not None and from_file:
        df = kvcache.df.with_columns(_usage_fraction(kvcache.df, "kvcache_usage_rate", inst.notes))
        parts.append(df.select("start_s", *from_file))
        inst.aliases.update(
            {
                s: f"kvcache.csv:{kvcache.res.raw[c]}"
                for s, c in KV_SOURCE_COLUMNS.items()
                if c in from_file
            }
        )
    if inst.steps is not None and from_batch:
        parts.append(inst.steps.select("start_s", *from_batch))
        inst.aliases.update(
            {s: f"batch.csv:{c}" for s, c in KV_SOURCE_COLUMNS.items() if c in from_batch}
        )
    got = set(from_file) | set(from_batch)
    inst.available |= {s for s, c in KV_SOURCE_COLUMNS.items() if c in got}
    if parts:
        inst.kv = _ensure(pl.concat(parts, how="diagonal_relaxed"), cols)
    else:
        inst.notes.append("no KV data (no kvcache.csv, no KV columns in batch.csv)")


def _batch_kv_columns(inst: Instance) -> set[str]:
    assert inst.steps is not None
    return {c for c in KV_SOURCE_COLUMNS.values() if inst.steps[c].null_count() < inst.steps.height}


def place_requests(requests: pl.DataFrame, rid_ranks: pl.DataFrame) -> pl.DataFrame:
    """Add ``dp_rank`` to requests: the rank where the request's rid first appears in res_list.

    Rids are matched exactly first, then with the vLLM ``-xxxxxxxx`` suffix stripped from the
    res_list rid and from the http_rid (whichever side carries it).
    """
    ranked = rid_ranks.filter(pl.col("dp_rank").is_not_null())
    exact = ranked.select(pl.col("rid").alias("key"), "dp_rank", pl.lit(0).alias("prio"), ps.ROW)
    stripped = ranked.filter(pl.col("rid").str.contains(RID_SUFFIX)).select(
        strip_rid_suffix(pl.col("rid")).alias("key"), "dp_rank", pl.lit(1).alias("prio"), ps.ROW
    )
    # first row of each key in (prio, row) order: the same rows as ``unique(keep="first",
    # maintain_order=True)``, which takes about 4x the memory (33 vs 8 MB for 120k rids)
    keys = (
        pl.concat([exact, stripped])
        .sort("prio", ps.ROW)
        .filter(pl.col("key").is_first_distinct())
        .select("key", "dp_rank")
    )
    first = requests.drop("dp_rank", strict=False).join(
        keys.rename({"dp_rank": "_r1"}), left_on="rid", right_on="key", how="left"
    )
    if not first["rid"].str.contains(RID_SUFFIX).any():
        # no http_rid carries the suffix: the stripped key is the rid itself, already joined
        return first.with_columns(pl.col("_r1").alias("dp_rank")).drop("_r1")
    second = first.with_columns(strip_rid_suffix(pl.col("rid")).alias("_k2")).join(
        keys.rename({"dp_rank": "_r2", "key": "_k2"}), on="_k2", how="left"
    )
    rank = pl.coalesce("_r1", "_r2").alias("dp_rank")
    return second.with_columns(rank).drop("_r1", "_r2", "_k2")


def _load_requests(inst: Instance, table: Table, rid_ranks: pl.DataFrame | None) -> None:
    if table.truncated:  # no complete row: no window was measured
        end = table.df["start_s"].max()
        inst.request_end_s = float(end) if isinstance(end, (int, float)) else -float("inf")
    ttft = pl.when(pl.col("ttft_ms") > 0).then(pl.col("ttft_ms"))  # 0 = not recorded
    df = table.df.with_columns(ttft.alias("ttft_ms"), pl.lit(None, pl.Int64).alias("dp_rank"))
    inst.available |= set(REQUEST_SIGNALS)
    inst.aliases.update(
        {
            s: f"request.csv:{table.res.raw.get(c, c)}"
            for s, c in (
                ("requests", "rid"),
                ("prompt_tokens", "prompt_tokens"),
                ("generation_tokens", "generation_tokens"),
                ("queue_wait_mean_ms", "queue_wait_ms"),
                ("ttft_mean_ms", "ttft_ms"),
                ("e2e_mean_ms", "e2e_ms"),
            )
        }
    )
    if inst.has_dp and rid_ranks is not None and not rid_ranks.is_empty():
        df = place_requests(df, rid_ranks)
        inst.placed = int(df["dp_rank"].is_not_null().sum())
        inst.dp_available |= set(REQUEST_SIGNALS)
        unplaced = 1.0 - inst.placed / df.height if df.height else 0.0
        if unplaced > 0:
            inst.dp_notes.append(
                f"{df.height - inst.placed} of {df.height} requests ({unplaced:.1%}) could not"
                " be placed on a DP rank"
                " (rid not in any batch.csv res_list: never scheduled while profiled)"
            )
    elif inst.has_dp:
        inst.dp_notes.append("no res_list rids: requests cannot be placed on DP ranks")
    inst.requests = df


def _load_waiting(inst: Instance, table: Table, ranks: pl.DataFrame | None) -> None:
    """Waiting samples per process; a pid maps to a rank through the prof_id's ``-<pid>``."""
    df = table.df.filter(pl.col("waiting").is_not_null()).select("start_s", "pid", "waiting")
    if ranks is not None:
        pids = ranks.select(
            pl.col("prof_id").str.extract(r"-(\d+)$").alias("pid"), pl.col("r").alias("dp_rank")
        ).drop_nulls("pid")
        df = df.join(pids.unique("pid"), on="pid", how="left")
    else:
        df = df.with_columns(pl.lit(None, pl.Int64).alias("dp_rank"))
    inst.waiting = df
    inst.available.add("waiting")
    inst.aliases["waiting"] = "request_status.csv:waiting"
    if inst.has_dp and df["dp_rank"].is_not_null().any():
        inst.dp_available.add("waiting")


def load_instance(files: InstanceFiles, clocks: pr.ClockPolicy = pr.CLOCKS) -> Instance:
    """Read every file of one instance and resolve its DP ranks and request placement."""
    inst = Instance(files.name)
    read = _read_files(files, inst.notes)
    tables = [r.steps if isinstance(r, BatchRead) else r for r in read.values()]
    for file, table in zip(read, tables, strict=True):  # one bad clock must not widen the grid
        bounds = pr.time_bounds(table.df["start_s"], clocks)
        table.df, dropped = pr.drop_time_outliers(table.df, file, bounds)
        inst.notes.extend(dropped)
    _align_times(tables, inst.notes)
    batch = read.get("batch.csv")
    simple = {k: v for k, v in read.items() if isinstance(v, Table)}
    ranks: pl.DataFrame | None = None
    rid_ranks: pl.DataFrame | None = None
    if isinstance(batch, BatchRead):
        ranks = _load_batch(inst, batch, simple.get("forward.csv"))
        assert inst.steps is not None  # first_rows only holds scheduling rows, as inst.steps
        rid_ranks = batch.first_rows.join(
            inst.steps.select(ps.ROW, "dp_rank"), on=ps.ROW, how="inner"
        )
    else:
        inst.notes.append("batch.csv missing — no batch/KV signals from steps")
    _load_kv(inst, simple.get("kvcache.csv"))
    if "request.csv" in simple:
        _load_requests(inst, simple["request.csv"], rid_ranks)
    else:
        inst.notes.append("request.csv missing — no request signals")
    if "request_status.csv" in simple:
        _load_waiting(inst, simple["request_status.csv"], ranks)
    return inst


# =========================================================================== windows and frames
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
STEP_AGGS: dict[str, pl.Expr] = {
    "steps": pl.len().cast(pl.Float64),
    "batch_size": pl.col("batch_size").mean(),
    "scheduled_tokens": _total("scheduled_tokens"),
    "running": pl.col("running").mean(),
}
KV_AGGS: dict[str, pl.Expr] = {
    "kv_usage": pl.col("kvcache_usage_rate").mean(),
    "kv_usage_max": pl.col("kvcache_usage_rate").max(),
    "free_blocks_min": pl.col("free_blocks").min(),
    "blocks_allocated": _total("blocks_allocated"),
    "blocks_freed": _total("blocks_freed"),
}
BUSY_AGGS: dict[str, pl.Expr] = {"busy_ms": _total("busy_ms")}
# signal -> column counting the rows of its part in a window (null: the window had none)
PART_ROWS: dict[str, str] = {
    sig: f"_n_{part}"
    for part, aggs in (("req", REQUEST_AGGS), ("step", STEP_AGGS), ("kv", KV_AGGS),
                       ("busy", BUSY_AGGS))
    for sig in aggs
}


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


def _span(instances: list[Instance]) -> tuple[float, float] | None:
    return pr.span([f for i in instances for f in (i.requests, i.steps, i.busy, i.kv, i.waiting)
                    if f is not None])


def make_grid(
    instances: list[Instance], window_s: float | None, windows: WindowPolicy = WINDOWS
) -> Grid:
    """Window grid over the span of every instance's events (aligned to multiples of window),
    at most ``windows.max_windows`` long."""
    span = _span(instances)
    if span is None:
        raise InputError("no data rows in any profiler file: nothing to analyse")
    lo, hi = span
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
    """One table across instances (``instance`` column added); DP level keeps ranked rows."""
    parts = []
    for inst in instances:
        df: pl.DataFrame | None = getattr(inst, attr)
        if df is None or df.is_empty():
            continue
        if dp:
            df = df.filter(pl.col("dp_rank").is_not_null())
        parts.append(df.with_columns(pl.lit(inst.name).alias("instance")))
    return pl.concat(parts, how="diagonal_relaxed") if parts else None


def _aggregate(
    df: pl.DataFrame | None, keys: Sequence[str], aggs: dict[str, pl.Expr], grid: Grid
) -> pl.DataFrame | None:
    if df is None:
        return None
    rows = {PART_ROWS[s]: pl.len() for s in aggs if s in PART_ROWS}  # one name per part
    return df.with_columns(grid.index()).group_by([*keys, WI]).agg(**aggs, **rows)


def _step_signals(
    df: pl.DataFrame | None, keys: Sequence[str], grid: Grid, dp: bool
) -> pl.DataFrame | None:
    """Per-step signals of a window. At instance level ``running`` is the SUM of the ranks'
    mean batches (like ``waiting`` and the request counts), not the mean step of one rank."""
    per_rank = _aggregate(df, keys if dp else [*keys, "dp_rank"], STEP_AGGS, grid)
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
    base = _units(instances, spec).join(grid.windows(), how="cross")
    kv_attr = "steps" if dp else "kv"
    parts = [
        _aggregate(_long(instances, "requests", dp), keys, REQUEST_AGGS, grid),
        _step_signals(_long(instances, "steps", dp), keys, grid, dp),
        _aggregate(_long(instances, kv_attr, dp), keys, KV_AGGS, grid),
        _aggregate(_long(instances, "dp_busy" if dp else "busy", dp), keys, BUSY_AGGS, grid),
        _waiting(_long(instances, "waiting", dp), keys, grid),
    ]
    for part in parts:
        if part is not None:
            base = base.join(part, on=[*keys, WI], how="left", nulls_equal=True)
    base = _ensure(base, [*SIGNAL_COLUMNS, *set(PART_ROWS.values())])
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


# =========================================================================== public API
def _prefixed(inst: Instance, notes: list[str]) -> list[str]:
    return [f"{inst.name}: {n}" for n in notes]


def _aliases(instances: list[Instance]) -> dict[str, str]:
    merged: dict[str, list[str]] = {}
    for inst in instances:
        for sig, name in inst.aliases.items():
            if name not in merged.setdefault(sig, []):
                merged[sig].append(name)
    return {sig: " | ".join(names) for sig, names in merged.items()}


def _frame(instances: list[Instance], spec: LevelSpec, grid: Grid, notes: list[str]) -> UnitFrame:
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


def zoom(
    instances: list[Instance], start: float | None, end: float | None, last_s: float | None
) -> str | None:
    """Keep the events in ``[start, end)`` or the capture's last ``last_s``; the report note."""
    whole = _span(instances)
    if whole is None or (start is None and end is None and last_s is None):
        return None
    lo, hi = pr.zoom_range(whole, start, end, last_s)
    keep = (pl.col("start_s") >= lo) & (pl.col("start_s") < hi)
    for inst in instances:
        for attr in ("requests", "steps", "busy", "dp_busy", "kv", "waiting"):
            if (df := getattr(inst, attr)) is not None:
                setattr(inst, attr, df.filter(keep))
        if inst.requests is not None:
            inst.placed = int(inst.requests["dp_rank"].is_not_null().sum())
    return pr.zoom_note(whole, lo, hi, _span(instances) is not None)


def load_profiler(
    specs: Sequence[str],
    *,
    window_s: float | None = None,
    windows: WindowPolicy = WINDOWS,
    clocks: pr.ClockPolicy = pr.CLOCKS,
    start: float | None = None,
    end: float | None = None,
    last_s: float | None = None,
) -> Evidence:
    """Load msServiceProfiler folders (``PATH`` or ``NAME=PATH``) into instance and DP frames,
    optionally zoomed to ``[start, end)`` (epoch s) or to the capture's last ``last_s``.

    Raises InputError/SchemaError with a one-line message for any bad input.
    """
    instances = [load_instance(files, clocks) for files in discover_all(specs)]
    pr.check_clocks({i.name: _span([i]) for i in instances}, clocks)
    zoomed = zoom(instances, start, end, last_s)
    grid = make_grid(instances, window_s, windows)
    notes = [n for i in instances for n in _prefixed(i, i.notes)] + ([zoomed] if zoomed else [])
    dp_notes = [n for i in instances if i.has_dp for n in _prefixed(i, i.dp_notes)]
    instance_frame = _frame(instances, INSTANCE_LEVEL, grid, notes)
    dp_instances = [i for i in instances if i.has_dp]
    dp_frame = _frame(dp_instances, DP_LEVEL, grid, dp_notes) if dp_instances else None
    return Evidence(instance=instance_frame, dp=dp_frame, notes=tuple(notes + dp_notes))
