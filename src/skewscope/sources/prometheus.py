"""Prometheus-compatible HTTP API (Prometheus, Thanos, Mimir, VictoriaMetrics) -> Evidence.

One ``label/__name__/values`` call finds which metric names exist (dialect and aliases), then one
``query_range`` per signal and level fetches every unit at once. Windows are aligned to
multiples of the window length since the epoch (as Grafana and VictoriaMetrics' cache do), so
the same range gives the same windows on every backend; only whole windows inside
[start, end] are used. Each evaluation at time t covers the window (t - W, t].
"""

from __future__ import annotations

import math
import reprlib
import threading
from collections import defaultdict
from collections.abc import Mapping
from concurrent.futures import Future
from itertools import repeat
from typing import Any

from skewscope.errors import SourceError, UsageError
from skewscope.frame import WINDOWS, Evidence, Level, WindowPolicy, bound_column
from skewscope.settings import DEFAULT_LIMITS, SourceLimits
from skewscope.sources.auth import HttpAuth, normalise_url, quoted
from skewscope.sources.daemon_pool import DaemonPool
from skewscope.sources.device_exporters import DeviceExporter, resolve_devices
from skewscope.sources.devices import (
    SIGNAL_OF_ROLE,
    DeviceMap,
    DeviceSeries,
    EngineInstance,
    device_values,
    engines_from_keys,
    merge_values,
)
from skewscope.sources.dialects import (
    ROLES,
    SIGNAL_SPECS,
    SPEC_BY_SIGNAL,
    Alias,
    combine,
    detect_dialect,
    get_dialect,
    resolve,
    unit_of,
)
from skewscope.sources.evidence import Key, Values, build_evidence
from skewscope.sources.prom_client import PromClient
from skewscope.sources.prom_duplicates import duplicate_notes
from skewscope.sources.prom_span import empty_range_error
from skewscope.sources.promql import (
    bound_marks,
    bucket_bounds_query,
    build_query,
    duration,
    normalise_selector,
    series_selector,
)
from skewscope.sources.range_body import RangeSeries
from skewscope.sources.validate import (
    parse_bound,
    parse_number,
    parse_points,
    parse_timestamp,
)


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
        for j, point in enumerate(points):
            ts = value = None
            if isinstance(point, list) and len(point) == 2:
                ts, value = parse_timestamp(point[0]), parse_number(point[1])
            if ts is None or value is None:
                shown = quoted(reprlib.repr(point), 60)
                raise SourceError(
                    f"{where} returned series {i} ({inst}) point {j} as {shown}; expected "
                    '[time, "number"]'
                )
            acc[(round(ts - window_s, 6), inst, dp)].append(value)
    out = {k: combine(vs, across) for k, vs in acc.items()}
    for (inst, dp), (grid, vs) in whole.items():
        out.update(zip(zip(grid, repeat(inst), repeat(dp), strict=False), vs, strict=True))
    return out


Job = tuple[Level, str, Alias, str]  # (level, signal, alias, PromQL)


def _load_tables(
    client: PromClient,
    jobs: list[Job],
    levels: list[Level],
    *,
    selector: str,
    span: tuple[float, float, float],
    max_workers: int,
) -> tuple[dict[Level, Values], list[str], list[str]]:
    """(value tables per level, series without a usable unit, notes) of every job's range query.

    Each worker decodes its own answer into a value table as soon as it arrives, so the
    client's decoding overlaps the server's work on the other queries (a bare fetch is server
    bound). Where histogram_quantile answered, ``<signal>_bound`` tables (frame.py) mark the
    values equal to a bucket bound: one ``count by (le)`` query per histogram over the whole
    range, sent as soon as its first quantile table is read. The check is an extra: when the
    backend refuses it, the percentiles stay unmarked and a note says so.
    """
    first_t, last_t, w = span
    whole = max(last_t - first_t, 1.0)
    bounds: dict[str, Future[list[Any]]] = {}
    lock = threading.Lock()
    with DaemonPool(max_workers) as pool:  # a stopping watch abandons its queries

        def run(job: Job) -> tuple[dict[Key, float], list[str]]:
            level, signal, alias, query = job
            bad: list[str] = []
            table = matrix_to_values(
                client.query_range_series(query, first_t, last_t, w),
                window_s=w,
                alias=alias,
                level=level,
                across=SPEC_BY_SIGNAL[signal].across,
                bad=bad,
                where=client.where,
            )
            if table and SPEC_BY_SIGNAL[signal].over_time == "quantile":
                with lock:
                    if alias.name not in bounds:
                        q = bucket_bounds_query(alias, whole, selector)
                        bounds[alias.name] = pool.submit(client.query_range, q, last_t, last_t,
                                                         whole)
            return table, bad

        results = [f.result() for f in [pool.submit(run, job) for job in jobs]]
        per_level: dict[Level, Values] = {lvl: {} for lvl in levels}
        bad: list[str] = []
        for (level, signal, _, _), (table, job_bad) in zip(jobs, results, strict=True):
            bad += job_bad
            if table:
                per_level[level][signal] = table
        notes = _mark_bucket_bounds(jobs, per_level, bounds)
    return per_level, bad, notes


