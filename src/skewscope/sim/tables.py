"""The run's record -> its polars tables (the ``SimResult`` contract in ``records``)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, ClassVar

import numpy as np

from skewscope.sim.rank import MEMBER_FIELDS, PIECE_FIELDS, STEP_FIELDS
from skewscope.sim.records import START_S

if TYPE_CHECKING:
    from array import array

    import polars as pl
    from numpy.typing import NDArray

    from skewscope.sim.rank import RequestState
    from skewscope.sim.records import RankInfo
    from skewscope.sim.workload import Workload


def segment_rows(pieces: array[float], pats: array[int]) -> NDArray[np.float64]:
    """The step rows of decode segment pieces (``rank.PIECE_FIELDS`` each), as the full steps'
    record lays them out: step ``j`` of a piece starts at ``t_a + j * dt``, ends at
    ``t_a + (j + 1) * dt``, and adds the ``j % period``-th block count of its pattern."""
    p = np.frombuffer(pieces, dtype=np.float64).reshape(-1, PIECE_FIELDS)
    lens = (p[:, 7] - p[:, 6]).astype(np.int64)
    n = int(lens.sum())
    out = np.zeros((n, STEP_FIELDS), dtype=np.float64)
    if n == 0:
        return out

    def each(col: int) -> NDArray[np.float64]:
        return np.repeat(p[:, col], lens)

    ends = np.cumsum(lens)
    j = np.arange(n, dtype=np.int64) + np.repeat(p[:, 6].astype(np.int64) - (ends - lens), lens)
    period = np.repeat(p[:, 9].astype(np.int64), lens)  # min(length, block size): j % it exact
    q, r = np.divmod(j, period)
    cum = np.frombuffer(pats, dtype=np.int64)
    at = np.repeat(p[:, 8].astype(np.int64), lens) + r
    here = cum[at]
    before = np.where(r > 0, cum[np.maximum(at - 1, 0)], 0)
    t_a, dt, n_dec = each(1), each(2), each(3)
    jf = j.astype(np.float64)
    out[:, 0] = each(0)
    out[:, 1] = t_a + jf * dt
    out[:, 2] = t_a + (jf + 1.0) * dt
    out[:, 4] = n_dec
    out[:, 6] = n_dec
    out[:, 7] = each(4)
    out[:, 8] = each(5) + q * each(10) + here
    out[:, 9] = here - before
    return out


def in_time_order(
    rec: array[float],
    members: array[int] | None,
    pieces: array[float],
    pats: array[int],
) -> tuple[NDArray[np.float64], NDArray[np.int64] | None]:
    """Every step row (full steps and segments) sorted by (start, rank), with step ids
    renumbered to match and member rows following their steps. Ranks are advanced one at a
    time, so the record's order is not time order."""
    full = np.frombuffer(rec, dtype=np.float64).reshape(-1, STEP_FIELDS)
    a = np.concatenate([full, segment_rows(pieces, pats)]) if len(pieces) else full.copy()
    del full
    del rec[:], pieces[:], pats[:]  # the rows replace the records while frames are built
    order = np.lexsort((a[:, 0], a[:, 1]))
    rows = a.take(order, axis=0)  # whole rows at once: ~2.5x a fancy index's time
    del a
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


@dataclass
class RequestColumns:
    """The requests' final state as arrays (the engine's ``RequestState`` holds lists)."""

    FIELDS: ClassVar[tuple[str, ...]] = ("fsched", "ftok", "finish", "preempt", "rank", "rejected")
    fsched: NDArray[np.float64]
    ftok: NDArray[np.float64]
    finish: NDArray[np.float64]
    preempt: NDArray[np.int64]
    rank: NDArray[np.int64]
    rejected: NDArray[np.bool_]

    @classmethod
    def of(cls, reqs: RequestState) -> RequestColumns:
        return cls(
            np.asarray(reqs.fsched, dtype=np.float64),
            np.asarray(reqs.ftok, dtype=np.float64),
            np.asarray(reqs.finish, dtype=np.float64),
            np.asarray(reqs.preempt, dtype=np.int64),
            np.asarray(reqs.rank, dtype=np.int64),
            np.asarray(reqs.rejected, dtype=bool),
        )

    @classmethod
    def empty(cls, n: int) -> RequestColumns:
        """Nothing happened yet (-1: never), no rank, none rejected."""
        return cls(
            np.full(n, -1.0),
            np.full(n, -1.0),
            np.full(n, -1.0),
            np.zeros(n, dtype=np.int64),
            np.full(n, -1, dtype=np.int64),
            np.zeros(n, dtype=bool),
        )


def requests_frame(
    wl: Workload,
    reqs: RequestColumns,
    infos: list[RankInfo],
    pending: set[int],
    rids: list[str],
) -> pl.DataFrame:
    import polars as pl

    def opt(a: NDArray[np.float64]) -> pl.Series:
        return pl.Series(np.where(a < 0, np.nan, a + START_S)).fill_nan(None)

    waiting = np.zeros(len(wl), dtype=bool)
    waiting[list(pending)] = True
    status = np.where(
        reqs.rejected,
        "rejected",
        np.where(reqs.finish >= 0, "finished", np.where(waiting, "waiting", "running")),
    )
    placed = reqs.rank >= 0
    at = np.where(placed, reqs.rank, 0)
    names = np.array([r.instance for r in infos] or [""], dtype=object)[at]
    names[~placed] = None
    dps = np.array([r.dp_rank for r in infos] or [0], dtype=np.int64)[at]
    return pl.DataFrame(
        {
            "rid": rids,
            "instance": pl.Series(names, dtype=pl.Utf8),
            "dp_rank": pl.Series(dps, dtype=pl.Int64).scatter(np.flatnonzero(~placed), None),
            "arrival_s": wl.arrival_s + START_S,
            "input_tokens": wl.input_tokens,
            "output_tokens": wl.output_tokens,
            "first_scheduled_s": opt(reqs.fsched),
            "first_token_s": opt(reqs.ftok),
            "finish_s": opt(reqs.finish),
            "preemptions": pl.Series(reqs.preempt, dtype=pl.Int64),
            "status": pl.Series(status, dtype=pl.Utf8),
        }
    )


def steps_frame(a: NDArray[np.float64], infos: list[RankInfo], first_id: int = 0) -> pl.DataFrame:
    import polars as pl

    g = a[:, 0].astype(np.int64)
    ints = a[:, 3:].astype(np.int64)
    total = np.array([r.total_blocks for r in infos], dtype=np.int64)[g]
    names = pl.Series([r.instance for r in infos], dtype=pl.Utf8)
    pf_bs, dec_bs, used = ints[:, 0], ints[:, 1], ints[:, 5]
    return pl.DataFrame(
        {
            "step_id": np.arange(first_id, first_id + a.shape[0], dtype=np.int64),
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
