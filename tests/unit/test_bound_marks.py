"""bound_marks (all values against all bucket bounds at once) against its one-value definition."""

from __future__ import annotations

import math

from hypothesis import given
from hypothesis import strategies as st

from skewscope.frame import BOUND_LOWER, BOUND_UPPER
from skewscope.sources.promql import bound_marks

BOUNDS = st.sets(st.floats(min_value=1e-6, max_value=1e6), min_size=1, max_size=12)


def _one(v: float, les: set[float], scale: float) -> float | None:
    finite = sorted(b for b in les if b == b and b != math.inf)
    raw = v / scale
    if abs(raw - finite[-1]) <= 1e-9 * max(1.0, abs(finite[-1])):
        return BOUND_LOWER
    if any(abs(raw - b) <= 1e-9 * max(1.0, abs(b)) for b in finite[:-1]):
        return BOUND_UPPER
    return None


@given(
    BOUNDS,
    st.lists(st.one_of(st.floats(allow_nan=True), st.integers(0, 11)), max_size=40),
    st.sampled_from([1.0, 1000.0]),
)
def test_marks_match_the_one_value_definition(
    les: set[float], picks: list[float | int], scale: float
) -> None:
    ordered = sorted(les)
    # ints pick a bound (times the scale, as a percentile in ms of a bound in s would be)
    vals = [ordered[p % len(ordered)] * scale if isinstance(p, int) else p for p in picks]
    values = {(float(i), "u", None): v for i, v in enumerate(vals)}
    want = {k: m for k, v in values.items() if (m := _one(v, les | {math.inf}, scale))}
    assert bound_marks(values, les | {math.inf}, scale) == want
