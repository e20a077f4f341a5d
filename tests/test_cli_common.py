"""Shared CLI pieces: durations, times, the renderer registry, one-line messages, atomic writes."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from skewscope.atomic import write_text_atomic
from skewscope.cli.common import parse_duration, parse_time
from skewscope.errors import MAX_MESSAGE_CHARS, UsageError, one_line
from skewscope.report.registry import by_name, for_path, names


@pytest.mark.parametrize(
    ("text", "seconds"),
    [("90", 90), ("90s", 90), ("15m", 900), ("2h", 7200), ("1h30m", 5400), ("1d2h", 93600),
     ("500ms", 0.5), ("0.2s", 0.2), ("1m30s", 90), ("1w", 604800)],
)
def test_durations_as_prometheus_users_type_them(text: str, seconds: float) -> None:
    assert parse_duration(text, "--x") == pytest.approx(seconds)


@pytest.mark.parametrize("text", ["nan", "inf", "-inf", "0", "-3s", "1h-30m", "15x", "", "m",
                                  "1e400", "s15"])
def test_bad_durations_are_usage_errors(text: str) -> None:
    with pytest.raises(UsageError, match="--x"):
        parse_duration(text, "--x")


@given(st.text(max_size=12))
def test_parse_duration_is_finite_positive_or_usage_error(text: str) -> None:
    try:
        value = parse_duration(text, "--x")
    except UsageError:
        return
    assert math.isfinite(value) and value > 0


@pytest.mark.parametrize("text", ["nan", "inf", "2025-13-01", "soon"])
def test_bad_times_are_usage_errors(text: str) -> None:
    with pytest.raises(UsageError, match="--start"):
        parse_time(text, "--start")


def test_times_epoch_and_iso() -> None:
    assert parse_time("1745369530", "--start") == 1745369530
    assert parse_time("2025-04-23T00:52:10Z", "--start") == 1745369530
    assert parse_time("2025-04-23T00:52:10", "--start") == 1745369530  # UTC when no offset


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
