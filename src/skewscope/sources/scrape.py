"""Sample /metrics endpoints directly (no Prometheus needed) -> Evidence.

Every ``interval_s`` all targets are fetched concurrently; the snapshots are then reduced per
window with the same signal specs the PromQL path uses (``dialects.SIGNAL_SPECS``):
counters by increases with reset handling (a drop means the process restarted: count from 0,
as ``rate()`` does), gauges by average/max/min of the samples, histograms by bucket increases and
Prometheus' bucket interpolation. Windows are anchored at the first scrape; window k covers
(t0 + kW, t0 + (k+1)W] (the first scrape belongs to window 0); a trailing partial window is
dropped. Instance name = ``host:port`` of the URL.
"""

from __future__ import annotations

import math
import sys
import time
from collections import defaultdict
from collections.abc import Callable, Iterable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from urllib.parse import urlsplit

import httpx

from skewscope.config import DEFAULT_THRESHOLDS, Thresholds
from skewscope.errors import SourceError, UsageError
from skewscope.frame import Evidence, Level, choose_window
from skewscope.sources.auth import HttpAuth, redact_url
from skewscope.sources.dialects import (
    ROLES,
    SIGNAL_SPECS,
    Alias,
    Dialect,
    Key,
    Kind,
    SignalSpec,
    Values,
    build_evidence,
    detect_dialect,
    get_dialect,
    normalise_name,
    resolve,
)

Labels = tuple[tuple[str, str], ...]  # sorted label pairs: hashable series identity
Sample = tuple[str, Labels, float]  # (sample name as exposed, labels, value)
ACCEPT = "text/plain; version=0.0.4"  # plain text: keeps colons in names (client_python #1177)


@dataclass(frozen=True)
class Snapshot:
    """One scrape of one target: ``samples`` is None when the scrape failed.

    ``t`` is seconds since the first scrape (an offset, not epoch time: window arithmetic on
    1.8e9-sized floats would misplace boundary samples by float rounding).
    """

    t: float
    samples: tuple[Sample, ...] | None
    error: str = ""


def parse_exposition(text: str) -> tuple[Sample, ...]:
    """Samples of a Prometheus text exposition, matched later on SAMPLE names (``_total`` kept)."""
    from prometheus_client.parser import text_string_to_metric_families

    out: list[Sample] = []
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            out.append((s.name, tuple(sorted(s.labels.items())), float(s.value)))
    return tuple(out)


def instance_of(url: str) -> str:
    """``host:port`` of a target URL (the default port of its scheme when none is given)."""
    parts = urlsplit(url if "://" in url else "http://" + url)
    port = parts.port or (443 if parts.scheme == "https" else 80)
    host = parts.hostname or ""
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


# ------------------------------------------------------------------------------------------------
# Window arithmetic (pure; property-tested)


def window_index(t: float, t0: float, window_s: float) -> int:
    """Index of the window (t0 + kW, t0 + (k+1)W] holding ``t``; the first scrape is window 0."""
    return max(0, math.ceil((t - t0) / window_s - 1e-6) - 1)


def counter_increases(
    points: Sequence[tuple[float, float | None]], t0: float, window_s: float
) -> dict[int, float]:
    """Per-window increase of one counter series from its successive samples.

    ``points`` are (time, value) for every successful scrape of the target, value None when
    the series was absent. A series that appears after a successful scrape without it is new:
    its whole value is counted. A drop means a reset: the new value is counted from 0. A window
    in which the series has a sample but no increase gets 0, so the result is never negative.
    """
    out: dict[int, float] = {}
    prev: float | None = None
    seen_target = False
    for t, v in points:
        if v is not None:
            k = window_index(t, t0, window_s)
            if prev is None:  # first sample of a new series (or the baseline scrape)
                out[k] = out.get(k, 0.0) + (v if seen_target else 0.0)
            else:  # a drop is a reset: the counter restarted from 0
                out[k] = out.get(k, 0.0) + (v - prev if v >= prev else v)
        prev = v
        seen_target = True
    return out


_ACROSS: dict[str, Callable[[list[float]], float]] = {
    "sum": sum,
    "avg": lambda xs: sum(xs) / len(xs),
    "max": max,
    "min": min,
}