def _mark_bucket_bounds(
    jobs: list[Job], per_level: Mapping[Level, Values], bounds: Mapping[str, Future[list[Any]]]
) -> list[str]:
    """Add the ``<signal>_bound`` tables from the bucket bounds each histogram's query found."""
    les: dict[str, set[float]] = {}
    for level, signal, alias, _ in jobs:
        spec = SPEC_BY_SIGNAL[signal]
        table = per_level[level].get(signal)
        if spec.over_time != "quantile" or not table:
            continue
        if alias.name not in les:
            try:
                result = bounds[alias.name].result()
            except SourceError as exc:
                return [f"histogram bucket bounds not checked ({exc}): percentiles unmarked"]
            found = set()
            for r in result:
                metric = r.get("metric") if isinstance(r, dict) else None
                raw = metric.get("le") if isinstance(metric, dict) else None
                le = parse_bound(raw) if isinstance(raw, str) else None
                if le is not None:
                    found.add(le)
            les[alias.name] = found
        marks = bound_marks(table, les[alias.name], ROLES[spec.role].scale)
        if marks:
            per_level[level][bound_column(signal)] = marks
    return []


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
        values: dict[float, float] = {}
        for j, point in enumerate(points):
            ts = value = None
            if isinstance(point, list) and len(point) == 2:
                ts, value = parse_timestamp(point[0]), parse_number(point[1])
            if ts is None or value is None:
                shown = quoted(reprlib.repr(point), 60)
                raise SourceError(f"{where} returned device series {i} point {j} as {shown}")
            values[round(ts - window_s, 6)] = value
        target = str(labels.get("instance", ""))
        out.append(DeviceSeries(exporter, target, labels, role, values))
    return out


def _engines(
    label_sets: list[dict[str, str]], per_level: dict[Level, Values], alias: Alias
) -> list[EngineInstance]:
    """Engine instances (ranks from the DP tables, labels from their series) for the join."""
    labels: dict[str, dict[str, str]] = {}
    for ls in label_sets:
        inst = ls.get("instance", "")
        if inst:
            labels.setdefault(inst, ls)
    found = engines_from_keys([*per_level.get(Level.INSTANCE, {}).values(),
                               *per_level.get(Level.DP, {}).values()])
    return [EngineInstance(e.instance, e.ranks, labels.get(e.instance, {})) for e in found]


def _load_devices(
    client: PromClient,
    names: list[str],
    engine_alias: Alias | None,
    per_level: dict[Level, Values],
    *,
    span: tuple[float, float, float, float, float],
    selector: str,
    device_selector: str,
    device_map: DeviceMap | None,
) -> tuple[dict[str, str], list[str]]:
    """Query device exporters, join them to the engine units and add their signals.

    ``span`` = (start, end, first evaluation, last evaluation, window).
    """
    found = resolve_devices(names)
    if not found or engine_alias is None:
        return {}, []
    start, end, first_t, last_t, w = span
    series: list[DeviceSeries] = []
    aliases: dict[str, str] = {}
    for role, exporter, alias in found:
        sel = series_selector(alias.name, alias, device_selector)
        result = client.query_range(f"avg_over_time({sel}[{duration(w)}])", first_t, last_t, w)
        for got in device_series(result, exporter, role, w, client.where):
            scaled = {t: v * alias.scale for t, v in got.values.items()}
            series.append(DeviceSeries(exporter, got.target, got.labels, role, scaled))
        signal = SIGNAL_OF_ROLE[role]
        aliases[signal] = "|".join(filter(None, (aliases.get(signal), alias.name)))
    match = series_selector(engine_alias.name, engine_alias, selector)
    engines = _engines(client.series(match, start, end), per_level, engine_alias)
    tables, notes = device_values(series, engines, device_map)
    for level, values in tables.items():
        if level in per_level:
            per_level[level] = merge_values(per_level[level], values)
    return aliases, notes


