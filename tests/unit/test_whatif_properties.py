"""Properties of the what-if building blocks (hypothesis)."""

from __future__ import annotations

import math

import numpy as np
import polars as pl
from hypothesis import given
from hypothesis import strategies as st

from skewscope.config import WHATIF
from skewscope.sources.online_workload import histogram_quantile, through_buckets
from skewscope.sources.workload import RequestLog
from skewscope.whatif.extract import _equal, _outputs
from skewscope.whatif.lengths import draw_lengths
from skewscope.whatif.replay import requests_in_system

lengths = st.lists(
    st.tuples(st.integers(1, 5000), st.booleans(), st.integers(0, 1)), min_size=1, max_size=60
)


@given(lengths)
def test_unfinished_outputs_are_never_shortened_and_finished_ones_kept(
    rows: list[tuple[int, bool, int]],
) -> None:
    out = [o for o, _, _ in rows]
    e2e = [1.0 if done else None for _, done, _ in rows]
    req = pl.DataFrame(
        {
            "output_tokens": out,
            "e2e_ms": e2e,
            "arrival_s": [float(k) for k in range(len(rows))],
            "ttft_ms": [None] * len(rows),
        },
        schema={
            "output_tokens": pl.Int64,
            "e2e_ms": pl.Float64,
            "arrival_s": pl.Float64,
            "ttft_ms": pl.Float64,
        },
    )
    unit = np.array([u for _, _, u in rows])
    steps = pl.DataFrame(schema={"instance": pl.String, "dp_rank": pl.Int64, "exec_ms": pl.Float64})
    log = RequestLog(req, steps, {"a": (0,), "b": (0,)}, 0.0, float(len(rows)))
    got, guessed = _outputs(req, unit, np.zeros_like(unit), log, ("a", "b"), WHATIF)
    assert guessed == (sum(not d for _, d, _ in rows) if any(d for _, d, _ in rows) else 0)
    for (o, done, _u), g in zip(rows, got, strict=True):
        assert g >= o
        if done:
            assert g == o
        elif g != o:  # never started (no first token): a finished request at least as long
            assert g in {x for x, d, _ in rows if d and x >= o}


@given(
    st.lists(
        st.tuples(st.integers(0, 3), st.floats(0, 100), st.floats(0, 50)), min_size=1, max_size=50
    )
)
def test_requests_in_system_adds_up_to_the_time_spent(rows: list[tuple[int, float, float]]) -> None:
    rank = np.array([r for r, _, _ in rows])
    arrival = np.array([a for _, a, _ in rows])
    leave = arrival + np.array([s for _, _, s in rows])
    load = requests_in_system(rank, arrival, leave, 4, 100.0)
    expected = np.clip(np.minimum(leave, 100.0) - arrival, 0, None).sum() / 100.0
    assert load.shape == (4,) and np.all(load >= 0)
    assert abs(load.sum() - expected) < 1e-9


@given(st.integers(2, 8), st.integers(50, 5000))
def test_exactly_equal_counts_are_equal_and_a_doubled_unit_is_not(k: int, per: int) -> None:
    counts = np.full(k, float(per))
    assert _equal(counts, WHATIF)
    counts[0] *= 2
    assert not _equal(counts, WHATIF)


BOUNDS = (1.0, 2.0, 5.0, 10.0, 20.0, 50.0, 100.0, 200.0, 500.0, 1000.0, 2000.0, 5000.0, math.inf)


@given(
    st.lists(st.integers(0, 40), min_size=len(BOUNDS), max_size=len(BOUNDS)),
    st.integers(0, 2**32 - 1),
)
def test_lengths_drawn_from_a_histogram_keep_its_bucket_shares(
    counts: list[int], seed: int
) -> None:
    """Without a mean to match, every draw lands in a bucket the histogram holds, and each
    bucket gets its share (a multinomial draw: within 5 sd)."""
    buckets = dict(zip(BOUNDS, map(float, counts), strict=True))
    n = 2000
    got = draw_lengths(np.random.default_rng(seed), n, buckets, None)
    assert got.shape == (n,) and got.min() >= 1
    if sum(counts) == 0:
        return
    back = through_buckets(got.tolist(), BOUNDS)
    total = sum(counts)
    for le, c in buckets.items():
        p = c / total
        assert abs(back[le] - n * p) <= 5 * math.sqrt(n * p * (1 - p)) + 1, (le, back[le], n * p)


@given(st.lists(st.floats(0.0, 1e5), min_size=1, max_size=300), st.floats(0.01, 0.99))
def test_quantile_through_buckets_lies_in_the_quantiles_bucket(
    values: list[float], q: float
) -> None:
    """Reading values through buckets gives a quantile inside the bucket the exact quantile
    falls in (what histogram_quantile promises, and why the calibration compares like with
    like)."""
    bounds = (10.0, 100.0, 1000.0, 10000.0, math.inf)
    got = histogram_quantile(q, through_buckets(values, bounds))
    assert got is not None
    exact = float(np.quantile(np.array(values), q, method="inverted_cdf"))
    les = [0.0, *bounds[:-1], bounds[-2]]
    k = int(np.searchsorted(np.array(bounds), exact, side="left"))
    lo, hi = les[k], (bounds[k] if math.isfinite(bounds[k]) else bounds[-2])
    assert lo - 1e-9 <= got <= hi + 1e-9, (exact, got, lo, hi)
