"""What-if from online evidence (Prometheus, /metrics scrapes): a replayable workload and a
service model from per-window counters, gauges and histograms.

No request log exists online, so the workload is rebuilt per unit and window: arrivals = the
requests finished in the window plus the change of requests in the system (running + waiting),
so a queue that builds up counts its arrivals where they came; each window keeps its own count
(no Poisson smoothing across windows: a burst stays in its window), spread uniformly inside it.
Lengths are drawn from the unit's prompt and output length histograms, bucket by bucket, and
scaled toward the unit's counter mean inside their buckets; without histograms, every request of
a unit has the unit's mean length.
The service model is fitted like the profiler's, on one mean step per unit and window: the
inter-token latency (a decoding rank's step time) against the prefill tokens per step and the
running batch; on light load (too few windows average a running request) the mean ITL
gives the fixed step and the mean TTFT less the mean queue wait the prefill cost.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np
import polars as pl

from skewscope.config import WHATIF, WhatIfSettings
from skewscope.errors import InputError
from skewscope.notes import Note
from skewscope.notes import WhatifNoteCode as W
from skewscope.report.whatif_model import Metrics, WhatIfReport
from skewscope.sim.workload import Workload
from skewscope.sources.access_log import LoggedRequest
from skewscope.sources.online_workload import (
    Buckets,
    Unit,
    WorkloadEvidence,
    add_buckets,
    counted_at_start,
    histogram_quantile,
)
from skewscope.whatif.calibrate import DEFAULT, ServiceModel, fit_model, uncalibrated
from skewscope.whatif.extract import Layout, Observed, observe
from skewscope.whatif.lengths import draw_lengths
from skewscope.whatif.replay import _ratios

AccessLog = tuple[Sequence[LoggedRequest], str | None]  # logged requests and their key field
MIN_STEP_ROWS = 10  # unit-windows with a timed step needed to fit the step law
LIGHT_ESTIMATOR = "mean_itl_ttft"  # light load: steps from the ITL and TTFT means
KV_FLOOR = 0.05  # KV usage below this says little about the pool size


def _frame(we: WorkloadEvidence) -> tuple[pl.DataFrame, bool]:
    """The finest per-unit frame (DP ranks when known) and whether it is the DP one."""
    ev = we.evidence
    if ev.dp is not None and not ev.dp.df.is_empty():
        return ev.dp.df, True
    return ev.instance.df.with_columns(pl.lit(0, pl.Int64).alias("dp_rank")), False


def layout_from(df: pl.DataFrame) -> tuple[Layout, dict[tuple[str, int], int]]:
    """Instances (sorted) and their DP sizes; rank labels -> rank index within the instance."""
    pairs = sorted(set(df.select("instance", "dp_rank").iter_rows()))
    index: dict[tuple[str, int], int] = {}
    sizes: dict[str, int] = {}
    for inst, rank in pairs:
        index[(inst, rank)] = sizes.get(inst, 0)
        sizes[inst] = sizes.get(inst, 0) + 1
    names = tuple(sorted(sizes))
    if not names:
        raise InputError("whatif: the online source has no unit with samples in the range")
    return Layout(names, max(sizes.values()), tuple(sizes[n] for n in names)), index


def _lookup(table: Mapping[Unit, Buckets], inst: str, rank: int, dp: bool) -> Buckets | None:
    """A unit's histogram: its own (DP), else its instance's, else the fleet's."""
    if dp and (inst, rank) in table:
        return table[(inst, rank)]
    if (inst, None) in table:
        return table[(inst, None)]
    mine = [b for (i, _), b in table.items() if i == inst]
    if mine:
        return add_buckets(mine)
    return add_buckets(list(table.values())) if table else None


def _arrivals(
    rows: pl.DataFrame,
    end_held: np.ndarray,
    w: float,
    t0: float,
    rng: np.random.Generator,
    at_start: bool,
) -> np.ndarray:
    """Arrival times of one unit: per window, finished + change in requests in the system
    (running + waiting at the window's end; the window mean where that sample is missing),
    each window's count spread uniformly inside it (the first window also brings the requests
    already in the system at the start). ``at_start``: the request counter counts requests
    leaving the queue (SGLang per rank), so only the waiting ones are in between."""
    fin = rows["requests"].fill_null(0).to_numpy()
    mean_held = (
        rows["waiting"].fill_null(0)
        if at_start
        else rows["running"].fill_null(0) + rows["waiting"].fill_null(0)
    ).to_numpy()
    held = np.where(np.isnan(end_held), mean_held, end_held)
    prev = np.concatenate([[0.0], held[:-1]])
    expect = np.clip(fin + held - prev, 0.0, None)
    count = np.floor(expect) + (rng.uniform(size=expect.shape[0]) < expect % 1)
    starts = rows["window_start_s"].to_numpy() - t0
    out = [s + np.sort(rng.uniform(0.0, w, int(c))) for s, c in zip(starts, count, strict=True)]
    return np.concatenate(out) if out else np.zeros(0)


