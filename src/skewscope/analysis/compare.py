"""Did the fix converge? Two reports (before and after), signal by signal.

Both sides are read in their JSON form (``report.document.report_document``), so a report
diagnosed now and one saved earlier with ``--format json``, compare the same way. The figures
come from the per-window series the analysis put in each report:

- hot/peer ratio: a focus unit (the before side's hot or starved units; when it had none, the
  after side's) against the median of its peers *in the same window*, floored as step 1 scores
  heat (``Thresholds.impact_floors``, so near-idle signals never read as skew), and its
  median over the windows: one burst does not decide;
- worst ratio: the same for the most unequal unit either way (``max(r, 1/r)``; for queueing
  and latency only the slow side), the figure the verdict uses;
- spread: max / median of the unit means and their coefficient of variation;
- P95 / P99 over every (window, unit) value: the tail the fleet showed.

Verdict per signal: ``converged`` when the worst ratio is below ``hot_ratio``; else ``improved``
/ ``worse`` when its log shrank / grew by ``compare_change``; else ``unchanged``. Overall:
``worse`` when any signal got worse, ``converged`` when all converged and the after side is not
imbalanced, ``improved`` when some signal improved or converged from an uneven before, else
``unchanged``.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import numpy as np

from skewscope.analysis.matrix import Array
from skewscope.analysis.peers import peer_reference
from skewscope.catalogue import SERIES, CompareVerdict, Verdict
from skewscope.config import DEFAULT_THRESHOLDS, Thresholds
from skewscope.report.comparison import (
    Comparison,
    Figures,
    GatewayShare,
    Side,
    SignalComparison,
)
from skewscope.report.facts import Note, NoteCode

NAN = math.nan
# Queueing and latency: a unit that waits less than its peers is not the skew a fix removes,
# so only the slow side counts toward the verdict (load signals count both ways: a starved unit).
SLOW_SIDE_ONLY: frozenset[str] = frozenset({"waiting", "queue_wait_mean_ms", "ttft_p99_ms"})


def compare(
    before: Mapping[str, Any],
    after: Mapping[str, Any],
    labels: tuple[str, str] = ("before", "after"),
    th: Thresholds = DEFAULT_THRESHOLDS,
) -> Comparison:
    notes: list[Note] = []
    focus = _flagged(before) or _flagged(after)  # what was fixed, else what broke
    if before.get("level") != after.get("level"):
        notes.append(
            Note(
                NoteCode.LEVELS_DIFFER, {"before": before.get("level"), "after": after.get("level")}
            )
        )
    signals: list[SignalComparison] = []
    for m in SERIES:
        b, a = _grid(before, m.key), _grid(after, m.key)
        if b is None or a is None:
            continue
        floor = th.impact_floors.get(m.key, 0.0)
        one_sided = m.key in SLOW_SIDE_ONLY
        fb = _figures(*b, focus, floor, one_sided)
        fa = _figures(*a, focus, floor, one_sided)
        signals.append(SignalComparison(m.key, fb, fa, _verdict(fb, fa, th)))
    missing_focus = [u for u in focus if u not in _units(after)]
    if missing_focus:
        notes.append(Note(NoteCode.FOCUS_MISSING, {"units": missing_focus}))
    if not signals:
        notes.append(Note(NoteCode.NOTHING_COMPARED))
    return Comparison(
        verdict=_overall(signals, after, th),
        before=_side(before, labels[0]),
        after=_side(after, labels[1]),
        focus_units=focus,
        signals=tuple(signals),
        notes=tuple(notes),
        gateway=_gateway_shares(before, after, focus),
    )


def _router_shares(doc: Mapping[str, Any]) -> tuple[str | None, dict[str, float]]:
    """(gateway source, engine unit -> the gateway's share of requests) of one report."""
    gw = doc.get("gateway")
    if not isinstance(gw, dict):
        return None, {}
    out: dict[str, float] = {}
    for u in gw.get("units") or []:
        share = u.get("router_share") if isinstance(u, dict) else None
        if isinstance(u, dict) and u.get("unit") and isinstance(share, int | float):
            out[str(u["unit"])] = float(share)
    source = gw.get("source")
    return (str(source) if source else None), out


def _gateway_shares(
    before: Mapping[str, Any], after: Mapping[str, Any], focus: tuple[str, ...]
) -> tuple[GatewayShare, ...]:
    """Each followed unit's share of the gateway's requests before and after (a fix at the
    gateway shows here first); () when neither side read a gateway."""
    (sb, b), (sa, a) = _router_shares(before), _router_shares(after)
    if sb is None and sa is None:
        return ()
    return tuple(GatewayShare(u, b.get(u, NAN), a.get(u, NAN), sb, sa) for u in focus)


def _flagged(doc: Mapping[str, Any]) -> tuple[str, ...]:
    return tuple(doc.get("hot_units", [])) + tuple(doc.get("starved_units", []))


def _units(doc: Mapping[str, Any]) -> list[str]:
    return [u["unit"] for u in doc.get("units", [])]


def _grid(doc: Mapping[str, Any], key: str) -> tuple[list[str], tuple[str, ...], Array] | None:
    """Units with any value of one series signal, their peer groups, and the (window, unit)
    values (NaN = not measured); None when fewer than two units have the signal."""
    series = doc.get("series")
    values = series.get("values") if isinstance(series, dict) else None
    per_unit = values.get(key) if isinstance(values, dict) else None
    group_of = {
        u.get("unit"): u.get("instance") or "" for u in doc.get("units", []) if isinstance(u, dict)
    }
    dp = doc.get("level") == "dp"
    units: list[str] = []
    rows: list[Array] = []
    for unit, row in per_unit.items() if isinstance(per_unit, dict) else ():
        if not isinstance(row, list):
            continue
        # a saved report holds numbers, null (not measured) or "inf"; anything else is skipped
        arr = np.array(
            [v if isinstance(v, int | float) and not isinstance(v, bool) else np.nan for v in row],
            dtype=np.float64,
        )
        if np.isfinite(arr).any() and (not rows or arr.size == rows[0].size):
            units.append(str(unit))
            rows.append(arr)
    if len(units) < 2:
        return None
    groups = tuple(str(group_of.get(u, "")) if dp else "" for u in units)
    return units, groups, np.stack(rows, axis=1)


def _figures(
    units: list[str],
    groups: tuple[str, ...],
    grid: Array,
    focus: tuple[str, ...],
    floor: float,
    one_sided: bool,
) -> Figures:
    typical = _typical_ratios(grid, groups, floor)
    worst = max(
        (
            r if one_sided else max(r, 1.0 / r) if r > 0 else math.inf
            for r in typical
            if not math.isnan(r)
        ),
        default=NAN,
    )
    focus_ratios = [typical[units.index(u)] for u in focus if u in units]
    focus_ratios = [r for r in focus_ratios if not math.isnan(r)]
    hot_peer = (
        max(focus_ratios, key=lambda r: abs(math.log(r)) if 0 < r < math.inf else math.inf)
        if focus_ratios
        else NAN
    )
    with np.errstate(all="ignore"):
        means = np.nanmean(grid, axis=0)
    means = means[np.isfinite(means)]
    median = float(np.median(means))
    everything = grid[np.isfinite(grid)]
    return Figures(
        hot_peer_ratio=hot_peer,
        worst_ratio=worst,
        max_median=float(means.max()) / median if median > 0 else NAN,
        cv=_cv(means),
        p95=float(np.percentile(everything, 95)),
        p99=float(np.percentile(everything, 99)),
    )


def _typical_ratios(grid: Array, groups: tuple[str, ...], floor: float) -> list[float]:
    """Per unit, the median over windows of its ratio to the median of its peers in the same
    window, floored as step 1 scores heat. Not smoothed: the median over windows already keeps
    one burst from deciding, and smoothing would spread each burst over three windows."""
    values = grid
    ref = peer_reference(values, groups)
    denom = np.maximum(ref, floor)
    with np.errstate(all="ignore"):
        above = np.where(
            denom > 0, np.maximum(values / denom, 1.0), np.where(values > 0, np.inf, 1.0)
        )
        below = np.where((ref >= floor) & (ref > 0), values / ref, 1.0)
        ratio = np.where(values >= ref, above, below)
    ratio[~(np.isfinite(values) & np.isfinite(ref))] = np.nan
    out: list[float] = []
    for j in range(grid.shape[1]):
        col = ratio[:, j]
        col = col[~np.isnan(col)]
        out.append(float(np.median(col)) if col.size else NAN)
    return out


def _verdict(b: Figures, a: Figures, th: Thresholds) -> CompareVerdict:
    if math.isfinite(a.worst_ratio) and a.worst_ratio < th.hot_ratio:
        return CompareVerdict.CONVERGED
    lb, la = _log(b.worst_ratio), _log(a.worst_ratio)
    if la == lb:  # also both unbounded (a unit with none of it on both sides)
        return CompareVerdict.UNCHANGED
    if la <= lb * (1.0 - th.compare_change):
        return CompareVerdict.IMPROVED
    if la >= max(lb * (1.0 + th.compare_change), _log(th.hot_ratio)) and la > lb:
        return CompareVerdict.WORSE
    return CompareVerdict.UNCHANGED


def _log(r: float) -> float:
    if math.isnan(r):
        return 0.0
    return math.log(r) if r > 0 and math.isfinite(r) else math.inf


def _overall(
    signals: list[SignalComparison], after: Mapping[str, Any], th: Thresholds
) -> CompareVerdict:
    verdicts = {s.verdict for s in signals}
    if not signals:
        return CompareVerdict.UNCHANGED
    if CompareVerdict.WORSE in verdicts:
        return CompareVerdict.WORSE
    if verdicts == {CompareVerdict.CONVERGED} and after.get("verdict") != Verdict.IMBALANCED:
        return CompareVerdict.CONVERGED
    # a signal that was already even before is no progress
    progressed = [
        s
        for s in signals
        if s.verdict == CompareVerdict.IMPROVED
        or (s.verdict == CompareVerdict.CONVERGED and not s.before.worst_ratio < th.hot_ratio)
    ]
    return CompareVerdict.IMPROVED if progressed else CompareVerdict.UNCHANGED


def _side(doc: Mapping[str, Any], label: str) -> Side:
    def num(key: str) -> float:
        v = doc.get(key)
        return float(v) if isinstance(v, int | float) else NAN

    return Side(
        label=label,
        verdict=str(doc.get("verdict", "")),
        level=str(doc.get("level", "")),
        source=str(doc.get("source", "")),
        window_s=num("window_s"),
        windows=int(doc.get("windows") or 0),
        start_s=num("start_s"),
        end_s=num("end_s"),
        hot_units=tuple(doc.get("hot_units", [])),
        starved_units=tuple(doc.get("starved_units", [])),
        units=tuple(_units(doc)),
    )


def _cv(values: np.ndarray) -> float:
    """Coefficient of variation, computed on values divided by their mean first: squaring tiny
    rates directly underflows and would make the figure depend on the unit of measure."""
    mean = float(values.mean()) if values.size else NAN
    if not mean > 0:
        return NAN
    return float((values / mean).std())
