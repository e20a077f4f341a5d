"""Profiler reader, first stage for a whole folder: one instance's files read
(``profiler_read``) and put on one clock.

Rows of a bad clock are dropped per file (``profiler_range``); an epoch column whose unit was
only guessed from its size is moved to the unit that puts it with the instance's other files,
local datetimes are moved to UTC by the offset learnt from a file holding both (segment by
segment when it changes during the capture: a DST change), and files that still disagree by
more than a capture can last are refused (``profiler_clock``).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace

import polars as pl

from skewscope.errors import InputError
from skewscope.sources import profiler_clock as pc
from skewscope.sources import profiler_range as pr
from skewscope.sources import profiler_schema as ps
from skewscope.sources import profiler_validate as pv
from skewscope.sources.profiler_layout import InstanceFiles
from skewscope.sources.profiler_read import BatchRead, Table, _Empty, read_batch, read_simple


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
    read = _agree_units(read, notes, clocks)
    for file in read:  # one bad clock must not widen the grid
        read[file] = _drop_bad_clocks(file, read[file], clocks, notes)
    read = _align_times(read, notes, clocks.datetime_utc_offset_h * 3600.0)
    _check_agreement(files.name, read, clocks)
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
                if file == "batch.csv":  # after request.csv (PROFILER_FILES' order)
                    requests = out.get("request.csv")
                    req = requests.df if isinstance(requests, Table) else None
                    out[file] = read_batch(path, notes, req)
                else:
                    out[file] = read_simple(path, ps.SCHEMAS[file], notes)
        except _Empty:
            notes.append(f"{file} is empty (0 bytes) — skipped")
    return out


def _table_of(got: Table | BatchRead) -> Table:
    return got.steps if isinstance(got, BatchRead) else got


def _median_start(t: Table) -> float | None:
    m = t.df["start_s"].median() if "start_s" in t.df.columns else None
    return float(m) if isinstance(m, (int, float)) else None


def _agree_units(
    read: dict[str, Table | BatchRead], notes: list[str], clocks: pr.ClockPolicy
) -> dict[str, Table | BatchRead]:
    """A file whose epoch unit only its numbers' size suggests, far from the files whose times
    are known (a unit read off the data, or local datetimes: within a time zone), is read in
    the unit that puts it with them: a clock near 1970 makes 12 days of µs look like ms."""
    tables = {f: _table_of(g) for f, g in read.items()}
    known = [m for t in tables.values() if not t.guessed and (m := _median_start(t)) is not None]
    if not known:
        return read
    anchor = float(pl.Series(known).median())  # type: ignore[arg-type]
    reach = clocks.outlier_floor_s + pc.ZONE_MAX_S
    out = dict(read)
    for file, t in tables.items():
        median = _median_start(t)
        if not t.guessed or median is None or abs(median - anchor) <= reach:
            continue
        unit = ps.unit_of(t.df["start_s"], replace(t.res.times["start_s"], unit=None))
        factor = pc.rescale(median, anchor, reach)
        if factor is None:
            continue  # left to _check_agreement
        moved = replace(t, df=t.df.with_columns(pl.col(c) * factor for c in t.guessed))
        out[file] = _with_table(read[file], moved)
        notes.append(
            f"{file}: {t.res.raw['start_s']} read as {_unit_name(unit * factor)}, not "
            f"{_unit_name(unit)} as the size of its numbers suggests: the instance's other "
            "files place it there (a clock near 1970?)"
        )
    return out


def _unit_name(unit: float) -> str:
    names = {1e-9: "ns", 1e-6: "µs", 1e-3: "ms", 1.0: "s"}
    return next((n for u, n in names.items() if abs(unit / u - 1) < 1e-6), f"{unit:g} s")


def _check_agreement(name: str, read: dict[str, Table | BatchRead], clocks: pr.ClockPolicy) -> None:
    """InputError when an instance's files lie further apart than a capture can last (more
    than the clock floor beyond the longest file's own span): windows would span the gap."""
    spans = {f: s for f, g in read.items() if (s := pr.span([_table_of(g).df])) is not None}
    if len(spans) < 2:
        return
    reach = clocks.outlier_floor_s + max(hi - lo for lo, hi in spans.values())
    lo_file = min(spans, key=lambda f: spans[f][0])
    hi_file = max(spans, key=lambda f: spans[f][1])
    if spans[hi_file][0] - spans[lo_file][1] > reach:
        raise InputError(
            f"instance {name}: its files disagree on the time ({lo_file} around "
            f"{pr.iso(spans[lo_file][0])}, {hi_file} around {pr.iso(spans[hi_file][0])}): a "
            "clock set wrong or near 1970, or files of different captures?"
        )


