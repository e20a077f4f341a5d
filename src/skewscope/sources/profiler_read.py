"""Profiler reader, first stage: one instance folder's CSVs -> tables on the epoch axis.

Each file is validated, its header resolved to canonical columns (``profiler_schema``), its cells
cast and checked, rows with a bad clock dropped (``profiler_range``) and local datetimes moved
to UTC. The result is a frozen ``Read`` per instance: nothing here knows about DP ranks,
signals or windows.

Large batch.csv files are scanned lazily and collected with the streaming engine in small chunks;
res_list strings are only ever touched by vectorised regex (never ``ast.literal_eval`` per row)
and never kept: the rid -> first row reduction runs inside the stream (see ``read_batch``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path

import polars as pl

from skewscope.sources import profiler_range as pr
from skewscope.sources import profiler_schema as ps
from skewscope.sources import profiler_validate as pv
from skewscope.sources.profiler_layout import InstanceFiles

SCHED_NAMES: tuple[str, ...] = ("batchFrameworkProcessing", "BatchSchedule")
# Execution row names, in preference order: one name is used per instance so nested or
# repeated execution records are not added twice.
EXEC_NAMES: tuple[str, ...] = ("modelExec", "modelRunnerExec", "Execute", "specDecoding")
# A res_list entry's rid as Python's repr writes it: quoted (a quote or backslash inside is
# escaped) or bare (a number); matched whole, so text inside a rid is never read as a key.
RID_PATTERN = r"""'rid': (?:'(?:[^'\\]|\\.)*'|"(?:[^"\\]|\\.)*"|[^,}\s]+)"""
TOKENS: tuple[str, ...] = ("prompt_tokens", "generation_tokens")


def rid_value(match: pl.Expr) -> pl.Expr:
    """The rid of one ``RID_PATTERN`` match (``'rid': 'x'``, ``'rid': "x"`` or ``'rid': x``)."""
    value = match.str.strip_prefix("'rid': ")
    quoted = value.str.starts_with("'") | value.str.starts_with('"')
    inner = value.str.slice(1, value.str.len_chars() - 2).str.replace_all(r"\\(.)", "$1")
    return pl.when(quoted).then(inner).otherwise(value)


def extract_rids(res_list: pl.Expr) -> pl.Expr:
    """List of the ``rid`` values in a Python-repr res_list cell (quoted or bare)."""
    return res_list.str.extract_all(RID_PATTERN).list.eval(rid_value(pl.element()))


def entry_count(res_list: pl.Expr) -> pl.Expr:
    """Entries of a res_list: its whole rid matches (a rid whose text holds ``'rid': `` is one
    entry, not two)."""
    return res_list.str.count_matches(RID_PATTERN).cast(pl.Float64)


def prefill_count(res_list: pl.Expr) -> pl.Expr:
    """Prefill entries of a res_list: ``type`` 0 (vLLM) or, without ``type`` (MindIE), iter 0.

    Keys are looked for with the rid values blanked: a rid such as ``"'type': "`` is text, not
    a key."""
    keys = res_list.str.replace_all(RID_PATTERN, "'rid': ''")
    typed = keys.str.contains("'type': ", literal=True)
    by_type = keys.str.count_matches(r"'type': 0\b")
    by_iter = keys.str.count_matches(r"'iter': 0\b")
    return pl.when(typed).then(by_type).otherwise(by_iter).cast(pl.Float64)


def ensure(df: pl.DataFrame, cols: Sequence[str]) -> pl.DataFrame:
    """``df`` with every column of ``cols`` it lacks added as a null stand-in."""
    missing = [pl.lit(None, dtype=pl.Float64).alias(c) for c in cols if c not in df.columns]
    return df.with_columns(missing) if missing else df


@dataclass(frozen=True)
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
    """Read a whole small-row file (request, kvcache, forward, request_status): numbers read
    by the parser, again as text when a cell does not parse (as in ``read_batch``)."""
    prep, res = _open(path, schema, notes)
    try:
        df = _collect(path, ps.scan(prep, res, typed=True))
    except (pl.exceptions.PolarsError, pl.exceptions.PanicException):
        df = _collect(path, ps.scan(prep, res))
    return _table(prep, res, df, notes)


@dataclass(frozen=True)
class BatchRead:
    """batch.csv: every row's canonical columns, and where each rid was first scheduled."""

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
    if "res_list" in res.raw:
        rids = _collect(path, first_rows(ps.scan(prep, res)))
    else:
        rids = pl.DataFrame(schema={"rid": pl.Utf8, ps.ROW: pl.UInt32})
    unread = [c for c in _unread_columns(res) if c in res.raw]
    try:  # the parser reads the numbers; a cell it cannot read: again as text, located
        typed = _rows(ps.scan(prep, res, typed=True), res)
        # unread columns kept as a null bit each, so the parser still reads (checks) them
        rows = _collect(path, typed.with_columns(pl.col(c).is_null() for c in unread))
        rows = rows.drop(unread)
    except (pl.exceptions.PolarsError, pl.exceptions.PanicException):
        untyped = _rows(ps.scan(prep, res), res)
        rows = _collect(path, untyped.drop(unread))  # the ``_bad`` marker checked them
    return BatchRead(_table(prep, res, rows, notes), rids)