def load_prometheus(
    url: str,
    *,
    start: float,
    end: float,
    step_s: float | None = None,
    selector: str = "",
    dialect: str | None = None,
    auth: HttpAuth | None = None,
    timeout_s: float = 30,
    window_s: float | None = None,
    limits: SourceLimits = DEFAULT_LIMITS,
    windows: WindowPolicy = WINDOWS,
    max_workers: int = 4,
    device_selector: str = "",
    device_map: DeviceMap | None = None,
) -> Evidence:
    """Load per-window, per-unit signals for [start, end] (epoch seconds) from a Prometheus API.

    The window equals the query step (default: ``windows.choose``), so windows tile the range.
    """
    if end <= start:
        raise UsageError("end must be after start")
    if step_s is not None and window_s is not None and abs(step_s - window_s) > 1e-9:
        raise UsageError("step and window must be equal (windows must tile the range)")
    w = window_s or step_s or windows.choose(end - start)
    if not (math.isfinite(timeout_s) and timeout_s > 0):
        raise UsageError(f"timeout must be a positive number of seconds, got {timeout_s}")
    first_t, last_t, _ = plan_windows(start, end, w, windows.max_windows)
    sel = normalise_selector(selector)
    url, url_note = normalise_url(url, "--prometheus")
    client = PromClient(
        url,
        auth=auth,
        timeout_s=timeout_s,
        max_bytes=limits.max_query_bytes,
    )
    try:
        names = client.metric_names(start, end, sel)
        try:
            chosen = get_dialect(dialect) if dialect else get_dialect(detect_dialect(names))
        except SourceError as e:  # none in the range: does the server hold some elsewhen?
            raise empty_range_error(client, start, end, sel) or e from None
        resolved = {lvl: resolve(chosen, names, lvl) for lvl in (Level.INSTANCE, Level.DP)}
        notes = [f"dialect: {chosen.name} ({'given' if dialect else 'detected'})"]
        if url_note:
            notes.append(url_note)
        levels = [Level.INSTANCE]
        if resolved[Level.DP]:
            levels.append(Level.DP)
        jobs: list[Job] = []
        for level in levels:
            for spec in SIGNAL_SPECS:
                alias = resolved[level].get(spec.signal)
                if alias is None:
                    continue
                q = build_query(spec, alias, level=level, window_s=w, selector=sel)
                if q is not None:
                    jobs.append((level, spec.signal, alias, q))
        first = next((alias for level, _, alias, _ in jobs if level is Level.INSTANCE), None)
        with DaemonPool(1) as side:  # beside the tables, not after them
            dup = None if first is None else side.submit(
                duplicate_notes, client, first, last_t=last_t,
                range_s=max(last_t - first_t, w), selector=sel)
            per_level, bad, bound_notes = _load_tables(
                client, jobs, levels, selector=sel, span=(first_t, last_t, w),
                max_workers=max_workers,
            )
            notes += bound_notes + (dup.result() if dup is not None else [])
        if bad:
            notes.append(
                f"skipped {len(bad)} series without a usable instance or DP label "
                f"(e.g. {sorted(set(bad))[0]})"
            )
        if not per_level[Level.INSTANCE]:
            if not names:
                raise empty_range_error(client, start, end, sel) or SourceError(
                    f"{client.where} holds no samples in this range; widen it or check the "
                    "selector")
            raise SourceError(
                f"{client.where} has {chosen.name} metric names but no samples "
                "in whole windows of the range; widen the range or check the selector"
            )
        engine_alias = next(iter(resolved[Level.INSTANCE].values()), None)
        dev_sel = normalise_selector(device_selector)
        # the engine selector does not apply to device exporters: list their names apart
        dev_names = client.metric_names(start, end, dev_sel) if sel or dev_sel else names
        device_aliases, device_notes = _load_devices(
            client,
            dev_names,
            engine_alias,
            per_level,
            span=(start, end, first_t, last_t, w),
            selector=sel,
            device_selector=dev_sel,
            device_map=device_map,
        )
        notes += device_notes
        notes.extend(dict.fromkeys(client.warnings))
        return build_evidence(
            per_level[Level.INSTANCE],
            per_level.get(Level.DP),
            resolved=resolved[Level.INSTANCE],
            dp_resolved=resolved[Level.DP],
            extra_aliases=device_aliases,
            names=names,
            window_s=w,
            source="prometheus",
            notes=notes,
        )
    finally:
        client.close()
