"""Gateway evidence across levels and over time.

- Levels: a DP-aware router (sglang-router / vllm-router ``--dp-aware``, an endpoint picker's
  ``<pod>-rank-<n>`` endpoints) names workers ``host:port@rank``; at instance level they are
  summed into their instance, at DP level each joins the DP unit of that rank.
- Time: per window, each upstream's share of the gateway's requests, and when the gateway
  started sending a unit more than its peers (so the report can say when routing diverged).
- Stale load: a router that picks by a load figure it polls decides on what it last saw; when
  its view of a unit's queue differs from the queue the engine measured, the bursts were
  shorter than its polling interval.
Pure functions; no source is read here.
"""

from __future__ import annotations

import math
from dataclasses import replace
from statistics import median

import numpy as np

from skewscope.catalogue import Level
from skewscope.config import Thresholds
from skewscope.frame import GatewayEvidence, GatewayUnit, split_rank, upstream_key
from skewscope.report.model import Report, StaleLoad, UnitReport


def engine_key(u: UnitReport) -> str:
    """The gateway's spelling of an engine unit: ``host:port``, ``host:port@rank`` for a rank."""
    return upstream_key(u.unit) if u.dp_rank is None else f"{upstream_key(u.instance)}@{u.dp_rank}"


def at_level(gw: GatewayEvidence, level: str) -> GatewayEvidence:
    """``gw`` as the units of ``level`` see it: at instance level a DP-aware router's
    ``url@rank`` workers are summed into ``url``; at DP level they stay per rank."""
    if level != Level.INSTANCE or not any(split_rank(u.upstream)[1] is not None for u in gw.units):
        return gw
    groups: dict[str, list[GatewayUnit]] = {}
    for u in gw.units:
        groups.setdefault(split_rank(u.upstream)[0], []).append(u)
    return replace(gw, units=tuple(_merged(k, us) for k, us in sorted(groups.items())))


def _nansum(values: list[float]) -> float:
    finite = [v for v in values if math.isfinite(v)]
    return float(sum(finite)) if finite else math.nan


def _nanmean(values: list[float]) -> float:
    finite = [v for v in values if math.isfinite(v)]
    return float(sum(finite) / len(finite)) if finite else math.nan


def _columns(rows: list[tuple[float, ...]]) -> tuple[float, ...]:
    rows = [r for r in rows if r]
    return tuple(_nansum(list(col)) for col in zip(*rows, strict=True)) if rows else ()


def _merged(upstream: str, ranks: list[GatewayUnit]) -> GatewayUnit:
    if len(ranks) == 1 and ranks[0].upstream == upstream:
        return ranks[0]
    keys: dict[str, float] = {}
    for u in ranks:
        for k, n in u.keys:
            keys[k] = keys.get(k, 0.0) + n
    sized = [
        (u.request_bytes, u.requests)
        for u in ranks
        if math.isfinite(u.request_bytes) and u.requests > 0
    ]
    return GatewayUnit(
        upstream=upstream,
        requests=_nansum([u.requests for u in ranks]),
        in_pool=any(u.in_pool for u in ranks),
        unhealthy_share=_nanmean([u.unhealthy_share for u in ranks]),
        breaker_open_share=_nanmean([u.breaker_open_share for u in ranks]),
        request_bytes=sum(b * n for b, n in sized) / sum(n for _, n in sized)
        if sized
        else math.nan,
        keys=tuple(sorted(keys.items(), key=lambda kv: -kv[1])),
        distinct_keys=max((u.distinct_keys for u in ranks), default=0),
        series=_columns([u.series for u in ranks]),
        load_series=_columns([u.load_series for u in ranks]),
    )


def share_series(units: tuple[GatewayUnit, ...]) -> dict[str, tuple[float, ...]]:
    """Per upstream, its share of the gateway's requests in each window (NaN: none sent)."""
    grid = np.array([u.series for u in units if u.series], dtype=float)
    if grid.size == 0:
        return {}
    total = np.nansum(grid, axis=0)
    with np.errstate(invalid="ignore", divide="ignore"):
        shares = np.where(total > 0, grid / np.where(total > 0, total, 1.0), np.nan)
    named = [u.upstream for u in units if u.series]
    return {u: tuple(float(v) for v in shares[i]) for i, u in enumerate(named)}


def diverged_from(
    units: tuple[GatewayUnit, ...], starts: tuple[float, ...], th: Thresholds
) -> dict[str, float]:
    """Per upstream the gateway sent at least ``count_ratio`` x its in-pool peers' median in
    ``min_consecutive`` windows running: the start of the first such run."""
    out: dict[str, float] = {}
    pool = [u for u in units if u.series and u.in_pool]
    for u in pool:
        run = 0
        for i, v in enumerate(u.series):
            peers = [p.series[i] for p in pool if p is not u and math.isfinite(p.series[i])]
            ref = float(median(peers)) if peers else math.nan
            more = v > 0 and (v >= th.count_ratio * ref if ref > 0 else ref == 0)
            run = run + 1 if more else 0
            if run >= th.min_consecutive:
                out[u.upstream] = starts[i - run + 1]
                break
    return out


def stale_load(
    report: Report, gw: GatewayEvidence, joined: dict[str, str], th: Thresholds
) -> tuple[StaleLoad, ...]:
    """Units whose queue, as the router polled it, differs from the queue their engine measured
    by ``gateway_stale_load_gap`` of the engine's mean or more; ``joined`` maps an upstream to
    its engine unit. Only for evidence whose load is the router's polled view."""
    waiting = report.series.values.get("waiting", {}) if report.series else {}
    if not gw.load_polled or not waiting or not gw.window_starts or report.series is None:
        return ()
    first, n = gw.window_starts[0], len(gw.window_starts)
    window_s = gw.window_starts[1] - first if n > 1 else math.nan
    if not window_s > 0:
        return ()
    slots = [round((t - first) / window_s) for t in report.series.window_starts]
    idx = [i if 0 <= i < n else None for i in slots]  # both on the engines' grid
    out = []
    for g in gw.units:
        unit = joined.get(g.upstream)
        if unit is None or unit not in waiting or not g.load_series:
            continue
        router = np.array([g.load_series[i] if i is not None else math.nan for i in idx])
        engine = np.array(waiting[unit], dtype=float)
        both = np.isfinite(router) & np.isfinite(engine)
        if both.sum() < th.min_consecutive:
            continue
        off_by = float(np.abs(router[both] - engine[both]).mean())
        gap = off_by / max(float(engine[both].mean()), th.floor_waiting)
        if gap < th.gateway_stale_load_gap:
            continue
        out.append(
            StaleLoad(
                unit,
                float(router[both].mean()),
                float(engine[both].mean()),
                off_by,
                gap,
                _lag(router, engine, th),
                window_s,
            )
        )
    return tuple(sorted(out, key=lambda s: -s.gap))


def _lag(router: np.ndarray, engine: np.ndarray, th: Thresholds) -> int:
    """The shift k (router at t + k against engine at t) that agrees best, 0..max lag."""
    best, best_k = math.inf, 0
    n = len(router)
    for k in range(min(th.gateway_stale_max_lag, n - th.min_consecutive) + 1):
        r, e = router[k:], engine[: n - k]
        ok = np.isfinite(r) & np.isfinite(e)
        if ok.sum() < th.min_consecutive:
            break
        d = float(np.abs(r[ok] - e[ok]).mean())
        if d < best:
            best, best_k = d, k
    return best_k
