"""Scrapes of one target -> per-unit, per-window values of one signal.

A signal's alias (``dialects``) picks the series of a snapshot; each series is reduced per window
(``scrape_windows``), named by its unit (the target, or the unit a label names, with its DP
rank) and combined across series as the signal spec says. Histogram quantiles come from the
summed bucket increases; the device exporters' gauges become ``devices.DeviceSeries``.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Callable, Mapping, Sequence

from skewscope.catalogue import MetricType
from skewscope.frame import Level
from skewscope.sources.auth import quoted
from skewscope.sources.collect import Snapshot
from skewscope.sources.device_exporters import resolve_devices
from skewscope.sources.devices import SIGNAL_OF_ROLE, DeviceSeries
from skewscope.sources.dialects import ROLES, Alias, SignalSpec, normalise_name, unit_of
from skewscope.sources.exposition import Labels
from skewscope.sources.scrape_windows import (
    ACROSS,
    Point,
    bucket_quantile,
    bucket_quantile_bound,
    counter_increases,
    gauge_reduce,
)
from skewscope.sources.validate import parse_bound


def series_points(snaps: Sequence[Snapshot], name: str, alias: Alias) -> dict[Labels, list[Point]]:
    """Every series of sample ``name`` passing the alias matchers, aligned on good scrapes."""
    want = normalise_name(name)
    ok = [s for s in snaps if s.samples is not None]
    series: dict[Labels, dict[float, float]] = defaultdict(dict)
    for snap in ok:
        for sname, labels, value in snap.samples or ():
            if normalise_name(sname) == want and all(
                m.matches(dict(labels)) for m in alias.matchers
            ):
                series[labels][snap.t] = value
    return {lab: [(s.t, vals.get(s.t)) for s in ok] for lab, vals in series.items()}


Unit = tuple[str | None, int | None]  # (instance named by a label, else None: the target; rank)


def _grouped(
    snaps: Sequence[Snapshot],
    name: str,
    alias: Alias,
    level: Level,
    reduce: Callable[[list[Point]], dict[int, float]],
    bad: list[str],
) -> dict[tuple[Unit, Labels], dict[int, float]]:
    """Reduce each series per window; key = (unit, labels) so callers can group and combine.

    A series naming no usable unit (a DP label that is not a rank, an empty unit label) is
    skipped and described in ``bad``.
    """
    out: dict[tuple[Unit, Labels], dict[int, float]] = {}
    for labels, points in series_points(snaps, name, alias).items():
        got = unit_of(alias, dict(labels), level, target="-")
        if got is None:
            label = alias.unit_label if alias.rank_in_unit else alias.dp_label
            raw = dict(labels).get(label or "", "")
            bad.append(f"{label}={quoted(repr(raw), 40)}")
            continue
        inst = got[0] if alias.unit_label else None
        reduced = reduce(points)
        if alias.copies:  # copies of one series (SGLang TP ranks): read once, their max
            labels = tuple((k, v) for k, v in labels if k not in alias.copies)
            seen = out.get(((inst, got[1]), labels), {})
            reduced = {k: max(v, seen[k]) if k in seen else v for k, v in reduced.items()} | {
                k: v for k, v in seen.items() if k not in reduced
            }
        out[((inst, got[1]), labels)] = reduced
    return out


def _combine(
    per_series: Mapping[tuple[Unit, Labels], dict[int, float]], how: str
) -> dict[tuple[Unit, int], float]:
    groups: dict[tuple[Unit, int], list[float]] = defaultdict(list)
    for (unit, _), windows in per_series.items():
        for k, v in windows.items():
            groups[(unit, k)].append(v)
    return {key: ACROSS[how](vs) for key, vs in groups.items()}


def signal_values(
    spec: SignalSpec,
    alias: Alias,
    snaps: Sequence[Snapshot],
    level: Level,
    w: float,
    bad: list[str] | None = None,
) -> dict[tuple[Unit, int], float]:
    """{((instance or None, dp rank or None), window index): value} of one signal for one
    target (the instance is None where the target itself is the unit).

    Series that cannot be used (a DP label that is not a rank, a bucket bound that is not a
    number) are skipped and described in ``bad``.
    """
    bad = [] if bad is None else bad
    role = ROLES[spec.role]
    lost = [s.t for s in snaps if s.samples is None]
    inc = lambda pts: counter_increases(pts, 0.0, w, lost)  # noqa: E731
    if role.kind is MetricType.COUNTER:
        vals = _combine(_grouped(snaps, alias.name, alias, level, inc, bad), "sum")
    elif role.kind is MetricType.GAUGE:
        red = lambda pts: gauge_reduce(pts, 0.0, w, spec.over_time)  # noqa: E731
        vals = _combine(_grouped(snaps, alias.name, alias, level, red, bad), spec.across)
    elif spec.over_time == "quantile":
        assert spec.quantile is not None
        per_le = bucket_increases(alias, snaps, level, inc, bad)
        vals = {key: bucket_quantile(spec.quantile, b) for key, b in per_le.items()}
    else:
        total = _combine(_grouped(snaps, alias.name + "_sum", alias, level, inc, bad), "sum")
        count = _combine(_grouped(snaps, alias.name + "_count", alias, level, inc, bad), "sum")
        vals = {k: (total[k] / c if c > 0 else math.nan) for k, c in count.items() if k in total}
    return {k: v * role.scale * alias.scale for k, v in vals.items()}


def bucket_increases(
    alias: Alias,
    snaps: Sequence[Snapshot],
    level: Level,
    inc: Callable[[list[Point]], dict[int, float]],
    bad: list[str],
) -> dict[tuple[Unit, int], dict[float, float]]:
    """{(unit, window index): {le: cumulative count increase}} of one histogram."""
    per_le: dict[tuple[Unit, int], dict[float, float]] = defaultdict(dict)
    for (unit, labels), windows in _grouped(
        snaps, alias.name + "_bucket", alias, level, inc, bad
    ).items():
        raw = dict(labels).get("le", "")
        le = parse_bound(raw)
        if le is None:
            bad.append(f"le={quoted(repr(raw), 40)}")
            continue
        for k, v in windows.items():
            per_le[(unit, k)][le] = per_le[(unit, k)].get(le, 0.0) + v
    return per_le


def quantile_bounds(
    spec: SignalSpec, alias: Alias, snaps: Sequence[Snapshot], level: Level, w: float
) -> dict[tuple[Unit, int], float]:
    """{(unit, window index): frame.BOUND_*} where the quantile is a bucket bound
    (unusable series are reported by ``signal_values``, not twice)."""
    assert spec.quantile is not None
    lost = [s.t for s in snaps if s.samples is None]
    inc = lambda pts: counter_increases(pts, 0.0, w, lost)  # noqa: E731
    out = {}
    for key, b in bucket_increases(alias, snaps, level, inc, []).items():
        flag = bucket_quantile_bound(spec.quantile, b)
        if not math.isnan(flag):
            out[key] = flag
    return out


def device_series(
    snapshots: Mapping[str, Sequence[Snapshot]],
    names: set[str],
    t0: float,
    window_s: float,
    n_windows: int,
) -> tuple[list[DeviceSeries], dict[str, str]]:
    """Per-device, per-window means of the device exporters' gauges among the targets."""
    series: list[DeviceSeries] = []
    aliases: dict[str, str] = {}
    for role, exporter, alias in resolve_devices(names):
        signal = SIGNAL_OF_ROLE[role]
        aliases[signal] = "|".join(filter(None, (aliases.get(signal), alias.name)))
        for inst, snaps in snapshots.items():
            for labels, points in series_points(snaps, alias.name, alias).items():
                per_w = gauge_reduce(points, 0.0, window_s, "avg")
                values = {
                    round(t0 + k * window_s, 6): v * alias.scale
                    for k, v in per_w.items()
                    if k < n_windows and math.isfinite(v)
                }
                series.append(DeviceSeries(exporter, inst, dict(labels), role, values))
    return series, aliases
