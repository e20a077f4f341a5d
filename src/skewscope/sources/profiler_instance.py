"""Profiler reader: one instance's signal rows, from its read files and DP ranks.

Each file contributes a frozen ``Part`` (its row tables, the signals it can give at instance and
DP level, where each came from, its notes); ``load_instance`` merges the parts once into a
frozen ``Instance``. Frames are built from instances by ``profiler_frame``; ``workload`` reads
the same instances for replays.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from typing import Any

import polars as pl

from skewscope.sources import profiler_forward as pf
from skewscope.sources import profiler_range as pr
from skewscope.sources import profiler_schema as ps
from skewscope.sources.profiler_folder import read_instance
from skewscope.sources.profiler_layout import InstanceFiles
from skewscope.sources.profiler_ranks import RankMap, pid_ranks, place_requests, rank_map, with_rank
from skewscope.sources.profiler_read import (
    EXEC_NAMES,
    SCHED_NAMES,
    BatchRead,
    Table,
    ensure,
)

KV_SOURCE_COLUMNS: dict[str, str] = {  # KV signal -> canonical column that feeds it
    "kv_usage": "kvcache_usage_rate",
    "kv_usage_max": "kvcache_usage_rate",
    "free_blocks_min": "free_blocks",
    "blocks_allocated": "blocks_allocated",
    "blocks_freed": "blocks_freed",
}
KV_COLUMNS: tuple[str, ...] = tuple(sorted(set(KV_SOURCE_COLUMNS.values())))
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
FRAMES: tuple[str, ...] = ("requests", "steps", "busy", "dp_busy", "kv", "waiting", "forward")


@dataclass(frozen=True)
class Part:
    """What one file gives an instance: row tables (epoch-seconds ``start_s``), the signals it
    can provide at each level, where they came from, and its notes."""

    requests: pl.DataFrame | None = None  # tokens, latencies, dp_rank (placed or null)
    steps: pl.DataFrame | None = None  # scheduling rows: start_s, dp_rank, step and KV columns
    busy: pl.DataFrame | None = None  # start_s, dp_rank, busy_ms (every row: instance level)
    dp_busy: pl.DataFrame | None = None  # the ranked busy rows
    kv: pl.DataFrame | None = None  # instance-level KV rows (kvcache.csv and/or batch rollup)
    waiting: pl.DataFrame | None = None  # start_s, pid, dp_rank, waiting
    forward: pl.DataFrame | None = None  # forward passes per device (profiler_forward.COLUMNS)
    available: frozenset[str] = frozenset()  # signals at instance level
    dp_available: frozenset[str] = frozenset()  # signals at DP level
    aliases: Mapping[str, str] = field(default_factory=dict)  # signal -> file:column
    notes: tuple[str, ...] = ()
    dp_notes: tuple[str, ...] = ()
    placed: int = 0  # requests placed on a DP rank
    request_end_s: float | None = None  # request.csv was cut here: later windows are unmeasured


@dataclass(frozen=True)
class Instance(Part):
    """Everything read for one instance, on the epoch-seconds axis, with DP ranks resolved."""

    name: str = ""
    ranks: tuple[int, ...] = ()
    # set by ``profiler_partials.reduce_instance``: steps, kv, busy and dp_busy then hold
    # (rank, tick) partials of ``tick_s`` seconds, and ``bounds`` the rows' event span
    tick_s: float | None = None
    bounds: tuple[float, float] | None = None

    @property
    def has_dp(self) -> bool:
        return len(self.ranks) >= 2

    def span(self) -> tuple[float, float] | None:
        """First and last event time (every row table but dp_busy, a subset of busy)."""
        if self.tick_s is not None:
            return self.bounds
        return pr.span(
            [df for f in FRAMES if f != "dp_busy" and (df := getattr(self, f)) is not None]
        )


def merge(name: str, ranks: tuple[int, ...], parts: list[Part]) -> Instance:
    """One instance from its parts: each row table comes from one part; signals, aliases and
    notes add up in the parts' order."""
    tables: dict[str, Any] = {}  # frame name -> row table (Any: not the float fields)
    for part in parts:
        for f in FRAMES:
            if (df := getattr(part, f)) is not None:
                assert f not in tables, f"two parts give {f}"
                tables[f] = df
    aliases: dict[str, str] = {}
    for part in parts:
        aliases.update(part.aliases)
    return Instance(
        **tables,
        available=frozenset().union(*(p.available for p in parts)),
        dp_available=frozenset().union(*(p.dp_available for p in parts)),
        aliases=aliases,
        notes=tuple(n for p in parts for n in p.notes),
        dp_notes=tuple(n for p in parts for n in p.dp_notes),
        placed=sum(p.placed for p in parts),
        request_end_s=next((p.request_end_s for p in parts if p.request_end_s is not None), None),
        name=name,
        ranks=ranks,
    )


