"""The run's record -> its polars tables (the ``SimResult`` contract in ``records``)."""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from skewscope.sim.rank import MEMBER_FIELDS, STEP_FIELDS
from skewscope.sim.records import START_S

if TYPE_CHECKING:
    from array import array

    import polars as pl
    from numpy.typing import NDArray

    from skewscope.sim.rank import RequestState
    from skewscope.sim.records import RankInfo
    from skewscope.sim.workload import Workload


def in_time_order(
    rec: array[float], members: array[int] | None, lazy: bool
) -> tuple[NDArray[np.float64], NDArray[np.int64] | None]:
    """Step rows sorted by (start, rank) — the order the global heap executes them in — with
    step ids renumbered to match, and member rows following their steps. ``loop.run`` (not lazy)
    already executes them in that order."""
    a = np.frombuffer(rec, dtype=np.float64).reshape(-1, STEP_FIELDS)
    if not lazy:
        m0 = None if members is None else np.frombuffer(members, dtype=np.int64)
        return a, None if m0 is None else m0.reshape(-1, MEMBER_FIELDS)
    order = np.lexsort((a[:, 0], a[:, 1]))
    rows = a[order]
    del a
    del rec[:]  # the sorted copy replaces the record: do not hold both while frames are built
    if members is None:
        return rows, None
    new_id = np.empty_like(order)
    new_id[order] = np.arange(order.size)
    m = np.frombuffer(members, dtype=np.int64).reshape(-1, MEMBER_FIELDS).copy()
    del members[:]
    m[:, 0] = new_id[m[:, 0]]
    return rows, m[np.argsort(m[:, 0], kind="stable")]



def request_ids(wl: Workload, rng: np.random.Generator) -> list[str]:
    """vLLM-style request ids from their own random stream (so they never shift the workload)."""
    vals = rng.integers(0, 2**63, size=len(wl), dtype=np.int64).tolist()
    return [f"chatcmpl-{v:016x}" for v in vals]


def requests_frame(
    wl: Workload, reqs: RequestState, infos: list[RankInfo], pending: set[int], rids: list[str]
) -> pl.DataFrame:
    import polars as pl

    def opt(vals: list[float]) -> pl.Series:
        a = np.asarray(vals, dtype=np.float64)
        return pl.Series(np.where(a < 0, np.nan, a + START_S)).fill_nan(None)

    status = [
        "rejected" if reqs.rejected[q]
        else "finished" if reqs.finish[q] >= 0
        else "waiting" if q in pending
        else "running"
        for q in range(len(wl))
    ]
    inst = [infos[r].instance if r >= 0 else None for r in reqs.rank]
    dp = [infos[r].dp_rank if r >= 0 else None for r in reqs.rank]
    return pl.DataFrame(
        {
            "rid": rids,
            "instance": pl.Series(inst, dtype=pl.Utf8),
            "dp_rank": pl.Series(dp, dtype=pl.Int64),
            "arrival_s": wl.arrival_s + START_S,
            "input_tokens": wl.input_tokens,
            "output_tokens": wl.output_tokens,
            "first_scheduled_s": opt(reqs.fsched),
            "first_token_s": opt(reqs.ftok),
            "finish_s": opt(reqs.finish),
            "preemptions": pl.Series(reqs.preempt, dtype=pl.Int64),
            "status": status,
        }
    )


def steps_frame(a: NDArray[np.float64], infos: list[RankInfo]) -> pl.DataFrame:
    import polars as pl

    g = a[:, 0].astype(np.int64)
    ints = a[:, 3:].astype(np.int64)
    total = np.array([r.total_blocks for r in infos], dtype=np.int64)[g]
    names = pl.Series([r.instance for r in infos], dtype=pl.Utf8)
    pf_bs, dec_bs, used = ints[:, 0], ints[:, 1], ints[:, 5]
    return pl.DataFrame(
        {
            "step_id": np.arange(a.shape[0], dtype=np.int64),
            "instance": names.gather(g),
            "dp_rank": np.array([r.dp_rank for r in infos], dtype=np.int64)[g],
            "start_s": a[:, 1] + START_S,
            "end_s": a[:, 2] + START_S,
            "batch_size": pf_bs + dec_bs,
            "prefill_batch_size": pf_bs,
            "decode_batch_size": dec_bs,
            "prefill_tokens": ints[:, 2],
            "decode_tokens": dec_bs,
            "running": ints[:, 3],
            "waiting": ints[:, 4],
            "total_blocks": total,
            "used_blocks": used,
            "free_blocks": total - used,
            "blocks_allocated": ints[:, 6],
            "blocks_freed": ints[:, 7],
            "preempted": ints[:, 8],
        }
    )


def members_frame(a: NDArray[np.int64], rids: list[str]) -> pl.DataFrame:
    import polars as pl

    names = pl.Series(rids, dtype=pl.Utf8)
    return pl.DataFrame(
        {
            "step_id": a[:, 0],
            "rid": names.gather(a[:, 1]),
            "iter": a[:, 2],
            "type": a[:, 3],
            "num_scheduled_tokens": a[:, 4],
            "num_prompt_tokens": a[:, 5],
            "num_computed_tokens": a[:, 6],
        }
    )