def _rows(lf: pl.LazyFrame, res: ps.Resolved) -> pl.LazyFrame:
    """The row pass of ``read_batch``: every column but res_list, lean (the unread columns are
    left to the caller)."""
    if "res_list" in res.raw:
        if "decode_batch_size" not in res.raw:
            lf = lf.with_columns(
                prefill_count(pl.col("res_list")).alias("res_prefill"),
                entry_count(pl.col("res_list")).alias("res_n"),
            )
        lf = lf.drop("res_list")
    # repeated short texts as categoricals: 4 bytes a row instead of a 16-byte view (+ the text)
    texts = [c for c in ("name", "prof_id") if c in res.raw] + [ps.BAD]
    return lf.with_columns(pl.col(c).cast(pl.Categorical) for c in texts)



@dataclass(frozen=True)
class Read:
    """One instance's files read, times on the epoch axis (bad clocks dropped, local datetimes
    moved to UTC); ``notes`` say what was skipped, dropped or guessed.

    ``batch`` is the only holder of batch.csv's full row table: ``take_batch`` hands it over so
    the table is released as soon as steps, busy rows and ranks are taken from it.
    """

    name: str
    tables: Mapping[str, Table]  # request.csv, kvcache.csv, forward.csv, request_status.csv
    batch: list[BatchRead]  # zero or one; emptied by ``take_batch``
    notes: tuple[str, ...]

    @property
    def has_batch(self) -> bool:
        return bool(self.batch)

    def take_batch(self) -> BatchRead:
        """batch.csv's tables, handed over once (``has_batch`` is False afterwards)."""
        return self.batch.pop()


def read_instance(files: InstanceFiles, clocks: pr.ClockPolicy = pr.CLOCKS) -> Read:
    """Read every file of one instance onto the epoch axis."""
    notes: list[str] = []
    read = _read_files(files, notes)
    for file in read:  # one bad clock must not widen the grid
        read[file] = _drop_bad_clocks(file, read[file], clocks, notes)
    read = _align_times(read, notes)
    batch = read.pop("batch.csv", None)
    tables = {k: v for k, v in read.items() if isinstance(v, Table)}
    del read
    return Read(files.name, tables, [batch] if isinstance(batch, BatchRead) else [], tuple(notes))


def _drop_bad_clocks(
    file: str, got: Table | BatchRead, clocks: pr.ClockPolicy, notes: list[str]
) -> Table | BatchRead:
    table = got.steps if isinstance(got, BatchRead) else got
    bounds = pr.time_bounds(table.df["start_s"], clocks)
    df, dropped = pr.drop_time_outliers(table.df, file, bounds)
    notes.extend(dropped)
    return _with_table(got, replace(table, df=df))


def _with_table(got: Table | BatchRead, table: Table) -> Table | BatchRead:
    return replace(got, steps=table) if isinstance(got, BatchRead) else table


def _read_files(inst: InstanceFiles, notes: list[str]) -> dict[str, Table | BatchRead]:
    out: dict[str, Table | BatchRead] = {}
    ps.small_csv_chunks()  # every read, header peeks included (they prefetch chunks too)
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


def _align_times(
    read: dict[str, Table | BatchRead], notes: list[str]
) -> dict[str, Table | BatchRead]:
    """Put local-datetime tables on the epoch axis using the instance's time-zone offset.

    The offset is learnt from a file holding both an epoch and a datetime column; failing that,
    guessed from the first timestamps of epoch and datetime files (same run, same start).
    """
    tables = {f: (g.steps if isinstance(g, BatchRead) else g) for f, g in read.items()}
    local = [t for t in tables.values() if t.local_time and not t.df.is_empty()]
    if not local:
        return read
    learnt = [t.tz_offset_s for t in tables.values() if t.tz_offset_s is not None]
    epoch = [t for t in tables.values() if not t.local_time and not t.df.is_empty()]
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
    del local, epoch
    out = dict(read)
    for file, t in tables.items():
        if not (t.local_time and not t.df.is_empty()):
            continue
        cols = [c for c, ts in t.res.times.items() if ts.is_datetime and c in t.df.columns]
        moved = replace(t, df=t.df.with_columns(pl.col(c) - offset for c in cols), local_time=False)
        out[file] = _with_table(read[file], moved)
    return out


def _first_time(tables: list[Table]) -> float:
    firsts = [t.df["start_s"].min() for t in tables]
    return min(float(v) for v in firsts if isinstance(v, (int, float)))
