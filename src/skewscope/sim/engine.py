"""Simulate a scenario: N instances x M DP ranks with continuous batching and paged KV blocks.

The parts: ``rank`` (one engine process), ``loop`` (arrivals routed in time order, ranks
stepped up to them), ``tables`` (the record -> the ``SimResult`` tables).
"""

from __future__ import annotations

from array import array
from typing import TYPE_CHECKING, Any

import numpy as np

from skewscope.frame import dp_unit_id
from skewscope.sim.loop import PROGRESS_EVERY, run
from skewscope.sim.rank import STEP_FIELDS, Rank, RequestState
from skewscope.sim.records import START_S, RankInfo, SimResult
from skewscope.sim.tables import (
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

    from skewscope.sim.scenario import Scenario

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
) -> SimResult:
    """Run a scenario and return its tables; the same (scenario, seed) gives identical tables.

    ``workload`` replays given requests instead of drawing the scenario's (what-if replays).
    ``progress`` is called with the simulated time every ``PROGRESS_EVERY`` arrivals.
    ``on_steps`` takes the step table in consecutive time chunks (about ``CHUNK_ROWS`` rows
    each, in ``SimResult.steps`` order and columns) as the run goes, so no whole-run step
    table is held; the result's ``steps`` (and ``members``) are then empty.
    """
    seed = scenario.seed if seed is None else seed
    duration = scenario.duration_s if duration_s is None else duration_s
    rng_wl, rng_route, rng_id = (np.random.default_rng(s) for s in np.random.SeedSequence(seed)
                                 .spawn(3))
    wl = generate(scenario.workload, duration, rng_wl) if workload is None else workload
    reqs = RequestState(wl)
    rids = request_ids(wl, rng_id)
    n_inst, n_dp = scenario.instances, scenario.dp_ranks
    specs = [scenario.rank_spec(i, d) for i in range(n_inst) for d in range(n_dp)]
    infos = [
        RankInfo(
            instance=scenario.instance_name(g // n_dp), dp_rank=g % n_dp,
            hostname=f"node-{g // n_dp}", pid=31000 + 17 * g, speed=sp.speed,
            total_blocks=sp.total_blocks, block_size=sp.block_size,
            max_running=sp.max_running, token_budget=sp.token_budget,
        )
        for g, sp in enumerate(specs)
    ]
    out = _StepChunks(infos, rids, record_members and on_steps is None, on_steps)
    ranks = [Rank(g, sp, reqs, out.rec, out.members, out.pieces, out.pats)
             for g, sp in enumerate(specs)]
    out.ranks = ranks
    rate = sum(1000.0 / (sp.fixed_ms * sp.speed) for sp in specs)  # most steps per second
    chunk_s = max(1.0, CHUNK_ROWS / rate)
    run(scenario, wl, reqs, ranks, rng_route, duration, progress, (chunk_s, out.flush))
    pending = {q for rk in ranks for q in rk.waiting}
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
        "n_steps": out.n_steps,
        "record_members": record_members,
    }
    steps, members = out.tables()
    return SimResult(
        start_s=START_S,
        end_s=START_S + duration,
        ranks=infos,
        requests=requests_frame(wl, reqs, infos, pending, rids),
        steps=steps,
        members=members,
        truth=scenario.truth,
        model_name=scenario.model_name,
        meta=meta,
    )


class _StepChunks:
    """The records the ranks write into, turned into table chunks at each time cut: kept
    for the result, or handed to ``on_steps`` and dropped."""

    def __init__(self, infos: list[RankInfo], rids: list[str], members: bool,
                 on_steps: Callable[[pl.DataFrame], None] | None) -> None:
        self.infos, self.rids, self.on_steps = infos, rids, on_steps
        self.rec: array[float] = array("d")
        self.members: array[int] | None = array("q") if members else None
        self.pieces: array[float] = array("d")
        self.pats: array[int] = array("q")
        self.n_steps = 0
        self.ranks: list[Rank] = []
        self.steps: list[pl.DataFrame] = []
        self.member_frames: list[pl.DataFrame] = []

    def flush(self) -> None:
        """Every rank has executed exactly the steps starting before the cut: those rows."""
        rows, mem = in_time_order(self.rec, self.members, self.pieces, self.pats)
        for rk in self.ranks:
            rk.pattern_dropped()
        frame = steps_frame(rows, self.infos, self.n_steps)
        if mem is not None:
            mem[:, 0] += self.n_steps
            self.member_frames.append(members_frame(mem, self.rids))
        self.n_steps += rows.shape[0]
        if self.on_steps is not None:
            self.on_steps(frame)
        else:
            self.steps.append(frame)

    def tables(self) -> tuple[pl.DataFrame, pl.DataFrame | None]:
        import polars as pl

        if not self.steps:  # streamed: an empty table with the contract's columns
            empty = np.zeros((0, STEP_FIELDS))
            return steps_frame(empty, self.infos, 0), None
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
