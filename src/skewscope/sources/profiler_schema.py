"""msServiceProfiler CSV schemas: header generations, column aliases, dirty-cell casting.

Three header generations (2025 CANN toolkit, Dec 2025, current) and MindIE variants spell the
same quantity differently, so every file is described once as canonical columns with the header
names that may carry them. Cells are read as strings and cast here, because real files hold
``N/A``, ``<NA>``, ``128.0`` and datetimes with a colon before the microseconds; a cell that is
none of those is reported with its file, line and column instead of failing deep inside polars.
"""

from __future__ import annotations

import io
import os
import re
import threading
from dataclasses import dataclass, field, replace
from typing import Any, Literal

import polars as pl

from skewscope.errors import SchemaError
from skewscope.sources import profiler_clock as pc
from skewscope.sources import profiler_validate as pv
from skewscope.sources.profiler_clock import datetime_to_us, epoch_scale
from skewscope.sources.profiler_prepare import Prepared as Prepared
from skewscope.sources.profiler_prepare import prepare as prepare

# "blob": long text only ever searched (res_list); NA cells become null, other cells are
# passed through unstripped (stripping would copy every multi-KB cell).
ColumnType = Literal["text", "blob", "number", "time"]  # how a cell is parsed

# Cells that mean "no value" (pandas writes NaN/None as empty; the profiler writes N/A; pandas'
# nullable integers print <NA>).
NA_TOKENS: tuple[str, ...] = ("", "N/A", "NA", "<NA>", "nan", "NaN", "None", "null")
# The same test as ``strip_chars().is_in(NA_TOKENS)``, anchored so it stops at a cell's first
# characters instead of copying the cell.
NA_PATTERN = r"^\s*(?:" + "|".join(re.escape(t) for t in NA_TOKENS if t) + r")?\s*$"
DATETIME_PATTERN = r"^\d{4}-\d{2}-\d{2}[ T]\d{2}:\d{2}:\d{2}(?:[:.]\d{1,9})?$"
DATETIME_EXAMPLE = "2025-04-23 08:52:13:123456"
BAD = "_bad"  # column naming the first unparsable canonical column of a row (null = row is fine)
ROW = "_row"  # 0-based data row index; file line = ROW + 2 (header is line 1)


@dataclass(frozen=True)
class Col:
    """A canonical column and the header names (lower case, first found wins) that carry it."""

    canon: str
    aliases: tuple[str, ...]
    kind: ColumnType
    required: bool = False


@dataclass(frozen=True)
class FileSchema:
    file: str
    columns: tuple[Col, ...]

    @property
    def canon_names(self) -> tuple[str, ...]:
        return tuple(c.canon for c in self.columns)


def _numbers(*names: str) -> tuple[Col, ...]:
    return tuple(Col(n, (n,), "number") for n in names)


REQUEST = FileSchema(
    "request.csv",
    (
        Col("rid", ("http_rid",), "text", True),
        # "start_time" is epoch ms in Dec 2025; epoch columns are preferred over datetimes.
        # 2024 (``exporter_request.py``): µs columns and no TTFT (see ``finish``).
        Col(
            "start_s",
            ("start_time(ms)", "start_time", "start_datetime", "start_time_httpreq(microsecond)"),
            "time",
            True,
        ),
        Col("prompt_tokens", ("recv_token_size",), "number", True),
        Col("generation_tokens", ("reply_token_size",), "number", True),
        Col("e2e_ms", ("execution_time(ms)", "execution_time(microsecond)"), "number", True),
        Col(
            "queue_wait_ms", ("queue_wait_time(ms)", "queue_wait_time(microsecond)"), "number", True
        ),
        Col("ttft_ms", ("first_token_latency(ms)",), "number"),
    ),
)

KV_COLUMNS = _numbers("total_blocks", "used_blocks", "blocks_allocated", "blocks_freed")