def _align_times(
    read: dict[str, Table | BatchRead], notes: list[str], default_offset_s: float
) -> dict[str, Table | BatchRead]:
    """Put local-datetime tables on the epoch axis using the instance's time-zone offset.

    The offset is learnt from a file holding both an epoch and a datetime column; failing that,
    guessed from the first timestamps of epoch and datetime files (same run, same start); with
    datetimes only, the zone the exporter writes (``default_offset_s``, UTC+8).
    """
    tables = {f: (g.steps if isinstance(g, BatchRead) else g) for f, g in read.items()}
    local = [t for t in tables.values() if t.local_time and not t.df.is_empty()]
    if not local:
        return read
    learnt = [t.tz_offset_s for t in tables.values() if t.tz_offset_s is not None]
    epoch = [t for t in tables.values() if not t.local_time and not t.df.is_empty()]
    if learnt:
        offset = learnt[0]
    elif epoch and abs(guess := _first_time(local) - _first_time(epoch)) <= pc.ZONE_MAX_S:
        offset = round(guess / pc.ZONE_STEP_S) * pc.ZONE_STEP_S
        notes.append(
            f"datetime columns aligned to epoch columns by a guessed offset of "
            f"{offset / 3600:+.2f} h (no file holds both)"
        )
    else:  # datetimes only, or further from the epoch files than any zone (an error below)
        offset = default_offset_s
        what = "no epoch column" if not epoch else "no zone aligns them with the epoch columns"
        notes.append(
            f"only local datetimes, {what}: read as UTC{offset / 3600:+g} h (the "
            "profiler writes Asia/Shanghai time; [sources] profiler_utc_offset_h sets another)"
        )
    del local, epoch
    segments = next((t.tz_segments for t in tables.values() if t.tz_segments is not None), None)
    if segments is not None:
        notes.append(_segments_note(segments))
    out = dict(read)
    for file, t in tables.items():
        if not (t.local_time and not t.df.is_empty()):
            continue
        cols = [c for c, ts in t.res.times.items() if ts.is_datetime and c in t.df.columns]
        shifted = (
            [pc.to_utc(t.df[c], segments) for c in cols]
            if segments is not None
            else [pl.col(c) - offset for c in cols]
        )
        moved = replace(t, df=t.df.with_columns(shifted), local_time=False)
        out[file] = _with_table(read[file], moved)
    return out


def _segments_note(segments: pl.DataFrame) -> str:
    first, second = segments.row(0, named=True), segments.row(1, named=True)
    at = pr.iso(second["local_s"]).replace("T", " ").rstrip("Z")
    return (
        f"local datetimes change their UTC offset during the capture "
        f"({first['offset_s'] / 3600:+.2f} h to {second['offset_s'] / 3600:+.2f} h at {at} "
        "local: a DST change?): epoch columns kept, datetime-only files placed by the offset "
        "in force at each time"
    )


def _first_time(tables: list[Table]) -> float:
    firsts = [t.df["start_s"].min() for t in tables]
    return min(float(v) for v in firsts if isinstance(v, (int, float)))
