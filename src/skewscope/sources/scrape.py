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
from collections import defaultdict
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from urllib.parse import urlsplit

from skewscope.config import DEFAULT_THRESHOLDS, Thresholds
from skewscope.errors import SourceError, UsageError
from skewscope.frame import (
    BOUND_LOWER,
    BOUND_UPPER,
    WINDOWS,
    Evidence,
    Level,
    WindowPolicy,
    bound_column,
)
from skewscope.sources.auth import HttpAuth, normalise_url, quoted
from skewscope.sources.collect import Snapshot, collect
from skewscope.sources.devices import (
    SIGNAL_OF_ROLE,
    DeviceMap,
    DeviceSeries,
    device_values,
    engines_from_keys,
    merge_values,
)
from skewscope.sources.dialects import (
    ROLES,
    SIGNAL_SPECS,
    Alias,
    Dialect,
    Kind,
    SignalSpec,
    detect_dialect,
    get_dialect,
    normalise_name,
    resolve,
    resolve_devices,
    unit_of,
)
from skewscope.sources.evidence import Key, Values, build_evidence
from skewscope.sources.exposition import Labels, parse_exposition
from skewscope.sources.validate import parse_bound

__all__ = [
    "Snapshot",
    "collect",
    "evidence_from_snapshots",
    "evidence_from_targets",
    "load_scrape",
    "parse_exposition",
]

Point = tuple[float, float | None]  # (scrape time, value; None: series absent from that scrape)


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
    points: Sequence[Point], t0: float, window_s: float, lost: Collection[float] = ()
) -> dict[int, float]:
    """Per-window increase of one counter series from its successive samples.

    ``points`` are (time, value) for every successful scrape of the target, value None when
    the series was absent. A series that appears after a successful scrape without it is new:
    its whole value is counted. A drop means a reset: the new value is counted from 0. A window
    in which the series has a sample but no increase gets 0, so the result is never negative.
    ``lost`` are times of failed scrapes: the increase across such a gap is unknown, so the
    next sample is a new baseline. A window with only non-finite samples is NaN (missing).
    """
    out: dict[int, float] = {}
    nonfinite: set[int] = set()
    prev: float | None = None
    seen_target = False
    after_loss = False
    gaps = sorted(lost)
    g = 0
    for t, v in points:
        while g < len(gaps) and gaps[g] < t:
            prev, seen_target, after_loss, g = None, False, True, g + 1
        if v is not None and not math.isfinite(v):
            nonfinite.add(window_index(t, t0, window_s))
            continue
        if v is not None:
            k = window_index(t, t0, window_s)
            if prev is None:  # first sample of a new series (or the baseline scrape)
                if not after_loss:
                    out[k] = out.get(k, 0.0) + (v if seen_target else 0.0)
            else:  # a drop is a reset: the counter restarted from 0
                out[k] = out.get(k, 0.0) + (v - prev if v >= prev else v)
            after_loss = False
        prev = v
        seen_target = True
    for k in nonfinite - out.keys():
        out[k] = math.nan
    return out


_ACROSS: dict[str, Callable[[list[float]], float]] = {
    "sum": sum,
    "avg": lambda xs: sum(xs) / len(xs),
    "max": max,
    "min": min,
}


def gauge_reduce(
    points: Sequence[Point], t0: float, window_s: float, how: str
) -> dict[int, float]:
    """Per-window avg/max/min of one gauge series (of its finite samples)."""
    buckets: dict[int, list[float]] = defaultdict(list)
    for t, v in points:
        if v is not None:
            buckets[window_index(t, t0, window_s)].append(v)
    fn = _ACROSS[how]
    out: dict[int, float] = {}
    for k, xs in buckets.items():
        finite = [x for x in xs if math.isfinite(x)]
        out[k] = fn(finite) if finite else math.nan  # only NaN/Inf: missing, said in a note
    return out


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
    if not total > 0 or math.isinf(total):  # no observations, or NaN/Inf counts: unknown
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


