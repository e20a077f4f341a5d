"""Simulator throughput: one simulated hour of 8 instances x 4 DP ranks at 64 req/s.

Prints simulated seconds per wall second and events (steps + requests) per wall second, and the
same for a deliberately naive per-sequence reference engine run on a short slice of the same
workload in the same process, so the ratio is measured on this machine, not quoted.

    python benchmarks/bench_sim.py              # the full hour (about a minute)
    python benchmarks/bench_sim.py --minutes 5  # shorter
    python benchmarks/bench_sim.py --fleet   # an hour of 64 x 8 ranks at 512 req/s (issue 14)
    python benchmarks/bench_sim.py --fleet --jobs 1   # the same in one process
    python benchmarks/bench_sim.py --fleet --cli     # `skewscope simulate --openmetrics` end to end
    python benchmarks/bench_sim.py --fleet --cli --metrics-interval 15s   # the same, 15 s scrapes
    python benchmarks/bench_sim.py --fleet --cli-out --minutes 2   # `--out` (profiler CSVs)

The run streams its steps (only their stats are kept) and, the gateway being round robin,
runs groups of instances in ``--jobs`` processes; ``--keep`` keeps the step table (one process).
CPU seconds (``time.process_time``) of this process are printed beside wall time.
"""

from __future__ import annotations

import argparse
import heapq
import os
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from skewscope.sim.engine import simulate
from skewscope.sim.limits import check_limits
from skewscope.sim.policies import RoutingSpec
from skewscope.sim.spec import GroundTruth, RankSpec, Scenario
from skewscope.sim.workload import LengthDist, Workload, WorkloadSpec, generate


def bench_scenario(
    minutes: float, instances: int = 8, ranks: int = 4, rate: float = 64.0
) -> Scenario:
    """The speed-goal workload: Poisson 64 req/s, lognormal ~1,024 in / ~200 out tokens."""
    return Scenario(
        name="bench",
        summary=f"{instances}x{ranks} ranks, {rate:g} req/s",
        truth=GroundTruth("bench", "balanced", "instance"),
        duration_s=minutes * 60.0,
        seed=7,
        instances=instances,
        dp_ranks=ranks,
        rank=RankSpec(),
        gateway=RoutingSpec("round_robin"),
        dispatcher=RoutingSpec("least_requests"),
        workload=WorkloadSpec(
            arrival="poisson",
            rate=rate,
            input=LengthDist("lognormal", median=1024, sigma=0.5, min=16, max=8192),
            output=LengthDist("lognormal", median=200, sigma=0.5, min=2, max=2048),
        ),
    )


# --- naive reference: one Python object per sequence, every sequence touched every step ------


@dataclass
class _Seq:
    q: int
    prompt: int
    out: int
    done_prompt: int = 0
    generated: int = 0
    blocks: int = 0