def gauge_reduce(
    points: Sequence[tuple[float, float | None]], t0: float, window_s: float, how: str
) -> dict[int, float]:
    """Per-window avg/max/min of one gauge series."""
    buckets: dict[int, list[float]] = defaultdict(list)
    for t, v in points:
        if v is not None and math.isfinite(v):
            buckets[window_index(t, t0, window_s)].append(v)
    fn = _ACROSS[how]
    return {k: fn(xs) for k, xs in buckets.items()}


def bucket_quantile(q: float, buckets: Mapping[float, float]) -> float:
    """Quantile from cumulative bucket counts {upper bound: count}, as PromQL does it.

    Linear interpolation inside the bucket holding the rank; the +Inf bucket answers the
    highest finite bound; NaN when there are no observations.
    """
    bounds = sorted(buckets)
    if len(bounds) < 2 or not math.isinf(bounds[-1]):
        return math.nan
    counts: list[float] = []
    for b in bounds:  # enforce monotonic cumulative counts, like Prometheus
        counts.append(max(buckets[b], counts[-1] if counts else 0.0))
    total = counts[-1]
    if total <= 0:
        return math.nan
    rank = q * total
    i = next(j for j, c in enumerate(counts) if c >= rank)
    if i == len(bounds) - 1:
        return bounds[-2]
    if i == 0 and bounds[0] <= 0:
        return bounds[0]
    lo = 0.0 if i == 0 else bounds[i - 1]
    below = 0.0 if i == 0 else counts[i - 1]
    return lo + (bounds[i] - lo) * ((rank - below) / (counts[i] - below))


# ------------------------------------------------------------------------------------------------
# Snapshots -> per-level values


def _series_points(
    snaps: Sequence[Snapshot], name: str, alias: Alias
) -> dict[Labels, list[tuple[float, float | None]]]:
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


def _unit_of(labels: Labels, level: Level, alias: Alias) -> tuple[bool, int | None]:
    if level is Level.INSTANCE:
        return True, None
    raw = dict(labels).get(alias.dp_label or "", "")
    return (True, int(raw)) if raw.isdigit() else (False, None)


def _grouped(
    snaps: Sequence[Snapshot],
    name: str,
    alias: Alias,
    level: Level,
    reduce: Callable[..., dict[int, float]],
) -> dict[tuple[int | None, Labels], dict[int, float]]:
    """Reduce each series per window; key = (dp rank, labels) so callers can group and combine."""
    out: dict[tuple[int | None, Labels], dict[int, float]] = {}
    for labels, points in _series_points(snaps, name, alias).items():
        usable, dp = _unit_of(labels, level, alias)
        if usable:
            out[(dp, labels)] = reduce(points)
    return out


def _combine(
    per_series: Mapping[tuple[int | None, Labels], dict[int, float]], how: str
) -> dict[tuple[int | None, int], float]:
    groups: dict[tuple[int | None, int], list[float]] = defaultdict(list)
    for (dp, _), windows in per_series.items():
        for k, v in windows.items():
            groups[(dp, k)].append(v)
    return {key: _ACROSS[how](vs) for key, vs in groups.items()}


def signal_values(
    spec: SignalSpec, alias: Alias, snaps: Sequence[Snapshot], level: Level, w: float
) -> dict[tuple[int | None, int], float]:
    """{(dp rank or None, window index): value} of one signal for one target."""
    role = ROLES[spec.role]
    inc = lambda pts: counter_increases(pts, 0.0, w)  # noqa: E731
    if role.kind is Kind.COUNTER:
        vals = _combine(_grouped(snaps, alias.name, alias, level, inc), "sum")
    elif role.kind is Kind.GAUGE:
        red = lambda pts: gauge_reduce(pts, 0.0, w, spec.over_time)  # noqa: E731
        vals = _combine(_grouped(snaps, alias.name, alias, level, red), spec.across)
    elif spec.over_time == "quantile":
        per_le: dict[tuple[int | None, int], dict[float, float]] = defaultdict(dict)
        for (dp, labels), windows in _grouped(
            snaps, alias.name + "_bucket", alias, level, inc
        ).items():
            le = float(dict(labels).get("le", "nan"))
            for k, v in windows.items():
                per_le[(dp, k)][le] = per_le[(dp, k)].get(le, 0.0) + v
        assert spec.quantile is not None
        vals = {key: bucket_quantile(spec.quantile, b) for key, b in per_le.items()}
    else:
        total = _combine(_grouped(snaps, alias.name + "_sum", alias, level, inc), "sum")
        count = _combine(_grouped(snaps, alias.name + "_count", alias, level, inc), "sum")
        vals = {k: (total[k] / c if c > 0 else math.nan) for k, c in count.items() if k in total}
    return {k: v * role.scale for k, v in vals.items()}