assert set(FRAMES) <= {f.name for f in fields(Part)}


# --------------------------------------------------------------------------- batch.csv
def _read_columns(found: set[str]) -> list[str]:
    """The batch.csv columns ``from_batch`` reads (missing ones become null columns)."""
    cols = ["name", "prof_id", "dp_rank", "start_s", "end_s", "during_ms", "batch_size"]
    if "total_scheduled_tokens" in found:
        cols.append("total_scheduled_tokens")
    else:
        cols += ["prefill_scheduled_tokens", "decode_scheduled_tokens"]
    cols += ["decode_batch_size"] if "decode_batch_size" in found else ["res_n", "res_prefill"]
    return cols + list(KV_COLUMNS)


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
        *KV_COLUMNS,
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


def _usage_fraction(df: pl.DataFrame, col: str, notes: list[str]) -> pl.Expr:
    """KV usage as a fraction; a column whose values exceed 1 was written in percent. A file
    without the column (a truncated header, a format that writes none) has no usage (null)."""
    if col not in df.columns:
        return pl.lit(None, dtype=pl.Float64).alias(col)
    peak = df[col].max()
    if isinstance(peak, (int, float)) and peak > 1.0:
        notes.append(f"{col} above 1 (max {peak}): read as percent")
        return pl.col(col) / 100.0
    return pl.col(col)


def from_batch(batch: BatchRead, forward: Table | None) -> tuple[Part, RankMap]:
    """Steps, busy rows and DP ranks from batch.csv.

    The caller hands ``batch`` over (``Read.take_batch``) and keeps no reference: the full row
    table is released on return, the steps keep lean columns.
    """
    notes: list[str] = []
    dp_notes: list[str] = []
    found = set(batch.steps.res.raw)
    first, pending = batch.first_rows, batch.pending
    df = ensure(batch.steps.df, _read_columns(found))
    del batch  # ``df`` is now the only reference to the full row table
    df = df.with_columns(_usage_fraction(df, "kvcache_usage_rate", notes))
    sched = df.select("name", "prof_id", "dp_rank").filter(pl.col("name").is_in(list(SCHED_NAMES)))
    if sched.is_empty():
        notes.append("batch.csv: no scheduling rows (batchFrameworkProcessing/BatchSchedule)")
    procs = rank_map(sched, dp_notes)
    df = with_rank(df, procs)
    rows, aliases = _step_rows(df, found)
    ranks = tuple(sorted(rows["dp_rank"].drop_nulls().unique().to_list()))
    step_signals = {"steps", "batch_size", "running"}
    if (
        "total_scheduled_tokens" in found
        or {
            "prefill_scheduled_tokens",
            "decode_scheduled_tokens",
        }
        <= found
    ):
        step_signals.add("scheduled_tokens")
    kv = {sig for sig, col in KV_SOURCE_COLUMNS.items() if col in found}
    busy = _busy(df, rows, forward, procs, has_dp=len(ranks) >= 2)
    del df
    if pending is not None:  # another read of batch.csv, now that its row table is released
        first = pending.run()
    # first_rows only holds scheduling rows, as ``rows`` does
    rids = first.join(rows.select(ps.ROW, "dp_rank"), on=ps.ROW, how="inner")
    part = Part(
        steps=rows,
        busy=busy.busy,
        dp_busy=busy.dp_busy,
        available=frozenset(step_signals | {"busy_ms"}),
        dp_available=frozenset(step_signals | kv | {"busy_ms"}),
        aliases={**aliases, **busy.aliases},
        notes=tuple(notes),
        dp_notes=tuple(dp_notes) + busy.dp_notes,
    )
    return part, RankMap(procs, rids, ranks)


def _busy(
    df: pl.DataFrame,
    rows: pl.DataFrame,
    forward: Table | None,
    ranks: pl.DataFrame,
    *,
    has_dp: bool,
) -> Part:
    """busy_ms rows: execution rows, else forward.csv, else the scheduling rows' durations."""
    busy, name = _exec_busy(df)
    if busy is not None:
        alias = f"batch.csv:{name} during_time(ms)"
    elif forward is not None and not forward.df.is_empty():
        busy = with_rank(forward.df, ranks).select(
            "start_s", "dp_rank", pl.col("during_ms").alias("busy_ms")
        )
        alias = "forward.csv:during_time(ms)"
    else:
        busy = _sched_busy(rows)
        alias = "batch.csv:scheduling rows end-start"
    # every row ranked (the usual case): the same rows, not a filtered copy
    ranked = busy["dp_rank"].null_count() == 0
    dp_busy = busy if ranked else busy.filter(pl.col("dp_rank").is_not_null())
    dp_notes: tuple[str, ...] = ()
    if has_dp and dp_busy.is_empty() and not busy.is_empty():
        dp_notes = ("execution rows carry no DP rank — DP busy_ms from scheduling rows",)
        dp_busy = _sched_busy(rows).filter(pl.col("dp_rank").is_not_null())
    return Part(busy=busy, dp_busy=dp_busy, aliases={"busy_ms": alias}, dp_notes=dp_notes)


