"""UnitFrame -> dense (window x unit) arrays, the shape every analysis step works on.

Missing values are NaN so that a signal a source could not provide makes a rule abstain
instead of reading as an idle unit.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np
import numpy.typing as npt

from skewscope.frame import (
    BOUND_LOWER,
    BOUND_UPPER,
    PERCENTILE_SIGNALS,
    SIGNAL_COLUMNS,
    bound_column,
)

if TYPE_CHECKING:
    import polars as pl

Array = npt.NDArray[np.float64]
Flags = npt.NDArray[np.bool_]


@dataclass(frozen=True)
class SignalMatrix:
    windows: Array  # window start, epoch seconds, shape (W,)
    units: tuple[str, ...]
    # peer group of each unit: its instance at DP level, its pool (prefill/decode) or "" at
    # instance level: units of different pools are never each other's peers
    groups: tuple[str, ...]
    instances: tuple[str, ...]  # each unit's instance (the unit itself at instance level)
    dp_ranks: tuple[int | None, ...]  # each unit's DP rank (None at instance level)
    values: dict[str, Array]  # signal -> (W, U); NaN = missing
    window_s: float = float("nan")  # window length: turns per-window totals into rates
    bounds: dict[str, Array] = field(default_factory=dict)  # percentile -> frame.BOUND_*, NaN
    pools: tuple[str, ...] = ()  # each unit's pool ("" none); empty: no unit has one
    # summary.unit_summary's results by (unit, window mask): a fleet's reference summaries
    # repeat for every hot unit and the unit rows ask for them again (values never change;
    # not an init field, so dataclasses.replace starts a new one)
    summaries: dict[tuple[int, str, bytes], dict[str, float]] = field(
        default_factory=dict, init=False, compare=False, repr=False
    )

    def get(self, signal: str) -> Array:
        return self.values[signal]

    def has(self, signal: str) -> bool:
        """True when the source provided this signal for at least one unit and window."""
        return bool(np.isfinite(self.values[signal]).any())


def build_matrix(
    df: pl.DataFrame, *, group_by_instance: bool, window_s: float = float("nan")
) -> SignalMatrix:
    """Pivot a UnitFrame table into (window x unit) arrays, adding derived signals.

    A missing cell stays NaN: sources fill true zeros themselves (the profiler reader knows
    when a unit's files cover a window; online, a missing series means the unit was absent).
    """
    import polars as pl

    windows = np.array(sorted(set(df["window_start_s"].to_list())), dtype=np.float64)
    has_pool = "pool" in df.columns and df["pool"].is_not_null().any()
    cols_id = ("unit", "instance", "dp_rank", *(("pool",) if has_pool else ()))
    ident = df.select(cols_id).unique("unit").sort("unit")
    units = tuple(ident["unit"].to_list())
    instances = tuple(ident["instance"].to_list())
    pools = tuple(p or "" for p in ident["pool"].to_list()) if has_pool else ()
    groups = instances if group_by_instance else pools or tuple("" for _ in units)
    w_index = {w: i for i, w in enumerate(windows.tolist())}
    u_index = {u: j for j, u in enumerate(units)}
    rows = np.array([w_index[w] for w in df["window_start_s"].to_list()], dtype=np.int64)
    cols = np.array([u_index[u] for u in df["unit"].to_list()], dtype=np.int64)
    values: dict[str, Array] = {}
    # one select for every column (a cast per column costs a query each: 1,000s at fleet size)
    table = df.select(pl.col(name).cast(pl.Float64).fill_null(np.nan) for name in SIGNAL_COLUMNS)
    for name, series in zip(SIGNAL_COLUMNS, table.get_columns(), strict=True):
        grid = np.full((len(windows), len(units)), np.nan)
        grid[rows, cols] = series.to_numpy().astype(np.float64)
        values[name] = grid
    values["total_tokens"] = _add(values["prompt_tokens"], values["generation_tokens"])
    bounds: dict[str, Array] = {}
    for name in PERCENTILE_SIGNALS:
        if bound_column(name) in df.columns:
            grid = np.full((len(windows), len(units)), np.nan)
            column = df[bound_column(name)].cast(float).fill_null(np.nan).to_numpy()
            grid[rows, cols] = column.astype(np.float64)
            if np.isfinite(grid).any():
                bounds[name] = grid
    return SignalMatrix(
        windows=windows,
        units=units,
        groups=groups,
        instances=instances,
        dp_ranks=tuple(ident["dp_rank"].to_list()),
        values=values,
        window_s=window_s,
        bounds=bounds,
        pools=pools,
    )


def sub_matrix(m: SignalMatrix, units: list[int], windows: Array) -> SignalMatrix:
    """The part of ``m`` for some of its units (indices, in order) over the given windows:
    what ``build_matrix`` gives for the rows of those units alone, without a pivot each
    (the ``auto`` drill-down builds one matrix for every DP rank and slices it per instance)."""
    rows = np.flatnonzero(np.isin(m.windows, windows))
    at = np.ix_(rows, np.asarray(units, dtype=np.int64))  # once: ~30 grids are cut alike

    def part(grid: Array) -> Array:
        return grid[at]

    bounds = {k: b for k, g in m.bounds.items() if np.isfinite(b := part(g)).any()}
    return SignalMatrix(
        windows=m.windows[rows],
        units=tuple(m.units[j] for j in units),
        groups=tuple(m.groups[j] for j in units),
        instances=tuple(m.instances[j] for j in units),
        dp_ranks=tuple(m.dp_ranks[j] for j in units),
        values={k: part(v) for k, v in m.values.items()},
        window_s=m.window_s,
        bounds=bounds,
        pools=tuple(m.pools[j] for j in units) if m.pools else (),
    )


# How a summary value relates to the truth when some of its windows were bucket bounds.
UPPER, LOWER, MIXED = "upper", "lower", "mixed"


def combine_bounds(flags: Array) -> str:
    """'upper' (at most), 'lower' (at least), 'mixed' (both) or '' from BOUND_* flags: a mean or
    median of values that are each >= their truth is itself >= the truth's, and so on."""
    upper = bool((flags == BOUND_UPPER).any())
    lower = bool((flags == BOUND_LOWER).any())
    return MIXED if upper and lower else UPPER if upper else LOWER if lower else ""


def _add(a: Array, b: Array) -> Array:
    """Sum that stays NaN only where both parts are missing."""
    both_missing = np.isnan(a) & np.isnan(b)
    out = np.nan_to_num(a) + np.nan_to_num(b)
    out[both_missing] = np.nan
    return out


def safe_ratio(num: float, den: float) -> float:
    """num / den with NaN when either is missing or den is not positive."""
    if not (np.isfinite(num) and np.isfinite(den)) or den <= 0:
        return float("nan")
    return float(num / den)


def load_ratio(num: float, den: float) -> float:
    """Like ``safe_ratio``, but a positive value over a reference that did none of it is
    ``inf`` (measured: all of it here), so tables, JSON and severity agree on one number."""
    if np.isfinite(num) and np.isfinite(den) and den == 0 and num > 0:
        return float("inf")
    return safe_ratio(num, den)


def nanmean(x: Array) -> float:
    finite = x[np.isfinite(x)]  # sum / size is what ndarray.mean computes, without its overhead
    return float(finite.sum()) / finite.size if finite.size else float("nan")


def median(x: Array) -> float:
    """``np.median`` of a non-empty 1-D array of finite values, without its per-call overhead
    (thousands of calls at fleet size): the same arithmetic, the middle value or the mean of
    the middle two, summed from 0.0 as numpy's mean sums."""
    s = np.sort(x)
    h = s.size // 2
    if s.size % 2:
        return 0.0 + float(s[h])
    return (0.0 + float(s[h - 1]) + float(s[h])) / 2.0


def nansum(x: Array) -> float:
    finite = x[np.isfinite(x)]
    return float(finite.sum()) if finite.size else float("nan")
