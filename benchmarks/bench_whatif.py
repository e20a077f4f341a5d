"""What-if speed and accuracy.

Speed: the current routing plus 8 candidate policies replayed over one hour of 8 instances x 4
DP ranks at 64 req/s (the issue's goal: under a minute on 2 cores). The evidence is a simulator
run of that hour (its tables turned into the RequestLog the profiler reader would give, so no
gigabytes of CSV are written); the baseline is that one simulator run, timed in the same
process, so the printed ratios are measured on this machine, not quoted.

Accuracy (``--truth``): every built-in skew scenario plus a held-out weight skew is simulated,
``whatif`` predicts every candidate from that evidence alone, then each candidate is run for real
(the same seed: the same arrivals, lengths and sessions, ``sim.counterfactual``) and the error
table is printed: MAPE and worst case per metric, and how often the recommended policy is truly
the best or within 5 % of it (docs/whatif.md, Accuracy).

    python benchmarks/bench_whatif.py              # speed, the full hour
    python benchmarks/bench_whatif.py --minutes 5  # shorter
    python benchmarks/bench_whatif.py --jobs 1     # replays one after another
    python benchmarks/bench_whatif.py --truth      # the error table (~12 scenarios)
"""

from __future__ import annotations

import argparse
import os
import time
from pathlib import Path

from bench_sim import bench_scenario
from skewscope.config import WHATIF
from skewscope.sim.engine import simulate
from skewscope.sim.scenario import builtin_scenarios, load_scenario
from skewscope.sim.spec import Scenario
from skewscope.whatif.plans import DEFAULT_DP_POLICIES, DEFAULT_POLICIES
from skewscope.whatif.predict import whatif
from skewscope.whatif.truth import Checked, check, error_table, request_log

POLICIES = ("round_robin", "least_requests", "least_tokens", "power_of_two")
DP_POLICIES = ("round_robin", "vllm_dp", "shortest_queue", "minimum_tokens")
# the built-in skew scenarios (each has a known cause) and the balanced ones
TRUTH_SCENARIOS = (
    "wrong-weights",
    "sticky-sessions",
    "health-check",
    "late-join",
    "long-input",
    "long-output",
    "slow-device",
    "kv-exhaustion",
    "dp-count",
    "dp-weight",
    "balanced",
    "transient-burst",
)
HELD_OUT = Path(__file__).with_name("scenarios_weight_heldout.toml")


def speed(args: argparse.Namespace) -> None:
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
    print(
        f"baseline: one simulator run of {args.minutes:g} min of 8x4 ranks at 64 req/s: "
        f"{base:.1f} s wall ({res.meta['n_steps']:,} steps, {res.meta['n_requests']:,} "
        "requests)"
    )
    print(
        f"whatif: current + {n - 1} candidates, {args.jobs} job(s): {wall:.1f} s wall = "
        f"{wall / base:.2f}x the baseline ({wall / base / n:.2f}x per replay); "
        f"this process {cpu:.0f} CPU s"
    )
    goal = 60.0 * args.minutes / 60.0
    print(
        f"goal: under {goal:.0f} s for this length (60 s per hour) -> "
        f"{'met' if wall < goal else 'NOT met'}; trusted={report.trusted}, "
        f"recommended={report.recommended}"
    )


def _pct(v: float | None) -> str:
    return "n/a" if v is None else f"{100 * v:.1f} %"


def truth(args: argparse.Namespace) -> None:
    scenarios: list[Scenario] = [builtin_scenarios()[n] for n in TRUTH_SCENARIOS]
    scenarios.append(load_scenario(str(HELD_OUT)))
    t0 = time.perf_counter()
    checked: list[Checked] = []
    for sc in scenarios:
        c = check(sc, DEFAULT_POLICIES, DEFAULT_DP_POLICIES, jobs=args.jobs)
        checked.append(c)
        bad = [r.metric for r in c.report.calibration if not r.ok]
        print(
            f"{sc.name:16} trusted={c.report.trusted!s:5} recommended={c.report.recommended:18}"
            f" truly best={c.truly_best:18} pick ok={c.pick_ok(WHATIF.pick_margin)}"
            + (f"  (calibration off: {', '.join(bad)})" if bad else "")
        )
    print(f"\n{len(scenarios)} scenarios in {time.perf_counter() - t0:.0f} s wall\n")
    print("| metric | MAPE | worst | worst case | pairs |")
    print("|---|---:|---:|---|---:|")
    for r in error_table(checked):
        print(f"| {r.metric} | {_pct(r.mape)} | {_pct(r.worst)} | {r.worst_case} | {r.n} |")
    hits = sum(c.pick_ok(WHATIF.pick_margin) for c in checked)
    exact = sum(c.report.recommended == c.truly_best for c in checked)
    print(
        f"\nrecommended truly best: {exact}/{len(checked)}; best or within "
        f"{100 * WHATIF.pick_margin:.0f} %: {hits}/{len(checked)}"
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--minutes", type=float, default=60.0)
    ap.add_argument("--jobs", type=int, default=len(os.sched_getaffinity(0)))
    ap.add_argument(
        "--truth",
        action="store_true",
        help="the error table against ground truth instead of the speed run",
    )
    args = ap.parse_args()
    (truth if args.truth else speed)(args)


if __name__ == "__main__":
    main()