@dataclass
class _NaiveRank:
    spec: RankSpec
    waiting: list[_Seq] = field(default_factory=list)
    running: list[_Seq] = field(default_factory=list)
    used: int = 0
    steps: int = 0

    def step(self, t: float) -> float:
        sp, B = self.spec, self.spec.block_size
        decode = [s for s in self.running if s.done_prompt >= s.prompt]
        for s in decode:  # grow KV per sequence
            need = -(-(s.prompt + s.generated) // B)
            if need > s.blocks:
                self.used += need - s.blocks
                s.blocks = need
        budget = sp.token_budget - len(decode)
        pf = 0
        while self.waiting and budget > 0 and len(self.running) < sp.max_running:
            s = self.waiting[0]
            nb = -(-s.prompt // B)
            if self.used + nb > sp.total_blocks:
                break
            self.waiting.pop(0)
            self.used += nb
            s.blocks = nb
            self.running.append(s)
            c = min(s.prompt, budget)
            s.done_prompt = c
            budget -= c
            pf += c
        for s in decode:
            s.generated += 1
        for s in self.running:
            if s.done_prompt >= s.prompt and s.generated == 0:
                s.generated = 1
        for s in [s for s in self.running if s.generated >= s.out]:
            self.running.remove(s)
            self.used -= s.blocks
        self.steps += 1
        dur = sp.fixed_ms + sp.per_prefill_token_ms * pf + sp.per_decode_seq_ms * len(decode)
        return t + dur * sp.speed / 1000.0 if (self.running or self.waiting) else -1.0


def naive_run(sc: Scenario, wl: Workload) -> int:
    """Round-robin the workload over naive ranks in time order; return steps executed."""
    ranks = [_NaiveRank(sc.rank) for _ in range(sc.instances * sc.dp_ranks)]
    heap: list[tuple[float, int]] = []
    busy = [False] * len(ranks)
    arrivals = wl.arrival_s.tolist()
    inp, out = wl.input_tokens.tolist(), wl.output_tokens.tolist()
    for q, ta in enumerate([*arrivals, sc.duration_s]):
        while heap and heap[0][0] < ta:
            t, r = heapq.heappop(heap)
            nxt = ranks[r].step(t)
            if nxt >= 0:
                heapq.heappush(heap, (nxt, r))
            else:
                busy[r] = False
        if q == len(arrivals):
            break
        r = q % len(ranks)
        ranks[r].waiting.append(_Seq(q, inp[q], out[q]))
        if not busy[r]:
            busy[r] = True
            heapq.heappush(heap, (ta, r))
    return sum(r.steps for r in ranks)


def peak_rss_mb() -> float:
    """This process's peak resident set (VmHWM; ru_maxrss would include a parent's pages)."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def scenario_toml(sc: Scenario) -> str:
    """``bench_scenario`` as a scenario file (what a user would give the command line)."""
    w = sc.workload

    def dist(d: LengthDist) -> str:
        return (
            f'{{ dist = "{d.dist}", median = {d.median:g}, sigma = {d.sigma:g}, '
            f"min = {d.min}, max = {d.max} }}"
        )

    return f"""name = "{sc.name}"
duration_s = {sc.duration_s:g}
seed = {sc.seed}
[cluster]
instances = {sc.instances}
dp_ranks = {sc.dp_ranks}
[gateway]
policy = "{sc.gateway.policy}"
[dispatcher]
policy = "{sc.dispatcher.policy}"
[workload]
rate = {w.rate:g}
input = {dist(w.input)}
output = {dist(w.output)}
[truth]
verdict = "balanced"
"""


def bench_cli(sc: Scenario, jobs: int, folders: bool = False, interval: str | None = None) -> None:
    """``skewscope simulate --openmetrics`` (``folders``: ``--out``) in this process: wall,
    CPU (this process and the engine's workers), peak RSS (here and the largest worker), the
    output's size."""
    import tempfile

    import skewscope.sim.engine as engine
    from skewscope.cli import main as cli

    stats: dict[str, float] = {}
    real = engine.simulate

    def spy(*a: object, **k: object) -> object:
        res = real(*a, **k)  # type: ignore[arg-type]
        stats.update(res.run_stats)
        return res

    engine.simulate = spy  # type: ignore[assignment]
    import skewscope.sim.writers.history as history

    real_write = history.write_history

    def timed_write(*a: object, **k: object) -> object:
        t, c = time.perf_counter(), time.process_time()
        out = real_write(*a, **k)  # type: ignore[arg-type]
        stats["write_s"], stats["write_cpu_s"] = time.perf_counter() - t, time.process_time() - c
        return out

    history.write_history = timed_write  # type: ignore[assignment]
    with tempfile.TemporaryDirectory(dir=".") as d:
        toml = Path(d) / "bench.toml"
        toml.write_text(scenario_toml(sc))
        om = Path(d) / ("bench" if folders else "bench.om")
        flag = "--out" if folders else "--openmetrics"
        t0, c0 = time.perf_counter(), time.process_time()
        every = ["--metrics-interval", interval] if interval else []
        rc = cli(["simulate", str(toml), flag, str(om), "--jobs", str(jobs), *every])
        wall, cpu = time.perf_counter() - t0, time.process_time() - c0
        size = sum(p.stat().st_size for p in [om, *om.rglob("*")] if p.is_file())
    print(
        f"cli: skewscope simulate {' '.join([flag, *every])}, {sc.duration_s:.0f} simulated s of "
        f"{sc.summary}, --jobs {jobs}: exit {rc}, {wall:.1f} s wall; CPU s: {cpu:.1f} in this "
        f"process (engine + writers), {stats.get('cpu_s', 0):.1f} engine over its processes "
        f"(of which {stats.get('sink_cpu_s', 0):.1f} in the writers' sinks); "
        f"the history file written in {stats.get('write_s', 0):.1f} s wall, "
        f"{stats.get('write_cpu_s', 0):.1f} CPU s of this process after the run; "
        f"peak RSS {peak_rss_mb():.0f} MB here, {stats.get('worker_rss_mb', 0):.0f} MB the "
        f"largest worker; {int(stats.get('steps', 0)):,} steps; output {size / 1e9:.2f} GB; "
        f"load average {os.getloadavg()[0]:.1f}"
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--minutes", type=float, default=60.0, help="simulated minutes (default 60)")
    ap.add_argument(
        "--naive-minutes",
        type=float,
        default=1.0,
        help="simulated minutes for the naive reference (default 1)",
    )
    ap.add_argument(
        "--fleet",
        action="store_true",
        help="64 instances x 8 ranks at 512 req/s (issue 14's goal) instead of 8x4",
    )
    ap.add_argument(
        "--jobs",
        type=int,
        default=len(os.sched_getaffinity(0)),
        help="worker processes for the streamed run (default: the usable CPUs)",
    )
    ap.add_argument(
        "--keep",
        action="store_true",
        help="keep the step table too (one process; a table of every step)",
    )
    ap.add_argument(
        "--cli",
        action="store_true",
        help="run `skewscope simulate SCENARIO --openmetrics FILE` end to end instead",
    )
    ap.add_argument(
        "--cli-out",
        action="store_true",
        help="run `skewscope simulate SCENARIO --out DIR` end to end instead",
    )
    ap.add_argument(
        "--metrics-interval",
        metavar="DURATION",
        help="with --cli: the history's interval (default: the command's, 5s)",
    )
    args = ap.parse_args()
    shape = (64, 8, 512.0) if args.fleet else (8, 4, 64.0)
    if args.cli or args.cli_out:
        bench_cli(
            bench_scenario(args.minutes, *shape), args.jobs, args.cli_out, args.metrics_interval
        )
        return

    sc = bench_scenario(args.minutes, *shape)
    check_limits(sc, keep_steps=args.keep)
    jobs = 1 if args.keep else args.jobs
    t0, c0 = time.perf_counter(), time.process_time()
    res = simulate(sc, record_members=False, keep_steps=args.keep, jobs=jobs)
    wall, cpu = time.perf_counter() - t0, time.process_time() - c0
    steps, nreq = int(res.run_stats["steps"]), res.requests.height
    sim_s = sc.duration_s
    how = "steps kept" if args.keep else f"steps streamed, {jobs} process(es)"
    print(
        f"engine: {sim_s:.0f} simulated s of {sc.summary} ({how}) in {wall:.1f} s wall, "
        f"{res.run_stats['cpu_s']:.1f} engine CPU s over its processes, {cpu:.1f} in this one "
        f"(peak RSS {peak_rss_mb():.0f} MB here, "
        f"{res.run_stats.get('worker_rss_mb', 0):.0f} MB the largest worker)"
    )
    print(
        f"  {sim_s / wall:.1f} simulated s per wall s; {steps:,} steps + {nreq:,} requests = "
        f"{(steps + nreq) / wall:,.0f} events per wall s; "
        f"KV peak {res.run_stats['kv_peak']:.2f}"
    )
    print(f"  finished {(res.requests['status'] == 'finished').mean():.1%}")
    if args.fleet and sim_s >= 3600:
        print(f"goal (issue 14): one hour under 60 s wall -> {'met' if wall < 60 else 'NOT met'}")

    nsc = bench_scenario(args.naive_minutes, *shape)
    wl = generate(nsc.workload, nsc.duration_s, np.random.default_rng(nsc.seed))
    t0 = time.process_time()
    nsteps = naive_run(nsc, wl)
    ncpu = time.process_time() - t0
    t0, w0 = time.process_time(), time.perf_counter()
    eres = simulate(nsc, record_members=False, keep_steps=False)
    ecpu, ewall = time.process_time() - t0, time.perf_counter() - w0
    naive_rate = (nsteps + len(wl)) / ncpu
    eng_rate = (eres.run_stats["steps"] + eres.requests.height) / ecpu
    print(
        f"baseline, same run: naive per-sequence reference, {nsc.duration_s:.0f} simulated s: "
        f"{ncpu:.2f} CPU s, {naive_rate:,.0f} events per CPU s"
    )
    print(
        f"  engine, one process, same slice: {ecpu:.2f} CPU s ({ewall:.2f} s wall), "
        f"{eng_rate:,.0f} events per CPU s -> {eng_rate / naive_rate:.1f}x the naive reference"
    )
    print(
        f"  full run in wall s against the one-process engine's pace on the slice: "
        f"{(sim_s / wall) / (nsc.duration_s / ewall):.2f}x"
    )


if __name__ == "__main__":
    main()
