"""Profiler reader, before parsing: a cheap look at a file (``prepare``): that it is a bounded
UTF-8 CSV (``profiler_validate``), its header as polars reads it, and how many rows to read
(a last line the profiler stopped writing mid-way is dropped, with a note)."""

from __future__ import annotations

import csv
import mmap
import os
from dataclasses import dataclass
from pathlib import Path

import polars as pl

from skewscope.sources import profiler_validate as pv


@dataclass(frozen=True)
class Prepared:
    """What a cheap look at a file found: header, how many rows to read, what was dropped."""

    path: Path
    header: list[str]
    n_rows: int | None  # None = read to the end
    notes: tuple[str, ...] = ()
    truncated: bool = False  # the writer stopped mid-line: data after the last row is missing


def _tail_line(path: Path, size: int) -> bytes:
    """The last line of a file (after its last newline): bounded by ``pv.check_lines``."""
    with path.open("rb") as fh, mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ) as mm:
        return mm[mm.rfind(b"\n", 0, size) + 1 : size]


def _count_newlines(path: Path) -> int:
    with path.open("rb") as fh:
        return sum(chunk.count(b"\n") for chunk in iter(lambda: fh.read(1 << 24), b""))


def _is_truncated(last: bytes, n_fields: int) -> bool:
    """A last line without newline is a stopped write when a quote is open or fields are short."""
    text = last.decode("utf-8", errors="replace")
    if text.count('"') % 2:
        return True
    try:
        return len(next(csv.reader([text]), [])) < n_fields
    except csv.Error:  # e.g. a field over the csv module's limit: a write cut in a res_list
        return True


def prepare(path: Path) -> Prepared | None:
    """Header and readable row count of ``path``; None when the file is empty (0 bytes).

    Raises InputError/SchemaError for what is no UTF-8 CSV (see ``profiler_validate``).
    """
    pv.check_file(path)
    size = os.path.getsize(path)
    if size == 0:
        return None
    pv.read_header(path)  # bounded and valid CSV, before polars reads it
    pv.check_lines(path)  # every line bounded too
    # the names as polars reads them (a malformed or repeated name is renamed there): the
    # columns resolved from them are then the columns every scan finds
    header = pl.read_csv(
        path, n_rows=0, infer_schema=False, encoding="utf8-lossy", glob=False
    ).columns
    with path.open("rb") as fh:
        fh.seek(size - 1)
        ends_with_newline = fh.read(1) == b"\n"
    if ends_with_newline:
        return Prepared(path, header, None)
    last = _tail_line(path, size)
    lines = _count_newlines(path)
    if lines == 0:  # only a header, without newline
        return Prepared(path, header, 0)
    if not _is_truncated(last, len(header)):
        return Prepared(path, header, None)
    note = f"{path.name}: last line {lines + 1} is truncated (profiler stopped mid-write) — dropped"
    return Prepared(path, header, lines - 1, (note,), truncated=True)