def workload_from(
    we: WorkloadEvidence, s: WhatIfSettings = WHATIF, logged: AccessLog | None = None
) -> tuple[Observed, pl.DataFrame, bool]:
    """The replayable workload and the current routing's shape, from online evidence (with
    session keys from the gateway's access log when ``logged``)."""
    df, dp = _frame(we)
    layout, index = layout_from(df)
    w = we.evidence.instance.window_s
    t0 = float(df["window_start_s"].min())  # type: ignore[arg-type]
    duration = float(df["window_start_s"].max()) + w - t0  # type: ignore[arg-type]
    rng = np.random.default_rng(s.seed)
    inst_of = {n: i for i, n in enumerate(layout.instances)}
    parts: list[tuple[np.ndarray, np.ndarray, np.ndarray, int, int]] = []
    notes: list[Note] = []
    hist = {r: we.buckets.get(r, {}) for r in ("prompt_length", "output_length")}
    frame = we.evidence.dp if dp and we.evidence.dp is not None else we.evidence.instance
    at_start = counted_at_start(frame.aliases.get("requests", ""))
    if at_start:
        notes.append(Note(W.COUNTED_AT_START, {"alias": frame.aliases["requests"]}))
    for (inst, rank), rows in df.sort("window_start_s").group_by(
        ["instance", "dp_rank"], maintain_order=True
    ):
        rows = rows.sort("window_start_s")
        table = we.waiting_at_end if at_start else we.held_at_end
        ends = np.array(
            [
                table.get(
                    (ws, str(inst), int(rank) if dp else None),
                    table.get((ws, str(inst), 0), np.nan),
                )
                for ws in rows["window_start_s"].to_list()
            ]
        )
        arr = _arrivals(rows, ends, w, t0, rng, at_start)
        done = float(rows["requests"].fill_null(0).sum())
        lengths = []
        for role, counter in (
            ("prompt_length", "prompt_tokens"),
            ("output_length", "generation_tokens"),
        ):
            total = rows[counter].fill_null(0).sum() if counter in rows.columns else 0
            mean = float(total) / done if done > 0 and total else None
            lengths.append(
                draw_lengths(rng, arr.shape[0], _lookup(hist[role], str(inst), int(rank), dp), mean)
            )
        parts.append(
            (arr, lengths[0], lengths[1], inst_of[str(inst)], index[(str(inst), int(rank))])
        )
    arrival = np.concatenate([p[0] for p in parts])
    order = np.argsort(arrival, kind="stable")
    n = arrival.shape[0]

    def col(k: int) -> np.ndarray:
        out: np.ndarray = np.concatenate([np.broadcast_to(p[k], p[0].shape) for p in parts])[order]
        return out

    wl = Workload(
        arrival_s=arrival[order],
        input_tokens=col(1).astype(np.int64),
        output_tokens=np.maximum(col(2), 1).astype(np.int64),
        tag=np.zeros(n, dtype=np.int64),
        session=np.full(n, -1, dtype=np.int64),
        instance_hint=col(3).astype(np.int64),
        rank_hint=col(4).astype(np.int64),
    )
    notes.append(Note(W.ONLINE_WORKLOAD, {"requests": n, "window_s": w}))
    for role, what in (("prompt_length", "prompt"), ("output_length", "output")):
        notes.append(Note(W.LENGTHS, {"what": what, "histogram": bool(hist[role])}))
    has_sessions = False
    if logged is not None:
        from skewscope.whatif.sessions import with_sessions

        wl, session_notes = with_sessions(wl, layout, t0, w, logged[0], logged[1], rng)
        notes += session_notes
        has_sessions = bool((wl.session >= 0).any())
    if not has_sessions:
        notes.append(Note(W.NO_SESSIONS_ONLINE))
    through = tuple(
        (key, tuple(1000.0 * b for b in sorted(_fleet(we, role))))
        for key, role, _ in THROUGH
        if _fleet(we, role)
    )
    through += (("kv_peak", (w,)),)  # the usage gauge is read as window means
    if exact_spent(df, at_start):  # load from counter deltas, not gauges sampled at window ends
        through += tuple((key, ()) for key in SPENT_KEYS)
    return observe(layout, wl, duration, notes, s, has_sessions, through), df, dp


