"""Properties of the what-if building blocks (hypothesis)."""

from __future__ import annotations

import numpy as np
import polars as pl
from hypothesis import given
from hypothesis import strategies as st

from skewscope.config import WHATIF
from skewscope.whatif.extract import _equal, _outputs
from skewscope.whatif.replay import requests_in_system

lengths = st.lists(st.tuples(st.integers(1, 5000), st.booleans()), min_size=1, max_size=60)


@given(lengths)
def test_unfinished_outputs_are_never_shortened_and_finished_ones_kept(rows: list[tuple[int, bool]]
                                                                      ) -> None:
    out = [o for o, _ in rows]
    e2e = [1.0 if done else None for _, done in rows]
    req = pl.DataFrame({"output_tokens": out, "e2e_ms": e2e},
                       schema={"output_tokens": pl.Int64, "e2e_ms": pl.Float64})
    got, guessed = _outputs(req, WHATIF)
    assert guessed == (sum(not d for _, d in rows) if any(d for _, d in rows) else 0)
    finished = {o for o, d in rows if d}
    for (o, done), g in zip(rows, got, strict=True):
        assert g >= o
        if done:
            assert g == o
        elif finished and g != o:
            assert g in finished  # drawn from a finished request at least as long


@given(st.lists(st.tuples(st.integers(0, 3), st.floats(0, 100), st.floats(0, 50)),
                min_size=1, max_size=50))
def test_requests_in_system_adds_up_to_the_time_spent(rows: list[tuple[int, float, float]]
                                                     ) -> None:
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
