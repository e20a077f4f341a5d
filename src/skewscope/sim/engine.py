"""Simulate a scenario: N instances x M DP ranks with continuous batching and paged KV blocks.

The parts: ``rank`` (one engine process), ``loop`` (arrivals routed in time order, ranks
stepped up to them), ``tables`` (the record -> the ``SimResult`` tables).
"""

from __future__ import annotations

import copy
import time
from array import array
from dataclasses import dataclass
from itertools import pairwise
from typing import TYPE_CHECKING, Any

import numpy as np

from skewscope.errors import SimulationError
from skewscope.frame import dp_unit_id
from skewscope.sim.loop import PROGRESS_EVERY, route, run
from skewscope.sim.pd import simulate_pd
from skewscope.sim.policies import reads_load
from skewscope.sim.rank import STEP_FIELDS, Rank, RequestState
from skewscope.sim.records import START_S, RankInfo, SimResult, SinkFactory, StepSink
from skewscope.sim.tables import (
    RequestColumns,
    in_time_order,
    members_frame,
    request_ids,
    requests_frame,
    steps_frame,
)
from skewscope.sim.workload import Workload, generate

if TYPE_CHECKING:
    from collections.abc import Callable

    import polars as pl

    from skewscope.sim.spec import RankSpec, Scenario

__all__ = ["CHUNK_ROWS", "PROGRESS_EVERY", "START_S", "simulate", "unit_ids"]

CHUNK_ROWS = 1_000_000  # step rows per time chunk at the most (bounds a streamed run's memory)