SPENT_KEYS = ("max_over_median_load", "min_over_median_load")


def exact_spent(df: pl.DataFrame, at_start: bool) -> bool:
    """Whether each unit's time spent in the system comes from counters: the E2E histogram's
    sum increase (mean x the finished requests) in every window with finished requests. Then
    the load is read from it (exact counter deltas) instead of running/waiting gauges sampled
    at window ends, which miss requests shorter than the scrape interval. SGLang counts
    requests as they leave the queue (``at_start``), so its count is no E2E count."""
    if at_start or "e2e_mean_ms" not in df.columns or df.is_empty():
        return False
    done = df.filter(pl.col("requests").fill_null(0) > 0)
    return not done.is_empty() and done["e2e_mean_ms"].null_count() == 0


def spent_load(df: pl.DataFrame, obs: Observed, index: dict[tuple[str, int], int]) -> np.ndarray:
    """Per grid slot: seconds its finished requests spent in the system / the run."""
    lay = obs.layout
    load = np.zeros(len(lay.present()))
    for (inst, rank), rows in df.group_by(["instance", "dp_rank"]):
        i = lay.instances.index(str(inst))
        spent = (rows["requests"].fill_null(0) * rows["e2e_mean_ms"].fill_null(0)).sum()
        load[i * lay.dp_ranks + index[(str(inst), int(rank))]] = (
            float(spent) / 1000.0 / obs.duration_s
        )
    return load


# Latency metrics the evidence gives as histograms: metric, histogram role, quantile.
THROUGH: tuple[tuple[str, str, float], ...] = (
    ("queue_wait_p95_ms", "queue_time", 0.95),
    ("ttft_p99_ms", "ttft", 0.99),
    ("e2e_p50_ms", "e2e", 0.5),
    ("e2e_p99_ms", "e2e", 0.99),
)


def _fleet(we: WorkloadEvidence, role: str) -> Buckets:
    return add_buckets(list(we.buckets.get(role, {}).values()))


ItlKey = tuple[float, str, int | None]  # (window start, instance, DP rank or None)


def itl_series(itl: Mapping[ItlKey, float], r: Mapping[str, Any]) -> ItlKey | None:
    """The ITL series a unit-window row's step is read from: its rank's own, else its
    instance's (SGLang's ITL has no DP label); None when neither was exported."""
    own: ItlKey = (r["window_start_s"], str(r["instance"]), int(r["dp_rank"]))
    if own in itl:
        return own
    shared: ItlKey = (own[0], own[1], None)
    return shared if shared in itl else None


def light_rows(
    df: pl.DataFrame,
    itl: Mapping[ItlKey, float],
    index: dict[tuple[str, int], int],
) -> tuple[list[dict[str, Any]], int, int]:
    """Timed steps from light load, where too few windows average a running request (a ~3 ms
    step on a CPU engine finishes a request between two scrapes): per rank and window with
    traffic, a decode step (its mean ITL — its own series, else its instance's —, no prefill);
    per rank, one prefill step (the mean TTFT less the mean queue wait over its windows with
    finished requests, at their mean prompt; a per-window row would pair a window's TTFT with
    a prompt mean of other requests, and that noise flattened the slope by 23-26 % on
    simulated light load). The per-sequence cost is not identifiable from batches near 1 (a
    least-squares split of the mean ITL between fixed and per-sequence cost is arbitrary and
    overpredicted E2E by up to +85 % on a real vLLM): it is left at 0, the fixed cost takes
    the mean ITL. Also returns the decode and the prefill windows used."""
    rows: list[dict[str, Any]] = []
    prefill: dict[tuple[str, int], list[float]] = {}  # unit -> requests, ms, prompt, windows
    for r in df.iter_rows(named=True):
        inst, rank = str(r["instance"]), int(r["dp_rank"])
        key = itl_series(itl, r)
        step = math.nan if key is None else itl[key]
        done, run = r["requests"] or 0.0, r["running"] or 0.0
        if not math.isfinite(step) or step <= 0 or (done <= 0 and run <= 0):
            continue
        unit = (inst, index[(inst, rank)])
        rows.append(
            {
                "instance": inst,
                "dp_rank": unit[1],
                "exec_ms": step,
                "prefill_tokens": 0.0,
                "decode_seqs": 0.0,
            }
        )
        ttft, queue = r.get("ttft_mean_ms"), r.get("queue_wait_mean_ms") or 0.0
        if done > 0 and r["prompt_tokens"] and ttft is not None and ttft - queue > 0:
            acc = prefill.setdefault(unit, [0.0, 0.0, 0.0, 0.0])
            acc[0] += done
            acc[1] += done * (ttft - queue)
            acc[2] += float(r["prompt_tokens"])
            acc[3] += 1
    decode = len(rows)
    for (inst, rank), (done, ms, prompt, _) in prefill.items():
        rows.append(
            {
                "instance": inst,
                "dp_rank": rank,
                "exec_ms": ms / done,
                "prefill_tokens": prompt / done,
                "decode_seqs": 0.0,
            }
        )
    return rows, decode, int(sum(acc[3] for acc in prefill.values()))