def bucket_quantile_bound(q: float, buckets: Mapping[float, float]) -> float:
    """Whether ``bucket_quantile`` answers a bucket bound (frame.BOUND_UPPER: the rank is the
    cumulative count at a bound, the truth is at most it; frame.BOUND_LOWER: the rank is in the
    +Inf bucket, the truth is above the highest finite bound), else NaN (interpolated)."""
    value = bucket_quantile(q, buckets)
    if math.isnan(value):
        return math.nan
    bounds = sorted(buckets)
    counts = [max(buckets[b] for b in bounds[: i + 1]) for i in range(len(bounds))]
    if q * counts[-1] > counts[-2]:
        return BOUND_LOWER
    if any(math.isclose(value, b, rel_tol=1e-12) for b in bounds[:-1]):
        return BOUND_UPPER
    return math.nan


# ------------------------------------------------------------------------------------------------
# Snapshots -> per-level values


def _series_points(snaps: Sequence[Snapshot], name: str, alias: Alias) -> dict[Labels, list[Point]]:
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
    for labels, points in _series_points(snaps, name, alias).items():
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
    return {key: _ACROSS[how](vs) for key, vs in groups.items()}


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
    if role.kind is Kind.COUNTER:
        vals = _combine(_grouped(snaps, alias.name, alias, level, inc, bad), "sum")
    elif role.kind is Kind.GAUGE:
        red = lambda pts: gauge_reduce(pts, 0.0, w, spec.over_time)  # noqa: E731
        vals = _combine(_grouped(snaps, alias.name, alias, level, red, bad), spec.across)
    elif spec.over_time == "quantile":
        assert spec.quantile is not None
        per_le = _bucket_increases(alias, snaps, level, inc, bad)
        vals = {key: bucket_quantile(spec.quantile, b) for key, b in per_le.items()}
    else:
        total = _combine(_grouped(snaps, alias.name + "_sum", alias, level, inc, bad), "sum")
        count = _combine(_grouped(snaps, alias.name + "_count", alias, level, inc, bad), "sum")
        vals = {k: (total[k] / c if c > 0 else math.nan) for k, c in count.items() if k in total}
    return {k: v * role.scale * alias.scale for k, v in vals.items()}


def _dead_windows(snaps: Sequence[Snapshot], window_s: float, n_windows: int) -> list[int]:
    """Windows in which every scrape of a target failed (its values there are unknown)."""
    good = {window_index(s.t, 0.0, window_s) for s in snaps if s.samples is not None}
    tried = {window_index(s.t, 0.0, window_s) for s in snaps}
    return sorted(k for k in tried - good if k < n_windows)


def _mark_missing(tables: Values, inst: str, dead: list[int], t0: float, w: float) -> None:
    """Give the units of ``inst`` NaN (missing, never 0) in its dead windows, in every table."""
    for table in tables.values():
        units = {dp for (_, i, dp) in table if i == inst}
        for k in dead:
            for dp in units:
                table.setdefault((round(t0 + k * w, 6), inst, dp), math.nan)


def _source_notes(snapshots: Mapping[str, Sequence[Snapshot]], bad: list[str]) -> list[str]:
    notes = []
    for inst, snaps in snapshots.items():
        dropped = [s for s in snaps if s.malformed]
        if dropped:
            n = sum(s.malformed for s in dropped)
            notes.append(
                f"target {inst}: dropped {n} malformed exposition line(s) in {len(dropped)} of "
                f"{len(snaps)} scrapes (e.g. {dropped[0].example})"
            )
    if bad:
        notes.append(
            f"skipped {len(bad)} series with an unusable label (e.g. {sorted(set(bad))[0]}): "
            "a DP label must be a rank like 0, a bucket bound a number"
        )
    return notes


