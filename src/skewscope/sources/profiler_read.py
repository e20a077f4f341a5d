"""Profiler reader, first stage: one instance folder's CSVs -> tables on the epoch axis.

Each file is validated, its header resolved to canonical columns (``profiler_schema``), its cells
cast and checked, rows with a bad clock dropped (``profiler_range``) and local datetimes moved
to UTC. The result is a frozen ``Read`` per instance: nothing here knows about DP ranks,
signals or windows.

Large batch.csv files are scanned lazily and collected with the streaming engine in small chunks;
res_list strings are only ever touched by vectorised regex (never ``ast.literal_eval`` per row)
and never kept: the rows carry only their prefill matches, or the rid -> first row reduction
runs inside a stream of its own (see ``read_batch``).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import polars as pl

from skewscope.sources import profiler_exporter as pe
from skewscope.sources import profiler_schema as ps
from skewscope.sources import profiler_validate as pv

SCHED_NAMES: tuple[str, ...] = ("batchFrameworkProcessing", "BatchSchedule")
# Execution row names, in preference order: one name is used per instance so nested or
# repeated execution records are not added twice.
EXEC_NAMES: tuple[str, ...] = ("modelExec", "modelRunnerExec", "Execute", "specDecoding")
# A res_list entry's rid as Python's repr writes it: quoted (a quote or backslash inside is
# escaped) or bare (a number); matched whole, so text inside a rid is never read as a key.
RID_PATTERN = r"""'rid': (?:'(?:[^'\\]|\\.)*'|"(?:[^"\\]|\\.)*"|[^,}\s]+)"""
# A prefill entry: its rid followed by iter 0 (vLLM writes rid, iter, type; MindIE rid, iter).
PREFILL_TAIL = ", 'iter': 0"
PREFILL_PATTERN = RID_PATTERN + PREFILL_TAIL + "[,}]"
# batch.csv rows whose every res_list entry is read by ``prefill_first_rows``: the first steps,
# where requests already running when the profile started appear without their prefill.
FULL_PREFIX_ROWS = 4096
RID_SUFFIX = r"-[0-9a-f]{8}$"  # vLLM >= 0.14 scheduler rids; the profiler strips it
PLAIN_RID = r"^[ -&(-\[\]-~]+$"  # printable ASCII but ' and backslash: repr writes it as is
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
    guessed: tuple[str, ...] = ()  # epoch time columns whose unit only their size suggests
    tz_segments: pl.DataFrame | None = None  # the UTC offset changed during the capture


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
    df = _unrecorded(df, prep, res, notes)
    df, dropped = pv.drop_impossible(df, res.schema.file, res.raw, ps.ROW)
    notes.extend(dropped)
    if res.schema is ps.REQUEST:
        df, dropped = pv.drop_duplicate_requests(df)
        notes.extend(dropped + pv.missing_value_notes(df, res.schema.file, res.raw, TOKENS))
    if df.is_empty():
        notes.append(f"{prep.path.name}: no data rows")
    local = any(ts.is_datetime for ts in res.times.values())
    guessed = tuple(
        c
        for c, ts in res.times.items()
        if not ts.is_datetime and ts.unit is None and c in df.columns
    )
    # one row per request or sample: cheap to read twice (batch.csv, forward.csv are not)
    small = res.schema in (ps.REQUEST, ps.REQUEST_STATUS)
    segments = ps.tz_segments(prep, res) if small else None
    return Table(df, res, local, ps.tz_offset_s(prep, res), prep.truncated, guessed, segments)


def _unrecorded(
    df: pl.DataFrame, prep: ps.Prepared, res: ps.Resolved, notes: list[str]
) -> pl.DataFrame:
    """What the exporter wrote where it recorded nothing, read as missing (``pe``)."""
    file = res.schema.file
    if res.schema is ps.REQUEST:
        return ensure(df, ["ttft_ms"])  # the 2024 header has no TTFT
    if res.schema is ps.KVCACHE:
        df, got = pe.action_format(df, file, prep.header)
        notes.extend(got)
    if res.schema in (ps.KVCACHE, ps.BATCH):
        sched = pl.col("name").is_in(list(SCHED_NAMES)) if res.schema is ps.BATCH else None
        df, got = pe.unrecorded_kv(df, file, sched)
        notes.extend(got)
    return df


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
    """batch.csv: every row's canonical columns, and where each rid was first scheduled
    (``first_rows``, completed by ``pending`` when another read of the file is left to do)."""

    steps: Table
    first_rows: pl.DataFrame  # rid, _row of the scheduling row where it first appears
    pending: RidSearch | None = None


