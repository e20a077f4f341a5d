"""Which ``query_range`` calls the Prometheus source sends, and how their answers become the
per-level value tables.

Every signal used to be fetched twice, once grouped by instance and once by (instance, DP
rank), and every percentile's bucket selection (the costly part of a query) ran at both
levels plus a bucket-bound probe. Where the instance level follows exactly from the rank level,
it is worked out here from the rank-level answer instead (``Job.derive``):

* sums (counter increases, summed gauges) and maxima / minima: the instance's value is the sum
  (max, min) of its ranks' groups, as Prometheus' ``sum by`` / ``max by`` / ``min by`` would
  give it (max and min skip NaN as Prometheus does);
* histogram means: the ranks' ``_sum`` and ``_count`` increases are fetched apart, so both
  levels divide a sum by a count (the same division the ``a / b`` query made);
* percentiles: the per-rank bucket increases are fetched once (``sum by (instance, rank, le)``),
  both levels' ``histogram_quantile`` are computed from them (``prom_quantile``, Prometheus'
  arithmetic), and the bucket bounds marking answers that are only a bound come from the same
  answer (no probe).
* histogram counts: where a histogram's buckets are fetched, its mean's ``_count`` increase is
  its ``le="+Inf"`` bucket's (the exposition format makes the two the same counter, and both go
  through the same increase expression), so the ``_count`` query is kept only as a spare
  (``Job.spare``), sent when the +Inf bucket does not give a count for every group the ``_sum``
  answer has (no buckets at all, as a summary has, or a bucket set without +Inf).

Gauges averaged across series (KV usage) keep their instance query: a mean of the ranks' means
is not the mean of the series. ``shared=False`` plans the former per-level queries (kept for
the equality test, and for a source without a DP level nothing changes).
"""

from __future__ import annotations

import functools
import math
from collections import defaultdict
from collections.abc import Callable, Iterable, Mapping
from concurrent.futures import Future
from dataclasses import dataclass
from typing import Any

import numpy as np

from skewscope.catalogue import MetricType
from skewscope.errors import SourceError
from skewscope.frame import Level, bound_column
from skewscope.sources.auth import quoted
from skewscope.sources.dialects import (
    ROLES,
    SIGNAL_SPECS,
    Alias,
    SignalSpec,
    combine,
    unit_of,
)
from skewscope.sources.evidence import Key, Values
from skewscope.sources.prom_matrix import checked_points, matrix_to_values
from skewscope.sources.prom_quantile import histogram_quantile
from skewscope.sources.promql import bound_marks, build_query, group_labels, part_query
from skewscope.sources.range_body import RangeSeries
from skewscope.sources.validate import parse_bound

# how a job's answer is read: one value per group, or a histogram's parts at rank level
VALUE, BUCKETS, SUM, COUNT = "value", "bucket", "sum", "count"


@dataclass(frozen=True)
class Job:
    """One range query: its answer grouped at ``level``; ``derive``: the instance level of
    ``signal`` is worked out from this rank-level answer too; ``counts``: a bucket answer's +Inf
    bucket also gives this mean signal's ``_count``; ``spare``: sent only when it does not."""

    level: Level
    signal: str
    alias: Alias
    query: str
    part: str = VALUE
    derive: bool = False
    counts: str = ""
    spare: bool = False


def _derivable(spec: SignalSpec, alias: Alias) -> bool:
    """Whether the instance level of ``spec`` follows exactly from its rank-level answer."""
    kind = ROLES[spec.role].kind
    if alias.rank_in_unit:  # the same query at both levels: read its answer twice
        return kind is not MetricType.HISTOGRAM
    if kind is MetricType.COUNTER:
        return True
    if kind is MetricType.GAUGE:
        return spec.across in ("sum", "max", "min")
    return True  # histogram: buckets, or sum and count


