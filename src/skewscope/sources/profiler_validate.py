"""The trust boundary of the profiler reader: what a CSV must be before it is parsed, and what
a value must be before it is counted.

Every file passes ``check_file`` (a readable regular file, UTF-8 text, not compressed or
UTF-16) and ``read_header`` (a bounded first line) before polars sees it, and every polars
call on it runs inside ``guard``, which turns any parser failure into one SchemaError naming
the file and, where a plain scan can find it, the line. Values the profiler cannot have written
(negative counts, 1e26 tokens, inf) are read as missing, duplicate requests are counted once
and rows whose time lies far outside the rest of the capture are dropped, each with a note
saying how many rows and why. Messages quote file text only through ``quote`` (bounded,
``repr``-escaped), so a 10 MB line or an escape sequence in a header never reaches a terminal.
"""

from __future__ import annotations

import codecs
import csv
import mmap
import re
import stat
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import polars as pl

from skewscope.errors import InputError, SchemaError

SNIFF_BYTES = 1 << 16  # how much of a file is looked at to tell text from binary
HEADER_MAX_BYTES = 1 << 16  # a profiler header is < 1 KB; a first line beyond this is not one
QUOTE_MAX_CHARS = 60  # file text quoted in a message is cut to this many characters
BINARY_SHARE = 0.05  # a sample with more undecodable or control bytes than this is not text
LOCATE_FIELD_BYTES = 1 << 20  # error path: a field longer than this is reported, not read
# A line longer than this is no profiler row (a vLLM res_list row of thousands of requests is
# a few MB): refused before polars sees it, which aborts the process (SIGABRT) on some
# 64 MB cells and reads a 100 MB line without a newline for minutes. Read at call time, so a
# test may lower it.
LINE_MAX_BYTES = 16 << 20

# Magic numbers of what users rename to .csv by mistake, and the fix to print.
_MAGIC: tuple[tuple[bytes, str], ...] = (
    (b"\x1f\x8b", "gzip-compressed (gunzip it first)"),
    (b"PK\x03\x04", "a zip archive (unzip it first)"),
    (b"BZh", "bzip2-compressed (bunzip2 it first)"),
    (b"\xfd7zXZ\x00", "xz-compressed (unxz it first)"),
    (b"\x28\xb5\x2f\xfd", "zstd-compressed (unzstd it first)"),
    (b"SQLite format 3\x00", "a SQLite database (run msserviceprofiler parse on it first)"),
    (codecs.BOM_UTF32_LE, "UTF-32 text (convert it to UTF-8)"),
    (codecs.BOM_UTF32_BE, "UTF-32 text (convert it to UTF-8)"),
    (codecs.BOM_UTF16_LE, "UTF-16 text (convert it to UTF-8, e.g. iconv -f UTF-16 -t UTF-8)"),
    (codecs.BOM_UTF16_BE, "UTF-16 text (convert it to UTF-8, e.g. iconv -f UTF-16 -t UTF-8)"),
)
_KINDS = (
    (stat.S_ISDIR, "a directory"),
    (stat.S_ISFIFO, "a named pipe"),
    (stat.S_ISSOCK, "a socket"),
    (stat.S_ISCHR, "a device"),
    (stat.S_ISBLK, "a device"),
)


def quote(text: object, limit: int = QUOTE_MAX_CHARS) -> str:
    """``repr`` of file text cut to ``limit`` characters: bounded, and control characters
    (ESC, BEL, CR) escaped so they cannot act on a terminal."""
    s = str(text)
    if len(s) <= limit:
        return repr(s)
    return repr(s[:limit]) + f"... ({len(s)} characters)"


# --------------------------------------------------------------------------- before parsing
def _kind(mode: int) -> str | None:
    return next((name for test, name in _KINDS if test(mode)), None)


def check_file(path: Path) -> None:
    """InputError/SchemaError unless ``path`` is a readable regular file holding UTF-8 text."""
    try:
        mode = path.stat().st_mode
    except OSError as e:
        raise InputError(f"{path}: cannot read ({e.strerror or e})") from None
    kind = _kind(mode)
    if kind is not None:
        raise InputError(f"{path}: is {kind}, expected a CSV file")
    try:
        with path.open("rb") as fh:
            head = fh.read(SNIFF_BYTES)
    except OSError as e:
        raise InputError(f"{path}: cannot read ({e.strerror or e})") from None
    for magic, what in _MAGIC:
        if head.startswith(magic):
            raise SchemaError(f"{path}: is {what}, expected a UTF-8 CSV")
    if b"\x00" in head:
        what = "UTF-16 text" if head[1::2].count(b"\x00") * 2 > len(head) // 2 else "binary"
        raise SchemaError(f"{path}: looks like {what} (NUL bytes), expected a UTF-8 CSV")
    if _bad_share(head) > BINARY_SHARE:
        raise SchemaError(
            f"{path}: not UTF-8 text (binary data in its first bytes), expected a UTF-8 CSV"
        )


