"""Replay the observed workload on the calibrated fleet under a routing plan, and measure it
the same way the evidence is measured (``metrics``), so replayed and observed numbers compare.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass

import numpy as np
import polars as pl

from skewscope.catalogue import Level, Verdict
from skewscope.config import DEFAULT_THRESHOLDS, WHATIF
from skewscope.frame import WINDOWS, dp_unit_id
from skewscope.notes import Note
from skewscope.report.whatif_model import Metrics, Spread
from skewscope.sim.engine import simulate
from skewscope.sim.policies import RoutingSpec
from skewscope.sim.records import START_S, SimResult
from skewscope.sim.spec import GroundTruth, Health, Scenario
from skewscope.sources.workload import RequestLog
from skewscope.whatif.calibrate import ServiceModel
from skewscope.whatif.extract import Layout, Observed
from skewscope.whatif.spread import persistent_spread, window_loads


@dataclass(frozen=True)
class Plan:
    """One candidate: routing at both levels and the pool (per instance [join, fail))."""

    name: str
    level: str
    description: Note  # what it replays (worded by report/whatif_phrases)
    gateway: RoutingSpec
    dispatcher: RoutingSpec
    availability: tuple[tuple[float, float], ...]
    speed_factor: tuple[float, ...] | None = None  # per rank, multiplies the calibrated speed
    # A robustness replay of the candidate of this name (the heavy requests of a correlated
    # placement kept pinned: whatif/correlation.py); not a candidate itself.
    robust_of: str = ""


def scenario_for(plan: Plan, obs: Observed, model: ServiceModel) -> Scenario:
    lay = obs.layout
    overrides = tuple(
        (dp_unit_id(f"inst-{k // lay.dp_ranks}", k % lay.dp_ranks), spec)
        for k, spec in enumerate(model.ranks)
    )
    health = tuple(
        Health(f"inst-{i}", fail_at_s=hi, join_at_s=lo)
        for i, (lo, hi) in enumerate(plan.availability)
        if (lo > 0 or math.isfinite(hi)) and lo < hi
    )
    truth = GroundTruth("whatif", Verdict.BALANCED, Level.INSTANCE)
    return Scenario(
        name=f"whatif-{plan.name}",
        summary=f"what-if replay: {plan.name}",
        truth=truth,
        duration_s=obs.duration_s,
        seed=WHATIF.seed,
        instances=len(lay.instances),
        dp_ranks=lay.dp_ranks,
        rank=model.base,
        overrides=overrides,
        health=health,
        dp_sizes=lay.sizes if lay.mixed else (),
        gateway=plan.gateway,
        dispatcher=plan.dispatcher,
    )


def run_plan(
    plan: Plan, obs: Observed, model: ServiceModel
) -> tuple[SimResult, float | None, float | None]:
    """Replay the plan: its KV peak and, when the evidence's KV usage is a gauge read per window
    (online), the highest window-mean usage; the steps are not kept (only their stats, or the
    window sums as they stream), so a long replay holds no whole-run step table."""
    sc = scenario_for(plan, obs, model)
    window = dict(obs.through).get("kv_peak")
    if window is None:
        res = simulate(sc, workload=obs.workload, record_members=False, keep_steps=False)
        return res, res.run_stats["kv_peak"] if res.run_stats["steps"] else None, None
    acc = WindowPeak(START_S, window[0])
    res = simulate(sc, workload=obs.workload, record_members=False, on_steps=acc.add)
    return res, res.run_stats["kv_peak"] if res.run_stats["steps"] else None, acc.peak()


def _ratios(load: np.ndarray) -> tuple[float | None, float | None]:
    if load.shape[0] < 2:
        return None, None
    med = float(np.median(load))
    if med <= 0:
        return None, None
    return float(load.max()) / med, float(load.min()) / med


def _pct(values: pl.Series, q: float) -> float | None:
    v = values.drop_nulls()
    if v.is_empty():
        return None
    out = v.quantile(q, "linear")
    return None if out is None else float(out)


def _metrics(
    load: np.ndarray,
    queue_ms: pl.Series,
    ttft_ms: pl.Series,
    e2e_ms: pl.Series,
    kv_peak: float | None,
    finished: int,
    duration: float,
) -> Metrics:
    hi, lo = _ratios(load)
    return Metrics(
        max_over_median_load=hi,
        min_over_median_load=lo,
        queue_wait_p95_ms=_pct(queue_ms, 0.95),
        ttft_p99_ms=_pct(ttft_ms, 0.99),
        e2e_p50_ms=_pct(e2e_ms, 0.5),
        e2e_p99_ms=_pct(e2e_ms, 0.99),
        kv_peak=kv_peak,
        throughput_rps=finished / duration if duration > 0 else None,
    )


def in_pool(avail: tuple[tuple[float, float], ...], layout: Layout, duration: float) -> list[bool]:
    """Per grid slot: is it an engine process whose instance was in the pool during the run."""
    per_inst = [lo < min(hi, duration) for lo, hi in avail]
    return [per_inst[k // layout.dp_ranks] and ok for k, ok in enumerate(layout.present())]


def requests_in_system(
    rank: np.ndarray, arrival: np.ndarray, leave: np.ndarray, n_ranks: int, duration: float
) -> np.ndarray:
    """Time-average requests in the system (waiting + running) per rank: each request counts
    from its arrival to its finish (or the end of the run). By Little's law this is arrival rate
    times residence time, so more requests, longer requests and a slower unit all raise it."""
    stay = np.clip(np.minimum(leave, duration) - arrival, 0.0, None)
    ok = rank >= 0
    return np.bincount(rank[ok], weights=stay[ok], minlength=n_ranks)[:n_ranks] / duration


def replayed(
    result: SimResult,
    kv: float | None,
    obs: Observed,
    pool: list[bool],
    window_kv: float | None = None,
) -> tuple[Metrics, np.ndarray, Metrics | None, Spread]:
    """Metrics of a replay (``kv``: its KV peak), the load per rank (simulator order), when
    the evidence gave latencies as histograms (``obs.through``) the metrics read through those
    buckets (``window_kv``: the highest window-mean KV usage), and its persistent load spread
    over the diagnosis' default windows (``spread.persistent_spread``)."""
    lay = obs.layout
    rq = result.requests.filter(pl.col("status") != "rejected")
    t0 = result.start_s
    rank = (
        rq["instance"].str.strip_prefix("inst-").cast(pl.Int64) * lay.dp_ranks + rq["dp_rank"]
    ).to_numpy()
    leave = (rq["finish_s"].fill_null(result.end_s) - t0).to_numpy()
    arrival = (rq["arrival_s"] - t0).to_numpy()
    load = requests_in_system(rank, arrival, leave, len(pool), obs.duration_s)
    window_s = WINDOWS.choose(obs.duration_s)
    spread = persistent_spread(
        window_loads(rank, arrival, leave, len(pool), obs.duration_s, window_s)[np.array(pool)],
        window_s,
        DEFAULT_THRESHOLDS,
    )
    started = rq.filter(pl.col("first_token_s").is_not_null())
    finished = int(rq["finish_s"].is_not_null().sum())
    queue = (started["first_scheduled_s"] - started["arrival_s"]) * 1000
    ttft = (started["first_token_s"] - started["arrival_s"]) * 1000
    e2e = (rq["finish_s"] - rq["arrival_s"]).drop_nulls() * 1000
    m = _metrics(load[np.array(pool)], queue, ttft, e2e, kv, finished, obs.duration_s)
    if not obs.through:
        return m, load, None, spread
    from skewscope.sources.online_workload import histogram_quantile, through_buckets

    raw = {
        "queue_wait_p95_ms": (queue, 0.95),
        "ttft_p99_ms": (ttft, 0.99),
        "e2e_p50_ms": (e2e, 0.5),
        "e2e_p99_ms": (e2e, 0.99),
    }
    read: dict[str, float | None] = {}
    done = leave < obs.duration_s  # finished in the range: what the E2E counters count
    spent = (
        np.bincount(rank[done], weights=(leave - arrival)[done], minlength=len(pool))[: len(pool)]
        / obs.duration_s
    )
    spent_hi, spent_lo = _ratios(spent[np.array(pool)])
    for key, bounds in obs.through:
        if key == "kv_peak":  # a gauge sampled per window: the highest window mean
            read[key] = window_kv
        elif key == "max_over_median_load":  # from the E2E sum counter (online.exact_spent)
            read[key] = spent_hi
        elif key == "min_over_median_load":
            read[key] = spent_lo
        else:
            read[key] = histogram_quantile(
                raw[key][1], through_buckets(raw[key][0].drop_nulls().to_list(), bounds)
            )
    return m, load, dataclasses.replace(m, **read), spread