def plan_jobs(
    resolved: Mapping[Level, Mapping[str, Alias]],
    levels: list[Level],
    *,
    window_s: float,
    selector: str,
    shared: bool = True,
) -> list[Job]:
    """The queries for every signal at every level (instance level first, in signal order)."""
    dp = resolved.get(Level.DP, {}) if Level.DP in levels else {}
    derived: set[str] = set()
    if shared:
        derived = {
            s.signal
            for s in SIGNAL_SPECS
            if s.signal in dp
            and resolved[Level.INSTANCE].get(s.signal) == dp[s.signal]
            and group_labels(Level.DP, dp[s.signal]) is not None
            and _derivable(s, dp[s.signal])
        }
    # the mean signal whose _count each derived percentile's buckets also give (same alias)
    counted = {
        p.signal: m.signal
        for p in SIGNAL_SPECS
        for m in SIGNAL_SPECS
        if p.over_time == "quantile"
        and m.over_time == "mean"
        and p.role == m.role
        and {p.signal, m.signal} <= derived
        and dp[p.signal] == dp[m.signal]
    }
    jobs: list[Job] = []
    for level in levels:
        for spec in SIGNAL_SPECS:
            alias = resolved[level].get(spec.signal)
            if alias is None or (level is Level.INSTANCE and spec.signal in derived):
                continue
            if level is Level.DP and spec.signal in derived:
                jobs += _shared_jobs(
                    spec,
                    alias,
                    selector,
                    window_s,
                    counts=counted.get(spec.signal, ""),
                    spare=spec.signal in counted.values(),
                )
                continue
            q = build_query(spec, alias, level=level, window_s=window_s, selector=selector)
            if q is not None:
                jobs.append(Job(level, spec.signal, alias, q))
    return jobs


def _shared_jobs(
    spec: SignalSpec,
    alias: Alias,
    selector: str,
    window_s: float,
    *,
    counts: str = "",
    spare: bool = False,
) -> list[Job]:
    """A derived signal's rank-level queries: its value, its buckets (``counts``: the mean
    signal they count too), or its sum and count (``spare``: a count the buckets give)."""
    parts = [VALUE]
    if ROLES[spec.role].kind is MetricType.HISTOGRAM:
        parts = [BUCKETS] if spec.over_time == "quantile" else [SUM, COUNT]
    jobs = []
    for part in parts:
        q = (
            build_query(spec, alias, level=Level.DP, window_s=window_s, selector=selector)
            if part == VALUE
            else part_query(alias, part, level=Level.DP, window_s=window_s, selector=selector)
        )
        assert q is not None  # group_labels(DP) was checked
        jobs.append(
            Job(
                Level.DP,
                spec.signal,
                alias,
                q,
                part,
                derive=True,
                counts=counts if part == BUCKETS else "",
                spare=spare and part == COUNT,
            )
        )
    return jobs


# --- reading the answers ----------------------------------------------------------------------

Row = tuple[dict[str, str], tuple[float, ...], list[float]]  # labels, times, values


def series_rows(result: list[Any], alias: Alias, where: str) -> list[Row]:
    """(labels, evaluation times, values) of each series of a range answer; a series or point
    of the wrong shape is the SourceError ``prometheus.matrix_to_values`` raises for it."""
    rows: list[Row] = []
    unit_label = alias.unit_label or "instance"
    for i, series in enumerate(result):
        if isinstance(series, RangeSeries):
            rows.append((series.labels, series.times, series.values))
            continue
        labels = series.get("metric") if isinstance(series, dict) else None
        points = series.get("values") if isinstance(series, dict) else None
        if not isinstance(labels, dict) or not isinstance(points, list):
            raise SourceError(f"{where} returned series {i} without metric labels and values")
        if not isinstance(labels.get(unit_label, ""), str):
            raise SourceError(f"{where} returned series {i} with a non-text {unit_label} label")
        times, values = checked_points(
            points, f"{where} returned series {i} ({labels.get(unit_label, '')})"
        )
        rows.append((labels, times, values))
    return rows