def first_rows(lf: pl.LazyFrame) -> pl.LazyFrame:
    """rid -> first (lowest) row of a scheduling step whose res_list holds it: every entry read.

    Streams: each row's rid matches are exploded and reduced by a group-by on the raw match text
    (one row per distinct match is all that is kept, never a per-row list), and the few distinct
    matches are unquoted afterwards (quoting variants of one rid meet in the second group-by).
    """
    matches = pl.col("res_list").str.extract_all(RID_PATTERN)
    return _reduce_matches(lf, matches)


def _prefill_matches(whole: pl.Expr) -> pl.Expr:
    """A res_list's rid matches: every entry where ``whole``, else its prefill entries only."""
    text = pl.col("res_list")
    every = pl.when(whole).then(text).str.extract_all(RID_PATTERN)
    return pl.when(whole).then(every).otherwise(text.str.extract_all(PREFILL_PATTERN))


def prefill_first_rows(lf: pl.LazyFrame, prefix_rows: int = FULL_PREFIX_ROWS) -> pl.LazyFrame:
    """``first_rows`` reading only the entries a rid first appears in, when the file is as the
    profiler writes it: its prefill (``'iter': 0`` right after the rid, vLLM and MindIE).

    About 1 entry in 15-50 is a prefill, and most of the rid pass's cost is in handing each
    match over, so this is the fast path. Read in full, every entry: the first
    ``prefix_rows`` rows (requests already running when the profile started never show
    their prefill; they are in the first steps of their process) and any row holding a ``"``
    (a rid written in double quotes can hold text that reads like a prefill entry; without one,
    ``'rid': '`` cannot occur inside a quoted rid). A rid whose first appearance is elsewhere
    and not a prefill (a key order other than rid, iter; a rid that never shows a prefill after
    the first rows) is missed or placed later: ``read_batch`` checks that every request of
    request.csv finds its rid, and reads the rows that could hold one it does not
    (``fill_missing``).
    """
    text = pl.col("res_list")
    whole = (pl.col(ps.ROW) < prefix_rows) | text.str.contains('"', literal=True)
    return _reduce_matches(lf, _prefill_matches(whole))


# Columns the row pass of ``read_batch`` carries for the rid pass (``carried_matches``).
MATCH = "_match"  # a scheduling row's rid matches (null for other rows)
QUOTED = "_quoted"  # a scheduling row past the first rows whose res_list holds a ``"``


def carried_matches(prefix_rows: int = FULL_PREFIX_ROWS) -> list[pl.Expr]:
    """``prefill_first_rows``' matches as row-pass columns, so batch.csv is read once: each
    scheduling row's prefill matches (every match in the first ``prefix_rows`` rows), and
    whether it is a row holding a ``"`` past them, which ``prefill_first_rows`` reads whole.

    Rows holding a ``"`` get their prefill matches only: a file full of them would carry
    every rid of every row to the end of the pass (about the file's size in memory), so
    ``first_rows_of`` leaves such a file's rids to a pass of their own.
    """
    prefix = pl.col(ps.ROW) < prefix_rows
    sched = pl.col("name").is_in(list(SCHED_NAMES))
    quoted = ~prefix & pl.col("res_list").str.contains('"', literal=True)
    return [
        pl.when(sched).then(_prefill_matches(prefix)).alias(MATCH),
        (sched & quoted).fill_null(False).alias(QUOTED),
    ]


def first_rows_of(carried: pl.DataFrame) -> pl.DataFrame | None:
    """``prefill_first_rows`` from the row pass's ``carried_matches`` columns (``ps.ROW``,
    ``MATCH``, ``QUOTED``); None when a row holding a ``"`` was not read whole (the caller
    then runs ``prefill_first_rows``)."""
    if carried[QUOTED].any():
        return None
    return _reduce_matches(carried.lazy(), pl.col(MATCH), scheduling=False).collect()


def _reduce_matches(lf: pl.LazyFrame, matches: pl.Expr, scheduling: bool = True) -> pl.LazyFrame:
    """rid -> lowest row over the scheduling rows' ``matches`` (``RID_PATTERN`` or
    ``PREFILL_PATTERN`` matches, the latter read back to their rid); ``scheduling=False``:
    ``lf`` holds no other rows' matches (``carried_matches``)."""
    match = pl.col("_m")
    prefill = match.str.ends_with(PREFILL_TAIL + ",") | match.str.ends_with(PREFILL_TAIL + "}")
    rid_match = pl.when(prefill).then(match.str.head(-len(PREFILL_TAIL) - 1)).otherwise(match)
    if scheduling:
        lf = lf.filter(pl.col("name").is_in(list(SCHED_NAMES)))
    return (
        lf.select(ps.ROW, matches.alias("_m"))
        .explode("_m")
        .drop_nulls("_m")
        .group_by("_m")
        .agg(pl.col(ps.ROW).min())
        .select(rid_value(rid_match).alias("rid"), ps.ROW)
        .group_by("rid")
        .agg(pl.col(ps.ROW).min())
    )


