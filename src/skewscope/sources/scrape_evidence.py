"""Per-target scrapes -> Evidence: every signal of the dialect at both levels, quantile bound
marks, device exporters joined, and the targets' failures kept as missing values with notes.

Shared by ``scrape.load_scrape`` (one collection) and watch's rolling sampler. A target whose
scrapes all failed in a window is missing there (null, never 0); a trailing partial window is
the caller's to drop (``n_windows``). Instance name = ``host:port`` of the URL.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from urllib.parse import urlsplit

from skewscope.errors import SourceError
from skewscope.frame import Evidence, Level, bound_column
from skewscope.sources.auth import quoted
from skewscope.sources.collect import Snapshot
from skewscope.sources.devices import DeviceMap, device_values, engines_from_keys, merge_values
from skewscope.sources.dialects import (
    SIGNAL_SPECS,
    DialectSpec,
    detect_dialect,
    get_dialect,
    resolve,
)
from skewscope.sources.evidence import Key, Values, build_evidence
from skewscope.sources.pools import resolve_pools
from skewscope.sources.scrape_series import device_series, quantile_bounds, signal_values
from skewscope.sources.scrape_windows import window_index


def instance_of(url: str) -> str:
    """``host:port`` of a target URL (the default port of its scheme when none is given)."""
    parts = urlsplit(url if "://" in url else "http://" + url)
    port = parts.port or (443 if parts.scheme == "https" else 80)
    host = parts.hostname or ""
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


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


def evidence_from_snapshots(
    snapshots: Mapping[str, Sequence[Snapshot]],
    *,
    t0: float,
    window_s: float,
    n_windows: int,
    dialect: str | None = None,
    notes: Iterable[str] = (),
    device_map: DeviceMap | None = None,
    role_label: str = "",
) -> Evidence:
    """Reduce per-target snapshots (instance -> scrapes in time order) into Evidence.

    Snapshot times are offsets from ``t0`` (epoch seconds of the first scrape). A target whose
    scrapes all failed in some windows (it died, or came up late) keeps the evidence of its
    other windows; its units are missing (null, not 0) in those windows, with a note.
    """
    names = {s[0] for snaps in snapshots.values() for snap in snaps for s in snap.samples or ()}
    chosen: DialectSpec = get_dialect(dialect or detect_dialect(names))
    resolved = {lvl: resolve(chosen, names, lvl) for lvl in (Level.INSTANCE, Level.DP)}
    all_notes = [f"dialect: {chosen.name} ({'given' if dialect else 'detected'})", *notes]
    dp_wanted = bool(resolved[Level.DP])
    per_level: dict[Level, Values] = {Level.INSTANCE: {}, Level.DP: {}}
    bad: list[str] = []
    twice: dict[str, set[str]] = {}  # a unit a label names -> the targets that exported it
    for level in (Level.INSTANCE, Level.DP):
        if level is Level.DP and not dp_wanted:
            continue
        for spec in SIGNAL_SPECS:
            alias = resolved[level].get(spec.signal)
            if alias is None:
                continue
            table: dict[Key, float] = {}
            origin: dict[str, str] = {}  # named unit -> the first target that exported it
            for inst, snaps in snapshots.items():
                got = signal_values(spec, alias, snaps, level, window_s, bad)
                for ((named, dp), k), v in got.items():
                    if k >= n_windows:
                        continue
                    key = (round(t0 + k * window_s, 6), named or inst, dp)
                    if named and origin.setdefault(named, inst) != inst:
                        # one unit from two targets (two router replicas): copies, read once
                        twice.setdefault(named, {origin[named]}).add(inst)
                        v = max(v, table.get(key, v))
                    table[key] = v
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
    all_notes += _source_notes(snapshots, bad) + _twice_note(twice)
    devices, device_aliases = device_series(snapshots, names, t0, window_s, n_windows)
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
    # a unit's pool does not change while it runs: its last answered scrape says it
    last = {
        inst: next((s.samples for s in reversed(snaps) if s.samples), ())
        for inst, snaps in snapshots.items()
    }
    pools, pool_notes = resolve_pools(
        chosen.name,
        role_label,
        lambda role: [
            (dict(labels), inst)
            for inst, samples in last.items()
            for _, labels, _ in samples
            if any(k == role.label and v for k, v in labels)
        ],
    )
    all_notes += pool_notes
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
        pools=pools,
    )


def _twice_note(twice: dict[str, set[str]]) -> list[str]:
    """The note naming units exported by more than one target (their copies read once)."""
    if not twice:
        return []
    shown = "; ".join(
        f"{quoted(u, 60)} from {', '.join(sorted(t))}" for u, t in sorted(twice.items())[:3]
    )
    more = f" and {len(twice) - 3} more" if len(twice) > 3 else ""
    return [
        f"{len(twice)} unit(s) exported by more than one scrape job or target: {shown}{more}; "
        "each series is read once (their max), not summed"
    ]


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


def evidence_from_targets(
    snaps: Mapping[str, Sequence[Snapshot]],
    *,
    t0: float,
    window_s: float,
    n_windows: int,
    dialect: str | None = None,
    notes: Iterable[str] = (),
    device_map: DeviceMap | None = None,
    role_label: str = "",
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
        role_label=role_label,
    )
