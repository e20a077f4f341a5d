"""A Prometheus range answer -> value tables ``{(window_start_s, instance, dp_rank): value}``,
and the window grid of a range (whole windows aligned to multiples of the window length since the
epoch, so a window once closed is the same window in every later range)."""

from __future__ import annotations

import math
import reprlib
from collections import defaultdict
from itertools import repeat
from typing import Any

from skewscope.errors import SourceError, UsageError
from skewscope.frame import WINDOWS, Level
from skewscope.sources.auth import quoted
from skewscope.sources.device_exporters import DeviceExporter
from skewscope.sources.devices import DeviceSeries
from skewscope.sources.dialects import Alias, combine, unit_of
from skewscope.sources.evidence import Key
from skewscope.sources.range_body import RangeSeries
from skewscope.sources.validate import parse_number, parse_points, parse_timestamp


def checked_points(points: list[Any], named: str) -> tuple[tuple[float, ...], list[float]]:
    """A range series' (times, values), read at once when every point has the shape, else
    point by point: the first bad point is the SourceError ``named`` + its index and text."""
    fast = parse_points(points)
    if fast is not None:
        return tuple(fast[0]), fast[1]
    times: list[float] = []
    values: list[float] = []
    for j, point in enumerate(points):
        ts = value = None
        if isinstance(point, list) and len(point) == 2:
            ts, value = parse_timestamp(point[0]), parse_number(point[1])
        if ts is None or value is None:
            shown = quoted(reprlib.repr(point), 60)
            raise SourceError(f'{named} point {j} as {shown}; expected [time, "number"]')
        times.append(ts)
        values.append(value)
    return tuple(times), values


def plan_windows(
    start: float, end: float, window_s: float, max_windows: int = WINDOWS.max_windows
) -> tuple[float, float, int]:
    """(first evaluation time, last evaluation time, number of windows) for whole windows;
    Prometheus refuses a query_range with more than ``max_windows`` points per series."""
    first_start = math.ceil(start / window_s - 1e-9) * window_s
    last_end = math.floor(end / window_s + 1e-9) * window_s
    n = round((last_end - first_start) / window_s)
    if n < 1:
        raise UsageError(
            f"the range {end - start:g}s holds no whole window of {window_s:g}s "
            "(windows are aligned to multiples of the window length)"
        )
    if n > max_windows:
        raise UsageError(f"{n} windows of {window_s:g}s exceed {max_windows}; use a larger step")
    return first_start + window_s, last_end, n


def matrix_to_values(
    result: list[Any],
    *,
    window_s: float,
    alias: Alias,
    level: Level,
    across: str = "sum",
    bad: list[str],
    where: str = "",
) -> dict[Key, float]:
    """Series of a range matrix (JSON, or ``range_body.RangeSeries``) ->
    {(window_start_s, instance, dp_rank): value}.

    The unit comes from ``instance`` (or the alias' unit label) and, at DP level, the DP label
    (or the ``-rank-<n>`` suffix). Series naming no usable unit are skipped; their label sets
    are reported through ``bad``. Series landing on the same unit (llm-d endpoints of one pod
    at instance level) combine by ``across``. A series or point of the wrong shape is a
    SourceError naming it (the server is not speaking the Prometheus API).
    """
    acc: dict[Key, list[float]] = defaultdict(list)
    # the usual case, one well-formed series per unit, is kept whole and keyed at the end
    whole: dict[tuple[str, int | None], tuple[tuple[float, ...], list[float]]] = {}
    spilled: set[tuple[str, int | None]] = set()
    starts: dict[tuple[float, ...], tuple[float, ...]] = {}  # series share one time grid

    def window_starts(times: tuple[float, ...]) -> tuple[float, ...]:
        got = starts.get(times)
        if got is None:
            got = starts[times] = tuple(round(t - window_s, 6) for t in times)
        return got

    for i, series in enumerate(result):
        decoded = series if isinstance(series, RangeSeries) else None
        labels: Any
        points: Any
        if decoded is not None:  # read from the answer's bytes, its points already checked
            labels, points = decoded.labels, []
        else:
            labels = series.get("metric") if isinstance(series, dict) else None
            points = series.get("values") if isinstance(series, dict) else None
        if not isinstance(labels, dict) or not isinstance(points, list):
            raise SourceError(f"{where} returned series {i} without metric labels and values")
        unit_label = alias.unit_label or "instance"
        if not isinstance(labels.get(unit_label, ""), str):
            raise SourceError(f"{where} returned series {i} with a non-text {unit_label} label")
        unit = unit_of(alias, labels, level)
        if unit is None:
            inst = labels.get(alias.unit_label or "instance", "")
            if not inst:
                bad.append(f"series without a {alias.unit_label or 'instance'} label")
            else:
                raw = inst if alias.rank_in_unit else labels.get(alias.dp_label or "", "")
                label = alias.unit_label if alias.rank_in_unit else alias.dp_label
                bad.append(f"{label}={quoted(repr(raw), 40)} on {inst}")
            continue
        inst, dp = unit
        fast = (decoded.times, decoded.values) if decoded is not None else parse_points(points)
        if fast is not None and (inst, dp) not in whole and (inst, dp) not in spilled:
            whole[(inst, dp)] = (window_starts(fast[0]), fast[1])
            continue
        spilled.add((inst, dp))
        kept_t, kept_v = whole.pop((inst, dp), ((), []))
        for t, v in zip(kept_t, kept_v, strict=True):  # a second series: the first one's first
            acc[(t, inst, dp)].append(v)
        if fast is not None:
            for t, v in zip(window_starts(fast[0]), fast[1], strict=True):
                acc[(t, inst, dp)].append(v)
            continue
        for ts, value in zip(
            *checked_points(points, f"{where} returned series {i} ({inst})"), strict=True
        ):
            acc[(round(ts - window_s, 6), inst, dp)].append(value)
    out = {k: combine(vs, across) for k, vs in acc.items()}
    for (inst, dp), (grid, vs) in whole.items():
        out.update(zip(zip(grid, repeat(inst), repeat(dp), strict=False), vs, strict=True))
    return out


def device_series(
    result: list[Any], exporter: DeviceExporter, role: str, window_s: float, where: str
) -> list[DeviceSeries]:
    """Per-device series of a range matrix (labels kept: the join needs them)."""
    out = []
    for i, series in enumerate(result):
        labels = series.get("metric") if isinstance(series, dict) else None
        points = series.get("values") if isinstance(series, dict) else None
        if not isinstance(labels, dict) or not isinstance(points, list):
            raise SourceError(f"{where} returned series {i} without metric labels and values")
        times, got = checked_points(points, f"{where} returned device series {i}")
        values = {round(ts - window_s, 6): v for ts, v in zip(times, got, strict=True)}
        target = str(labels.get("instance", ""))
        out.append(DeviceSeries(exporter, target, labels, role, values))
    return out
