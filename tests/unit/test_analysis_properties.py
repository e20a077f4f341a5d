"""Property tests for the statistics under the diagnosis."""

from __future__ import annotations

import math

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from skewscope.analysis.classify import decompose
from skewscope.analysis.detect import longest_run, smooth
from skewscope.analysis.impact import trend_slope
from skewscope.analysis.matrix import median
from skewscope.analysis.peers import peer_reference
from skewscope.config import DEFAULT_THRESHOLDS

pos = st.floats(min_value=0.1, max_value=1e5, allow_nan=False)


@given(pos, pos, pos, pos)
def test_decomposition_is_exact_when_there_is_excess(
    n_h: float, w_h: float, n_r: float, w_r: float
) -> None:
    count, weight = decompose(n_h, w_h, n_r, w_r)
    excess = n_h * w_h - n_r * w_r
    if excess <= 0:
        assert math.isnan(count) and math.isnan(weight)
        return
    assert count + weight == 1.0 or math.isclose(count + weight, 1.0)
    assert math.isclose(count * excess, (n_h - n_r) * w_r, rel_tol=1e-6, abs_tol=1e-6 * excess)


matrices = st.integers(min_value=2, max_value=6).flatmap(
    lambda u: st.lists(
        st.lists(st.floats(0, 1e4, allow_nan=False), min_size=u, max_size=u),
        min_size=1,
        max_size=12,
    )
)


@given(matrices)
def test_peer_reference_leaves_the_unit_out(rows: list[list[float]]) -> None:
    values = np.array(rows, dtype=np.float64)
    ref = peer_reference(values, tuple("g" for _ in range(values.shape[1])))
    for j in range(values.shape[1]):
        others = np.delete(values, j, axis=1)
        assert np.allclose(ref[:, j], np.median(others, axis=1))


def _peer_reference_per_unit(
    values: np.ndarray, groups: tuple[str, ...], against: dict[str, list[int]] | None
) -> np.ndarray:
    """The plain definition: one nanmedian over each unit's peers (fleet-slow, clearly right)."""
    ref = np.full(values.shape, np.nan)
    group_arr = np.array(groups)
    for j in range(values.shape[1]):
        peers = (group_arr == groups[j]) & (np.arange(values.shape[1]) != j)
        if against and groups[j] in against:
            peers &= np.isin(np.arange(values.shape[1]), against[groups[j]])
        block = values[:, np.flatnonzero(peers)]
        with np.errstate(all="ignore"):
            for w in range(values.shape[0]):
                if np.isfinite(block[w]).any():
                    ref[w, j] = np.nanmedian(block[w])
    return ref


_CELL = st.one_of(
    st.floats(-1e6, 1e6), st.sampled_from([math.nan, math.inf, -math.inf, 0.0, 1.0, 2.0])
)


@settings(max_examples=300, deadline=None)
@given(st.data())
def test_peer_reference_is_the_per_unit_median(data: st.DataObject) -> None:
    """The sorted, vectorised leave-one-out median equals one nanmedian per unit, with NaN,
    infinities, ties, several groups and fixed reference units."""
    w, u = data.draw(st.integers(1, 5)), data.draw(st.integers(1, 7))
    values = np.array(data.draw(st.lists(_CELL, min_size=w * u, max_size=w * u))).reshape(w, u)
    groups = tuple(data.draw(st.lists(st.sampled_from("ab"), min_size=u, max_size=u)))
    against = None
    if data.draw(st.booleans()):
        against = {
            data.draw(st.sampled_from("ab")): data.draw(
                st.lists(st.integers(0, u - 1), max_size=u, unique=True)
            )
        }
    np.testing.assert_array_equal(
        peer_reference(values, groups, against), _peer_reference_per_unit(values, groups, against)
    )


@given(matrices, st.randoms(use_true_random=False))
def test_peer_reference_follows_a_permutation_of_units(rows: list[list[float]], rnd) -> None:  # type: ignore[no-untyped-def]
    values = np.array(rows, dtype=np.float64)
    perm = list(range(values.shape[1]))
    rnd.shuffle(perm)
    groups = tuple("g" for _ in perm)
    assert np.allclose(
        peer_reference(values, groups)[:, perm], peer_reference(values[:, perm], groups)
    )


@given(st.floats(0, 1e6, allow_nan=False), st.integers(1, 30), st.integers(1, 7))
def test_smoothing_keeps_a_constant_series(c: float, n: int, width: int) -> None:
    values = np.full((n, 2), c)
    assert np.allclose(smooth(values, width), c)


def _smooth_per_window(values: np.ndarray, width: int) -> np.ndarray:
    """The definition, one window at a time: the mean of the finite values of the centred
    stretch of ``width`` windows; NaN where the value itself is missing."""
    half, (n, u) = width // 2, values.shape
    out = np.full(values.shape, np.nan)
    for t in range(n):
        for j in range(u):
            around = values[max(0, t - half) : t + width - half, j]
            finite = around[np.isfinite(around)]
            if np.isfinite(values[t, j]) and finite.size:
                out[t, j] = finite.mean()
    return out


@given(
    st.lists(
        st.lists(
            st.one_of(st.floats(-1e6, 1e6), st.just(math.nan), st.just(math.inf)),
            min_size=3,
            max_size=3,
        ),
        min_size=1,
        max_size=20,
    ),
    st.integers(2, 12),
)  # width 1 is no smoothing: the values as they are
def test_smoothing_is_the_mean_of_the_finite_neighbours(
    rows: list[list[float]], width: int
) -> None:
    # widths under 8 add shifted slices, 8 and more sum a sliding view: both the definition
    values = np.array(rows, dtype=np.float64)
    np.testing.assert_allclose(
        smooth(values, width), _smooth_per_window(values, width), rtol=1e-12, atol=1e-9
    )


@given(st.lists(st.booleans(), max_size=40))
def test_longest_run_matches_a_plain_count(flags: list[bool]) -> None:
    text = "".join("1" if f else "0" for f in flags)
    expected = max((len(run) for run in text.split("0")), default=0)
    assert longest_run(np.array(flags, dtype=bool)) == expected


@settings(max_examples=50)
@given(
    st.floats(-100, 100, allow_nan=False), st.floats(-1e3, 1e3, allow_nan=False), st.integers(3, 50)
)
def test_trend_slope_recovers_a_line(slope: float, intercept: float, n: int) -> None:
    y = intercept + slope * np.arange(n, dtype=np.float64)
    fitted = trend_slope(y, DEFAULT_THRESHOLDS.trend_min_points)
    assert math.isclose(fitted, slope, rel_tol=1e-6, abs_tol=1e-6)


@settings(max_examples=300, deadline=None)
@given(
    st.lists(
        st.one_of(
            st.floats(allow_nan=False, allow_infinity=False), st.sampled_from([0.0, -0.0, 1.0, 2.0])
        ),
        min_size=1,
        max_size=12,
    )
)
def test_median_is_numpys(values: list[float]) -> None:
    """The analysis' median of finite values is np.median's, bit for bit (sign of zero too)."""
    x = np.array(values)
    with np.errstate(over="ignore"):
        want = float(np.median(x))
    got = median(x)
    assert got == want or (math.isnan(got) and math.isnan(want))
    assert math.copysign(1.0, got) == math.copysign(1.0, want)
