"""Chance is no hot spot (``chance.beyond_chance``): the excess is judged in sigmas of the
difference of two counts, the reference as noisy as the median it is."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from helpers.frame_builder import Spec, make_frame
from skewscope.analysis.chance import length_spread, median_noise
from skewscope.analysis.diagnose import diagnose_frame
from skewscope.analysis.matrix import SignalMatrix
from skewscope.frame import Level

WINDOW = 60.0  # the day's watch window
NIGHT = 8.0  # requests per rank and window: a near-idle night


@settings(max_examples=25, deadline=None)
@given(n=st.integers(1, 40), lam=st.floats(5.0, 500.0), seed=st.integers(0, 2**32 - 1))
def test_median_noise_is_the_variance_of_a_median_of_poisson_draws(
    n: int, lam: float, seed: int
) -> None:
    draws = np.random.default_rng(seed).poisson(lam, (20_000, n))
    var = float(np.median(draws, axis=1).var()) / lam
    assert 0.9 * var <= median_noise(n, lam) <= 1.45 * var


@settings(max_examples=25, deadline=None)
@given(sigma=st.floats(0.05, 0.8), rate=st.floats(5.0, 60.0), seed=st.integers(0, 2**32 - 1))
def test_length_spread_reads_the_length_mix_from_window_sums(
    sigma: float, rate: float, seed: int
) -> None:
    # lognormal lengths: cv^2 = exp(sigma^2) - 1; two units of different mean lengths. The
    # estimate is unbiased for heavier tails too, but its spread grows with their fourth moment
    # (sigma 1: 0.84-1.76x the truth over 60 seeds of 400 windows), so the test stops at 0.8.
    rng = np.random.default_rng(seed)
    windows, units = 800, 2
    n = rng.poisson(rate, (windows, units)).astype(np.float64)
    tok = np.zeros_like(n)
    for w in range(windows):
        for u in range(units):
            tok[w, u] = rng.lognormal(np.log(300.0 * (u + 1)), sigma, int(n[w, u])).sum()
    m = SignalMatrix(
        windows=np.arange(windows, dtype=np.float64),
        units=("a", "b"),
        groups=("g", "g"),
        instances=("a", "b"),
        dp_ranks=(None, None),
        values={"requests": n, "total_tokens": tok},
    )
    want = float(np.expm1(sigma**2))
    assert abs(length_spread(m, [0, 1]) - want) <= 0.3 * want + 0.02


def test_two_equal_ranks_on_a_quiet_night_are_never_a_hot_spot() -> None:
    # judged against the sibling's count alone, one seed of these 40 draws a "hot" rank
    hot = [
        seed
        for seed in range(40)
        if diagnose_frame(
            make_frame(
                {"i/dp0": Spec(rate=NIGHT), "i/dp1": Spec(rate=NIGHT)},
                windows=14,
                window_s=WINDOW,
                level=Level.DP,
                seed=seed,
            )
        ).hot_units
    ]
    assert hot == []


def test_a_real_skew_on_a_quiet_night_is_still_found() -> None:
    for seed in range(10):
        specs = {"i/dp0": Spec(rate=NIGHT * 1.7), "i/dp1": Spec(rate=NIGHT)}
        report = diagnose_frame(
            make_frame(specs, windows=14, window_s=WINDOW, level=Level.DP, seed=seed)
        )
        assert report.hot_units == ("i/dp0",), seed
