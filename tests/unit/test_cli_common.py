"""Shared CLI pieces: durations, times, the renderer registry, one-line messages, atomic writes."""

from __future__ import annotations

import datetime as dt
import math
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from skewscope.atomic import write_text_atomic
from skewscope.cli.common import MAX_DURATION_S, parse_duration, parse_time
from skewscope.errors import MAX_MESSAGE_CHARS, UsageError, one_line
from skewscope.report.registry import by_name, for_path, names


@pytest.mark.parametrize(
    ("text", "seconds"),
    [
        ("90s", 90),
        ("15m", 900),
        ("2h", 7200),
        ("1h30m", 5400),
        ("1d2h", 93600),
        ("500ms", 0.5),
        ("0.2s", 0.2),
        ("1m30s", 90),
        ("1w", 604800),
        ("100y", 3153600000),
    ],
)
def test_durations_as_prometheus_users_type_them(text: str, seconds: float) -> None:
    assert parse_duration(text, "--x") == pytest.approx(seconds)


@pytest.mark.parametrize(
    "text",
    [
        "nan",
        "inf",
        "-inf",
        "0",
        "-3s",
        "1h-30m",
        "15x",
        "",
        "m",
        "1e400",
        "s15",
        "101y",
        "1e12s",
        "0s",
    ],
)
def test_bad_durations_are_usage_errors(text: str) -> None:
    with pytest.raises(UsageError, match="--x"):
        parse_duration(text, "--x")


@pytest.mark.parametrize("text", ["10", "0.5", "90"])
def test_a_bare_number_needs_a_unit(text: str) -> None:
    """`--last 10` was silently 10 s; now the message names the option and offers the units."""
    with pytest.raises(UsageError, match=rf"^--last: '{text}' needs a unit, e.g. {text}s, "):
        parse_duration(text, "--last")


@given(st.text(max_size=12))
def test_parse_duration_is_finite_positive_or_usage_error(text: str) -> None:
    try:
        value = parse_duration(text, "--x")
    except UsageError:
        return
    assert math.isfinite(value) and 0 < value <= MAX_DURATION_S


UNITS = {"ms": 0.001, "s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800, "y": 31536000}


@given(
    st.lists(
        st.tuples(st.integers(0, 10**6), st.sampled_from(sorted(UNITS))), min_size=1, max_size=4
    )
)
def test_parse_duration_sums_its_parts(parts: list[tuple[int, str]]) -> None:
    """Every well-formed duration is the sum of its parts, or refused as zero / over 100y."""
    text = "".join(f"{n}{u}" for n, u in parts)
    want = sum(n * UNITS[u] for n, u in parts)
    if 0 < want <= MAX_DURATION_S:
        assert parse_duration(text, "--x") == pytest.approx(want)
    else:
        with pytest.raises(UsageError, match=r"^--x: "):
            parse_duration(text, "--x")


@pytest.mark.parametrize(
    "text",
    [
        "nan",
        "inf",
        "2025-13-01",
        "soon",
        "10000-01-01",
        "1e15",
        "-1e15",
        "253402300800",
        "9999-12-31T23:30:00-05:00",
        "1e308",
    ],
)
def test_bad_times_are_usage_errors(text: str) -> None:
    with pytest.raises(UsageError, match=r"^--start: expected "):
        parse_time(text, "--start")


def test_times_epoch_and_iso() -> None:
    assert parse_time("1745369530", "--start") == 1745369530
    assert parse_time("2025-04-23T00:52:10Z", "--start") == 1745369530
    assert parse_time("2025-04-23T00:52:10", "--start") == 1745369530  # UTC when no offset
    assert parse_time("0", "--start") == 0 and parse_time("-5", "--start") == -5  # near 1970


@given(
    st.datetimes(
        timezones=st.sampled_from(
            [
                dt.UTC,
                dt.timezone(dt.timedelta(hours=-5)),
                dt.timezone(dt.timedelta(hours=5, minutes=30)),
            ]
        )
    )
)
def test_parse_time_reads_every_iso_time_as_its_utc_instant(when: dt.datetime) -> None:
    """An ISO time with an offset is its UTC instant; one a report cannot show (past 9999 once
    in UTC) is a usage error, never a traceback."""
    try:
        want = when.timestamp()
        dt.datetime.fromtimestamp(want, dt.UTC)
    except (OverflowError, ValueError):
        with pytest.raises(UsageError, match=r"^--end: "):
            parse_time(when.isoformat(), "--end")
        return
    assert parse_time(when.isoformat(), "--end") == pytest.approx(want, abs=1e-6)
    assert parse_time(repr(want), "--end") == want


@given(st.one_of(st.floats(allow_nan=True, allow_infinity=True), st.integers(-(10**20), 10**20)))
def test_parse_time_of_any_number_is_a_showable_time_or_usage_error(value: float) -> None:
    """Epoch numbers of any size: a time the report's formatting takes, or one usage line."""
    try:
        got = parse_time(str(value), "--start")
    except UsageError:
        return
    dt.datetime.fromtimestamp(got, dt.UTC)  # never "year out of range"


@given(st.text(max_size=30))
def test_parse_time_of_any_text_is_a_time_or_usage_error(text: str) -> None:
    try:
        got = parse_time(text, "--start")
    except UsageError:
        return
    dt.datetime.fromtimestamp(got, dt.UTC)


def test_renderers_are_picked_by_extension() -> None:
    assert for_path("r.md").name == "markdown"  # type: ignore[union-attr]
    assert for_path("R.JSON").name == "json"  # type: ignore[union-attr]
    assert for_path("r.txt").name == "terminal"  # type: ignore[union-attr]
    assert for_path("r.unknown") is None
    assert set(names()) >= {"terminal", "markdown", "json"}
    with pytest.raises(KeyError):
        by_name("pdf")


@given(st.text())
def test_one_line_is_one_printable_bounded_line(text: str) -> None:
    line = one_line(text)
    assert "\n" not in line and "\r" not in line
    assert all(ch.isprintable() for ch in line)
    assert len(line) <= MAX_MESSAGE_CHARS


def test_one_line_neutralises_terminal_escapes() -> None:
    line = one_line("bad header \x1b]0;pwned\x07 in\nrequest.csv")
    assert "\x1b" not in line and "\x07" not in line
    assert "request.csv" in line and "\\x1b" in line


def test_atomic_write_replaces_whole_or_leaves_old(tmp_path: Path) -> None:
    target = tmp_path / "report.json"
    target.write_text("old")
    write_text_atomic(target, "new")
    assert target.read_text() == "new"

    with pytest.raises(TypeError):
        write_text_atomic(target, 42)  # type: ignore[arg-type]  # fails mid-write
    assert target.read_text() == "new"
    assert [p.name for p in tmp_path.iterdir()] == ["report.json"]  # no temp file left


@pytest.mark.parametrize(
    "zoom",
    [
        ["--start", "1e15"],
        ["--end", "10000-01-01"],
        ["--start", "253402300800"],
        ["--last", "10"],
        ["--last", "101y"],
    ],
)
def test_a_zoom_past_any_showable_time_is_one_usage_line(
    zoom: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    """Was `ValueError: year ... is out of range` from the report's time formatting."""
    from skewscope.cli import main

    example = str(Path(__file__).resolve().parents[2] / "examples" / "cluster-skew")
    assert main(["diagnose", example, *zoom]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"skewscope: error: {zoom[0]}: ") and err.count("\n") == 1
