"""Is a hot unit's heavier load more than luck? A permutation test on per-window token loads.

Heavy-tailed prompts behind a round-robin balancer put a few huge requests on some unit by
chance, and its tokens per request look 1.3x its peers'. Under "no weight skew" the units'
window cells are exchangeable within a window: the test reassigns, window by window, the
(tokens, requests) cells of the hot unit and its reference peers at random and counts how often
the hot unit's pooled tokens per request over the peers' reaches the observed ratio. Per-window
aggregates are all the analysis sees (online sources have nothing finer), and a cell keeps its
own request count, so a window with one monster prompt moves as a whole. Seeded: the same
input gives the same p-value.
"""

from __future__ import annotations

import math

import numpy as np

from skewscope.analysis.matrix import Array, Flags, SignalMatrix
from skewscope.config import Thresholds


def _max_ratio(tok: Array, req: Array) -> Array:
    """(P, W, K) cells -> per permutation, the largest of each column's pooled tokens per
    request over the other columns' (the hot unit was picked for being the heaviest, so chance
    is judged by the heaviest of K units, not by one fixed unit)."""
    col_t, col_n = tok.sum(-2), req.sum(-2)  # (P, K)
    all_t, all_n = col_t.sum(-1, keepdims=True), col_n.sum(-1, keepdims=True)
    with np.errstate(all="ignore"):
        ratio = (col_t / col_n) / ((all_t - col_t) / (all_n - col_n))
    out: Array = np.nanmax(np.where(np.isfinite(ratio), ratio, -np.inf), axis=-1)
    return out


def weight_p_value(
    m: SignalMatrix, j: int, ref_cols: list[int], mask: Flags, signal: str, th: Thresholds
) -> float:
    """One-sided p-value that unit ``j``'s ``signal`` per request exceeds its peers' by chance.

    NaN when the windows hold too little to test (fewer than ``min_windows`` complete windows).
    """
    cols = [j, *ref_cols]
    tok = m.get(signal)[mask][:, cols]
    req = m.get("requests")[mask][:, cols]
    ok = (np.isfinite(tok) & np.isfinite(req)).all(axis=1) & (req.sum(axis=1) > 0)
    tok, req = tok[ok], req[ok]
    if tok.shape[0] < th.min_windows or not ref_cols:
        return math.nan
    hot_t, hot_n = tok[:, 0].sum(), req[:, 0].sum()
    ref_t, ref_n = tok[:, 1:].sum(), req[:, 1:].sum()
    if min(hot_n, ref_n, ref_t) <= 0:
        return math.nan
    observed = float((hot_t / hot_n) / (ref_t / ref_n))
    rng = np.random.default_rng(th.permutation_seed)
    n_perm, (w, k) = th.permutations, tok.shape
    rows = np.arange(w)[None, :, None]
    reached = 0
    # in slices of permutations (the same draws, in the same order, as one batch): memory
    # stays ~PERMUTATION_CELLS cells whatever the fleet (999 x 13 windows x 10,000 units
    # would be 130 M cells, 1 GB a copy)
    step = max(1, PERMUTATION_CELLS // max(1, w * k))
    for first in range(0, n_perm, step):
        order = np.argsort(rng.random((min(step, n_perm - first), w, k)), axis=-1)
        perm = _max_ratio(tok[rows, order], req[rows, order])
        reached += int(np.count_nonzero(perm >= observed * (1.0 - 1e-12)))
    return (1.0 + reached) / (1.0 + n_perm)


PERMUTATION_CELLS = 1 << 22  # cells of one slice of the permutation test (~32 MB a copy)
