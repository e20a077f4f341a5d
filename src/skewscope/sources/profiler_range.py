"""Which event times the profiler reader keeps: rows of a bad clock or cell are dropped, and
``--start/--end/--last`` zoom into part of a capture.

A single timestamp decades away would otherwise stretch the window grid over millions of
windows; the bulk of a file is its median time +- a number of median absolute deviations
(``ClockPolicy``), robust to any minority of bad rows.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from datetime import UTC, datetime

import polars as pl

from skewscope.errors import InputError, UsageError
from skewscope.frame import WINDOWS

CLOCK_RANGE_S = (-1e10, 1e10)  # epoch seconds a clock can show (years 1653..2286)


@dataclass(frozen=True)
class ClockPolicy:
    """Which event times the reader believes: a source-side setting, not an analysis threshold.

    A row whose time is further from its file's median time than ``outlier_mads`` median
    absolute deviations (and than ``outlier_floor_s``) is a bad clock or cell, dropped with a
    note; an instance whose capture lies further than the floor (or than the longest capture)
    from the others' is refused.
    """

    outlier_mads: float = 20.0
    outlier_floor_s: float = 6 * 3600.0
    # The exporter formats every datetime in Asia/Shanghai time (UTC+8, no DST), whatever the
    # host's zone (``data_source/db_data_source.py``: ``tz_convert('Asia/Shanghai')``): the
    # offset of a folder whose files hold datetimes only (``[sources]
    # profiler_utc_offset_h``); a file with both an epoch and a datetime column overrides it.
    datetime_utc_offset_h: float = 8.0


CLOCKS = ClockPolicy()


def time_bounds(times: pl.Series, th: ClockPolicy = CLOCKS) -> tuple[float, float]:
    """The range of plausible event times: median +- max(k MADs, floor) of the times a clock
    can show (an empty range when there are none)."""
    t = times.filter(times.is_between(*CLOCK_RANGE_S))
    if t.is_empty():
        return 1.0, 0.0
    median = float(t.median())  # type: ignore[arg-type]
    mad = float((t - median).abs().median())  # type: ignore[arg-type]
    reach = max(th.outlier_mads * mad, th.outlier_floor_s)
    return median - reach, median + reach


def drop_time_outliers(
    df: pl.DataFrame, file: str, bounds: tuple[float, float]
) -> tuple[pl.DataFrame, list[str]]:
    """Rows with no time, or a time outside ``bounds``, are dropped with a note; an end time
    outside them is read as missing."""
    if df.is_empty() or "start_s" not in df.columns:
        return df, []
    start = pl.col("start_s")
    inside = start.is_between(*bounds).fill_null(False)
    counts = df.select(
        (~inside & start.is_null()).sum().alias("none"),
        (~inside & start.is_not_null()).sum().alias("far"),
    )
    none, far = int(counts["none"][0]), int(counts["far"][0])
    notes = []
    if none:
        notes.append(f"{file}: {none} row(s) without a start time — dropped")
    if far:
        notes.append(
            f"{file}: {far} row(s) with a start time far outside the rest of the "
            "capture or no clock time (a bad clock or cell) — dropped"
        )
    out = df.filter(inside) if none or far else df
    if "end_s" in out.columns:
        out = out.with_columns(
            pl.when(pl.col("end_s").is_between(*bounds)).then(pl.col("end_s")).alias("end_s")
        )
    return out, notes


def check_clocks(spans: dict[str, tuple[float, float] | None], th: ClockPolicy = CLOCKS) -> None:
    """InputError when an instance's capture lies far from all the others' (a clock set wrong,
    or captures of different days): windows would span the gap and compare nothing."""
    mids = {name: (s[0] + s[1]) / 2 for name, s in spans.items() if s is not None}
    if len(mids) < 2:
        return
    centre = float(pl.Series(list(mids.values())).median())  # type: ignore[arg-type]
    reach = max(th.outlier_floor_s, max(s[1] - s[0] for s in spans.values() if s))
    far = {n: m for n, m in mids.items() if abs(m - centre) > reach}
    if far:
        name, mid = next(iter(far.items()))
        raise InputError(
            f"instance {name}: its events (around {iso(mid)}) are {abs(mid - centre) / 3600:.1f} "
            f"h from the others' (around {iso(centre)}): a clock set wrong, or a capture of "
            "another time? Diagnose it separately"
        )


def iso(t: float) -> str:
    return datetime.fromtimestamp(t, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def span(frames: list[pl.DataFrame]) -> tuple[float, float] | None:
    """First and last ``start_s`` of the frames; None without a row."""
    times = [f["start_s"].drop_nulls() for f in frames if not f.is_empty()]
    times = [t for t in times if len(t)]
    if not times:
        return None
    lo = min(float(t.min()) for t in times)  # type: ignore[arg-type]
    return lo, max(float(t.max()) for t in times)  # type: ignore[arg-type]


def zoom_range(
    whole: tuple[float, float], start: float | None, end: float | None, last_s: float | None
) -> tuple[float, float]:
    """``[lo, hi)`` to keep: ``--start/--end`` as given, ``--last D`` the capture's last D."""
    if last_s is not None:
        return whole[1] - last_s, math.inf
    lo = -math.inf if start is None else start
    hi = math.inf if end is None else end
    if hi <= lo:
        raise UsageError("--end must be after --start")
    return lo, hi


def zoom_note(whole: tuple[float, float], lo: float, hi: float, kept: bool) -> str:
    """The report note of a zoom; InputError when the range holds no event."""
    shown = f"{iso(max(lo, whole[0]))} .. {iso(min(hi, whole[1]))}"
    capture = f"the capture spans {iso(whole[0])} .. {iso(whole[1])}"
    if not kept:
        raise InputError(f"no profiler event in {shown} ({capture})")
    return f"zoomed to {shown} ({capture})"


def check_window_count(
    n: float, window_s: float, span_s: float, max_windows: int = WINDOWS.max_windows
) -> None:
    """UsageError when the grid would exceed ``max_windows`` (the cap every source shares)."""
    if n > max_windows:
        raise UsageError(
            f"--window {window_s:g}s over a capture of {span_s:.0f}s gives {n:.0f} windows, more "
            f"than {max_windows}: use a larger --window, or zoom in with --start/--end/--last"
        )
