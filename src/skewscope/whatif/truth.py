"""Ground truth for a what-if prediction: the simulated scenario re-run for real under each
candidate the prediction replayed (the same arrivals, lengths and sessions: ``sim.counterfactual``)
and measured the same way, so every predicted number has the number it should have been.

Only a simulated evidence has such a truth; ``benchmarks/bench_whatif.py`` prints the error table
over the built-in skew scenarios and ``tests/unit/test_whatif_truth.py`` checks it on known cases.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import polars as pl

from skewscope.config import WHATIF, WhatIfSettings
from skewscope.notes import Note
from skewscope.notes import WhatifNoteCode as W
from skewscope.report.whatif_model import PolicyResult, WhatIfReport
from skewscope.sim.counterfactual import rerouted
from skewscope.sim.engine import simulate
from skewscope.sim.records import SimResult
from skewscope.sim.spec import Health, Scenario
from skewscope.sources.workload import RequestLog
from skewscope.whatif.calibrate import calibrate
from skewscope.whatif.extract import Observed, extract
from skewscope.whatif.extract import layout_of as obs_layout
from skewscope.whatif.plans import CURRENT
from skewscope.whatif.predict import prepare, whatif
from skewscope.whatif.rank import recommend
from skewscope.whatif.replay import Plan, in_pool, replayed

# The metrics of the error table (issue 22), in its order.
TRUTH_METRICS: tuple[str, ...] = (
    "ttft_p99_ms",
    "queue_wait_p95_ms",
    "e2e_p50_ms",
    "e2e_p99_ms",
    "max_over_median_load",
    "kv_peak",
    "throughput_rps",
)


def request_log(res: SimResult) -> RequestLog:
    """What ``load_request_log`` reads back from this run's profiler folders (no CSV written):
    an unfinished request's output length is not in request.csv (the reader gives 1), so the
    what-if sees no more than the profiler shows."""
    rq = res.requests.filter(pl.col("status") != "rejected")
    ms = 1000.0
    requests = rq.select(
        "instance",
        "dp_rank",
        "arrival_s",
        pl.col("input_tokens").alias("prompt_tokens"),
        pl.when(pl.col("finish_s").is_not_null())
        .then(pl.col("output_tokens"))
        .otherwise(1)
        .alias("output_tokens"),
        ((pl.col("first_scheduled_s") - pl.col("arrival_s")) * ms).alias("queue_wait_ms"),
        ((pl.col("first_token_s") - pl.col("arrival_s")) * ms).alias("ttft_ms"),
        ((pl.col("finish_s") - pl.col("arrival_s")) * ms).alias("e2e_ms"),
    )
    steps = res.steps.select(
        "instance",
        "dp_rank",
        "start_s",
        ((pl.col("end_s") - pl.col("start_s")) * ms).alias("exec_ms"),
        pl.col("prefill_tokens").cast(pl.Float64),
        pl.col("decode_batch_size").cast(pl.Float64).alias("decode_seqs"),
        pl.col("batch_size").cast(pl.Float64),
        (pl.col("used_blocks") / pl.col("total_blocks")).alias("kv_usage"),
        pl.col("free_blocks").cast(pl.Float64),
    )
    ranks = {
        i: tuple(sorted({r.dp_rank for r in res.ranks if r.instance == i})) for i in res.instances
    }
    return RequestLog(requests, steps, ranks, res.start_s, res.end_s)


def truth_scenario(sc: Scenario, plan: Plan, obs: Observed) -> Scenario:
    """The scenario as the plan would change it in production: a gateway plan replaces the
    gateway (the real DP dispatchers stay), a DP plan the dispatchers (the real gateway stays),
    ``restore_pool`` only the pool; a plan that takes units out of the pool takes them out."""
    if plan.name == CURRENT:
        return sc
    if plan.name == "restore_pool":
        return rerouted(sc, health=())
    health = None
    if plan.availability != obs.availability:
        health = tuple(
            Health(obs.layout.instances[i], fail_at_s=hi, join_at_s=lo)
            for i, (lo, hi) in enumerate(plan.availability)
            if (lo > 0 or math.isfinite(hi)) and lo < hi
        )
    if plan.level == "dp":
        return rerouted(sc, dispatcher=plan.dispatcher, health=health)
    return rerouted(sc, gateway=plan.gateway, health=health)


def actual_one(sc: Scenario, plan: Plan, obs: Observed) -> PolicyResult:
    """Run the plan for real and measure it as a replay is measured (a process-pool task)."""
    res = simulate(truth_scenario(sc, plan, obs), record_members=False, keep_steps=False)
    kv = res.run_stats["kv_peak"] if res.run_stats["steps"] else None
    pool = in_pool(plan.availability, obs.layout, obs.duration_s)
    m, load, _, spread = replayed(res, kv, obs, pool)
    present = np.array(obs.layout.present())
    total = float(load[present].sum()) or 1.0
    share = tuple(
        (u, float(v) / total) for u, v in zip(obs.layout.rank_units(), load[present], strict=True)
    )
    return PolicyResult(plan.name, plan.level, Note(W.PLAN_CURRENT), m, share, spread)


@dataclass(frozen=True)
class Checked:
    """One scenario: the prediction, what each candidate really did, and the true pick."""

    scenario: str
    report: WhatIfReport
    actual: tuple[PolicyResult, ...]  # in the report's policy order
    truly_best: str  # what the ranking picks from the actual results

    def actual_of(self, name: str) -> PolicyResult:
        return next(p for p in self.actual if p.name == name)

    def pick_ok(self, margin: float) -> bool:
        """The recommended policy is the truly best, or within ``margin`` of it on both the
        ranking's keys (TTFT P99 and the load spread), as it really ran."""
        if self.report.recommended == self.truly_best:
            return True
        rec, best = self.actual_of(self.report.recommended), self.actual_of(self.truly_best)
        pairs = (
            (rec.predicted.ttft_p99_ms, best.predicted.ttft_p99_ms),
            (rec.spread.value, best.spread.value),
        )
        return all(a is not None and b is not None and a <= b * (1 + margin) for a, b in pairs)