BATCH = FileSchema(
    "batch.csv",
    (
        Col("name", ("name",), "text", True),
        Col("res_list", ("res_list",), "blob"),
        Col("prof_id", ("prof_id",), "text"),
        Col("dp_rank", ("dp_rank",), "number"),
        # Dec 2025 renamed start_datetime -> start_time (a datetime string there).
        Col("start_s", ("start_time(ms)", "start_datetime", "start_time"), "time", True),
        Col("end_s", ("end_time(ms)", "end_datetime", "end_time"), "time"),
        Col("during_ms", ("during_time(ms)",), "number"),
        Col("batch_size", ("batch_size", "total_batch_size"), "number", True),
        *_numbers(
            "prefill_batch_size",
            "decode_batch_size",
            "prefill_scheduled_tokens",
            "decode_scheduled_tokens",
            "total_scheduled_tokens",
            "free_blocks",
            "kvcache_usage_rate",
        ),
        *KV_COLUMNS,
    ),
)

KVCACHE = FileSchema(
    "kvcache.csv",
    (
        # mid-2025 writes ``timestamp(ms)`` (epoch ms) and no usage column.
        Col(
            "start_s",
            ("start_time", "start_datetime", "start_time(ms)", "timestamp(ms)"),
            "time",
            True,
        ),
        Col("name", ("name",), "text"),
        Col("kvcache_usage_rate", ("kvcache_usage_rate",), "number"),
        # ``device_kvcache_left`` (the action format) is no free-block count: see
        # ``profiler_exporter.ACTION_NAMES``; it is not read.
        Col("free_blocks", ("free_blocks",), "number"),
        *KV_COLUMNS,
    ),
)

# Header generations (ms_service_profiler/exporters/exporter_forward.py, its docs and its
# checks at Cztk5380/msserviceprofiler): current ``..., start_datetime, end_datetime, ...,
# start_time(ms), end_time(ms)``; Dec 2025 renamed the datetimes to ``start_time``/``end_time``
# (FORWARD_REMAME_COLUMNS) with no epoch columns; CANN 2025 has ``start_time(ms)``,
# ``end_time(ms)`` only. ``forward_iter`` counts each device's forwards from 1.
FORWARD = FileSchema(
    "forward.csv",
    (
        Col("start_s", ("start_time(ms)", "start_datetime", "start_time"), "time", True),
        Col("end_s", ("end_time(ms)", "end_datetime", "end_time"), "time"),
        Col("during_ms", ("during_time(ms)",), "number", True),
        Col("batch_size", ("batch_size",), "number"),
        Col("forward_iter", ("forward_iter",), "number"),
        Col("prof_id", ("prof_id",), "text"),
        Col("dp_rank", ("dp_rank",), "number"),
    ),
)

REQUEST_STATUS = FileSchema(
    "request_status.csv",
    (
        Col("pid", ("pid",), "text", True),
        Col("start_s", ("timestamp(ms)", "start_datetime"), "time", True),
        Col("waiting", ("waiting",), "number", True),
        Col("running", ("running",), "number"),
    ),
)

SCHEMAS: dict[str, FileSchema] = {
    s.file: s for s in (REQUEST, BATCH, KVCACHE, FORWARD, REQUEST_STATUS)
}


# --------------------------------------------------------------------------- header resolution
def _normalise(name: str) -> str:
    return name.strip().lstrip("\ufeff").lower()


def _looks_like_datetime(values: list[str | None]) -> bool:
    """A time column holds datetimes when most sampled cells are datetimes (one bad cell must
    be reported as a bad datetime, not flip the column to numbers)."""
    sample = [v.strip() for v in values if v is not None and v.strip() not in NA_TOKENS]
    if not sample:
        return False
    hits = pl.Series(sample).str.contains(DATETIME_PATTERN).sum()
    return hits * 2 >= len(sample)


@dataclass(frozen=True)
class TimeSource:
    """How a canonical time column is read: epoch number (unit by magnitude) or local datetime."""

    raw: str
    is_datetime: bool
    paired_datetime: str | None = None  # a datetime column of the same instant (for the TZ)
    unit: float | None = None  # to seconds, read off the data (None: guessed from the size)


@dataclass
class Resolved:
    """A header mapped onto a schema: canonical name -> header name, time columns classified."""

    schema: FileSchema
    raw: dict[str, str] = field(default_factory=dict)
    times: dict[str, TimeSource] = field(default_factory=dict)


def _describe(col: Col) -> str:
    return " or ".join(col.aliases)


HEAD_ROWS = 50  # rows sampled to tell a time column's kind (and the time zone)
HEAD_BYTES = 256 << 10  # the file's first bytes parsed for them, when they hold the rows