def _bucket_increases(
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
    for key, b in _bucket_increases(alias, snaps, level, inc, []).items():
        flag = bucket_quantile_bound(spec.quantile, b)
        if not math.isnan(flag):
            out[key] = flag
    return out


def _device_series(
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
            for labels, points in _series_points(snaps, alias.name, alias).items():
                per_w = gauge_reduce(points, 0.0, window_s, "avg")
                values = {
                    round(t0 + k * window_s, 6): v * alias.scale
                    for k, v in per_w.items()
                    if k < n_windows and math.isfinite(v)
                }
                series.append(DeviceSeries(exporter, inst, dict(labels), role, values))
    return series, aliases


def evidence_from_snapshots(
    snapshots: Mapping[str, Sequence[Snapshot]],
    *,
    t0: float,
    window_s: float,
    n_windows: int,
    dialect: str | None = None,
    notes: Iterable[str] = (),
    device_map: DeviceMap | None = None,
) -> Evidence:
    """Reduce per-target snapshots (instance -> scrapes in time order) into Evidence.

    Snapshot times are offsets from ``t0`` (epoch seconds of the first scrape). A target whose
    scrapes all failed in some windows (it died, or came up late) keeps the evidence of its
    other windows; its units are missing (null, not 0) in those windows, with a note.
    """
    names = {s[0] for snaps in snapshots.values() for snap in snaps for s in snap.samples or ()}
    chosen: Dialect = get_dialect(dialect or detect_dialect(names))
    resolved = {lvl: resolve(chosen, names, lvl) for lvl in (Level.INSTANCE, Level.DP)}
    all_notes = [f"dialect: {chosen.name} ({'given' if dialect else 'detected'})", *notes]
    dp_wanted = bool(resolved[Level.DP])
    per_level: dict[Level, Values] = {Level.INSTANCE: {}, Level.DP: {}}
    bad: list[str] = []
    for level in (Level.INSTANCE, Level.DP):
        if level is Level.DP and not dp_wanted:
            continue
        for spec in SIGNAL_SPECS:
            alias = resolved[level].get(spec.signal)
            if alias is None:
                continue
            table: dict[Key, float] = {}
            for inst, snaps in snapshots.items():
                got = signal_values(spec, alias, snaps, level, window_s, bad)
                for ((named, dp), k), v in got.items():
                    if k < n_windows:
                        table[(round(t0 + k * window_s, 6), named or inst, dp)] = v
            if table:
                per_level[level][spec.signal] = table
            if table and spec.over_time == "quantile":  # frame.py: which values are bounds
                marks = {
                    (round(t0 + k * window_s, 6), named or inst, dp): flag
                    for inst, snaps in snapshots.items()
                    for ((named, dp), k), flag in quantile_bounds(
                        spec, alias, snaps, level, window_s
                    ).items()
                    if k < n_windows
                }
                if marks:
                    per_level[level][bound_column(spec.signal)] = marks
    all_notes += _source_notes(snapshots, bad)
    devices, device_aliases = _device_series(snapshots, names, t0, window_s, n_windows)
    if devices:
        engines = engines_from_keys(
            [*per_level[Level.INSTANCE].values(), *per_level[Level.DP].values()]
        )
        tables, device_notes = device_values(devices, engines, device_map)
        for level in per_level:
            per_level[level] = merge_values(per_level[level], tables[level])
        all_notes += device_notes
    for inst, snaps in snapshots.items():
        dead = _dead_windows(snaps, window_s, n_windows)
        if not dead:
            continue
        for values in per_level.values():
            _mark_missing(values, inst, dead, t0, window_s)
        first_error = next(s.error for s in snaps if s.samples is None)
        all_notes.append(
            f"target {inst} answered no scrape in {len(dead)} of {n_windows} windows "
            f"(windows {_ranges(dead)}, e.g. {first_error}); its values there are missing, "
            "not zero"
        )
    return build_evidence(
        per_level[Level.INSTANCE],
        per_level[Level.DP] if dp_wanted else None,
        resolved=resolved[Level.INSTANCE],
        dp_resolved=resolved[Level.DP],
        extra_aliases=device_aliases,
        names=names,
        window_s=window_s,
        source="scrape",
        notes=all_notes,
    )


def _ranges(ks: list[int]) -> str:
    """[1, 2, 3, 7] -> '1-3, 7' (window indexes, 0-based)."""
    parts: list[str] = []
    start = prev = ks[0]
    for k in [*ks[1:], None]:
        if k is not None and k == prev + 1:
            prev = k
            continue
        parts.append(str(start) if start == prev else f"{start}-{prev}")
        if k is not None:
            start = prev = k
    return ", ".join(parts)


# ------------------------------------------------------------------------------------------------
# Loading


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
    device_map: DeviceMap | None = None,
    windows: WindowPolicy = WINDOWS,
) -> Evidence:
    """Scrape ``urls`` for ``duration_s`` and reduce to per-window, per-unit Evidence.

    One target down gives a note and a partial result; all down raises SourceError. Ctrl-C
    stops the collection: the whole windows gathered so far are diagnosed, with a note. An
    ambient token (``auth.token_ambient``) is never sent to /metrics targets.
    """
    if not urls:
        raise UsageError("no /metrics URL given")
    for name, value in (("duration", duration_s), ("interval", interval_s)):
        if not (math.isfinite(value) and value > 0):
            raise UsageError(f"{name} must be a positive number of seconds, got {value}")
    if timeout_s is not None and not (math.isfinite(timeout_s) and timeout_s > 0):
        raise UsageError(f"timeout must be a positive number of seconds, got {timeout_s}")
    w = window_s or windows.choose(duration_s)
    if w < interval_s:
        raise UsageError(f"window {w:g}s is shorter than the scrape interval {interval_s:g}s")
    n_windows = math.floor(duration_s / w + 1e-9)
    if n_windows < 1:
        raise UsageError(f"duration {duration_s:g}s is shorter than one window of {w:g}s")
    notes: list[str] = []
    normalised = [normalise_url(u, "--scrape") for u in urls]
    urls = [u for u, _ in normalised]
    notes += [n for _, n in normalised if n]
    instances = [instance_of(u) for u in urls]
    if len(set(instances)) != len(instances):
        raise UsageError("two URLs name the same host:port; give each target once")
    auth, auth_notes = _scrape_auth(auth, urls)
    notes += auth_notes
    got = collect(
        urls,
        duration_s=n_windows * w,
        interval_s=interval_s,
        auth=auth,
        timeout_s=timeout_s,
        progress=progress,
        thresholds=thresholds,
    )
    if got.skipped:
        notes.append(f"{got.skipped} scrape rounds were skipped because targets answered slowly")
    if got.interrupted_at is not None:
        done = math.floor(got.interrupted_at / w + 1e-9)
        if done < 1 or not got.rounds:
            raise SourceError(
                f"interrupted after {got.interrupted_at:.0f}s, before one whole window of "
                f"{w:g}s was collected; nothing to diagnose"
            )
        notes.append(
            f"interrupted (Ctrl-C) after {got.interrupted_at:.0f}s of {n_windows * w:g}s: "
            f"diagnosed the {min(done, n_windows)} whole window(s) collected so far"
        )
        n_windows = min(done, n_windows)
    elif abs(n_windows * w - duration_s) > 1e-6:
        notes.append(f"scraped {n_windows * w:g}s: whole windows of {w:g}s only")
    snaps = {u: [s for s in got.snaps[u] if window_index(s.t, 0.0, w) < n_windows] for u in urls}
    return evidence_from_targets(
        snaps,
        t0=got.t0,
        window_s=w,
        n_windows=n_windows,
        dialect=dialect,
        notes=notes,
        device_map=device_map,
    )


def _scrape_auth(auth: HttpAuth | None, urls: Sequence[str]) -> tuple[HttpAuth | None, list[str]]:
    """Credentials for /metrics targets: explicit ones only (``collect`` drops an ambient
    token whoever calls it), and notes saying so and naming plain-http targets."""
    if auth is None:
        return None, []
    notes = []
    if auth.token_ambient:
        notes.append(
            "the bearer token from the default environment variable is for --prometheus only; "
            "it was not sent to /metrics targets (name it with --token-env to send it)"
        )
        auth = auth.without_ambient()
    plain = [u for u in urls if urlsplit(u).scheme.lower() == "http"]
    if auth.has_credentials and plain:
        notes.append(
            f"credentials were sent over plain http (unencrypted) to {len(plain)} target(s)"
        )
    return auth, notes


def evidence_from_targets(
    snaps: Mapping[str, Sequence[Snapshot]],
    *,
    t0: float,
    window_s: float,
    n_windows: int,
    dialect: str | None = None,
    notes: Iterable[str] = (),
    device_map: DeviceMap | None = None,
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
        good,
        t0=t0,
        window_s=window_s,
        n_windows=n_windows,
        dialect=dialect,
        notes=all_notes,
        device_map=device_map,
    )