def missing_keys(request_rids: pl.Series, first: pl.DataFrame) -> pl.Series:
    """The suffix-stripped rids of the requests whose rid matches no rid of ``first``, exactly
    or with the vLLM suffix stripped on either side (as ``profiler_ranks.place_requests``
    matches them)."""
    rid = pl.col("rid")
    rids = request_rids.drop_nulls().rename("rid").to_frame()
    rids = rids.filter(~rid.is_in(first["rid"].implode()))  # the usual case: all found here
    if rids.is_empty():
        return rids["rid"]
    keys = pl.concat([first.select(rid), first.select(strip_rid_suffix(rid))])["rid"].unique()
    found = rid.is_in(keys.implode()) | strip_rid_suffix(rid).is_in(keys.implode())
    return rids.filter(~found).select(strip_rid_suffix(rid))["rid"].unique()


def fill_missing(
    path: Path, lf: pl.LazyFrame, first: pl.DataFrame, request_rids: pl.Series
) -> pl.DataFrame:
    """``first`` (``prefill_first_rows``) completed for the requests it does not place: every
    entry of the rows whose res_list holds one of their rids as plain text (a second read of
    the file: ~0.35 CPU s for 222 MB).

    The rows are found by one literal search (Aho-Corasick) for the missing rids; a rid that
    ``repr`` could write otherwise (a quote, backslash or non-ASCII character) reads every row.
    Any res_list rid that one of these requests could match (exactly or through the suffix,
    both hold the stripped rid) is in those rows, so their placement is what reading every
    entry gives. Requests never scheduled while profiled (the usual reason) cost this search.
    """
    keys = missing_keys(request_rids, first)
    if keys.is_empty():
        return first
    rows = lf
    if keys.str.contains(PLAIN_RID).all():
        rows = lf.filter(pl.col("res_list").str.contains_any(keys.to_list()))
    rid = pl.col("rid")
    wanted = rid.is_in(keys.implode()) | strip_rid_suffix(rid).is_in(keys.implode())
    found = _collect(path, first_rows(rows).filter(wanted))
    return pl.concat([first, found]).group_by("rid").agg(pl.col(ps.ROW).min())


def strip_rid_suffix(rid: pl.Expr) -> pl.Expr:
    """The rid without the vLLM ``-xxxxxxxx`` suffix."""
    return rid.str.replace(RID_SUFFIX, "")


def carries_matches(requests: pl.DataFrame) -> bool:
    """Whether the rid pass takes the prefills (``prefill_first_rows``), carried by the row
    pass: only when every request has its first token recorded (all were scheduled while
    profiled). A request without one was most likely never scheduled, so no res_list holds it
    and the search for it (``fill_missing``) would read the file again: then every entry is
    read at once instead (``first_rows``)."""
    return not (requests["ttft_ms"].fill_null(0.0) <= 0.0).any()


@dataclass(frozen=True)
class RidSearch:
    """The rest of the prefill rid pass (``prefill_first_rows`` then ``fill_missing``), each
    a read of batch.csv: the prefill pass itself unless the row pass carried it (``first``),
    every entry when no prefill is found, the rows holding a request the prefills left
    unplaced. ``profiler_instance.from_batch`` runs it once the instance's full row table is
    released, so the read's chunks do not come on top of that table."""

    path: Path
    prep: ps.Prepared
    res: ps.Resolved
    first: pl.DataFrame | None  # the carried prefills reduced (``first_rows_of``), if usable
    request_rids: pl.Series

    def run(self) -> pl.DataFrame:
        """rid -> first scheduling row, as reading every entry gives it."""
        with pv.guard(self.path):  # any parser failure: one line naming file and line
            first = self.first
            if first is None:
                first = _collect(self.path, prefill_first_rows(ps.scan(self.prep, self.res)))
            if first.is_empty():  # no prefill at all: whether any rid is there, every entry
                return _collect(self.path, first_rows(ps.scan(self.prep, self.res)))
            return fill_missing(self.path, ps.scan(self.prep, self.res), first, self.request_rids)