def _head(prep: Prepared, names: list[str]) -> pl.DataFrame:
    """The first ``HEAD_ROWS`` rows of ``names``, as text, parsed from the file's first
    ``HEAD_BYTES`` when they hold one row more (the rows before it are then whole, parsed as
    in the file): polars reads a whole 4 MiB chunk for a file's first rows (~4 ms for
    batch.csv, 0.5 ms from the bytes)."""
    n = HEAD_ROWS if prep.n_rows is None else min(HEAD_ROWS, prep.n_rows)
    options: dict[str, Any] = {"infer_schema": False, "columns": names, "encoding": "utf8-lossy"}
    with prep.path.open("rb") as fh:
        first = fh.read(HEAD_BYTES + 1)
    whole = len(first) <= HEAD_BYTES
    try:
        rows = pl.read_csv(io.BytesIO(first), n_rows=n if whole else n + 1, **options)
        if whole or rows.height > n:
            return rows.head(n)
    except (pl.exceptions.PolarsError, pl.exceptions.PanicException):
        pass  # cut inside a row that does not parse: read from the file
    return pl.read_csv(prep.path, n_rows=n, glob=False, **options)


def _classify_time(col: Col, present: list[str], head: pl.DataFrame) -> TimeSource:
    kinds = {raw: _looks_like_datetime(head[raw].to_list()) for raw in present}
    epoch = [r for r in present if not kinds[r]]
    dates = [r for r in present if kinds[r]]
    if epoch:
        return TimeSource(epoch[0], False, dates[0] if dates else None)
    return TimeSource(dates[0], True)


def resolve(prep: Prepared, schema: FileSchema) -> Resolved:
    """Map the header of ``prep`` onto ``schema``; SchemaError names missing columns."""
    by_name = {_normalise(h): h for h in prep.header}
    found = {c.canon: [by_name[a] for a in c.aliases if a in by_name] for c in schema.columns}
    if not any(found.values()):
        expected = ", ".join(c.aliases[0] for c in schema.columns if c.required)
        raise SchemaError(
            f"{prep.path}: line 1: not a msServiceProfiler {schema.file} header "
            f"(expected columns {expected}; found {pv.quote(','.join(prep.header))})"
        )
    missing = [_describe(c) for c in schema.columns if c.required and not found[c.canon]]
    if missing:
        raise SchemaError(
            f"{prep.path}: line 1: header lacks column(s) {', '.join(missing)}"
            f" (a {schema.file} header of any known generation has them)"
        )
    res = Resolved(schema)
    time_cols = [c for c in schema.columns if c.kind == "time" and found[c.canon]]
    all_time_raw = sorted({r for c in time_cols for r in found[c.canon]})
    during = found.get("during_ms", [])[:1]
    head = _head(prep, all_time_raw + during) if all_time_raw else pl.DataFrame()
    for col in schema.columns:
        if not found[col.canon]:
            continue
        if col.kind == "time":
            res.times[col.canon] = _classify_time(col, found[col.canon], head)
            res.raw[col.canon] = res.times[col.canon].raw
        else:
            res.raw[col.canon] = found[col.canon][0]
    _read_units(res, head)
    return res


def _number(head: pl.DataFrame, raw: str) -> pl.Series:
    return head[raw].str.strip_chars().cast(pl.Float64, strict=False)


def _read_units(res: Resolved, head: pl.DataFrame) -> None:
    """Each epoch time column's unit read off the sampled rows (``profiler_clock``): from a
    datetime column of the same instant, else from the rows' durations."""
    for canon, ts in list(res.times.items()):
        if not ts.is_datetime and ts.paired_datetime is not None:
            local = head.select(datetime_to_us(pl.col(ts.paired_datetime)) / 1e6).to_series()
            unit = pc.unit_from_pair(_number(head, ts.raw), local)
            res.times[canon] = replace(ts, unit=unit)
    start, end = res.times.get("start_s"), res.times.get("end_s")
    if (
        start is None
        or end is None
        or start.is_datetime
        or end.is_datetime
        or "during_ms" not in res.raw
        or (start.unit and end.unit)
    ):
        return
    unit = pc.unit_from_durations(
        _number(head, start.raw), _number(head, end.raw), _number(head, res.raw["during_ms"])
    )
    res.times["start_s"] = replace(start, unit=start.unit or unit)
    res.times["end_s"] = replace(end, unit=end.unit or unit)