def model_from(
    we: WorkloadEvidence, obs: Observed, df: pl.DataFrame, dp: bool, s: WhatIfSettings = WHATIF
) -> ServiceModel:
    """Per-unit service model: the step law and speeds fitted on one mean step per unit and
    window (inter-token latency vs prefill tokens per step and running batch) — on light load,
    where fewer than ``MIN_STEP_ROWS`` windows average a running request, on the ITL and TTFT
    means instead (``light_rows``) —, KV pool from free blocks and usage (or from the tokens
    the running batch holds), limits from the peaks."""
    layout = obs.layout
    _, index = layout_from(df)
    w = we.evidence.instance.window_s
    itl = we.means.get("itl", {})
    # one mean step per ITL series and window: a rank's own, or an instance's (SGLang's ITL has
    # no DP label: its mean weighs each rank's step by its decode tokens, i.e. its running batch)
    groups: dict[ItlKey, list[dict[str, Any]]] = {}
    for r in df.iter_rows(named=True):
        if (key := itl_series(itl, r)) is not None:
            groups.setdefault(key, []).append(r)
    rows = []
    for key, members in groups.items():
        step = itl[key]
        run = np.array([m["running"] or 0.0 for m in members])
        if not math.isfinite(step) or step <= 0 or run.sum() < 1:
            continue
        pf = np.array(
            [(m["prompt_tokens"] or 0.0) / (m["steps"] or 1000.0 * w / step) for m in members]
        )  # without a step counter: busy all window
        for m in members:  # each rank of the series gets the series' mean step
            rows.append(
                {
                    "instance": key[1],
                    "dp_rank": index[(key[1], int(m["dp_rank"]))],
                    "exec_ms": step,
                    "prefill_tokens": float((run * pf).sum() / run.sum()),
                    "decode_seqs": float((run * run).sum() / run.sum()),
                }
            )
    light = None
    if len(rows) < MIN_STEP_ROWS:  # light load: the means of ITL and TTFT instead
        rows, decode, prefill = light_rows(df, itl, index)
        if decode < MIN_STEP_ROWS or prefill < MIN_STEP_ROWS:
            return uncalibrated(layout, W.NO_ITL_HISTOGRAM)
        light = Note(
            W.LIGHT_LOAD,
            {
                "estimator": LIGHT_ESTIMATOR,
                "decode_windows": decode,
                "prefill_windows": prefill,
                "min_windows": MIN_STEP_ROWS,
            },
        )
    blocks = _kv_blocks(we, df, index, obs, s)
    top = we.buckets.get("iteration_tokens", {})
    seen = [b for u in top.values() for b, c in u.items() if c > 0 and math.isfinite(b)]
    budget = max(seen) if seen else float(DEFAULT.token_budget)
    ceiling = float(df["running"].max() or 1.0)  # type: ignore[arg-type]
    if light is not None:  # window means under one running request bound no batch ceiling
        ceiling = max(ceiling, float(DEFAULT.max_running))
    model = fit_model(
        pl.DataFrame(rows),
        blocks,
        (ceiling, budget),
        layout,
        s,
        budget="histogram" if seen else "default",
    )
    if light is None:
        return model
    return dataclasses.replace(model, notes=(*model.notes, light), light_load=light)