# undecodable (U+FFFD) or control characters but tab, LF and CR: one C-speed scan of a sample
_NOT_TEXT = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\ufffd]")


def _bad_share(head: bytes) -> float:
    """Share of undecodable or control characters in a sample (tab, CR, LF are text)."""
    if not head:
        return 0.0
    text = head.decode("utf-8", errors="replace")
    return len(_NOT_TEXT.findall(text)) / len(text)


def read_header(path: Path) -> list[str]:
    """The header fields (BOM and CRLF tolerated); SchemaError when line 1 is unbounded."""
    with path.open("rb") as fh:
        line = fh.readline(HEADER_MAX_BYTES + 1)
    if len(line) > HEADER_MAX_BYTES:
        raise SchemaError(
            f"{path}: line 1: longer than {HEADER_MAX_BYTES} bytes, expected a msServiceProfiler "
            "CSV header (column names, under 1 KB)"
        )
    text = line.decode("utf-8-sig", errors="replace").rstrip("\r\n")
    try:
        return next(csv.reader([text], strict=True), [])
    except csv.Error as e:
        raise SchemaError(f"{path}: line 1: not a CSV header ({e})") from None


def check_lines(path: Path, limit: int | None = None) -> None:
    """SchemaError naming the first line longer than ``limit`` (``LINE_MAX_BYTES``) bytes.

    Cheap: the mapped file is searched for a newline in blocks of half the limit, each search
    stopping at its first newline (one page touched per block of a normal file); only a block
    without any is looked at closely. Any line over the limit holds a whole block."""
    limit = LINE_MAX_BYTES if limit is None else limit
    size = path.stat().st_size
    if size <= limit:
        return
    step = max(1, limit // 2)
    with path.open("rb") as fh, mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ) as mm:
        pos = 0
        while pos < size:
            end = min(pos + step, size)
            if mm.find(b"\n", pos, end) >= 0 or end - pos < step:
                pos = end
                continue
            start = mm.rfind(b"\n", 0, pos) + 1
            stop = mm.find(b"\n", end)
            stop = size if stop < 0 else stop
            if stop - start > limit:
                line = _count(mm, start) + 1
                raise SchemaError(
                    f"{path}: line {line}: longer than {limit} bytes ({stop - start} bytes"
                    f"{'' if stop < size else ', no newline to the end of the file'}), expected "
                    "a msServiceProfiler CSV row (a cut or corrupt file?)"
                )
            pos = stop + 1


def _count(mm: mmap.mmap, end: int) -> int:
    """Newlines before offset ``end`` (error path)."""
    return sum(mm[i : min(i + (1 << 24), end)].count(b"\n") for i in range(0, end, 1 << 24))


# --------------------------------------------------------------------------- parser failures
def locate_bad_line(path: Path, n_fields: int) -> str | None:
    """Error path only: the first line a strict CSV scan rejects, as ``line N: what``.

    Polars reports a malformed file with a chunk of it; a plain scan says where it is.
    """
    old = csv.field_size_limit(LOCATE_FIELD_BYTES)
    try:
        with path.open(encoding="utf-8-sig", errors="replace", newline="") as fh:
            reader = csv.reader(fh, strict=True)
            start = 1
            try:
                for row in reader:
                    if reader.line_num > 1 and len(row) > n_fields:
                        return (
                            f"line {start}: {len(row)} fields, the header has {n_fields} "
                            "(a stray comma or quote?)"
                        )
                    start = reader.line_num + 1
            except csv.Error as e:
                return f"line {start}: {_csv_problem(str(e))}"
    finally:
        csv.field_size_limit(old)
    return None


def _csv_problem(message: str) -> str:
    if "field larger than field limit" in message:
        return f"a field longer than {LOCATE_FIELD_BYTES} bytes (an unclosed quote?)"
    if "unexpected end of data" in message:
        return "a quote opened here is never closed"
    return f"malformed CSV ({message}; a stray quote?)"


def _header_width(path: Path) -> int:
    try:
        return len(read_header(path))
    except (SchemaError, OSError):
        return 1 << 30