def _reduce(how: str) -> Callable[..., Any]:
    """Prometheus' aggregation of several groups' values: sum propagates NaN, max and min skip
    it (NaN only when every value is)."""
    return {"sum": np.add.reduce, "max": np.fmax.reduce, "min": np.fmin.reduce}[how]


def fold_instances(
    rows: Iterable[Row], alias: Alias, how: str, window_s: float, bad: list[str]
) -> dict[Key, float]:
    """The instance level from rank-level groups: each instance's groups combined by ``how``,
    window by window (a group without a point at a time adds nothing there)."""
    per: dict[str, list[tuple[tuple[float, ...], list[float]]]] = defaultdict(list)
    unlabelled = False
    for labels, times, values in rows:
        unit = unit_of(alias, labels, Level.INSTANCE)
        if unit is None:
            unlabelled = True
            continue
        per[unit[0]].append((times, values))
    if unlabelled:  # the instance query answered one series without an instance label
        bad.append(f"series without a {alias.unit_label or 'instance'} label")
    reduce = _reduce(how)
    out: dict[Key, float] = {}
    starts: dict[tuple[float, ...], list[float]] = {}
    for inst, got in per.items():
        grid = got[0][0]
        if all(t == grid for t, _ in got):
            values = (
                got[0][1]
                if len(got) == 1
                else reduce(np.array([v for _, v in got]), axis=0).tolist()
            )
        else:  # groups on different time grids: combine time by time
            by_t: dict[float, list[float]] = defaultdict(list)
            for times, vs in got:
                for t, v in zip(times, vs, strict=True):
                    by_t[t].append(v)
            grid = tuple(sorted(by_t))
            values = [float(reduce(np.array(by_t[t]))) for t in grid]
        first = starts.get(grid)
        if first is None:
            first = starts[grid] = [round(t - window_s, 6) for t in grid]
        out.update(zip(((s, inst, None) for s in first), values, strict=True))
    return out


def inf_bucket_counts(
    result: list[Any], rows: list[Row], alias: Alias, window_s: float, where: str
) -> dict[Level, dict[Key, float]]:
    """Both levels' ``_count`` increases from a rank-level bucket answer's ``le="+Inf"``
    series (what the ``_count`` query would answer: the exposition's same counter); ``rows``
    are the answer's ``series_rows``, in its order."""
    at = [i for i, (labels, _, _) in enumerate(rows) if _le(labels) == math.inf]
    bad: list[str] = []  # the _sum answer notes the unusable series, as the _count one did not
    return {
        Level.DP: matrix_to_values(
            [result[i] for i in at],
            window_s=window_s,
            alias=alias,
            level=Level.DP,
            across="sum",
            bad=bad,
            where=where,
        ),
        Level.INSTANCE: fold_instances([rows[i] for i in at], alias, "sum", window_s, bad),
    }


def counts_cover(sums: Mapping[Key, float], counts: Mapping[Key, float]) -> bool:
    """Whether ``counts`` has every group ``sums`` has (so the mean is the one ``_count``'s
    query would give)."""
    return all(k in counts for k in sums)


def ratio(total: float, count: float) -> float:
    """``total / count`` as PromQL divides (IEEE: x/0 is ±Inf, 0/0 NaN)."""
    if count:
        return total / count
    return math.nan if total == 0 or math.isnan(total) else math.copysign(math.inf, total)


def mean_table(
    sums: Mapping[Key, float], counts: Mapping[Key, float], scale: float
) -> dict[Key, float]:
    """``scale * (sum / count)`` where both have the group (PromQL's one-to-one match)."""
    return {k: scale * ratio(s, counts[k]) for k, s in sums.items() if k in counts}


def query_scale(spec: SignalSpec, alias: Alias) -> float:
    """The scale factor as the query text writes it (``promql._scaled``: ``%g``)."""
    return float(f"{ROLES[spec.role].scale * alias.scale:g}")


# an answer holds a few bucket bounds over thousands of series: each is parsed once
_bound = functools.lru_cache(maxsize=1024)(parse_bound)


