"""What-if speed: the current routing plus 8 candidate policies replayed over one hour of
8 instances x 4 DP ranks at 64 req/s (the issue's goal: under a minute on 2 cores).

The evidence is a simulator run of that hour (its tables turned into the RequestLog the profiler
reader would give, so no gigabytes of CSV are written); the baseline is that one simulator run,
timed in the same process, so the printed ratios are measured on this machine, not quoted.

    python benchmarks/bench_whatif.py              # the full hour
    python benchmarks/bench_whatif.py --minutes 5  # shorter
    python benchmarks/bench_whatif.py --jobs 1     # replays one after another
"""

from __future__ import annotations

import argparse
import os
import time

import polars as pl
from bench_sim import bench_scenario

from skewscope.sim.engine import simulate
from skewscope.sim.records import SimResult
from skewscope.sources.workload import RequestLog
from skewscope.whatif.predict import whatif

POLICIES = ("round_robin", "least_requests", "least_tokens", "power_of_two")
DP_POLICIES = ("round_robin", "vllm_dp", "shortest_queue", "minimum_tokens")


def request_log(res: SimResult) -> RequestLog:
    """What load_request_log would read back from this run's profiler folders."""
    rq = res.requests.filter(pl.col("status") != "rejected")
    ms = 1000.0
    requests = rq.select(
        "instance", "dp_rank", "arrival_s",
        pl.col("input_tokens").alias("prompt_tokens"),
        pl.col("output_tokens").alias("output_tokens"),
        ((pl.col("first_scheduled_s") - pl.col("arrival_s")) * ms).alias("queue_wait_ms"),
        ((pl.col("first_token_s") - pl.col("arrival_s")) * ms).alias("ttft_ms"),
        ((pl.col("finish_s") - pl.col("arrival_s")) * ms).alias("e2e_ms"),
    )
    steps = res.steps.select(
        "instance", "dp_rank", "start_s",
        ((pl.col("end_s") - pl.col("start_s")) * ms).alias("exec_ms"),
        pl.col("prefill_tokens").cast(pl.Float64),
        pl.col("decode_batch_size").cast(pl.Float64).alias("decode_seqs"),
        pl.col("batch_size").cast(pl.Float64),
        (pl.col("used_blocks") / pl.col("total_blocks")).alias("kv_usage"),
        pl.col("free_blocks").cast(pl.Float64),
    )
    ranks = {i: tuple(sorted({r.dp_rank for r in res.ranks if r.instance == i}))
             for i in res.instances}
    return RequestLog(requests, steps, ranks, res.start_s, res.end_s)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--minutes", type=float, default=60.0)
    ap.add_argument("--jobs", type=int, default=len(os.sched_getaffinity(0)))
    args = ap.parse_args()
    sc = bench_scenario(args.minutes)
    t0 = time.perf_counter()
    res = simulate(sc, record_members=False)
    base = time.perf_counter() - t0
    log = request_log(res)
    t0 = time.perf_counter()
    report = whatif(log, "bench", POLICIES, DP_POLICIES, jobs=args.jobs)
    wall = time.perf_counter() - t0
    cpu = time.process_time()
    n = len(report.policies)
    print(f"baseline: one simulator run of {args.minutes:g} min of 8x4 ranks at 64 req/s: "
          f"{base:.1f} s wall ({res.meta['n_steps']:,} steps, {res.meta['n_requests']:,} "
          "requests)")
    print(f"whatif: current + {n - 1} candidates, {args.jobs} job(s): {wall:.1f} s wall = "
          f"{wall / base:.2f}x the baseline ({wall / base / n:.2f}x per replay); "
          f"this process {cpu:.0f} CPU s")
    goal = 60.0 * args.minutes / 60.0
    print(f"goal: under {goal:.0f} s for this length (60 s per hour) -> "
          f"{'met' if wall < goal else 'NOT met'}; trusted={report.trusted}, "
          f"recommended={report.recommended}")


if __name__ == "__main__":
    main()
