"""What a new user, a fuzzer and real files tripped on (issue 10), one test per class:

1. inputs that are no profiler CSV give one clean, bounded error line (or simply work);
2. blank/N/A cells are missing, not 0; impossible values and duplicate requests are noted;
3. one bad timestamp does not stretch the window grid; the window count is capped;
4. --start/--end/--last zoom into a capture.
"""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import polars as pl
import pytest

from helpers.cli_run import run_cli
from helpers.profiler_fixtures import REQUEST_HEADERS, T0, Req, simple_instance, write_requests
from skewscope.errors import InputError, UsageError
from skewscope.frame import WINDOWS
from skewscope.sources.profiler import load_profiler

HEADER = REQUEST_HEADERS["cann2025"]  # http_rid,start_time(ms),recv,reply,e2e,queue,ttft,cache


def _requests(path: Path, rows: list[list[str]]) -> Path:
    """request.csv with the given cells after http_rid,start_time(ms) (defaults filled)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    lines = [HEADER] + [
        ",".join(r + ["100", "20", "500", "10", "50", "N/A"][len(r) - 2 :]) for r in rows
    ]
    path.write_text("\n".join(lines) + "\n")
    return path


def _ms(t: float) -> str:
    return f"{t * 1000:.0f}"


def assert_one_clean_line(rc: int, err: str, *must: str) -> None:
    assert rc == 3, err
    assert err.endswith("\n") and err.count("\n") == 1, err
    assert err.startswith("skewscope: error: ")
    assert len(err) <= 420 and "\x1b" not in err and "\x07" not in err
    for text in must:
        assert text in err, err


# --------------------------------------------------------------------------- 1. clean errors
def _good(folder: Path) -> Path:
    return write_requests(folder / "request.csv", [Req(f"q{i}", T0 + i) for i in range(40)])


def _gzip(f: Path) -> None:
    f.write_bytes(gzip.compress(f.read_bytes()))


def _utf16(f: Path) -> None:
    f.write_bytes(f.read_text().encode("utf-16"))


def _binary(f: Path) -> None:
    f.write_bytes(bytes(range(256)) * 40)


def _stray_quote(f: Path) -> None:
    lines = f.read_text().splitlines()
    lines[5] = lines[5].replace(",", ',"', 1)
    f.write_text("\n".join(lines) + "\n")


def _huge_header(f: Path) -> None:
    f.write_text("http_rid," + "x" * 10_000_000 + "\n" + f.read_text().split("\n", 1)[1])


def _escape_header(f: Path) -> None:
    text = f.read_text()
    f.write_text("\x1b]0;owned\x07\x1b[31mred," + "y" * 3000 + "\n" + text.split("\n", 1)[1])


def _directory(f: Path) -> None:
    f.unlink()
    f.mkdir()


CASES = {
    "gzip": (_gzip, "gzip-compressed"),
    "utf16": (_utf16, "UTF-16"),
    "binary": (_binary, "expected a UTF-8 CSV"),
    "stray quote": (_stray_quote, "line 6: a quote opened here is never closed"),
    "10 MB header": (_huge_header, "line 1: longer than 65536 bytes"),
    "escape header": (_escape_header, "not a msServiceProfiler request.csv header"),
    "directory": (_directory, "is a directory, expected a CSV file"),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_bad_file_gives_one_clean_bounded_line(tmp_path: Path, case: str) -> None:
    # GIVEN a folder whose request.csv is broken in one way
    mutate, expected = CASES[case]
    f = _good(tmp_path / "a")
    mutate(f)
    # WHEN diagnosed THEN one bounded line without control characters names file and problem
    rc, err = run_cli("diagnose", str(tmp_path / "a"))
    assert_one_clean_line(rc, err, str(f), expected)


def test_unreadable_file_is_an_input_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # GIVEN a request.csv the OS refuses to open (chmod 000 does not stop root, so the refusal
    # is simulated where the reader opens files)
    f = _good(tmp_path / "a")
    real_open = Path.open

    def refuse(self: Path, *args: object, **kwargs: object) -> object:
        if self == f:
            raise PermissionError(13, "Permission denied", str(self))
        return real_open(self, *args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(Path, "open", refuse)
    with pytest.raises(InputError, match=r"request\.csv: cannot read \(Permission denied\)"):
        load_profiler([str(tmp_path / "a")])


def test_crlf_and_a_newer_column_simply_work(tmp_path: Path) -> None:
    # GIVEN the same 40 requests with CRLF line ends, and with a column a newer profiler added
    for name in ("crlf", "newer"):
        f = _good(tmp_path / name)
        if name == "crlf":
            f.write_bytes(f.read_bytes().replace(b"\n", b"\r\n"))
        else:
            lines = f.read_text().splitlines()
            lines = [lines[0] + ",future_col"] + [ln + ",7" for ln in lines[1:]]
            f.write_text("\n".join(lines) + "\n")
    # WHEN loaded THEN both give all requests and tokens, like the plain file
    df = load_profiler([str(tmp_path)], window_s=10).instance.df
    for unit in ("crlf", "newer"):
        mine = df.filter(pl.col("unit") == unit)
        assert mine["requests"].sum() == 40
        assert mine["prompt_tokens"].sum() == 40 * 100
        assert mine["e2e_mean_ms"].drop_nulls().to_list() == [500.0] * mine.height


def test_truncated_file_without_a_complete_row(tmp_path: Path) -> None:
    # GIVEN instance a whose request.csv was cut inside its first row (found by the fuzz suite)
    f = _good(tmp_path / "a")
    f.write_text(f.read_text()[: f.read_text().index("\n") + 12])
    _good(tmp_path / "b")
    # WHEN loaded THEN a's request side is unmeasured (null), b's is read
    ev = load_profiler([str(tmp_path)], window_s=10)
    df = ev.instance.df
    assert df.filter(pl.col("unit") == "a")["requests"].null_count() == df.height // 2
    assert df.filter(pl.col("unit") == "b")["requests"].sum() == 40
    assert any("a: request.csv: last line 2 is truncated" in n for n in ev.notes)


# --------------------------------------------------------------------------- 2. values
def test_blank_and_na_tokens_are_missing_not_zero(tmp_path: Path) -> None:
    # GIVEN 40 requests of 100 prompt tokens, every other one with a blank or N/A token cell
    rows = [[f"q{i}", _ms(T0 + i), ["100", "", "N/A"][i % 2 * (1 + i % 4 // 2)]] for i in range(40)]
    _requests(tmp_path / "a" / "request.csv", rows)
    # AND an instance whose reply tokens are never recorded
    _requests(
        tmp_path / "b" / "request.csv", [[f"p{i}", _ms(T0 + i), "100", "N/A"] for i in range(40)]
    )
    ev = load_profiler([str(tmp_path)], window_s=10)
    df = ev.instance.df
    # THEN a's token totals are estimated from the known cells (100 per request), not lowered
    a = df.filter(pl.col("unit") == "a")
    assert (a["prompt_tokens"] == a["requests"] * 100).all()
    # AND b's output tokens are null in every window (unknown), not 0
    assert df.filter(pl.col("unit") == "b")["generation_tokens"].null_count() == a.height
    assert any("20 of 40 row(s) have no recv_token_size" in n for n in ev.notes)


@pytest.mark.parametrize("bad", ["-5", "1e26", "inf", "-inf"])
def test_impossible_counts_are_read_as_missing_with_a_note(tmp_path: Path, bad: str) -> None:
    # GIVEN 40 requests of 100 prompt tokens, three with an impossible count
    rows = [[f"q{i}", _ms(T0 + i), bad if i in (3, 4, 30) else "100"] for i in range(40)]
    _requests(tmp_path / "a" / "request.csv", rows)
    ev = load_profiler([str(tmp_path / "a")], window_s=10)
    # THEN those cells are missing: every window still reads 100 tokens per request
    df = ev.instance.df
    assert (df["prompt_tokens"] == df["requests"] * 100).all()
    note = next(n for n in ev.notes if "recv_token_size outside" in n)
    assert "3 row(s)" in note and "line 5" in note


def test_duplicate_http_rid_counted_once(tmp_path: Path) -> None:
    rows = [[f"q{i}", _ms(T0 + i)] for i in range(40)] + [["q7", _ms(T0 + 7)], ["q9", _ms(T0)]]
    _requests(tmp_path / "a" / "request.csv", rows)
    ev = load_profiler([str(tmp_path / "a")], window_s=10)
    assert ev.instance.df["requests"].sum() == 40
    assert any("2 row(s) repeat an http_rid" in n for n in ev.notes)


# --------------------------------------------------------------------------- 3. times
@pytest.mark.parametrize("bad_ms", ["0", "1e22", "inf", "-3e15", "4102444800000"])
def test_one_bad_timestamp_does_not_ruin_the_folder(tmp_path: Path, bad_ms: str) -> None:
    # GIVEN a 10-minute capture with one row whose time is absurd
    rows = [[f"q{i}", _ms(T0 + i)] for i in range(600)]
    rows[300][1] = bad_ms
    _requests(tmp_path / "a" / "request.csv", rows)
    # WHEN loaded with a 5 s window (before: billions of windows, a native abort)
    ev = load_profiler([str(tmp_path / "a")], window_s=5)
    df = ev.instance.df
    # THEN the grid covers only the capture and the row is dropped with a note
    assert df.height == (T0 + 599) // 5 - T0 // 5 + 1
    assert df["requests"].sum() == 599
    assert any("1 row(s) with a start time far outside" in n for n in ev.notes)


def test_instance_with_a_wrong_clock_is_a_clean_error(tmp_path: Path) -> None:
    # GIVEN three instances, one whose whole capture is stamped a day late
    for name, shift in (("a", 0), ("b", 0), ("c", 86400)):
        _requests(
            tmp_path / name / "request.csv", [[f"q{i}", _ms(T0 + shift + i)] for i in range(40)]
        )
    # THEN it is named instead of stretching the windows over the day between
    with pytest.raises(InputError, match=r"instance c: its events .* are 24\.0 h from the"):
        load_profiler([str(tmp_path)])


def test_window_count_is_capped_with_a_clean_error(tmp_path: Path) -> None:
    _requests(tmp_path / "a" / "request.csv", [[f"q{i}", _ms(T0 + 60 * i)] for i in range(60)])
    with pytest.raises(UsageError, match=f"more than {WINDOWS.max_windows}: use a larger --window"):
        load_profiler([str(tmp_path / "a")], window_s=0.1)
    with pytest.raises(UsageError, match="inf windows"):  # no int64 overflow on the way
        load_profiler([str(tmp_path / "a")], window_s=1e-320)
    for window in ("100ms", "0.000000001s"):  # the last one overflowed an int64
        rc, err = run_cli("diagnose", str(tmp_path / "a"), "--window", window)
        assert rc == 2 and err.count("\n") == 1 and "more than 11000" in err, err


# --------------------------------------------------------------------------- 4. zoom
def test_start_end_and_last_zoom_into_the_capture(tmp_path: Path) -> None:
    # GIVEN two instances with a request a second for 20 minutes
    simple_instance(tmp_path / "a", 1200, prefix="a")
    simple_instance(tmp_path / "b", 1200, prefix="b")
    t1 = (T0 // 60) * 60 + 300
    # WHEN zoomed to a 2-minute incident
    ev = load_profiler([str(tmp_path)], start=t1, end=t1 + 120, window_s=10)
    df = ev.instance.df
    # THEN only its 12 windows remain, each holding its 10 requests per instance
    assert df["window_start_s"].min() == t1 and df["window_start_s"].max() == t1 + 110
    assert df.filter(pl.col("unit") == "a")["requests"].to_list() == [10.0] * 12
    assert ev.dp is not None and ev.dp.df["requests"].sum() == 240  # DP level zoomed too
    assert any(n.startswith("zoomed to ") for n in ev.notes)
    # AND --last 60s is the capture's last minute (not the wall clock's)
    last = load_profiler([str(tmp_path)], last_s=60, window_s=10).instance.df
    # the capture ends with the last decode step, 0.05 s after the last request (T0 + 1199)
    assert last["requests"].sum() == 2 * 60
    assert last["window_start_s"].max() == ((T0 + 1199) // 10) * 10


def test_zoom_through_the_cli_with_iso_times(tmp_path: Path) -> None:
    simple_instance(tmp_path / "a", 1200, prefix="a")
    simple_instance(tmp_path / "b", 1200, prefix="b")
    out = tmp_path / "r.json"
    rc, err = run_cli(
        "diagnose",
        str(tmp_path),
        "--start",
        "2025-04-23T08:55:00Z",
        "--end",
        "2025-04-23T09:00:00",
        "-o",
        str(out),
        "--format",
        "json",
    )
    assert rc == 0, err
    assert "zoomed to 2025-04-23T08:55:00Z .. 2025-04-23T09:00:00Z" in out.read_text()
    # a range outside the capture, and --last with --start, are one clean line each
    rc, err = run_cli("diagnose", str(tmp_path), "--start", "2030-01-01T00:00:00Z")
    assert_one_clean_line(rc, err, "no profiler event in", "the capture spans")
    rc, err = run_cli("diagnose", str(tmp_path), "--last", "5m", "--start", "0")
    assert rc == 2 and "--last cannot be combined" in err


def test_blank_token_cells_do_not_change_the_verdict(tmp_path: Path) -> None:
    # GIVEN the wrong-weights scenario (inst-1 gets more requests of the same size: count skew)
    from skewscope.sim.engine import simulate
    from skewscope.sim.scenario import builtin_scenarios
    from skewscope.sim.writers.profiler import write_profiler

    result = simulate(builtin_scenarios()["wrong-weights"])
    write_profiler(result, tmp_path)
    truth = result.truth.to_dict()
    # AND the other instances' request.csv with every other token count written as N/A
    for f in tmp_path.glob("inst-*/request.csv"):
        if f.parent.name in truth["hot_units"]:
            continue
        df = pl.read_csv(f, infer_schema=False)
        blank = pl.int_range(pl.len()) % 2 == 1
        df = df.with_columns(
            pl.when(blank).then(pl.lit("N/A")).otherwise(pl.col(c)).alias(c)
            for c in ("recv_token_size", "reply_token_size")
        )
        df.write_csv(f)
    # WHEN diagnosed THEN the finding is still count skew (blank was read as 0 before: the
    # peers' tokens per request halved, and the hot unit looked like a heavy-request unit)
    out = tmp_path / "r.json"
    rc, err = run_cli("diagnose", str(tmp_path), "--format", "json", "-o", str(out))
    assert rc == 0, err
    doc = json.loads(out.read_text())
    assert sorted(doc["hot_units"]) == sorted(truth["hot_units"])
    assert doc["findings"][0]["kind"] == truth["kind"] == "count"
    assert doc["findings"][0]["weight_side"] == truth["weight_side"]