def simulate(
    scenario: Scenario,
    *,
    seed: int | None = None,
    record_members: bool = True,
    duration_s: float | None = None,
    workload: Workload | None = None,
    progress: Callable[[float], None] | None = None,
    on_steps: Callable[[pl.DataFrame], None] | None = None,
    keep_steps: bool = True,
    jobs: int = 1,
    sinks: SinkFactory | None = None,
) -> SimResult:
    """Run a scenario and return its tables; the same (scenario, seed) gives identical tables.

    ``workload`` replays given requests instead of drawing the scenario's (what-if replays).
    ``progress`` is called with the simulated time every ``PROGRESS_EVERY`` arrivals.
    ``on_steps`` takes the step table in consecutive time chunks (about ``CHUNK_ROWS`` rows
    each, in ``SimResult.steps`` order and columns) as the run goes, so no whole-run step
    table is held; the result's ``steps`` (and ``members``) are then empty. So they are with
    ``keep_steps=False``, where only ``SimResult.run_stats`` (steps, KV peak) is kept; then a
    gateway that reads no load lets ``jobs`` processes run groups of instances apart (the
    gateway's choices are made first), with the same result.

    ``sinks(lo, hi, ...)`` makes a ``StepSink`` for instances ``[lo, hi)`` (the writers): it
    takes each time chunk of their steps with the requests' state as the chunk is cut, in the
    process that runs them, and its ``close`` summary lands in ``SimResult.outputs`` (one
    per instance group, in instance order). With ``keep_steps=False`` and a gateway that
    reads no load, ``jobs`` worker processes make and feed their own sinks.
    """
    seed = scenario.seed if seed is None else seed
    duration = scenario.duration_s if duration_s is None else duration_s
    root = np.random.SeedSequence(seed)
    rng_wl, rng_route, rng_id = (np.random.default_rng(s) for s in root.spawn(3))
    if scenario.pd is not None:  # two pools, each run as a fleet of its own (sim/pd.py)
        if sinks is not None or on_steps is not None or not keep_steps:
            raise SimulationError(
                "a prefill/decode scenario runs whole: no streamed writers "
                "(write its metrics from the result)"
            )
        wl = generate(scenario.workload, duration, rng_wl) if workload is None else workload
        return simulate_pd(
            scenario,
            scenario.pd,
            simulate,
            seed=seed,
            duration=duration,
            workload=wl,
            record_members=record_members,
            progress=progress,
        )
    rng_disp = [np.random.default_rng(s) for s in root.spawn(1)[0].spawn(scenario.instances)]
    wl = generate(scenario.workload, duration, rng_wl) if workload is None else workload
    rng_id_start = copy.deepcopy(rng_id)  # workers draw the same ids again
    rids = request_ids(wl, rng_id)
    n_inst, n_dp = scenario.instances, scenario.dp_ranks
    specs = [scenario.rank_spec(i, d) for i in range(n_inst) for d in range(n_dp)]
    infos = [
        RankInfo(
            instance=scenario.instance_name(g // n_dp),
            dp_rank=g % n_dp,
            hostname=f"node-{g // n_dp}",
            pid=31000 + 17 * g,
            speed=sp.speed,
            total_blocks=sp.total_blocks,
            block_size=sp.block_size,
            max_running=sp.max_running,
            token_budget=sp.token_budget,
        )
        for g, sp in enumerate(specs)
    ]
    keep = keep_steps and on_steps is None
    jobs = min(jobs, n_inst)
    cpu0 = time.process_time()
    outputs: list[Any] = []
    if jobs > 1 and not keep and on_steps is None and not reads_load(scenario.gateway):
        routed = route(scenario, wl, rng_route)
        bounds = np.linspace(0, n_inst, jobs + 1).round().astype(int).tolist()
        parts = [
            _Part(
                scenario,
                wl,
                (rng_route, rng_disp),
                duration,
                routed,
                lo,
                hi,
                infos,
                rng_id_start if record_members and sinks else None,
                sinks,
                CHUNK_ROWS,
            )
            for lo, hi in pairwise(bounds)
        ]
        cols, pending, stats, outputs = _run_apart(parts, routed, progress)
        steps, members = _empty(infos)
    else:
        reqs = RequestState(wl)
        sink = sinks(0, n_inst, wl, infos, duration) if sinks is not None else None
        out = _StepChunks(
            infos, rids, record_members and (keep or sink is not None), on_steps, keep, sink, reqs
        )
        ranks = [
            Rank(g, sp, reqs, out.rec, out.members, out.pieces, out.pats)
            for g, sp in enumerate(specs)
        ]
        out.ranks = ranks
        run(
            scenario,
            wl,
            reqs,
            ranks,
            (rng_route, rng_disp),
            duration,
            progress,
            (_chunk_s(specs), out.flush),
        )
        pending = {q for rk in ranks for q in rk.waiting}
        cols = RequestColumns.of(reqs)
        stats = out.stats
        steps, members = out.tables()
        if sink is not None:
            outputs.append(out.close_sink())
    stats["cpu_s"] = stats.get("cpu_s", 0.0) + time.process_time() - cpu0
    meta: dict[str, Any] = {
        "scenario": scenario.name,
        "seed": seed,
        "duration_s": duration,
        "arrival": scenario.workload.describe(),
        "arrival_rate": len(wl) / duration if duration > 0 else 0.0,
        "gateway_policy": scenario.gateway.describe(),
        "dispatcher_policy": scenario.dispatcher.describe(),
        "instances": n_inst,
        "dp_ranks": n_dp,
        "n_requests": len(wl),
        "n_steps": int(stats["steps"]),
        "record_members": record_members,
    }
    return SimResult(
        start_s=START_S,
        end_s=START_S + duration,
        ranks=infos,
        requests=requests_frame(wl, cols, infos, pending, rids),
        steps=steps,
        members=members,
        truth=scenario.truth,
        model_name=scenario.model_name,
        meta=meta,
        run_stats=stats,
        outputs=outputs,
    )


def _chunk_s(specs: list[RankSpec], rows: int | None = None) -> float:
    """Simulated seconds per time chunk: ``rows`` (``CHUNK_ROWS``) steps at the ranks'
    fastest pace."""
    rate = sum(1000.0 / (sp.fixed_ms * sp.speed) for sp in specs)
    return max(1.0, (CHUNK_ROWS if rows is None else rows) / rate)


def _empty(infos: list[RankInfo]) -> tuple[pl.DataFrame, None]:
    """The step table with no rows (its columns are still the contract's)."""
    return steps_frame(np.zeros((0, STEP_FIELDS)), infos, 0), None


@dataclass
class _Part:
    """One worker's share: instances [lo, hi) on the gateway's choices ``routed``."""

    scenario: Scenario
    wl: Workload
    rngs: tuple[np.random.Generator, list[np.random.Generator]]
    duration: float
    routed: list[int]
    lo: int
    hi: int
    infos: list[RankInfo]
    rng_id: np.random.Generator | None  # request ids, when the sink records batch members
    sinks: SinkFactory | None
    chunk_rows: int  # ``CHUNK_ROWS`` as the parent reads it


_progress_queue: Any = None  # a worker's channel for its simulated time (``_run_apart``)


def _init_worker(queue: Any) -> None:
    global _progress_queue
    _progress_queue = queue


def _run_part(part: _Part) -> tuple[dict[str, Any], list[int], dict[str, float], Any]:
    """Run instances [lo, hi) on the gateway's choices (a worker process): their requests'
    state, the requests still waiting, the step stats, the sink's summary; the steps go to the
    sink or are dropped."""
    scenario, wl, lo, hi = part.scenario, part.wl, part.lo, part.hi
    cpu0 = time.process_time()
    reqs = RequestState(wl)
    n_dp = scenario.dp_ranks
    specs = [scenario.rank_spec(i, d) for i in range(lo, hi) for d in range(n_dp)]
    sink = part.sinks(lo, hi, wl, part.infos, part.duration) if part.sinks else None
    rids = request_ids(wl, part.rng_id) if part.rng_id is not None else []
    out = _StepChunks(part.infos, rids, part.rng_id is not None, None, False, sink, reqs)
    ranks = [
        Rank(lo * n_dp + k, sp, reqs, out.rec, out.members, out.pieces, out.pats)
        for k, sp in enumerate(specs)
    ]
    out.first = lo * n_dp
    out.totals = out.totals[out.first : out.first + len(ranks)]
    out.ranks = ranks
    queue, me = _progress_queue, lo
    report = (lambda t: queue.put((me, t))) if queue is not None else None
    run(
        scenario,
        wl,
        reqs,
        ranks,
        part.rngs,
        part.duration,
        report,
        (_chunk_s(specs, part.chunk_rows), out.flush),
        part.routed,
        lo,
    )
    routed = np.asarray(part.routed)
    mine = np.flatnonzero((routed >= lo) & (routed < hi))
    state = {name: np.asarray(getattr(reqs, name))[mine] for name in RequestColumns.FIELDS}
    state["q"] = mine
    summary = out.close_sink() if sink is not None else None
    out.stats["cpu_s"] = time.process_time() - cpu0
    out.stats["worker_rss_mb"] = _peak_rss_mb()
    return state, [q for rk in ranks for q in rk.waiting], out.stats, summary


def _run_apart(
    parts: list[_Part], routed: list[int], progress: Callable[[float], None] | None
) -> tuple[RequestColumns, set[int], dict[str, float], list[Any]]:
    """Run the instance groups in worker processes and put their requests' state together
    (as arrays: the parent holds no per-request Python objects); ``progress`` gets the
    simulated time every worker has reached."""
    import multiprocessing
    import queue as queues
    from concurrent.futures import wait

    from skewscope.workers import process_pool

    # forkserver: forking a process that runs polars' thread pool can deadlock the child
    ctx = multiprocessing.get_context("forkserver")
    channel = ctx.Queue() if progress is not None else None
    reached = {p.lo: 0.0 for p in parts}
    # on SIGTERM/SIGHUP (cli.streams.Terminated) or Ctrl-C the workers are terminated, not
    # left simulating after the parent is gone
    with process_pool(len(parts), initializer=_init_worker, initargs=(channel,)) as ex:
        futures = [ex.submit(_run_part, p) for p in parts]
        while channel is not None and progress is not None:
            if not wait(futures, timeout=0)[1]:
                break
            try:
                who, t = channel.get(timeout=0.25)
            except queues.Empty:
                continue
            reached[who] = t
            progress(min(reached.values()))
        results = [f.result() for f in futures]
    while channel is not None and progress is not None:  # what came after the last look
        try:
            who, t = channel.get_nowait()
        except queues.Empty:
            break
        reached[who] = max(reached[who], t)
        progress(min(reached.values()))
    cols = RequestColumns.empty(len(routed))
    cols.rejected |= np.asarray(routed) < 0  # no healthy instance: refused by the gateway
    pending: set[int] = set()
    stats = {"steps": 0.0, "kv_peak": 0.0, "cpu_s": 0.0}
    outputs = []
    for state, waiting, st, summary in results:
        for name in RequestColumns.FIELDS:
            getattr(cols, name)[state["q"]] = state[name]
        pending.update(waiting)
        stats["steps"] += st["steps"]
        stats["kv_peak"] = max(stats["kv_peak"], st["kv_peak"])
        stats["cpu_s"] += st["cpu_s"]
        stats["sink_cpu_s"] = stats.get("sink_cpu_s", 0.0) + st.get("sink_cpu_s", 0.0)
        stats["worker_rss_mb"] = max(stats.get("worker_rss_mb", 0.0), st["worker_rss_mb"])
        if summary is not None:
            outputs.append(summary)
    return cols, pending, stats, outputs


def _peak_rss_mb() -> float:
    """This process's peak resident set in MB (Linux ``VmHWM``; 0 where unknown)."""
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) / 1024
    except OSError:
        pass
    return 0.0