# --------------------------------------------------------------------------- other files
def from_kv(kvcache: Table | None, steps: pl.DataFrame | None) -> Part:
    """Instance-level KV rows: kvcache.csv columns first, batch scheduling rows for the rest."""
    notes: list[str] = []
    from_file = [c for c in KV_COLUMNS if kvcache is not None and c in kvcache.res.raw]
    batch_found = set() if steps is None else _batch_kv_columns(steps)
    from_batch = [c for c in KV_COLUMNS if c not in from_file and c in batch_found]
    parts = []
    aliases: dict[str, str] = {}
    if kvcache is not None and from_file:
        df = kvcache.df.with_columns(_usage_fraction(kvcache.df, "kvcache_usage_rate", notes))
        parts.append(df.select("start_s", *from_file))
        aliases.update(
            {
                s: f"kvcache.csv:{kvcache.res.raw[c]}"
                for s, c in KV_SOURCE_COLUMNS.items()
                if c in from_file
            }
        )
    if steps is not None and from_batch:
        parts.append(steps.select("start_s", *from_batch))
        aliases.update(
            {s: f"batch.csv:{c}" for s, c in KV_SOURCE_COLUMNS.items() if c in from_batch}
        )
    got = set(from_file) | set(from_batch)
    kv = None
    if parts:
        kv = ensure(pl.concat(parts, how="diagonal_relaxed"), KV_COLUMNS)
    else:
        notes.append("no KV data (no kvcache.csv, no KV columns in batch.csv)")
    return Part(
        kv=kv,
        available=frozenset(s for s, c in KV_SOURCE_COLUMNS.items() if c in got),
        aliases=aliases,
        notes=tuple(notes),
    )


def _batch_kv_columns(steps: pl.DataFrame) -> set[str]:
    return {c for c in KV_COLUMNS if steps[c].null_count() < steps.height}


def request_latencies(
    df: pl.DataFrame, capture_end_s: float | None, raw: Mapping[str, str]
) -> tuple[pl.DataFrame, list[str]]:
    """TTFT and queue wait as the profiler meant them, with a note per class read otherwise.

    The exporter fills a missing TTFT and a missing queue wait (no ``Dequeue`` event) with 0
    (``exporter_req_data.safe_merge_ttft_que``), so a 0 is "not recorded", never a wait of 0:

    * TTFT 0 -> missing;
    * no TTFT, queue wait 0 and no ``execution_time`` (the request never finished): it never
      left the queue while profiled, so it waited at least from its arrival to the capture's
      end (``capture_end_s``, the instance's last event): read as that lower bound;
    * no TTFT, queue wait 0 but finished: the wait was not recorded -> missing.

    A 0 next to a recorded TTFT is kept: the request was scheduled, and 0 is a possible wait.
    """
    recorded = pl.col("ttft_ms") > 0
    no_ttft = ~recorded.fill_null(False)
    no_wait = ~(pl.col("queue_wait_ms") > 0).fill_null(False)
    waiting = no_ttft & no_wait & pl.col("e2e_ms").is_null()
    finished = pl.col("e2e_ms").is_not_null() & pl.col("queue_wait_ms").is_not_null()
    unknown = no_ttft & no_wait & finished
    end = float("nan") if capture_end_s is None else capture_end_s
    bound = (pl.lit(end) - pl.col("start_s")) * 1000.0
    counts = df.select(waiting.sum().alias("w"), unknown.sum().alias("u")).row(0)
    queue = (
        pl.when(waiting)
        .then(pl.when(bound > 0).then(bound))
        .when(unknown)
        .then(None)
        .otherwise(pl.col("queue_wait_ms"))
    )
    df = df.with_columns(
        pl.when(recorded).then(pl.col("ttft_ms")).alias("ttft_ms"), queue.alias("queue_wait_ms")
    )
    q, t = raw.get("queue_wait_ms", "queue_wait_ms"), raw.get("ttft_ms", "ttft_ms")
    notes = []
    if counts[0]:
        notes.append(
            f"request.csv: {counts[0]} request(s) never scheduled while profiled ({q} and {t} "
            "0, no execution_time): queue wait read as at least the time from arrival to the "
            "capture's end (a lower bound), not 0"
        )
    if counts[1]:
        notes.append(
            f"request.csv: {counts[1]} finished request(s) with {q} and {t} 0 (not "
            "recorded) — queue wait read as missing"
        )
    return df, notes


