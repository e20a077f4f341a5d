"""Per-unit summaries over the judged windows: the numbers put side by side, hot against idle."""

from __future__ import annotations

import numpy as np

from skewscope.analysis.matrix import (
    LOWER,
    MIXED,
    UPPER,
    Array,
    Flags,
    SignalMatrix,
    combine_bounds,
    median,
    nanmean,
    nansum,
    safe_ratio,
)


def unit_summary(m: SignalMatrix, j: int, mask: Flags) -> dict[str, float]:
    """Summarise unit ``j`` over the windows selected by ``mask`` (NaN = not measured); each
    (unit, windows) is computed once per matrix (``SignalMatrix.summaries``), a copy returned."""
    key = (j, mask.dtype.str, mask.tobytes())
    done = m.summaries.get(key)
    if done is None:
        done = m.summaries[key] = _summarise(m, j, mask)
    return dict(done)


def _summarise(m: SignalMatrix, j: int, mask: Flags) -> dict[str, float]:
    def col(sig: str) -> Array:
        out: Array = m.get(sig)[mask, j]
        return out

    req, prompt, gen = (
        nansum(col("requests")),
        nansum(col("prompt_tokens")),
        nansum(col("generation_tokens")),
    )
    busy, steps = nansum(col("busy_ms")), nansum(col("steps"))
    scheduled = nansum(col("scheduled_tokens"))
    work_tokens = (
        scheduled if np.isfinite(scheduled) and scheduled > 0 else nansum(col("total_tokens"))
    )
    free = col("free_blocks_min")
    return {
        "requests_per_s": nanmean(col("requests")) / m.window_s,
        "prompt_tokens_per_request": safe_ratio(prompt, req),
        "generation_tokens_per_request": safe_ratio(gen, req),
        "tokens_per_s": nanmean(col("total_tokens")) / m.window_s,
        "batch_size": nanmean(col("batch_size")),
        "scheduled_tokens_per_s": nanmean(col("scheduled_tokens")) / m.window_s,
        "step_time_ms": safe_ratio(busy, steps),
        "cost_us_per_token": safe_ratio(busy * 1000.0, work_tokens),
        "running": nanmean(col("running")),
        "waiting": nanmean(col("waiting")),
        "queue_wait_mean_ms": nanmean(col("queue_wait_mean_ms")),
        "queue_wait_p95_ms": nanmean(col("queue_wait_p95_ms")),
        "ttft_mean_ms": nanmean(col("ttft_mean_ms")),
        "ttft_p99_ms": nanmean(col("ttft_p99_ms")),
        "e2e_mean_ms": nanmean(col("e2e_mean_ms")),
        "e2e_p99_ms": nanmean(col("e2e_p99_ms")),
        "kv_usage": nanmean(col("kv_usage")),
        "kv_usage_max": float(np.nanmax(col("kv_usage_max")))
        if np.isfinite(col("kv_usage_max")).any()
        else float("nan"),
        "free_blocks_min": float(np.nanmin(free)) if np.isfinite(free).any() else float("nan"),
        "alloc_free_ratio": safe_ratio(
            nansum(col("blocks_allocated")), nansum(col("blocks_freed"))
        ),
        "preemptions": nansum(col("preemptions")),
        "device_util": nanmean(col("device_util")),
        "busy_share": nanmean(col("busy_ms")) / (m.window_s * 1000.0),
    }


def reference_summary(summaries: list[dict[str, float]]) -> dict[str, float]:
    """Median over the reference (idle / normal) units, metric by metric."""
    if not summaries:
        return {}
    out: dict[str, float] = {}
    for key in summaries[0]:
        vals = np.array([s[key] for s in summaries], dtype=np.float64)
        finite = vals[np.isfinite(vals)]
        out[key] = median(finite) if finite.size else float("nan")
    return out


PER_REQUEST = ("prompt_tokens_per_request", "generation_tokens_per_request")


def with_measured_weight(
    ref: dict[str, float],
    summaries: list[dict[str, float]],
    served: list[float],
    min_requests: float,
) -> dict[str, float]:
    """The reference's tokens per request from the units that served ``min_requests`` or more
    (a unit with a stray request or two measures no weight); NaN when none did."""
    kept = [s for s, n in zip(summaries, served, strict=True) if n >= min_requests]
    if len(kept) == len(summaries):
        return ref
    measured = reference_summary(kept)
    return {**ref, **{k: measured.get(k, float("nan")) for k in PER_REQUEST}}


def unit_bounds(m: SignalMatrix, j: int, mask: Flags) -> dict[str, str]:
    """Percentile metrics of unit ``j`` that rest on bucket bounds: metric -> upper/lower/mixed.

    The summary of a percentile is the mean over windows, so one bounded window bounds it."""
    out: dict[str, str] = {}
    for sig, flags in m.bounds.items():
        measured = mask & np.isfinite(m.get(sig)[:, j])
        mark = combine_bounds(flags[measured, j])
        if mark:
            out[sig] = mark
    return out


def reference_bounds(per_unit: list[dict[str, str]]) -> dict[str, str]:
    """Bounds of the peers' median: upper if any peer's value is an upper bound, and so on."""
    out: dict[str, str] = {}
    for key in {k for b in per_unit for k in b}:
        marks = {b[key] for b in per_unit if key in b}
        up, low = marks & {UPPER, MIXED}, marks & {LOWER, MIXED}
        out[key] = MIXED if up and low else UPPER if up else LOWER
    return out
