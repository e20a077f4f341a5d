"""Fuzz the offline reader end to end: a real-format profiler folder with one file mutated
(truncated, bytes flipped, a cell replaced by garbage, blank, N/A, huge or negative values,
extra columns, CRLF, other encodings, compression; the exporter's "not recorded" zeros, a DST
jump, an epoch column in another unit, a line over the line limit) must give a report or one
clean error line, never a traceback, a multi-line or unbounded message, or a raw control character.
"""

from __future__ import annotations

import contextlib
import gzip
import io
import os
import shutil
import tempfile
from collections.abc import Callable
from pathlib import Path
from unittest import mock

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from helpers.profiler_fixtures import T0, KvSnap, simple_instance, write_kvcache, write_status
from skewscope.cli import main
from skewscope.sources import profiler_validate as pv

FUZZ_EXAMPLES = int(os.environ.get("SKEWSCOPE_FUZZ_EXAMPLES", "60"))  # more for a campaign
FILES = ("request.csv", "batch.csv", "kvcache.csv", "request_status.csv")
GARBAGE = (
    "",
    "N/A",
    "<NA>",
    "nan",
    "inf",
    "-inf",
    "-5",
    "1e26",
    "-1e308",
    "0",
    "abc",
    '"',
    '""',
    "\x1b]0;x\x07",
    "\x00",
    "2025-13-45 99:99:99:0",
    "9" * 400,
    "x" * 70_000,
    "[{'rid': 'r1'",
    "1,2",
    "\r",
    "\u202e",
    "１２３",
)


