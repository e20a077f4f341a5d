"""The profiler's clocks: the unit of an epoch column and the UTC offset of local datetimes.

An epoch column's label lies (batch.csv ``start_time(ms)`` holds µs), so its unit is read off
the data, most trusted first: a datetime column of the same instant beside it (the two differ
by a time zone, at most ``ZONE_MAX_S``), else the file's own durations (``during_time(ms)``
against end - start), else the number's size (``epoch_scale``), which fails for a clock near
1970 (12 days in µs look like ms). A file whose unit was only guessed from its size is moved to
the unit that puts it with the instance's other files (``rescale``). The offset of local
datetimes can change during a capture (a DST change on a host that writes its own zone), so it
is learnt as segments of local time (``offset_segments``).
"""

from __future__ import annotations

import polars as pl

UNITS: tuple[float, ...] = (1e-9, 1e-6, 1e-3, 1.0)  # ns, µs, ms, s -> seconds
EPOCH_SCALE: tuple[tuple[float, float], ...] = ((1e17, 1e-9), (1e14, 1e-6), (1e11, 1e-3))
ZONE_MAX_S = 15 * 3600.0  # |local - UTC| of any zone (UTC-12 .. UTC+14), with room
ZONE_STEP_S = 900.0  # zones are whole quarter hours


def epoch_scale(median: float) -> float:
    """Factor to seconds of an epoch column from its magnitude: ns, µs, ms or s.

    ``start_time(ms)`` in batch.csv holds µs in current profiler versions despite its label.
    """
    for bound, factor in EPOCH_SCALE:
        if abs(median) >= bound:
            return factor
    return 1.0


def datetime_to_us(raw: pl.Expr) -> pl.Expr:
    """Datetime text (colon or dot before the fraction, or none) -> µs since epoch, naive = UTC.

    The profiler prints ``%Y-%m-%d %H:%M:%S:%f``, which no standard parser accepts: the colon is
    rewritten to a dot first. Unparsable text gives null.
    """
    text = (
        raw.str.strip_chars()
        .str.replace(r"^(\d{4}-\d{2}-\d{2})[ T](\d{2}:\d{2}:\d{2})[:.](\d{1,9})$", "${1} ${2}.${3}")
        .str.replace(r"^(\d{4}-\d{2}-\d{2})T", "${1} ")
    )
    parsed = text.str.to_datetime("%Y-%m-%d %H:%M:%S%.f", strict=False, time_unit="us")
    return parsed.dt.epoch("us")


def _median(s: pl.Series) -> float | None:
    m = s.drop_nulls().drop_nans().median() if s.dtype.is_float() else s.drop_nulls().median()
    return float(m) if isinstance(m, (int, float)) else None


def unit_from_pair(epoch: pl.Series, local_s: pl.Series) -> float | None:
    """The unit that makes ``epoch`` differ from local datetimes of the same instants by a time
    zone (within ``ZONE_MAX_S``, nearest a whole quarter hour); None when none does."""
    best: tuple[float, float] | None = None
    for unit in UNITS:
        diff = _median(local_s - epoch * unit)
        if diff is None:
            return None
        if abs(diff) <= ZONE_MAX_S:
            off = abs(diff - round(diff / ZONE_STEP_S) * ZONE_STEP_S)
            if best is None or off < best[0]:
                best = (off, unit)
    return None if best is None else best[1]


def unit_from_durations(start: pl.Series, end: pl.Series, during_ms: pl.Series) -> float | None:
    """The unit of ``start``/``end`` whose difference is the rows' ``during_time(ms)`` (within a
    factor 3); None without such rows or when no unit fits."""
    span = end - start
    ok = (span > 0) & (during_ms > 0)
    ratio = _median((during_ms / 1000.0 / span).filter(ok.fill_null(False)))
    if ratio is None:
        return None
    return next((u for u in UNITS if u / 3 <= ratio <= u * 3), None)


def rescale(median_s: float, anchor_s: float, reach_s: float) -> float | None:
    """The factor (a power of 1000 but 1) moving a column whose median is ``median_s`` seconds
    to within ``reach_s`` of ``anchor_s``; None when none does."""
    fits = [(abs(median_s * f - anchor_s), f) for f in (1e-9, 1e-6, 1e-3, 1e3, 1e6, 1e9)]
    best = min(fits)
    return best[1] if best[0] <= reach_s else None


def offset_segments(epoch_s: pl.Series, local_s: pl.Series) -> pl.DataFrame | None:
    """Where the local datetimes' UTC offset changes (a DST change): rows ``local_s`` (the local
    time a segment starts) and ``offset_s``, in local-time order; None when it never changes."""
    pairs = pl.DataFrame({"local_s": local_s, "e": epoch_s}).drop_nulls().sort("local_s")
    offset = ((pl.col("local_s") - pl.col("e")) / ZONE_STEP_S).round(0) * ZONE_STEP_S
    pairs = pairs.with_columns(offset.alias("offset_s")).filter(
        pl.col("offset_s").abs() <= ZONE_MAX_S
    )
    if pairs["offset_s"].n_unique() < 2:
        return None
    change = pl.col("offset_s") != pl.col("offset_s").shift(1)
    return pairs.filter(change.fill_null(True)).select("local_s", "offset_s")


def to_utc(local_s: pl.Series, segments: pl.DataFrame) -> pl.Series:
    """Local times moved to UTC by the offset of the segment each falls in (the first one's
    before it). An hour repeated when the clock went back takes the later offset."""
    idx = segments["local_s"].search_sorted(local_s.fill_null(0.0), side="right") - 1
    offsets = segments["offset_s"].gather(idx.clip(0, segments.height - 1))
    return (local_s - offsets).alias(local_s.name)
