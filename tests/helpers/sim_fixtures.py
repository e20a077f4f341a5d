"""Small hand-built SimResult fixtures for the writer tests.

The real simulator engine is written in parallel; the writers must not wait for it, so this file
holds a tiny, deterministic continuous-batching model (whole-prompt prefill in one step, one
decode token per running request per step, KV blocks per request, recompute preemption when the
pool overflows).  It is deliberately simple but keeps every table of the contract consistent:
each request's prefill/decode appear in ``members``, step KV columns follow the requests' blocks.
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass, field

import polars as pl

from skewscope.sim.records import RankInfo, SimResult
from skewscope.sim.spec import GroundTruth

T0 = 1_745_369_533.0  # 2025-04-23 08:52:13 +08:00


@dataclass
class _Req:
    rid: str
    instance: str
    dp_rank: int
    arrival_s: float
    input_tokens: int
    output_tokens: int
    first_scheduled_s: float | None = None
    first_token_s: float | None = None
    finish_s: float | None = None
    preemptions: int = 0
    generated: int = 0
    blocks: int = 0
    status: str = "waiting"


@dataclass
class _Rank:
    info: RankInfo
    reqs: list[_Req] = field(default_factory=list)


def _simulate_rank(
    rank: _Rank,
    end_s: float,
    step_rows: list[dict[str, object]],
    member_rows: list[dict[str, object]],
    next_step: list[int],
) -> None:
    info = rank.info
    pending = sorted(rank.reqs, key=lambda r: r.arrival_s)
    waiting: list[_Req] = []
    running: list[_Req] = []
    t = pending[0].arrival_s if pending else end_s
    used = 0

    def need(r: _Req) -> int:
        return math.ceil((r.input_tokens + r.generated + 1) / info.block_size)

    while t < end_s:
        while pending and pending[0].arrival_s <= t:
            waiting.append(pending.pop(0))
        if not running and not waiting:
            if not pending:
                break
            t = pending[0].arrival_s
            continue
        allocated = freed = preempted = 0
        members: list[tuple[_Req, int, int, int]] = []  # req, type, scheduled, computed
        # decode for running requests; grow their blocks, preempt newest on overflow
        for r in list(running):
            grow = need(r) - r.blocks
            while grow > 0 and used + grow > info.total_blocks and running:
                victim = running.pop()
                used -= victim.blocks
                freed += victim.blocks
                victim.blocks = 0
                victim.generated = 0
                victim.preemptions += 1
                preempted += 1
                waiting.insert(0, victim)
                members[:] = [m for m in members if m[0] is not victim]
                if victim is r:
                    break
            if r not in running:
                continue
            used += grow
            allocated += grow
            r.blocks += grow
            members.append((r, 1, 1, r.input_tokens + r.generated - 1))
        # admit waiting requests (whole prompt prefill) within the budgets
        budget = info.token_budget - len(members)
        while waiting and len(running) < info.max_running:
            r = waiting[0]
            blocks = math.ceil((r.input_tokens + 1) / info.block_size)
            if r.input_tokens > budget or used + blocks > info.total_blocks:
                break
            waiting.pop(0)
            budget -= r.input_tokens
            used += blocks
            allocated += blocks
            r.blocks = blocks
            if r.first_scheduled_s is None:
                r.first_scheduled_s = t
            r.status = "running"
            running.append(r)
            members.append((r, 0, r.input_tokens, 0))
        if not members:
            t = pending[0].arrival_s if pending else end_s
            continue
        prefill_tokens = sum(m[2] for m in members if m[1] == 0)
        decode_tokens = sum(m[2] for m in members if m[1] == 1)
        dur = info.speed * (0.010 + 0.00002 * prefill_tokens + 0.0002 * len(members))
        sid = next_step[0]
        next_step[0] += 1
        step_rows.append(
            {
                "step_id": sid,
                "instance": info.instance,
                "dp_rank": info.dp_rank,
                "start_s": t,
                "end_s": t + dur,
                "batch_size": len(members),
                "prefill_batch_size": sum(1 for m in members if m[1] == 0),
                "decode_batch_size": sum(1 for m in members if m[1] == 1),
                "prefill_tokens": prefill_tokens,
                "decode_tokens": decode_tokens,
                "running": len(members),
                "waiting": len(waiting),
                "total_blocks": info.total_blocks,
                "used_blocks": used,
                "free_blocks": info.total_blocks - used,
                "blocks_allocated": allocated,
                "blocks_freed": freed,
                "preempted": preempted,
            }
        )
        for r, typ, sched, computed in members:
            member_rows.append(
                {
                    "step_id": sid,
                    "rid": r.rid,
                    "iter": r.generated,
                    "type": typ,
                    "num_scheduled_tokens": sched,
                    "num_prompt_tokens": r.input_tokens,
                    "num_computed_tokens": computed,
                }
            )
        t += dur
        for r, _typ, _s, _c in members:
            r.generated += 1
            if r.first_token_s is None:
                r.first_token_s = t
            if r.generated >= r.output_tokens:
                r.finish_s = t
                r.status = "finished"
                running.remove(r)
                used -= r.blocks
                r.blocks = 0
    for r in rank.reqs:
        if r.status == "running" and r not in running:
            r.status = "waiting"


def make_result(
    *,
    seed: int = 7,
    n_requests: int = 120,
    duration_s: float = 60.0,
    layout: tuple[int, ...] = (2, 1),
    hot_share: float = 0.5,
    with_members: bool = True,
) -> SimResult:
    """Build a run: ``layout[i]`` DP ranks on instance ``inst-i``; ``inst-0/dp0`` takes
    ``hot_share`` of the traffic (a DP hot spot), the rest is spread round-robin.  The last
    request is rejected so the tables contain every status."""
    rng = random.Random(seed)
    ranks: list[_Rank] = []
    pid = 4000
    for i, n in enumerate(layout):
        for d in range(n):
            pid += 1
            ranks.append(
                _Rank(
                    RankInfo(
                        instance=f"inst-{i}",
                        dp_rank=d,
                        hostname=f"node{i}",
                        pid=pid,
                        speed=1.5 if (i, d) == (0, 0) else 1.0,
                        total_blocks=48 if (i, d) == (0, 0) else 400,
                        block_size=16,
                        max_running=16,
                        token_budget=4096,
                    )
                )
            )
    reqs: list[_Req] = []
    for k in range(n_requests):
        arrival = T0 + duration_s * 0.98 * k / n_requests + rng.random() * 0.05
        rank = ranks[0] if rng.random() < hot_share else ranks[k % len(ranks)]
        r = _Req(
            f"chatcmpl-{k:05d}",
            rank.info.instance,
            rank.info.dp_rank,
            arrival,
            rng.randint(16, 300),
            rng.randint(2, 120),
        )
        if k >= n_requests - 5:  # a tail that cannot finish before the end of the run
            r.arrival_s = T0 + duration_s - 0.5 + 0.01 * k / n_requests
            r.input_tokens, r.output_tokens = 700, 500
        rank.reqs.append(r)
        reqs.append(r)
    rejected = reqs[-1]
    for rank in ranks:
        if rejected in rank.reqs:
            rank.reqs.remove(rejected)
    rejected.status = "rejected"
    step_rows: list[dict[str, object]] = []
    member_rows: list[dict[str, object]] = []
    counter = [0]
    end_s = T0 + duration_s
    for rank in ranks:
        _simulate_rank(rank, end_s, step_rows, member_rows, counter)
    requests = pl.DataFrame(
        [
            {
                "rid": r.rid,
                "instance": r.instance,
                "dp_rank": r.dp_rank,
                "arrival_s": r.arrival_s,
                "input_tokens": r.input_tokens,
                "output_tokens": r.output_tokens,
                "first_scheduled_s": r.first_scheduled_s,
                "first_token_s": r.first_token_s,
                "finish_s": r.finish_s,
                "preemptions": r.preemptions,
                "status": r.status,
            }
            for r in reqs
        ],
        schema={
            "rid": pl.Utf8,
            "instance": pl.Utf8,
            "dp_rank": pl.Int64,
            "arrival_s": pl.Float64,
            "input_tokens": pl.Int64,
            "output_tokens": pl.Int64,
            "first_scheduled_s": pl.Float64,
            "first_token_s": pl.Float64,
            "finish_s": pl.Float64,
            "preemptions": pl.Int64,
            "status": pl.Utf8,
        },
    )
    steps = (
        pl.DataFrame(step_rows)
        .with_columns(
            pl.col(c).cast(pl.Int64)
            for c in (
                "step_id",
                "dp_rank",
                "batch_size",
                "prefill_batch_size",
                "decode_batch_size",
                "prefill_tokens",
                "decode_tokens",
                "running",
                "waiting",
                "total_blocks",
                "used_blocks",
                "free_blocks",
                "blocks_allocated",
                "blocks_freed",
                "preempted",
            )
        )
        .sort("step_id")
    )
    members = pl.DataFrame(member_rows).with_columns(
        pl.col(c).cast(pl.Int64)
        for c in (
            "step_id",
            "iter",
            "type",
            "num_scheduled_tokens",
            "num_prompt_tokens",
            "num_computed_tokens",
        )
    )
    truth = GroundTruth(
        scenario="fixture-dp-hot",
        verdict="imbalanced",
        level="dp",
        hot_units=("inst-0/dp0",),
        kind="count",
        root_cause=None,
        description="hand-built fixture: inst-0/dp0 takes extra traffic",
    )
    return SimResult(
        start_s=T0,
        end_s=end_s,
        ranks=[r.info for r in ranks],
        requests=requests,
        steps=steps,
        members=members if with_members else None,
        truth=truth,
        model_name="sim-llama-8b",
        meta={"scenario": "fixture-dp-hot", "seed": seed},
    )