def check(
    sc: Scenario,
    policies: tuple[str, ...],
    dp_policies: tuple[str, ...],
    s: WhatIfSettings = WHATIF,
    jobs: int = 1,
) -> Checked:
    """Simulate ``sc``, predict from its evidence alone, then run every candidate for real."""
    res = simulate(sc)
    log = request_log(res)
    report = whatif(log, sc.name, policies, dp_policies, s, jobs=jobs)
    obs, plans, _, _ = prepare(
        extract(log, s), calibrate(log, obs_layout(log), s), policies, dp_policies, s
    )
    plans = [p for p in plans if not p.robust_of]  # a pinned client is no plan to run
    assert [p.name for p in plans] == [p.name for p in report.policies]
    if jobs <= 1:
        actual = [actual_one(sc, p, obs) for p in plans]
    else:
        from skewscope.workers import process_pool

        with process_pool(min(jobs, len(plans))) as ex:
            futures = [ex.submit(actual_one, sc, p, obs) for p in plans]
            actual = [f.result() for f in futures]
    # the truly best among the candidates the ranking may offer (a correlated placement's
    # count-based ones are not: re-applying the router's own policy changes nothing)
    best, _, _ = recommend(actual, s, excluded=frozenset(report.ranking.excluded))
    return Checked(sc.name, report, tuple(actual), best)


def ape(
    pred: float | None, true: float | None, key: str, s: WhatIfSettings = WHATIF
) -> float | None:
    """Absolute percentage error; a latency divides by at least ``s.error_floor_ms`` (a wait
    shorter than a step is no percentage to bet on)."""
    if pred is None or true is None:
        return None
    den = max(abs(true), s.error_floor_ms) if key.endswith("_ms") else abs(true)
    return abs(pred - true) / den if den > 0 else None


@dataclass(frozen=True)
class ErrorRow:
    metric: str
    mape: float | None
    worst: float | None
    worst_case: str  # "scenario/policy"
    n: int


def error_table(
    checked: list[Checked], s: WhatIfSettings = WHATIF, candidates_only: bool = True
) -> list[ErrorRow]:
    """MAPE and worst case per metric over every (scenario, candidate) pair."""
    out = []
    for key in TRUTH_METRICS:
        errs: list[tuple[float, str]] = []
        for c in checked:
            for p in c.report.policies:
                if candidates_only and p.name == CURRENT:
                    continue
                e = ape(p.predicted.get(key), c.actual_of(p.name).predicted.get(key), key, s)
                if e is not None:
                    errs.append((e, f"{c.scenario}/{p.name}"))
        if not errs:
            out.append(ErrorRow(key, None, None, "", 0))
            continue
        worst = max(errs)
        out.append(
            ErrorRow(key, float(np.mean([e for e, _ in errs])), worst[0], worst[1], len(errs))
        )
    return out