def evidence_from_snapshots(
    snapshots: Mapping[str, Sequence[Snapshot]],
    *,
    t0: float,
    window_s: float,
    n_windows: int,
    dialect: str | None = None,
    notes: Iterable[str] = (),
) -> Evidence:
    """Reduce per-target snapshots (instance -> scrapes in time order) into Evidence.

    Snapshot times are offsets from ``t0`` (epoch seconds of the first scrape).
    """
    names = {s[0] for snaps in snapshots.values() for snap in snaps for s in snap.samples or ()}
    chosen: Dialect = get_dialect(dialect or detect_dialect(names))
    resolved = resolve(chosen, names)
    all_notes = [f"dialect: {chosen.name} ({'given' if dialect else 'detected'})", *notes]
    dp_wanted = any(a.dp_label for a in resolved.values())
    per_level: dict[Level, Values] = {Level.INSTANCE: {}, Level.DP: {}}
    for level in (Level.INSTANCE, Level.DP):
        if level is Level.DP and not dp_wanted:
            continue
        for spec in SIGNAL_SPECS:
            alias = resolved.get(spec.signal)
            if alias is None or (level is Level.DP and alias.dp_label is None):
                continue
            table: dict[Key, float] = {}
            for inst, snaps in snapshots.items():
                for (dp, k), v in signal_values(spec, alias, snaps, level, window_s).items():
                    if k < n_windows:
                        table[(round(t0 + k * window_s, 6), inst, dp)] = v
            if table:
                per_level[level][spec.signal] = table
    return build_evidence(
        per_level[Level.INSTANCE],
        per_level[Level.DP] if dp_wanted else None,
        resolved=resolved,
        names=names,
        window_s=window_s,
        source="scrape",
        notes=all_notes,
    )


# ------------------------------------------------------------------------------------------------
# Collection


def _fetch(client: httpx.Client, url: str, t: float) -> Snapshot:
    shown = redact_url(url)
    try:
        resp = client.get(url, headers={"Accept": ACCEPT})
    except httpx.TimeoutException:
        return Snapshot(t, None, f"{shown} did not answer within the timeout")
    except httpx.ConnectError as exc:
        why = "connection refused" if "refused" in str(exc).lower() else type(exc).__name__
        return Snapshot(t, None, f"cannot connect to {shown}: {why}")
    except httpx.HTTPError as exc:
        return Snapshot(t, None, f"scrape of {shown} failed: {type(exc).__name__}")
    if resp.status_code != 200:
        return Snapshot(t, None, f"{shown} answered HTTP {resp.status_code}")
    try:
        return Snapshot(t, parse_exposition(resp.text))
    except (ValueError, TypeError, IndexError) as exc:
        return Snapshot(t, None, f"{shown} served unparsable metrics: {str(exc)[:120]}")


def _progress(enabled: bool, total: int) -> tuple[Callable[[], None], Callable[[], None]]:
    """(advance, stop) of a rich progress bar on stderr; no-ops when off or not a TTY."""
    if not enabled or not sys.stderr.isatty():
        return (lambda: None), (lambda: None)
    from rich.console import Console
    from rich.progress import Progress

    bar = Progress(console=Console(stderr=True), transient=True)
    task = bar.add_task("scraping", total=total)
    bar.start()
    return (lambda: bar.advance(task)), bar.stop


