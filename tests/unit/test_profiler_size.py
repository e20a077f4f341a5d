"""Size bounds before polars sees a file (issue 26): a line longer than
``profiler_validate.LINE_MAX_BYTES`` is one located error line (file, line, limit), exit 3, found
by a cheap scan; polars otherwise aborts the process on some 64 MB cells and reads a 100 MB line
without a newline for minutes."""

from __future__ import annotations

import contextlib
import io
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from helpers.profiler_fixtures import REQUEST_HEADERS, simple_instance
from skewscope.cli import main
from skewscope.errors import SchemaError
from skewscope.sources import profiler_validate as pv
from skewscope.sources.profiler import load_profiler


def _cli(*args: str) -> tuple[int, str]:
    err = io.StringIO()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
        rc = main(["diagnose", *args, "--format", "json", "-o", "/dev/null"])
    return rc, err.getvalue()


def test_a_line_over_the_default_limit_is_one_located_line(tmp_path: Path) -> None:
    # GIVEN a batch.csv whose 4th line holds a res_list just over the default 16 MiB
    simple_instance(tmp_path / "i", 5, ranks=1)
    path = tmp_path / "i" / "batch.csv"
    lines = path.read_bytes().split(b"\n")
    lines[3] = lines[3].replace(b"[{", b"[{'pad': '" + b"y" * pv.LINE_MAX_BYTES + b"', ", 1)
    path.write_bytes(b"\n".join(lines))
    rc, err = _cli(str(tmp_path / "i"))
    assert rc == 3
    assert err.count("\n") == 1 and len(err) < 300, err
    assert f"batch.csv: line 4: longer than {pv.LINE_MAX_BYTES} bytes" in err


@pytest.mark.parametrize("newline", [True, False])
def test_a_long_last_line_with_or_without_newline(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, newline: bool
) -> None:
    monkeypatch.setattr(pv, "LINE_MAX_BYTES", 4096)
    simple_instance(tmp_path / "i", 5, ranks=1)
    path = tmp_path / "i" / "request.csv"
    tail = "r9,1745398333000," + "9" * 10_000 + ("\n" if newline else "")
    path.write_text(path.read_text() + tail)
    with pytest.raises(
        SchemaError,
        match=r"request.csv: line 7: longer than 4096 bytes"
        r" \(10017 bytes" + ("" if newline else ", no newline"),
    ):
        load_profiler([str(tmp_path / "i")])


def test_rows_under_the_limit_read_as_before(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(pv, "LINE_MAX_BYTES", 4096)
    simple_instance(tmp_path / "i", 300, ranks=2)  # a file far larger than the limit
    ev = load_profiler([str(tmp_path / "i")], window_s=60)
    assert ev.instance.df["requests"].sum() == 300


@given(st.lists(st.integers(0, 300), min_size=1, max_size=40), st.integers(8, 200), st.booleans())
@settings(max_examples=200, deadline=None)
def test_check_lines_refuses_exactly_the_files_with_a_line_over_the_limit(
    lengths: list[int], limit: int, final_newline: bool
) -> None:
    import tempfile

    body = b"\n".join(b"x" * n for n in lengths) + (b"\n" if final_newline else b"")
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "f.csv"
        path.write_bytes(body)
        longest = max(range(len(lengths)), key=lambda i: (lengths[i] > limit, -i))
        if lengths[longest] > limit:
            with pytest.raises(
                SchemaError,
                match=f"line {longest + 1}: longer than {limit} bytes \\({lengths[longest]} bytes",
            ):
                pv.check_lines(path, limit)
        else:
            pv.check_lines(path, limit)


def test_header_generations_are_unaffected() -> None:
    assert all(len(h) < pv.LINE_MAX_BYTES for h in REQUEST_HEADERS.values())