# --------------------------------------------------------------------------- cell casting
def _is_na(raw: pl.Expr) -> pl.Expr:
    return raw.is_null() | raw.is_in(list(NA_TOKENS))


def _cast(col: Col, source: str, is_datetime: bool) -> tuple[pl.Expr, pl.Expr]:
    """(value expression, bad-cell flag) of one canonical column."""
    if col.kind == "blob":
        blob = pl.col(source)
        na_blob = blob.is_null() | blob.str.contains(NA_PATTERN)
        return pl.when(na_blob).then(None).otherwise(blob).alias(col.canon), pl.lit(False)
    raw = pl.col(source).str.strip_chars()
    na = _is_na(raw)
    if col.kind == "text":
        return pl.when(na).then(None).otherwise(raw).alias(col.canon), pl.lit(False)
    if is_datetime:
        value = pl.when(na).then(None).otherwise(datetime_to_us(raw).cast(pl.Float64) / 1e6)
    else:  # epoch numbers stay in their unit until the whole column is known (see finish)
        value = pl.when(na).then(None).otherwise(raw.cast(pl.Float64, strict=False))
    return value.alias(col.canon), (~na & value.is_null())


def expected_type(res: Resolved, canon: str) -> str:
    ts = res.times.get(canon)
    if ts is not None and ts.is_datetime:
        return f"a datetime like {DATETIME_EXAMPLE}"
    if ts is not None:
        return "an epoch time (ms or µs)"
    return "a number"


# Bytes per chunk the streaming CSV reader parses at a time. Polars' default (32 MiB) times the
# chunks in flight (two per pipeline) held a third of an 800 MB batch.csv; 4 MiB costs no speed.
# Polars (2.1) takes it only from the environment, read when a scan starts.
CSV_CHUNK_BYTES = 4 << 20
_CHUNK_ENV = "POLARS_CSV_CHUNK_SIZE"
_chunk_lock = threading.Lock()


def small_csv_chunks() -> None:
    """Make streaming CSV scans use ``CSV_CHUNK_BYTES`` chunks from now on (a value the user
    set is kept). Set once and never unset: instances are read on several threads, and a
    variable set and removed around each read would race with another thread's scan."""
    with _chunk_lock:
        os.environ.setdefault(_CHUNK_ENV, str(CSV_CHUNK_BYTES))


def scan(prep: Prepared, res: Resolved, *, typed: bool = False) -> pl.LazyFrame:
    """Lazy scan with canonical, cast columns, a row index and the ``_bad`` marker column.

    Nothing is read until collected, so callers select only the columns they need (res_list is
    never materialised by queries that do not ask for it).

    ``typed``: the CSV parser reads number (and epoch time) cells as Float64 itself, with the
    ``NA_TOKENS`` as nulls: about half the work of reading every cell as text and casting it,
    but a cell it cannot read fails the whole query without saying where. The caller then
    reads the file again untyped (``scan``), whose ``_bad`` marker names the cell.
    """
    numeric = {
        res.raw[c.canon]: pl.Float64
        for c in res.schema.columns
        if c.canon in res.raw
        and (c.kind == "number" or (c.kind == "time" and not res.times[c.canon].is_datetime))
    }
    lf = pl.scan_csv(
        prep.path,
        infer_schema=False,
        n_rows=prep.n_rows,
        encoding="utf8-lossy",
        glob=False,
        schema_overrides=numeric if typed else None,
        null_values=list(NA_TOKENS) if typed else None,
    ).with_row_index(ROW)
    values, flags = [], []
    for col in res.schema.columns:
        if col.canon not in res.raw:
            continue
        ts = res.times.get(col.canon)
        if typed and res.raw[col.canon] in numeric:
            values.append(pl.col(res.raw[col.canon]).alias(col.canon))
            continue
        value, bad = _cast(col, res.raw[col.canon], ts is not None and ts.is_datetime)
        values.append(value)
        flags.append(pl.when(bad).then(pl.lit(col.canon)))
    marker = pl.coalesce(flags) if flags else pl.lit(None, dtype=pl.Utf8)
    return lf.select(pl.col(ROW), *values, marker.alias(BAD))