class _StepChunks:
    """The records the ranks write into, turned into table chunks at each time cut: kept
    for the result, handed to ``on_steps``, or only counted (``stats``: steps, KV peak)."""

    def __init__(
        self,
        infos: list[RankInfo],
        rids: list[str],
        members: bool,
        on_steps: Callable[[pl.DataFrame], None] | None,
        keep: bool,
        sink: StepSink | None = None,
        reqs: RequestState | None = None,
    ) -> None:
        self.infos, self.rids, self.on_steps, self.keep = infos, rids, on_steps, keep
        self.sink, self.reqs = sink, reqs
        self.rec: array[float] = array("d")
        self.members: array[int] | None = array("q") if members else None
        self.pieces: array[float] = array("d")
        self.pats: array[int] = array("q")
        self.ranks: list[Rank] = []
        self.totals = np.array([r.total_blocks for r in infos], dtype=np.float64)
        self.first = 0  # global index of ``totals[0]``'s rank
        self.stats = {"steps": 0.0, "kv_peak": 0.0}
        self.steps: list[pl.DataFrame] = []
        self.member_frames: list[pl.DataFrame] = []

    def flush(self, cut: float) -> None:
        """Every rank has executed exactly the steps starting before ``cut``: those rows."""
        rows, mem = in_time_order(self.rec, self.members, self.pieces, self.pats)
        for rk in self.ranks:
            rk.pattern_dropped()
        n = int(self.stats["steps"])
        if rows.shape[0]:
            kv = rows[:, 8] / self.totals[rows[:, 0].astype(np.int64) - self.first]
            self.stats["kv_peak"] = max(self.stats["kv_peak"], float(kv.max()))
        self.stats["steps"] += rows.shape[0]
        if mem is not None:
            mem[:, 0] += n
        if self.sink is not None and self.reqs is not None:
            cpu0 = time.process_time()
            members = members_frame(mem, self.rids) if mem is not None else None
            self.sink.chunk(rows, members, n, cut, self.reqs)
            self._sink_cpu(cpu0)
        if not self.keep and self.on_steps is None:
            return
        frame = steps_frame(rows, self.infos, n)
        if mem is not None and self.keep:
            self.member_frames.append(members_frame(mem, self.rids))
        if self.on_steps is not None:
            self.on_steps(frame)
        else:
            self.steps.append(frame)

    def close_sink(self) -> Any:
        """The sink's summary (its ``close``), its CPU counted."""
        assert self.sink is not None and self.reqs is not None
        cpu0 = time.process_time()
        summary = self.sink.close(self.reqs)
        self._sink_cpu(cpu0)
        return summary

    def _sink_cpu(self, since: float) -> None:
        """CPU seconds of this process's sinks (``run_stats["sink_cpu_s"]``: the writers'
        share of ``cpu_s``)."""
        self.stats["sink_cpu_s"] = self.stats.get("sink_cpu_s", 0.0) + (time.process_time() - since)

    def tables(self) -> tuple[pl.DataFrame, pl.DataFrame | None]:
        import polars as pl

        if not self.steps:
            return _empty(self.infos)
        steps = pl.concat(self.steps, rechunk=True)
        self.steps.clear()
        if self.members is None:
            return steps, None
        members = pl.concat(self.member_frames, rechunk=True)
        self.member_frames.clear()
        return steps, members


def unit_ids(result: SimResult) -> list[str]:
    """Every unit id the run has: instance names, and ``<instance>/dp<rank>`` per rank."""
    return sorted({r.instance for r in result.ranks}) + [
        dp_unit_id(r.instance, r.dp_rank) for r in result.ranks
    ]