def _le(labels: dict[str, str]) -> float | None:
    """A bucket series' ``parse_bound(le)`` (None without a string ``le``)."""
    raw = labels.get("le")
    return _bound(raw) if isinstance(raw, str) else None


def _without_le(labels: dict[str, str]) -> object:
    """A bucket series' group: its label set without ``le`` (a set op in C, not a sort; a
    label value JSON gave as something unhashable falls back to the sorted pairs)."""
    try:
        return frozenset(labels.items()) - {("le", labels["le"])}
    except TypeError:
        return tuple(sorted((k, v) for k, v in labels.items() if k != "le"))


def bucket_quantiles(
    rows: list[Row],
    spec: SignalSpec,
    alias: Alias,
    window_s: float,
    bad: list[str],
    *,
    across: Callable[[list[float], str], float] = combine,
) -> tuple[dict[Level, dict[Key, float]], set[float]]:
    """Both levels' ``scale * histogram_quantile(q, ...)`` from per-rank bucket increases, and
    the bucket bounds the answer holds (for the bound marks)."""
    assert spec.quantile is not None
    scale = query_scale(spec, alias)
    parsed = []
    for labels, ts, vs in rows:
        if (le := _le(labels)) is not None:  # PromQL skips a bucket without le
            parsed.append((le, labels, ts, vs))
    bounds = sorted({p[0] for p in parsed})
    position = {b: i for i, b in enumerate(bounds)}
    times = sorted({t for p in parsed for t in p[2]})
    unit_label = alias.unit_label or "instance"
    out: dict[Level, dict[Key, float]] = {}
    for level in (Level.DP, Level.INSTANCE):
        groups: dict[Any, int] = {}
        cells: list[tuple[int, int, tuple[float, ...], list[float]]] = []
        names: list[dict[str, str]] = []
        for le, labels, ts, vs in parsed:
            if level is Level.DP:
                key: Any = _without_le(labels)
            else:
                key = labels.get(unit_label, "")
            g = groups.get(key)
            if g is None:
                g = groups[key] = len(groups)
                names.append(
                    {k: v for k, v in labels.items() if k != "le"}
                    if level is Level.DP
                    else {unit_label: key}
                )
            cells.append((g, position[le], ts, vs))
        out[level] = _quantile_table(
            q=spec.quantile,
            bounds=bounds,
            times=times,
            cells=cells,
            names=names,
            alias=alias,
            level=level,
            scale=scale,
            window_s=window_s,
            how=spec.across,
            bad=bad,
            across=across,
        )
    return out, set(bounds)