def from_requests(table: Table, ranks: RankMap | None, capture_end_s: float | None = None) -> Part:
    """Request rows, placed on DP ranks through the res_list rids where the instance has DP;
    latencies the profiler did not record are missing (``request_latencies``)."""
    end_s = None
    if table.truncated:  # no complete row: no window was measured
        end = table.df["start_s"].max()
        end_s = float(end) if isinstance(end, (int, float)) else -float("inf")
    df, notes = request_latencies(table.df, capture_end_s, table.res.raw)
    df = df.with_columns(pl.lit(None, pl.Int64).alias("dp_rank"))
    aliases = {
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
    placed = 0
    dp_available: frozenset[str] = frozenset()
    dp_notes: list[str] = []
    has_dp = ranks is not None and ranks.has_dp
    if ranks is not None and has_dp and not ranks.rids.is_empty():
        df = place_requests(df, ranks.rids)
        placed = int(df["dp_rank"].is_not_null().sum())
        dp_available = frozenset(REQUEST_SIGNALS)
        unplaced = 1.0 - placed / df.height if df.height else 0.0
        if unplaced > 0:
            dp_notes.append(
                f"{df.height - placed} of {df.height} requests ({unplaced:.1%}) could not"
                " be placed on a DP rank"
                " (rid not in any batch.csv res_list: never scheduled while profiled)"
            )
    elif has_dp:
        dp_notes.append("no res_list rids: requests cannot be placed on DP ranks")
    return Part(
        requests=df,
        available=frozenset(REQUEST_SIGNALS),
        dp_available=dp_available,
        aliases=aliases,
        notes=tuple(notes),
        dp_notes=tuple(dp_notes),
        placed=placed,
        request_end_s=end_s,
    )


def from_waiting(table: Table, ranks: RankMap | None) -> Part:
    """Waiting samples per process; a pid maps to a rank through the prof_id's ``-<pid>``."""
    df = table.df.filter(pl.col("waiting").is_not_null()).select("start_s", "pid", "waiting")
    if ranks is not None:
        df = df.join(pid_ranks(ranks.procs), on="pid", how="left")
    else:
        df = df.with_columns(pl.lit(None, pl.Int64).alias("dp_rank"))
    ranked = ranks is not None and ranks.has_dp and df["dp_rank"].is_not_null().any()
    return Part(
        waiting=df,
        available=frozenset({"waiting"}),
        dp_available=frozenset({"waiting"}) if ranked else frozenset(),
        aliases={"waiting": "request_status.csv:waiting"},
    )


def from_forward(table: Table, ranks: RankMap | None) -> Part:
    """Forward passes per device: the device busy share at both levels (DP where ranked)."""
    rows, notes = pf.forward_rows(table, ranks)
    ranked = ranks is not None and ranks.has_dp and rows["dp_rank"].is_not_null().any()
    signal = frozenset({pf.SIGNAL})
    return Part(
        forward=rows,
        available=signal,
        dp_available=signal if ranked else frozenset(),
        aliases={pf.SIGNAL: pf.ALIAS},
        notes=tuple(notes),
    )


def load_instance(files: InstanceFiles, clocks: pr.ClockPolicy = pr.CLOCKS) -> Instance:
    """Read every file of one instance and resolve its DP ranks and request placement."""
    read = read_instance(files, clocks)
    tables = read.tables
    end = pr.span([t.df for t in tables.values()] + [b.steps.df for b in read.batch])
    parts = [Part(notes=read.notes)]
    ranks: RankMap | None = None
    if read.has_batch:
        batch, ranks = from_batch(read.take_batch(), tables.get("forward.csv"))
        parts.append(batch)
    else:
        parts.append(Part(notes=("batch.csv missing — no batch/KV signals from steps",)))
    parts.append(from_kv(tables.get("kvcache.csv"), parts[-1].steps))
    if "request.csv" in tables:
        parts.append(from_requests(tables["request.csv"], ranks, None if end is None else end[1]))
    else:
        parts.append(Part(notes=("request.csv missing — no request signals",)))
    if "request_status.csv" in tables:
        parts.append(from_waiting(tables["request_status.csv"], ranks))
    if "forward.csv" in tables:
        parts.append(from_forward(tables["forward.csv"], ranks))
    return merge(files.name, ranks.ranks if ranks else (), parts)
