"""The reference a unit is judged against: the median of its peers, leaving the unit out."""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

from skewscope.analysis.matrix import Array


def peer_reference(
    values: Array, groups: tuple[str, ...], against: dict[str, list[int]] | None = None
) -> Array:
    """Leave-one-out median of each unit's peers, per window (NaN when it has no peer).

    ``against`` replaces the peers of a group by fixed reference units (the under-loaded
    minority when most of a group runs hot and the leave-one-out median would be hot too).
    Each group's values are sorted once per window and every unit's median is read from them
    with its own value left out, so a fleet of U units costs O(W U log U), not U medians.
    The result is ``np.nanmedian`` of the peers' non-NaN values (NaN when none is finite).
    """
    ref = np.full(values.shape, np.nan)
    group_arr = np.array(groups)
    if not against:
        return _peer_reference_by_size(values, group_arr, ref)
    for g in dict.fromkeys(groups):
        members = group_arr == g
        chosen = members.copy()
        if against and g in against:
            fixed = np.zeros(values.shape[1], dtype=bool)
            fixed[against[g]] = True
            chosen &= fixed
        cols = np.flatnonzero(chosen)
        if cols.size == 0:
            continue
        block = values[:, cols].astype(np.float64)
        lone = np.flatnonzero(members & ~chosen)  # not a reference: all of them are its peers
        if lone.size:
            ref[:, lone] = _median_without(block, leave_one_out=False)[:, None]
        ref[:, cols] = _median_without(block, leave_one_out=True)
    return ref


def _peer_reference_by_size(values: Array, group_arr: npt.NDArray[np.str_], ref: Array) -> Array:
    """``peer_reference`` without ``against``: the groups of one size k are stacked into one
    (W * groups, k) block, so 256 DP groups of 4 ranks are one ``_median_without`` call instead
    of 256; every row is computed as it would be alone (the same values, bit for bit)."""
    names, inverse = np.unique(group_arr, return_inverse=True)
    members = [np.flatnonzero(inverse == g) for g in range(names.size)]
    by_size: dict[int, list[npt.NDArray[np.intp]]] = {}
    for cols in members:
        by_size.setdefault(cols.size, []).append(cols)
    w = values.shape[0]
    for k, groups in by_size.items():
        at = np.stack(groups)  # (G, k) column indices
        block = values[:, at].astype(np.float64).reshape(w * at.shape[0], k)
        ref[:, at] = _median_without(block, leave_one_out=True).reshape(w, at.shape[0], k)
    return ref


def _median_without(block: Array, *, leave_one_out: bool) -> Array:
    """Per row of ``block`` (W, k): the median of its non-NaN values, leaving out column p for
    output column p (W, k) when ``leave_one_out``, else one median per row (W,); NaN when no
    finite value remains. (Plain fancy indexing, not take/put_along_axis: at 256 DP drills
    this runs thousands of times on small blocks, where numpy's call overhead dominates.)"""
    w, k = block.shape
    rows = np.arange(w)[:, None]
    nan = np.isnan(block)
    order = np.argsort(block, axis=1, kind="stable")  # NaN sort last
    srt = block[rows, order]
    n = k - nan.sum(axis=1, keepdims=True)
    finite = np.isfinite(block)
    if not leave_one_out:
        m, q = n, np.full((w, 1), k)
        left = finite.sum(axis=1, keepdims=True)
    else:
        rank = np.empty_like(order)
        rank[rows, order] = np.arange(k)
        m = np.where(nan, n, n - 1)
        q = np.where(nan, k, rank)  # sorted position removed (k: none)
        left = finite.sum(axis=1, keepdims=True) - finite
    lo, hi = (m - 1) // 2, m // 2
    lo, hi = lo + (lo >= q), hi + (hi >= q)  # skip the removed position
    v_lo = srt[rows, np.minimum(np.maximum(lo, 0), k - 1)]
    v_hi = srt[rows, np.minimum(np.maximum(hi, 0), k - 1)]
    with np.errstate(all="ignore"):
        med = np.where(m % 2 == 1, v_lo, (v_lo + v_hi) / 2)
    med = np.where((m > 0) & (left > 0), med, np.nan)
    return med if leave_one_out else med[:, 0]