class WindowPeak:
    """The highest time-average KV usage of any rank over a window of ``window_s`` (what an
    ``avg_over_time`` of the usage gauge shows), from the steps as the simulator streams them
    (``simulate(on_steps=...)``: consecutive time chunks, so no whole-run table is held)."""

    def __init__(self, t0: float, window_s: float) -> None:
        self.t0, self.window_s = t0, window_s
        self.area: dict[tuple[str, int, float], float] = {}

    def add(self, steps: pl.DataFrame) -> None:
        per = (
            steps.select(
                "instance",
                "dp_rank",
                ((pl.col("start_s") - self.t0) // self.window_s).alias("k"),
                (
                    pl.col("used_blocks")
                    / pl.col("total_blocks")
                    * (pl.col("end_s") - pl.col("start_s"))
                ).alias("area"),
            )
            .group_by("instance", "dp_rank", "k")
            .agg(pl.col("area").sum())
        )
        for inst, rank, k, area in per.iter_rows():
            key = (inst, rank, k)
            self.area[key] = self.area.get(key, 0.0) + area

    def peak(self) -> float | None:
        return max(self.area.values()) / self.window_s if self.area else None


def observed(log: RequestLog, obs: Observed, pool: list[bool]) -> tuple[Metrics, np.ndarray]:
    """The same metrics from the evidence itself (requests placed as the replay places them)."""
    lay = obs.layout
    wl = obs.workload
    assert wl.instance_hint is not None and wl.rank_hint is not None
    rank = wl.instance_hint * lay.dp_ranks + np.maximum(wl.rank_hint, 0)
    req = log.requests.sort("arrival_s")
    e2e = req["e2e_ms"].to_numpy()
    leave = np.where(np.isnan(e2e), np.inf, wl.arrival_s + e2e / 1000.0)
    load = requests_in_system(rank, wl.arrival_s, leave, len(pool), obs.duration_s)
    rq = req.filter(pl.col("ttft_ms").is_not_null() & (pl.col("ttft_ms") > 0))
    kv = log.steps["kv_usage"].max() if not log.steps.is_empty() else None
    finished = int(req["e2e_ms"].is_not_null().sum())
    m = _metrics(
        load[np.array(pool)],
        rq["queue_wait_ms"],
        rq["ttft_ms"],
        req["e2e_ms"],
        float(kv) if isinstance(kv, (int, float)) else None,
        finished,
        obs.duration_s,
    )
    return m, load