@pytest.fixture(scope="module")
def template(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Two instances in every format the reader takes (built once, copied per example)."""
    root = tmp_path_factory.mktemp("fuzz-template")
    for name in ("a", "b"):
        folder = root / name
        simple_instance(folder, 30, ranks=2, prefix=name)
        write_kvcache(folder / "kvcache.csv", [KvSnap(T0 + i, 100 + i) for i in range(30)])
        write_status(
            folder / "request_status.csv", [(T0 + i, 100 + i % 2, i % 5) for i in range(30)]
        )
    return root


Mutation = Callable[[bytes], bytes]


@st.composite
def mutations(draw: st.DrawFn) -> tuple[str, Mutation]:
    kind = draw(
        st.sampled_from(
            [
                "truncate",
                "flip",
                "cell",
                "column",
                "crlf",
                "encode",
                "gzip",
                "lines",
                "unrecorded",
                "dst",
                "unit",
                "long",
            ]
        )
    )
    pos = draw(st.floats(0, 1))
    if kind == "unrecorded":  # the exporter's "not recorded" zeros (issue 26)
        return kind, lambda b: _set_columns(b, pos, UNRECORDED)
    if kind == "dst":  # local datetimes jump an hour from a row on
        hours = draw(st.sampled_from([1.0, -1.0, 0.5]))
        return kind, lambda b: _shift_datetimes(b, pos, hours)
    if kind == "unit":  # an epoch column in another unit (a clock near 1970 looks like this)
        factor = draw(st.sampled_from([1e-3, 1e3, 1e-6]))
        return kind, lambda b: _scale_epochs(b, factor)
    if kind == "long":  # a line over the (lowered) line limit
        return kind, lambda b: _insert_line(b, pos, b"r," + b"9" * (LONG_LINE_LIMIT + 1))
    if kind == "truncate":
        return kind, lambda b: b[: int(len(b) * pos)]
    if kind == "flip":
        byte = draw(st.integers(0, 255))
        n = draw(st.integers(1, 8))
        return kind, lambda b: _flip(b, pos, byte, n)
    if kind == "cell":
        value = draw(st.sampled_from(GARBAGE) | st.text(max_size=12))
        col = draw(st.integers(0, 30))
        return kind, lambda b: _replace_cell(b, pos, col, value)
    if kind == "column":
        name = draw(st.sampled_from(["future_col", "", "http_rid", "start_time", "\x1b[2J"]))
        return kind, lambda b: _add_column(b, name)
    if kind == "crlf":
        return kind, lambda b: b.replace(b"\n", b"\r\n")
    if kind == "encode":
        enc = draw(st.sampled_from(["utf-16", "utf-16-le", "utf-32", "latin-1", "utf-8-sig"]))
        return kind, lambda b: _recode(b, enc)
    if kind == "gzip":
        return kind, gzip.compress
    keep = draw(st.sampled_from(["header only", "no header", "dup lines", "blank lines"]))
    return kind, lambda b: _lines(b, keep)


def _recode(b: bytes, enc: str) -> bytes:
    return b.decode(errors="replace").replace("r1", "r1é").encode(enc, errors="replace")


LONG_LINE_LIMIT = 4096  # pv.LINE_MAX_BYTES while a "long" mutation is drawn
UNRECORDED = {
    "queue_wait_time(ms)": "0.0",
    "first_token_latency(ms)": "0.0",
    "execution_time(ms)": "",
    "name": "Free",
    "total_blocks": "0.0",
    "used_blocks": "0.0",
    "free_blocks": "0.0",
    "blocks_allocated": "0.0",
}
EPOCHS = ("start_time(ms)", "end_time(ms)", "timestamp(ms)")


def _rows_from(b: bytes, pos: float) -> tuple[list[str], list[str], int]:
    lines = b.decode(errors="replace").split("\n")
    return lines, lines[0].split(","), 1 + int((len(lines) - 1) * pos)


def _set_columns(b: bytes, pos: float, values: dict[str, str]) -> bytes:
    """Cells of the named columns set on every row from ``pos`` on (rows without a quoted
    comma: the simple CSVs; batch.csv res_list rows are left alone)."""
    lines, header, first = _rows_from(b, pos)
    idx = {header.index(c): v for c, v in values.items() if c in header}
    for i in range(first, len(lines)):
        cells = lines[i].split(",")
        if len(cells) == len(header):
            lines[i] = ",".join(idx.get(j, c) for j, c in enumerate(cells))
    return "\n".join(lines).encode()


def _shift_datetimes(b: bytes, pos: float, hours: float) -> bytes:
    from datetime import datetime, timedelta

    lines, _, first = _rows_from(b, pos)
    for i in range(first, len(lines)):
        cells = lines[i].split(",")
        for j, cell in enumerate(cells):
            try:
                t = datetime.strptime(cell, "%Y-%m-%d %H:%M:%S:%f")
            except ValueError:
                continue
            cells[j] = (t + timedelta(hours=hours)).strftime("%Y-%m-%d %H:%M:%S:%f")
        lines[i] = ",".join(cells)
    return "\n".join(lines).encode()


def _scale_epochs(b: bytes, factor: float) -> bytes:
    lines, header, _ = _rows_from(b, 0.0)
    cols = [header.index(c) for c in EPOCHS if c in header]
    for i in range(1, len(lines)):
        cells = lines[i].split(",")
        if len(cells) != len(header):
            continue
        for j in cols:
            with contextlib.suppress(ValueError):
                cells[j] = f"{float(cells[j]) * factor:.3f}"
        lines[i] = ",".join(cells)
    return "\n".join(lines).encode()


def _insert_line(b: bytes, pos: float, line: bytes) -> bytes:
    lines = b.split(b"\n")
    i = 1 + int((len(lines) - 1) * pos)
    return b"\n".join([*lines[:i], line, *lines[i:]])


def _flip(b: bytes, pos: float, byte: int, n: int) -> bytes:
    out = bytearray(b)
    start = int(len(out) * pos)
    for i in range(start, min(start + n, len(out))):
        out[i] = byte
    return bytes(out)


def _replace_cell(b: bytes, pos: float, col: int, value: str) -> bytes:
    lines = b.decode(errors="replace").split("\n")
    i = int((len(lines) - 1) * pos)
    cells = lines[i].split(",")
    cells[col % len(cells)] = value
    lines[i] = ",".join(cells)
    return "\n".join(lines).encode()


def _add_column(b: bytes, name: str) -> bytes:
    lines = b.decode(errors="replace").split("\n")
    out = [lines[0] + "," + name] + [ln + ",1" if ln else ln for ln in lines[1:]]
    return "\n".join(out).encode()


def _lines(b: bytes, keep: str) -> bytes:
    lines = b.split(b"\n")
    if keep == "header only":
        return lines[0] + b"\n"
    if keep == "no header":
        return b"\n".join(lines[1:])
    if keep == "dup lines":
        return b"\n".join(lines[:1] + lines[1:] + lines[1:])
    return b"\n".join(x for ln in lines for x in (ln, b""))


def _diagnose(folder: Path) -> tuple[int, str]:
    err = io.StringIO()
    out = folder / "report.json"
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
        rc = main(
            [
                "diagnose",
                str(folder / "a"),
                str(folder / "b"),
                "--format",
                "json",
                "-o",
                str(out),
                "--window",
                "5s",
            ]
        )
    return rc, err.getvalue()


@given(
    st.lists(
        st.tuples(st.sampled_from(FILES), st.sampled_from("ab"), mutations()),
        min_size=1,
        max_size=2,
    )
)
@settings(max_examples=FUZZ_EXAMPLES, suppress_health_check=[HealthCheck.function_scoped_fixture])
def test_mutated_folder_gives_a_report_or_one_clean_line(
    template: Path, edits: list[tuple[str, str, tuple[str, Mutation]]]
) -> None:
    limit = LONG_LINE_LIMIT if any(k == "long" for _, _, (k, _) in edits) else pv.LINE_MAX_BYTES
    with tempfile.TemporaryDirectory() as tmp, mock.patch.object(pv, "LINE_MAX_BYTES", limit):
        folder = Path(tmp) / "run"
        shutil.copytree(template, folder)
        for file, inst, (_, mutate) in edits:
            f = folder / inst / file
            f.write_bytes(mutate(f.read_bytes()))
        rc, err = _diagnose(folder)
        if rc == 0:
            assert err == ""
            assert (folder / "report.json").stat().st_size > 0
        else:
            assert rc in (2, 3), err
            assert err.startswith("skewscope: error: ") and err.count("\n") == 1, err
            assert len(err) <= 420, err
            assert not any(ord(c) < 32 and c != "\n" for c in err), repr(err)


def test_kvcache_cut_before_its_usage_column_is_read_without_usage(
    template: Path, tmp_path: Path
) -> None:
    """Found by the campaign above: kvcache.csv cut inside its header, before
    ``kvcache_usage_rate``, raised polars' ColumnNotFoundError (a traceback). The file has no
    usage then: a report (or one clean line), never a traceback."""
    folder = tmp_path / "run"
    shutil.copytree(template, folder)
    kv = folder / "a" / "kvcache.csv"
    head = kv.read_bytes().split(b"\n", 1)[0]
    cut = head.index(b"kvcache_usage_rate")
    assert cut > 0
    kv.write_bytes(head[:cut].rstrip(b","))
    rc, err = _diagnose(folder)
    assert rc == 0 or (rc == 3 and err.startswith("skewscope: error: ")), err
