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
from skewscope.sim.rank import Rank, RequestState
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

    from skewscope.sim.scenario import Scenario

__all__ = ["PROGRESS_EVERY", "START_S", "simulate", "unit_ids"]


def simulate(
    scenario: Scenario,
    *,
    seed: int | None = None,
    record_members: bool = True,
    duration_s: float | None = None,
    workload: Workload | None = None,
    progress: Callable[[float], None] | None = None,
) -> SimResult:
    """Run a scenario and return its tables; the same (scenario, seed) gives identical tables.

    ``workload`` replays given requests instead of drawing the scenario's (what-if replays).
    ``progress`` is called with the simulated time every ``PROGRESS_EVERY`` arrivals.
    """
    seed = scenario.seed if seed is None else seed
    duration = scenario.duration_s if duration_s is None else duration_s
    rng_wl, rng_route, rng_id = (np.random.default_rng(s) for s in np.random.SeedSequence(seed)
                                 .spawn(3))
    wl = generate(scenario.workload, duration, rng_wl) if workload is None else workload
    reqs = RequestState(wl)
    rec: array[float] = array("d")
    members: array[int] | None = array("q") if record_members else None
    n_inst, n_dp = scenario.instances, scenario.dp_ranks
    specs = [scenario.rank_spec(i, d) for i in range(n_inst) for d in range(n_dp)]
    pieces: array[float] = array("d")
    pats: array[int] = array("q")
    ranks = [Rank(g, sp, reqs, rec, members, pieces, pats) for g, sp in enumerate(specs)]
    run(scenario, wl, reqs, ranks, rng_route, duration, progress)
    step_rows, member_rows = in_time_order(rec, members, pieces, pats)
    n_steps = step_rows.shape[0]
    infos = [
        RankInfo(
            instance=scenario.instance_name(g // n_dp), dp_rank=g % n_dp,
            hostname=f"node-{g // n_dp}", pid=31000 + 17 * g, speed=sp.speed,
            total_blocks=sp.total_blocks, block_size=sp.block_size,
            max_running=sp.max_running, token_budget=sp.token_budget,
        )
        for g, sp in enumerate(specs)
    ]
    pending = {q for rk in ranks for q in rk.waiting}
    rids = request_ids(wl, rng_id)
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
        "n_steps": n_steps,
        "record_members": record_members,
    }
    return SimResult(
        start_s=START_S,
        end_s=START_S + duration,
        ranks=infos,
        requests=requests_frame(wl, reqs, infos, pending, rids),
        steps=steps_frame(step_rows, infos),
        members=members_frame(member_rows, rids) if member_rows is not None else None,
        truth=scenario.truth,
        model_name=scenario.model_name,
        meta=meta,
    )



def unit_ids(result: SimResult) -> list[str]:
    """Every unit id the run has: instance names, and ``<instance>/dp<rank>`` per rank."""
    return sorted({r.instance for r in result.ranks}) + [
        dp_unit_id(r.instance, r.dp_rank) for r in result.ranks
    ]
