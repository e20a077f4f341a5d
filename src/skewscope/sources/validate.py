"""Strict readers for the text values both online sources receive from servers.

Python's own ``float``/``int``/``str.isdigit`` accept far more than the Prometheus formats do
(``"1_000"``, Arabic-Indic digits, ``"²"``, which ``isdigit`` calls a digit and ``int`` refuses),
so values from the wire go through these ASCII-only readers instead: a value is either read
exactly as Prometheus would read it, or refused (None) for the caller to drop and count.
"""

from __future__ import annotations

import math
import re

# Go's strconv.ParseFloat forms Prometheus writes: decimal / exponent, Inf, NaN (any case).
NUMBER_PATTERN = r"[+-]?(?:(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:[eE][+-]?[0-9]+)?|inf(?:inity)?|nan)"
_NUMBER = re.compile(NUMBER_PATTERN, re.IGNORECASE)  # case-insensitive (range_body.py too)
# A whole series' values at once (one regex call instead of one per point).
_NUMBERS = re.compile(rf"(?:{_NUMBER.pattern})(?:\n(?:{_NUMBER.pattern}))*", re.IGNORECASE)
_TIME_TYPES, _TEXT = frozenset({int, float}), frozenset({str})  # exact: bool is no time
_RANK = re.compile(r"[0-9]{1,6}")  # a DP rank: a small non-negative ASCII integer


def parse_number(text: object) -> float | None:
    """A sample value or timestamp as Prometheus writes it (string or JSON number), else None."""
    if isinstance(text, bool):
        return None
    if isinstance(text, int | float):
        return float(text)
    if isinstance(text, str) and _NUMBER.fullmatch(text):
        return float(text)
    return None


def parse_points(points: object) -> tuple[tuple[float, ...], list[float]] | None:
    """A range series' ``[[time, "value"], ...]`` read at once as (times, values): finite
    JSON-number times (as given, int or float) and string values ``parse_number`` accepts; None
    when any point is not of that shape (the caller then reads point by point and names the
    bad one). Type checks and conversions run as C loops (``map``), not per point in Python."""
    if not isinstance(points, list) or not points:
        return None
    try:
        times, values = zip(*points, strict=True)
        if not (
            set(map(type, times)) <= _TIME_TYPES
            and all(map(math.isfinite, times))
            and set(map(type, values)) == _TEXT
            and _NUMBERS.fullmatch("\n".join(values))
        ):
            return None
        return times, list(map(float, values))
    except (TypeError, ValueError):  # not pairs, or a value with a newline inside
        return None


def parse_timestamp(value: object) -> float | None:
    """A finite timestamp (seconds), else None."""
    t = parse_number(value)
    return t if t is not None and math.isfinite(t) else None


def parse_rank(raw: object) -> int | None:
    """A DP rank label value (``"0"``, ``"12"``), else None (``"²"``, ``"-1"``, ``"1.0"``)."""
    if isinstance(raw, str) and _RANK.fullmatch(raw):
        return int(raw)
    return None


def parse_bound(raw: object) -> float | None:
    """A histogram bucket's ``le`` bound (``"0.5"``, ``"+Inf"``), else None (``"abc"``, NaN)."""
    le = parse_number(raw) if isinstance(raw, str) else None
    return None if le is None or math.isnan(le) else le
