"""Wire-value readers: a whole series read at once agrees with reading it point by point."""

from __future__ import annotations

import math

from hypothesis import given, settings
from hypothesis import strategies as st

from skewscope.sources.validate import parse_number, parse_points, parse_timestamp

_VALUE = st.one_of(
    st.floats(allow_nan=True, allow_infinity=True).map(repr),
    st.sampled_from(
        [
            "1",
            "-0.5",
            ".5",
            "5.",
            "1e3",
            "+Inf",
            "-inf",
            "NaN",
            "1_000",
            " 1",
            "1\n2",
            "",
            "0x10",
            "٣",
            "1e",
            "nan\n",
            "Infinity",
        ]
    ),
    st.text(max_size=6),
    st.integers(-5, 5),
    st.none(),
)
_TIME = st.one_of(
    st.integers(0, 2**40),
    st.floats(allow_nan=True, allow_infinity=True),
    st.sampled_from(["1700000000", True, None]),
)
_POINT = st.one_of(st.tuples(_TIME, _VALUE).map(list), st.lists(_VALUE, max_size=3))


def _one_by_one(points: list[object]) -> list[tuple[float, float]] | None:
    out = []
    for p in points:
        if not (isinstance(p, list) and len(p) == 2):
            return None
        t, v = parse_timestamp(p[0]), parse_number(p[1])
        if t is None or v is None:
            return None
        out.append((t, v))
    return out


@settings(max_examples=400, deadline=None)
@given(st.lists(_POINT, min_size=1, max_size=6))
def test_a_series_at_once_reads_as_point_by_point(points: list[object]) -> None:
    fast = parse_points(points)
    if fast is None:
        return  # the caller falls back to point by point, which names the bad point
    slow = _one_by_one(points)
    assert slow is not None and len(slow) == len(fast[0]) == len(fast[1])
    for t1, v1, (t2, v2) in zip(*fast, slow, strict=True):
        assert t1 == t2 and (v1 == v2 or (math.isnan(v1) and math.isnan(v2)))


def test_typical_series_take_the_fast_path_and_bad_ones_do_not() -> None:
    assert parse_points([[1.5, "2"], [3, "NaN"]]) is not None
    for bad in ([[1, "1_000"]], [[1, "1\n2"]], [[True, "1"]], [[1, 2.0]], [[1, "1", 2]], []):
        assert parse_points(bad) is None
