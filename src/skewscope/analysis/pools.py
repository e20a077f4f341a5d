"""Prefill/decode imbalance: the two pools of a disaggregated fleet compared with each other.

Inside a pool, units are judged against their own pool only (``matrix.build_matrix`` makes the
pool the peer group), so a prefill worker is never a hot spot against decode workers. Between
the pools there is no peer to compare: a prefill instance does different work than a decode
instance. What can be wrong there is the split itself — one pool queueing while the other has
capacity to spare — which no hot-unit rule can see. This module finds it per window from the
pools' own pressure (waiting, KV usage, running) and reports it as one finding with both pools'
figures side by side.
"""

from __future__ import annotations

import math

import numpy as np
import numpy.typing as npt

from skewscope.analysis.causes import fixed, rank
from skewscope.analysis.detect import longest_run, persists
from skewscope.analysis.findings import side_by_side
from skewscope.analysis.matrix import Array, Flags, SignalMatrix, nanmean
from skewscope.analysis.summary import reference_summary, unit_summary
from skewscope.analysis.timeline import timeline
from skewscope.catalogue import DECODE, PREFILL, Cause, Kind, Severity
from skewscope.config import Thresholds
from skewscope.report.facts import PdFacts
from skewscope.report.model import Finding

Cols = npt.NDArray[np.intp]
PD_SIDE_BY_SIDE = (
    "requests_per_s",
    "prompt_tokens_per_request",
    "running",
    "waiting",
    "kv_usage",
    "queue_wait_p95_ms",
    "ttft_p99_ms",
)


def _pool_mean(m: SignalMatrix, signal: str, cols: Cols) -> Array:
    """Per window, the mean of ``signal`` over the pool's units that reported it (NaN: none)."""
    block = m.get(signal)[:, cols]
    n = np.isfinite(block).sum(axis=1)
    with np.errstate(invalid="ignore"):
        return np.where(n > 0, np.nansum(block, axis=1) / np.maximum(n, 1), np.nan)


def pd_findings(m: SignalMatrix, th: Thresholds) -> list[Finding]:
    """The P/D imbalance finding of an instance-level matrix with a prefill and a decode pool
    (none otherwise, or when neither pool is persistently saturated while the other idles)."""
    if not m.pools or PREFILL not in m.pools or DECODE not in m.pools:
        return []
    pools = np.array(m.pools)
    cols = {p: np.flatnonzero(pools == p) for p in (PREFILL, DECODE)}
    run = {p: _pool_mean(m, "running", c) for p, c in cols.items()}
    wait = {p: _pool_mean(m, "waiting", c) for p, c in cols.items()}
    kv = {p: _pool_mean(m, "kv_usage", c) for p, c in cols.items()}
    both = np.isfinite(wait[PREFILL]) & np.isfinite(wait[DECODE])
    if int(both.sum()) < th.min_windows:
        return []
    with np.errstate(invalid="ignore", divide="ignore"):
        ratio = run[PREFILL] / np.maximum(run[DECODE], th.floor_running)

    def saturated(p: str) -> Flags:
        queueing = np.nan_to_num(wait[p]) >= th.pd_min_waiting
        full = np.nan_to_num(kv[p]) >= th.kv_high
        return queueing | full

    def idle(p: str) -> Flags:
        quiet = np.nan_to_num(wait[p], nan=np.inf) < th.pd_idle_waiting
        roomy = np.nan_to_num(kv[p]) < th.pd_idle_kv  # KV not measured: the queue decides
        return quiet & roomy

    bound = {
        PREFILL: both
        & (
            saturated(PREFILL) & idle(DECODE)
            | (np.nan_to_num(ratio) > th.pd_running_ratio)
            & (np.nan_to_num(wait[PREFILL]) >= th.pd_min_waiting)
        ),
        DECODE: both & saturated(DECODE) & idle(PREFILL),
    }
    n = int(both.sum())
    out = []
    for sat, idl in ((PREFILL, DECODE), (DECODE, PREFILL)):
        flags = bound[sat]
        share, longest = float(flags.sum()) / n, longest_run(flags)
        if not persists(share, longest, th):
            continue
        out.append(_finding(m, sat, idl, flags, both, cols, (ratio, wait, kv), share, longest, th))
    return out[:1]  # both directions at once cannot hold in the same windows: keep the first


def _finding(
    m: SignalMatrix,
    sat: str,
    idl: str,
    flags: Flags,
    both: Flags,
    cols: dict[str, Cols],
    series: tuple[Array, dict[str, Array], dict[str, Array]],
    share: float,
    longest: int,
    th: Thresholds,
) -> Finding:
    ratio, wait, kv = series
    hot = reference_summary([unit_summary(m, int(j), flags) for j in cols[sat]])
    ref = reference_summary([unit_summary(m, int(j), flags) for j in cols[idl]])
    ttft = (
        np.nanmean(
            np.where(np.isfinite(m.get("ttft_mean_ms")), m.get("ttft_mean_ms"), np.nan), axis=1
        )
        if m.has("ttft_mean_ms")
        else None
    )
    edge = th.trend_min_points  # windows at each end of the range
    first = nanmean(ttft[:edge]) if ttft is not None else math.nan
    last = nanmean(ttft[-edge:]) if ttft is not None else math.nan
    facts = PdFacts(
        saturated=sat,
        idle=idl,
        share=share,
        windows=int(both.sum()),
        run=longest,
        prefill_units=int(cols[PREFILL].size),
        decode_units=int(cols[DECODE].size),
        running_ratio=nanmean(ratio[flags]),
        saturated_waiting=nanmean(wait[sat][flags]),
        idle_waiting=nanmean(wait[idl][flags]),
        saturated_kv=nanmean(kv[sat][flags]),
        idle_kv=nanmean(kv[idl][flags]),
        ttft_first_ms=first,
        ttft_last_ms=last,
    )
    rising = math.isfinite(first) and math.isfinite(last) and last >= th.impact_ratio * first
    evidence = {
        "saturated_pool": sat,
        "idle_pool": idl,
        "bound_share": share,
        "bound_windows": int(flags.sum()),
        "windows": int(both.sum()),
        "longest_run": longest,
        "pd_ratio": f"{cols[PREFILL].size}:{cols[DECODE].size}",
        "running_ratio_prefill_decode": facts.running_ratio,
        "waiting_per_unit": {sat: facts.saturated_waiting, idl: facts.idle_waiting},
        "kv_usage": {sat: facts.saturated_kv, idl: facts.idle_kv},
        "ttft_mean_ms": {"first": first, "last": last},
    }
    votes = fixed(Cause.PD_RATIO)
    return Finding(
        kind=Kind.PD_IMBALANCE,
        units=tuple(m.units[int(j)] for j in cols[sat]),
        reference_units=tuple(m.units[int(j)] for j in cols[idl]),
        severity=Severity.HIGH if rising else Severity.MEDIUM,
        facts=facts,
        evidence=evidence,
        root_causes=rank(votes),
        votes=votes,
        side_by_side=side_by_side(hot, ref, keys=PD_SIDE_BY_SIDE),
        timeline=timeline(m, flags, both),
    )