def _rid_pass(
    path: Path, prep: ps.Prepared, res: ps.Resolved, requests: pl.DataFrame
) -> pl.DataFrame:
    """rid -> first scheduling row, as reading every entry gives it, for placing ``requests``,
    in passes of their own (the row pass does not carry the matches).

    When ``carries_matches``, the prefills are read and the rows holding a request they missed
    searched (``RidSearch``): a third less CPU than reading every entry on vLLM-sized
    res_lists (0.38 vs 0.57 s for a 222 MB batch.csv). Otherwise every entry is read
    (``first_rows``).
    """
    if not carries_matches(requests):
        return _collect(path, first_rows(ps.scan(prep, res)))
    return RidSearch(path, prep, res, None, requests["rid"]).run()


def _unread_columns(res: ps.Resolved) -> list[str]:
    """batch.csv columns no step, KV or busy signal reads (see ``_read_columns``)."""
    unread = ["prefill_batch_size", "total_blocks", "used_blocks"]
    if "total_scheduled_tokens" in res.raw:
        unread += ["prefill_scheduled_tokens", "decode_scheduled_tokens"]
    return unread


def read_batch(path: Path, notes: list[str], requests: pl.DataFrame | None = None) -> BatchRead:
    """batch.csv streamed once, keeping no res_list string or per-row rid list: every row's
    canonical columns (res_list only reduced to prefill/decode counts, and only when
    ``decode_batch_size`` is missing: they stand in for it, see ``_step_rows``), and the
    rid -> first scheduling row reduction for placing ``requests`` (request.csv, read first;
    none: no reduction), see ``_rid_pass``.

    The reduction's matches ride in the row pass when they are few (``carries_matches``:
    the prefills, ``carried_matches``), and are reduced after it; a further read it needs
    (``RidSearch``) is left to ``pending``. Otherwise (every entry read, or a typed read that
    failed) the reduction is a streamed pass of its own before the rows (``first_rows``), whose
    output is small: every row's rid list carried to the end of one query would hold about the
    file's size, and one scan shared by two queries buffers the chunks of the faster one.
    """
    prep, res = _open(path, ps.BATCH, notes)
    placed = requests if "res_list" in res.raw else None  # the requests to place, if any
    carry = placed is not None and carries_matches(placed)
    rids = pl.DataFrame(schema={"rid": pl.Utf8, ps.ROW: pl.UInt32})
    if placed is not None and not carry:
        rids = _rid_pass(path, prep, res, placed)
    unread = [c for c in _unread_columns(res) if c in res.raw]
    try:  # the parser reads the numbers; a cell it cannot read: again as text, located
        typed = _rows(ps.scan(prep, res, typed=True), res, carry)
        # unread columns kept as a null bit each, so the parser still reads (checks) them
        rows = _collect(path, typed.with_columns(pl.col(c).is_null() for c in unread))
        rows = rows.drop(unread)
    except (pl.exceptions.PolarsError, pl.exceptions.PanicException):
        if placed is not None and carry:  # the rids in a pass of their own, then the rows
            rids, carry = _rid_pass(path, prep, res, placed), False
        untyped = _rows(ps.scan(prep, res), res)
        rows = _collect(path, untyped.drop(unread))  # the ``_bad`` marker checked them
    pending = None
    if placed is not None and carry:
        carried, rows = rows.select(ps.ROW, MATCH, QUOTED), rows.drop(MATCH, QUOTED)
        first = first_rows_of(carried)
        del carried
        if (
            first is not None
            and not first.is_empty()
            and missing_keys(placed["rid"], first).is_empty()
        ):
            rids = first  # the usual case: every request placed by the prefills
        else:
            pending = RidSearch(path, prep, res, first, placed["rid"])
    return BatchRead(_table(prep, res, rows, notes), rids, pending)


def _rows(lf: pl.LazyFrame, res: ps.Resolved, carry: bool = False) -> pl.LazyFrame:
    """The row pass of ``read_batch``: every column but res_list, lean (the unread columns are
    left to the caller), with ``carried_matches`` when ``carry``."""
    if "res_list" in res.raw:
        if "decode_batch_size" not in res.raw:
            lf = lf.with_columns(
                prefill_count(pl.col("res_list")).alias("res_prefill"),
                entry_count(pl.col("res_list")).alias("res_n"),
            )
        if carry:
            lf = lf.with_columns(carried_matches())
        lf = lf.drop("res_list")
    none = pe.no_blocks(list(res.raw))  # before the unread block columns are dropped
    if none is not None:
        lf = lf.with_columns(none.alias(pe.NO_BLOCKS))
    # repeated short texts as categoricals: 4 bytes a row instead of a 16-byte view (+ the text)
    texts = [c for c in ("name", "prof_id") if c in res.raw] + [ps.BAD]
    return lf.with_columns(pl.col(c).cast(pl.Categorical) for c in texts)