def collect(
    urls: Sequence[str],
    *,
    duration_s: float,
    interval_s: float,
    auth: HttpAuth | None = None,
    timeout_s: float | None = None,
    progress: bool = True,
) -> tuple[float, dict[str, list[Snapshot]], int]:
    """Scrape all targets every ``interval_s`` for ``duration_s``; (t0, snapshots, skipped ticks).

    Snapshot times are offsets from ``t0``, the epoch time of the first round.

    Timestamps are the nominal tick times; a tick that could not start within half an interval
    of its time (a slow target held the previous one) is skipped rather than mis-stamped.
    """
    n_ticks = math.floor(duration_s / interval_s + 1e-9)
    timeout = timeout_s if timeout_s is not None else max(0.5, min(interval_s, 10.0))
    kwargs = (auth or HttpAuth()).client_kwargs()
    snaps: dict[str, list[Snapshot]] = {u: [] for u in urls}
    skipped = 0
    advance, stop = _progress(progress, n_ticks + 1)
    t0 = time.time()
    m0 = time.monotonic()
    try:
        with (
            httpx.Client(timeout=timeout, **kwargs) as client,
            ThreadPoolExecutor(max_workers=min(32, len(urls))) as pool,
        ):
            for k in range(n_ticks + 1):
                due = m0 + k * interval_s
                lag = time.monotonic() - due
                if lag < 0:
                    time.sleep(-lag)
                elif k > 0 and lag > interval_s / 2:
                    skipped += 1
                    advance()
                    continue
                stamps = [k * interval_s] * len(urls)
                fetched = pool.map(_fetch, [client] * len(urls), urls, stamps)
                for url, snap in zip(urls, fetched, strict=True):
                    snaps[url].append(snap)
                advance()
    finally:
        stop()
    return t0, snaps, skipped


def load_scrape(
    urls: Sequence[str],
    *,
    duration_s: float,
    interval_s: float,
    dialect: str | None = None,
    progress: bool = True,
    window_s: float | None = None,
    auth: HttpAuth | None = None,
    timeout_s: float | None = None,
    thresholds: Thresholds = DEFAULT_THRESHOLDS,
) -> Evidence:
    """Scrape ``urls`` for ``duration_s`` and reduce to per-window, per-unit Evidence.

    One target down gives a note and a partial result; all down raises SourceError.
    """
    if not urls:
        raise UsageError("no /metrics URL given")
    if interval_s <= 0 or duration_s <= 0:
        raise UsageError("duration and interval must be positive")
    w = window_s or choose_window(duration_s, thresholds.target_windows, thresholds.min_window_s)
    if w < interval_s:
        raise UsageError(f"window {w:g}s is shorter than the scrape interval {interval_s:g}s")
    n_windows = math.floor(duration_s / w + 1e-9)
    if n_windows < 1:
        raise UsageError(f"duration {duration_s:g}s is shorter than one window of {w:g}s")
    instances = [instance_of(u) for u in urls]
    if len(set(instances)) != len(instances):
        raise UsageError("two URLs name the same host:port; give each target once")
    t0, snaps, skipped = collect(
        urls,
        duration_s=n_windows * w,
        interval_s=interval_s,
        auth=auth,
        timeout_s=timeout_s,
        progress=progress,
    )
    notes: list[str] = []
    if skipped:
        notes.append(f"{skipped} scrape rounds were skipped because targets answered slowly")
    if abs(n_windows * w - duration_s) > 1e-6:
        notes.append(f"scraped {n_windows * w:g}s: whole windows of {w:g}s only")
    return evidence_from_targets(
        snaps, t0=t0, window_s=w, n_windows=n_windows, dialect=dialect, notes=notes
    )


def evidence_from_targets(
    snaps: Mapping[str, Sequence[Snapshot]],
    *,
    t0: float,
    window_s: float,
    n_windows: int,
    dialect: str | None = None,
    notes: Iterable[str] = (),
) -> Evidence:
    """Per-URL scrapes -> Evidence: a target whose scrapes all failed is left out with a note,
    partial failures are noted; all targets down raises SourceError. Shared by ``load_scrape``
    and watch's rolling sampler."""
    all_notes = list(notes)
    good: dict[str, Sequence[Snapshot]] = {}
    for url, target_snaps in snaps.items():
        inst = instance_of(url)
        failed = [s for s in target_snaps if s.samples is None]
        if len(failed) == len(target_snaps):
            why = failed[0].error if failed else "no scrape yet"
            all_notes.append(f"target {inst} is down: {why}; analysed the others")
            continue
        if failed:
            all_notes.append(
                f"target {inst}: {len(failed)} of {len(target_snaps)} scrapes failed "
                f"(first: {failed[0].error})"
            )
        good[inst] = target_snaps
    if not good:
        first = next((s.error for ss in snaps.values() for s in ss if s.error), "no scrape")
        raise SourceError(f"all {len(snaps)} /metrics targets are down (e.g. {first})")
    return evidence_from_snapshots(
        good, t0=t0, window_s=window_s, n_windows=n_windows, dialect=dialect, notes=all_notes
    )