def _quantile_table(
    *,
    q: float,
    bounds: list[float],
    times: list[float],
    cells: list[tuple[int, int, tuple[float, ...], list[float]]],
    names: list[dict[str, str]],
    alias: Alias,
    level: Level,
    scale: float,
    window_s: float,
    how: str,
    bad: list[str],
    across: Callable[[list[float], str], float],
) -> dict[Key, float]:
    if not cells:
        return {}
    t_index = {t: i for i, t in enumerate(times)}
    shape = (len(names), len(times), len(bounds))
    counts = np.zeros(shape)
    present = np.zeros(shape, dtype=bool)
    on_grid: dict[tuple[float, ...], list[tuple[int, int, list[float]]]] = defaultdict(list)
    for g, b, ts, vs in cells:
        on_grid[ts].append((g, b, vs))
    for ts, got in on_grid.items():  # buckets of one group and bound add up (coalesced)
        idx = np.array([t_index[t] for t in ts], dtype=np.intp)[None, :]
        g_of = np.array([g for g, _, _ in got], dtype=np.intp)[:, None]
        b_of = np.array([b for _, b, _ in got], dtype=np.intp)[:, None]
        np.add.at(counts, (g_of, idx, b_of), np.array([vs for _, _, vs in got]))
        present[g_of, idx, b_of] = True
    flat_c = counts.reshape(-1, len(bounds))
    flat_p = present.reshape(-1, len(bounds))
    code = flat_p @ (1 << np.arange(len(bounds), dtype=np.int64))  # which buckets a row has
    values = np.full(flat_c.shape[0], np.nan)
    bound_arr = np.array(bounds)
    for pattern in np.unique(code[code > 0]):
        rows = np.flatnonzero(code == pattern)
        cols = np.flatnonzero(flat_p[rows[0]])
        values[rows] = histogram_quantile(q, bound_arr[cols], flat_c[np.ix_(rows, cols)])
    values *= scale
    units = []
    for labels in names:
        unit = unit_of(alias, labels, level)
        if unit is None:  # the same note the histogram_quantile answer's series made
            _note_unusable(labels, alias, level, bad)
        units.append(unit)
    has = code.reshape(len(names), len(times)) > 0
    gi, ti = np.nonzero(has)  # group by group, times in order
    vals = values.reshape(len(names), len(times))[gi, ti].tolist()
    starts = [round(t - window_s, 6) for t in times]
    keys: list[Key] = [
        (starts[t], u[0], u[1])
        for g, t in zip(gi.tolist(), ti.tolist(), strict=True)
        if (u := units[g]) is not None
    ]
    if len(keys) < len(vals):
        vals = [v for g, v in zip(gi.tolist(), vals, strict=True) if units[g] is not None]
    used = [u for u in units if u is not None]
    if len(set(used)) == len(used):  # one group a unit, the usual case
        return dict(zip(keys, vals, strict=True))
    spill: dict[Key, list[float]] = defaultdict(list)
    for key, v in zip(keys, vals, strict=True):  # groups landing on one unit combine
        spill[key].append(v)
    out = {k: (vs[0] if len(vs) == 1 else across(vs, how)) for k, vs in spill.items()}
    return out


def _note_unusable(labels: dict[str, str], alias: Alias, level: Level, bad: list[str]) -> None:
    """The ``bad`` entry ``matrix_to_values`` makes for a series naming no usable unit."""
    label = alias.unit_label or "instance"
    inst = labels.get(label, "")
    if not inst:
        bad.append(f"series without a {label} label")
        return
    raw = inst if alias.rank_in_unit else labels.get(alias.dp_label or "", "")
    shown = alias.unit_label if alias.rank_in_unit else alias.dp_label
    bad.append(f"{shown}={quoted(repr(raw), 40)} on {inst}")


def mark_bucket_bounds(
    jobs: list[Job],
    levels: list[Level],
    per_level: Mapping[Level, Values],
    bounds: Mapping[str, Future[list[Any]]],
    known: Mapping[tuple[Level, str], set[float]],
) -> list[str]:
    """Add the ``<signal>_bound`` tables from the bucket bounds each histogram's answer held
    (``known``) or its probe found."""
    les: dict[str, set[float]] = {}
    for level in levels:
        for spec in SIGNAL_SPECS:
            table = per_level[level].get(spec.signal)
            if spec.over_time != "quantile" or not table:
                continue
            alias = next(
                j.alias for j in jobs if j.signal == spec.signal and (j.level is level or j.derive)
            )
            found = known.get((level, spec.signal))
            if found is None:
                if alias.name not in les:
                    try:
                        result = bounds[alias.name].result()
                    except SourceError as exc:
                        return [
                            f"histogram bucket bounds not checked ({exc}): percentiles unmarked"
                        ]
                    les[alias.name] = _probe_bounds(result)
                found = les[alias.name]
            marks = bound_marks(table, found, ROLES[spec.role].scale)
            if marks:
                per_level[level][bound_column(spec.signal)] = marks
    return []


def _probe_bounds(result: list[Any]) -> set[float]:
    found = set()
    for r in result:
        metric = r.get("metric") if isinstance(r, dict) else None
        raw = metric.get("le") if isinstance(metric, dict) else None
        le = parse_bound(raw) if isinstance(raw, str) else None
        if le is not None:
            found.add(le)
    return found