@contextmanager
def guard(path: Path) -> Iterator[None]:
    """Run polars on ``path``: any failure becomes one SchemaError naming the file and line.

    A polars panic is a BaseException, caught here too: no input may end in a traceback.
    """
    try:
        yield
    except (
        pl.exceptions.PolarsError,
        pl.exceptions.PanicException,
        csv.Error,
        UnicodeError,
        OverflowError,
    ) as err:
        where = locate_bad_line(path, _header_width(path))
        if where is not None:
            raise SchemaError(f"{path}: {where}") from None
        first = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
        raise SchemaError(f"{path}: not a readable CSV ({quote(first, 120)})") from None
    except OSError as e:
        raise InputError(f"{path}: cannot read ({e.strerror or e})") from None


# --------------------------------------------------------------------------- impossible values
COUNT_MAX = 1e9  # tokens, batch sizes, blocks, queue lengths: more is not a real engine
MS_MAX = 30 * 86400 * 1e3  # a latency or step beyond 30 days is not a measurement
RANK_MAX = 65535.0
# canonical column -> (lowest, highest) value the profiler can write; others read as missing
VALID_RANGE: dict[str, tuple[float, float]] = {
    **{
        c: (0.0, COUNT_MAX)
        for c in (
            "prompt_tokens",
            "generation_tokens",
            "batch_size",
            "prefill_batch_size",
            "decode_batch_size",
            "prefill_scheduled_tokens",
            "decode_scheduled_tokens",
            "total_scheduled_tokens",
            "free_blocks",
            "total_blocks",
            "used_blocks",
            "blocks_allocated",
            "blocks_freed",
            "waiting",
            "running",
            "forward_iter",
        )
    },
    **{c: (0.0, MS_MAX) for c in ("e2e_ms", "queue_wait_ms", "ttft_ms", "during_ms")},
    "kvcache_usage_rate": (0.0, 100.0),  # a fraction, or percent (see _usage_fraction)
    "dp_rank": (0.0, RANK_MAX),
}


def drop_impossible(
    df: pl.DataFrame, file: str, raw: dict[str, str], row: str
) -> tuple[pl.DataFrame, list[str]]:
    """Cells outside ``VALID_RANGE`` (and inf) become null, one note per column; ``row`` is the
    0-based data row index column (file line = row + 2)."""
    notes: list[str] = []
    fixes = []
    checked = {
        c: r for c, r in VALID_RANGE.items() if c in df.columns and df[c].dtype == pl.Float64
    }
    bads = {
        c: pl.col(c).is_not_null() & (pl.col(c).is_nan() | ~pl.col(c).is_between(lo, hi))
        for c, (lo, hi) in checked.items()
    }
    # every column's count in one query; the first offending row only where there is one
    counts = df.select(bad.sum().alias(c) for c, bad in bads.items()).row(0) if bads else ()
    for (canon, (lo, hi)), n in zip(checked.items(), counts, strict=True):
        if n == 0:
            continue
        bad, col = bads[canon], pl.col(canon)
        hits = df.select(
            pl.col(row).filter(bad).first().alias("r"), col.filter(bad).first().alias("v")
        )
        line, value = int(hits["r"][0]) + 2, hits["v"][0]
        notes.append(
            f"{file}: {n} row(s) with {raw.get(canon, canon)} outside {lo:g}..{hi:g} "
            f"(first: {value:g} at line {line}) — read as missing"
        )
        fixes.append(pl.when(bad).then(None).otherwise(col).alias(canon))
    return (df.with_columns(fixes) if fixes else df), notes


def drop_duplicate_requests(df: pl.DataFrame) -> tuple[pl.DataFrame, list[str]]:
    """request.csv rows repeating an ``http_rid`` seen on an earlier line: counted once."""
    dup = pl.col("rid").is_not_null() & ~pl.col("rid").is_first_distinct()
    n = int(df.select(dup.sum()).item())
    if n == 0:
        return df, []
    return df.filter(~dup), [
        f"request.csv: {n} row(s) repeat an http_rid of an earlier row — dropped "
        "(each request counted once)"
    ]


def missing_value_notes(
    df: pl.DataFrame, file: str, raw: dict[str, str], columns: tuple[str, ...]
) -> list[str]:
    """A note per column with blank/N/A cells in rows that are otherwise counted."""
    notes = []
    for canon in columns:
        if canon not in df.columns:
            continue
        n = df[canon].null_count()
        if n:
            notes.append(
                f"{file}: {n} of {df.height} row(s) have no {raw.get(canon, canon)} (blank or "
                "N/A) — window totals estimated from the rows that have one"
            )
    return notes
