"""Builds UnitFrames with known truth for the analysis tests (no simulator involved).

Each unit gets a request rate, input/output tokens per request and a speed factor; window
values are drawn with seeded Poisson/lognormal noise, and pressure signals follow from load:
busy time = tokens x cost x speed, running = rate x latency (Little's law).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import polars as pl

from skewscope.frame import Level, UnitFrame, conform, dp_unit_id


@dataclass
class Spec:
    rate: float = 20.0  # requests per window
    prompt: float = 1000.0  # input tokens per request
    output: float = 200.0  # output tokens per request
    speed: float = 1.0  # 1.0 nominal, 2.0 = twice as slow
    burst: dict[int, float] = field(default_factory=dict)  # window index -> rate multiplier
    until: int | None = None  # no traffic from this window on (failed health check)
    ramp: float = 0.0  # rate grows by this share of ``rate`` every window
    tail_ramp_ms: float = 0.0  # e2e latency grows by this much every window
    stalled_from: int | None = None  # engine hangs from this window: holds requests, no steps
    ceiling: float | None = None  # finishes at most this many requests per window (online)
    pool: str | None = None  # prefill/decode pool (None: aggregated serving)


def make_frame(
    specs: dict[str, Spec],
    *,
    windows: int = 24,
    window_s: float = 10.0,
    level: Level = Level.INSTANCE,
    seed: int = 7,
    source: str = "profiler",
) -> UnitFrame:
    rng = np.random.default_rng(seed)
    rows = []
    t0 = 1_745_000_000.0
    for name, s in specs.items():
        backlog = 0.0
        instance, rank = (name, None)
        if level == Level.DP:
            instance, r = name.split("/dp")
            rank = int(r)
        for w in range(windows):
            rate = s.rate * s.burst.get(w, 1.0) * (1.0 + s.ramp * w)
            if s.until is not None and w >= s.until:
                rate = 0.0
            n = int(rng.poisson(rate))
            prompt = float(rng.lognormal(np.log(s.prompt), 0.1) * n)
            gen = float(rng.lognormal(np.log(s.output), 0.1) * n)
            tokens = prompt + gen
            busy = tokens * 0.05 * s.speed * (1.0 + 0.05 * rng.standard_normal())
            util = busy / (window_s * 1000.0)
            queue = 20.0 * s.speed / max(1e-3, 1.0 - min(util, 0.95))
            e2e = s.speed * (60.0 + 0.02 * s.prompt + 15.0 * s.output) + queue
            e2e += s.tail_ramp_ms * w
            rows.append(
                {
                    "window_start_s": t0 + w * window_s,
                    "unit": dp_unit_id(instance, rank) if rank is not None else instance,
                    "instance": instance,
                    "dp_rank": rank,
                    "pool": s.pool,
                    "requests": float(n),
                    "prompt_tokens": prompt,
                    "generation_tokens": gen,
                    "running": n / window_s * e2e / 1000.0,
                    "waiting": n / window_s * queue / 1000.0,
                    "queue_wait_mean_ms": queue,
                    "queue_wait_p95_ms": queue * 2.5,
                    "ttft_mean_ms": queue + s.speed * 0.05 * s.prompt,
                    "ttft_p99_ms": (queue + s.speed * 0.05 * s.prompt) * 3,
                    "e2e_mean_ms": e2e,
                    "e2e_p99_ms": e2e * 2.0,
                    "steps": window_s * 1000.0 / 40.0,
                    "batch_size": max(1.0, n / window_s * e2e / 1000.0),
                    "scheduled_tokens": tokens,
                    "busy_ms": busy,
                    "kv_usage": min(1.0, 0.01 * n / window_s * e2e / 1000.0 + 0.1),
                    "kv_usage_max": min(1.0, 0.015 * n / window_s * e2e / 1000.0 + 0.1),
                }
            )
            if s.ceiling is not None and (n + backlog) > s.ceiling:
                # saturated: batch pinned at 16, the rest queues; requests = finished (online)
                backlog += n - s.ceiling
                share = s.ceiling / max(n, 1)
                rows[-1].update(
                    requests=s.ceiling,
                    prompt_tokens=prompt * share,
                    generation_tokens=gen * share,
                    running=16.0,
                    waiting=backlog,
                    batch_size=16.0,
                )
            if s.stalled_from is not None and w >= s.stalled_from:
                held = 8.0 + 2.0 * (w - s.stalled_from)  # queue keeps growing, nothing leaves
                rows[-1].update(
                    requests=0.0,
                    prompt_tokens=0.0,
                    generation_tokens=0.0,
                    steps=0.0,
                    scheduled_tokens=0.0,
                    busy_ms=0.0,
                    running=8.0,
                    waiting=held,
                    batch_size=None,
                    e2e_mean_ms=None,
                    e2e_p99_ms=None,
                    ttft_mean_ms=None,
                    ttft_p99_ms=None,
                    queue_wait_mean_ms=None,
                    queue_wait_p95_ms=None,
                )
    df = conform(pl.DataFrame(rows))
    return UnitFrame(df=df, level=level, window_s=window_s, source=source)