def raise_first_bad(df: pl.DataFrame, prep: Prepared, res: Resolved) -> None:
    """SchemaError for the first row whose ``_bad`` marker is set (file, line, column, value)."""
    if BAD not in df.columns:
        return
    bad = df.filter(pl.col(BAD).is_not_null()).head(1)
    if bad.is_empty():
        return
    row, canon = int(bad[ROW][0]), str(bad[BAD][0])
    raw_name = res.raw[canon]
    cell = (
        pl.scan_csv(
            prep.path, infer_schema=False, n_rows=row + 1, encoding="utf8-lossy", glob=False
        )
        .select(raw_name)
        .tail(1)
        .collect()[raw_name][0]
    )
    raise SchemaError(
        f"{prep.path}: line {row + 2}, column {pv.quote(raw_name)}: {pv.quote(cell)} is not "
        f"{expected_type(res, canon)}"
    )


MICROSECOND_SUFFIX = "(microsecond)"  # 2024 headers: a duration in µs, read in ms


def finish(df: pl.DataFrame, res: Resolved) -> pl.DataFrame:
    """Epoch-number time columns to seconds, each by its own magnitude; durations a header
    labels ``(microsecond)`` to ms."""
    exprs = [
        pl.col(canon) / 1000.0
        for canon, raw in res.raw.items()
        if canon not in res.times
        and canon in df.columns
        and _normalise(raw).endswith(MICROSECOND_SUFFIX)
    ]
    for canon, ts in res.times.items():
        if ts.is_datetime or canon not in df.columns:
            continue
        exprs.append(pl.col(canon) * unit_of(df[canon], ts))
    return df.with_columns(exprs) if exprs else df


def unit_of(values: pl.Series, ts: TimeSource) -> float:
    """An epoch column's unit: read off the data, else guessed from its median's size."""
    if ts.unit is not None:
        return ts.unit
    median = values.median()
    return epoch_scale(float(median)) if isinstance(median, (int, float)) else 1.0


def tz_segments(prep: Prepared, res: Resolved) -> pl.DataFrame | None:
    """The whole file's UTC-offset segments (``profiler_clock.offset_segments``) from its first
    epoch column with a datetime beside it; None when the offset never changes. Reads the two
    columns of every row: for the small files only."""
    for ts in res.times.values():
        if ts.is_datetime or ts.paired_datetime is None:
            continue
        cols = pl.read_csv(
            prep.path,
            columns=[ts.raw, ts.paired_datetime],
            infer_schema=False,
            n_rows=prep.n_rows,
            encoding="utf8-lossy",
            glob=False,
        )
        epoch = _number(cols, ts.raw)
        local = cols.select(datetime_to_us(pl.col(ts.paired_datetime)) / 1e6).to_series()
        return pc.offset_segments(epoch * unit_of(epoch, ts), local)
    return None


def tz_offset_s(prep: Prepared, res: Resolved) -> float | None:
    """Local-time offset (local wall clock - UTC, seconds) from a file with both an epoch and a
    datetime column of the same instant, rounded to 15 minutes; None when it cannot be learnt.

    Datetime-only files (kvcache.csv, Dec 2025 batch.csv) are then placed on the epoch axis.
    """
    for ts in res.times.values():
        if ts.is_datetime or ts.paired_datetime is None:
            continue
        head = _head(prep, [ts.raw, ts.paired_datetime])
        epoch = pl.col(ts.raw).str.strip_chars().cast(pl.Float64, strict=False)
        local = datetime_to_us(pl.col(ts.paired_datetime)).cast(pl.Float64) / 1e6
        pairs = head.select(epoch.alias("e"), local.alias("l")).drop_nulls()
        if pairs.is_empty():
            continue
        median_epoch = pairs["e"].median()
        if not isinstance(median_epoch, (int, float)):
            continue
        seconds = pairs["e"] * (ts.unit or epoch_scale(float(median_epoch)))
        diff = (pairs["l"] - seconds).median()
        if isinstance(diff, (int, float)):
            return round(float(diff) / 900.0) * 900.0
    return None