def _kv_blocks(
    we: WorkloadEvidence,
    df: pl.DataFrame,
    index: dict[tuple[str, int], int],
    obs: Observed,
    s: WhatIfSettings,
) -> dict[tuple[str, int], float | None]:
    """KV blocks per rank (of ``s.block_size`` tokens): the configured pool where an info
    gauge tells it, else free blocks / (1 - usage) where both are exported, else the blocks
    the running batch holds (running x (mean prompt + half the mean output) / block size) over
    the usage, median over windows with usage >= ``KV_FLOOR``."""
    wl = obs.workload
    held_tokens = float(wl.input_tokens.mean() + wl.output_tokens.mean() / 2) if len(wl) else 0.0
    out: dict[tuple[str, int], float | None] = {}
    for (inst, rank), rows in df.group_by(["instance", "dp_rank"]):
        conf = we.kv_config.get((str(inst), int(rank))) or we.kv_config.get((str(inst), None))
        if conf is not None:  # the pool as configured (blocks of the configured size)
            out[(str(inst), index[(str(inst), int(rank))])] = conf[0] * conf[1] / s.block_size
            continue
        kv = rows["kv_usage_max"].fill_null(rows["kv_usage"])
        free = rows["free_blocks_min"]
        if free.null_count() < rows.height:
            est = (free / (1 - kv)).filter((kv < 0.98) & free.is_not_null())
        else:
            usage = rows["kv_usage"]
            est = (rows["running"] * held_tokens / s.block_size / usage).filter(usage >= KV_FLOOR)
        v = est.drop_nulls().median()
        out[(str(inst), index[(str(inst), int(rank))])] = (
            float(v) if isinstance(v, (int, float)) else None
        )
    return out


def seen_metrics(we: WorkloadEvidence, obs: Observed, df: pl.DataFrame) -> Metrics:
    """The evidence's own metrics, defined as the replay's: load = mean running + waiting per
    engine process (requests in the system) — or, from counters where the evidence has them
    (``exact_spent``), the time its finished requests spent in the system —, latency
    percentiles from the fleet's histograms, KV peak from the usage gauge, throughput from the
    finished counter."""
    _, index = layout_from(df)
    lay = obs.layout
    load = np.zeros(len(lay.present()))
    for (inst, rank), rows in df.group_by(["instance", "dp_rank"]):
        i = lay.instances.index(str(inst))
        held = rows["running"].fill_null(0) + rows["waiting"].fill_null(0)
        load[i * lay.dp_ranks + index[(str(inst), int(rank))]] = (
            float(held.sum()) * we.evidence.instance.window_s / obs.duration_s
        )
    from skewscope.whatif.replay import in_pool

    pool = np.array(in_pool(obs.availability, lay, obs.duration_s))
    if any(key in SPENT_KEYS for key, _ in obs.through):
        load = spent_load(df, obs, index)
    hi, lo = _ratios(load[pool])
    kv = df["kv_usage"].max()  # window means (a max of samples depends on the scrape interval)
    done = float(df["requests"].fill_null(0).sum())
    q = {
        key: histogram_quantile(qq, {1000.0 * b: c for b, c in _fleet(we, role).items()})
        for key, role, qq in THROUGH
    }
    return Metrics(
        max_over_median_load=hi,
        min_over_median_load=lo,
        queue_wait_p95_ms=q["queue_wait_p95_ms"],
        ttft_p99_ms=q["ttft_p99_ms"],
        e2e_p50_ms=q["e2e_p50_ms"],
        e2e_p99_ms=q["e2e_p99_ms"],
        kv_peak=float(kv) if isinstance(kv, (int, float)) else None,
        throughput_rps=done / obs.duration_s if obs.duration_s > 0 else None,
    )


def whatif_online(
    we: WorkloadEvidence,
    source: str,
    policies: tuple[str, ...],
    dp_policies: tuple[str, ...],
    s: WhatIfSettings = WHATIF,
    progress: Callable[[str], None] | None = None,
    jobs: int = 1,
    logged: AccessLog | None = None,
) -> WhatIfReport:
    """What-if from online evidence: rebuild the workload, fit the model, replay, rank."""
    from skewscope.whatif.predict import predict

    obs, df, dp = workload_from(we, s, logged)
    model = model_from(we, obs, df, dp, s)
    seen = seen_metrics(we, obs, df)
    if obs.through:
        model = dataclasses.replace(model, notes=(*model.notes, Note(W.THROUGH_BUCKETS)))
    report = predict(
        obs, model, seen, source, policies, dp_policies, s, progress, jobs, engine=we.dialect
    )
    extra = tuple(
        Note.text(n) for n in (*we.notes, *we.evidence.notes) if not n.startswith("dialect")
    )
    return dataclasses.replace(report, notes=(*report.notes, *extra))
