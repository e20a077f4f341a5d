"""What a simulation run produces: the contract between the model and every writer.

All writers (profiler folders, OpenMetrics history, live /metrics) derive their output from these
tables only, so the outputs can never disagree with one another or with the ground truth.
Times are seconds since the Unix epoch (float64); the run starts at ``SimResult.start_s``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

from skewscope.sim.spec import GroundTruth

if TYPE_CHECKING:
    import numpy as np
    import polars as pl
    from numpy.typing import NDArray

    from skewscope.sim.rank import RequestState
    from skewscope.sim.workload import Workload

# Fixed start so outputs are byte-for-byte reproducible: 2025-04-23 00:52:13 UTC.
START_S = 1_745_369_533.0


@dataclass(frozen=True)
class RankInfo:
    """One DP engine process of one instance."""

    instance: str
    dp_rank: int
    hostname: str
    pid: int
    speed: float  # step-time multiplier (1.0 nominal; 2.0 = twice as slow)
    total_blocks: int
    block_size: int
    max_running: int
    token_budget: int

    @property
    def prof_id(self) -> str:
        return f"ms_service_{self.hostname}-{self.pid}"


@dataclass
class SimResult:
    """Tables of one run.

    ``requests`` — one row per request:
        rid (str), instance (str), dp_rank (i64), arrival_s, input_tokens (i64),
        output_tokens (i64), first_scheduled_s (null if never scheduled), first_token_s,
        finish_s (null if unfinished at the end), preemptions (i64),
        status (str: "finished" | "running" | "waiting" | "rejected").
        queue wait = first_scheduled_s - arrival_s; TTFT = first_token_s - arrival_s;
        e2e = finish_s - arrival_s.
    ``steps`` — one row per engine step of a rank (scheduling + execution):
        step_id (i64, unique in the run), instance, dp_rank, start_s, end_s (execution end),
        batch_size, prefill_batch_size, decode_batch_size, prefill_tokens, decode_tokens
        (all i64), running (i64, sequences in the batch), waiting (i64, queued after scheduling),
        total_blocks, used_blocks, free_blocks, blocks_allocated, blocks_freed (i64, KV state
        after scheduling this step; allocated/freed during this step), preempted (i64).
    ``members`` — only when the run recorded batch membership (needed for res_list); one row per
        (step, request): step_id, rid, iter (i64, 0 = prefill), type (0 prefill / 1 decode),
        num_scheduled_tokens, num_prompt_tokens, num_computed_tokens (i64).
    """

    start_s: float
    end_s: float
    ranks: list[RankInfo]
    requests: pl.DataFrame
    steps: pl.DataFrame
    members: pl.DataFrame | None
    truth: GroundTruth
    model_name: str = "sim-llama-8b"
    meta: dict[str, Any] = field(default_factory=dict)
    # also when the step table was streamed or dropped: "steps", "kv_peak" (highest used /
    # total KV blocks of any rank after scheduling), "cpu_s" (CPU seconds of the engine, summed
    # over its worker processes, writers' sinks included), "sink_cpu_s" (the sinks' share, when
    # there are sinks), "worker_rss_mb" (the largest worker's peak memory, when instances ran
    # apart)
    run_stats: dict[str, float] = field(default_factory=dict)
    # what the run's sinks (``simulate(sinks=...)``) summed up, one per instance group
    outputs: list[Any] = field(default_factory=list)

    @property
    def instances(self) -> list[str]:
        return sorted({r.instance for r in self.ranks})


class StepSink(Protocol):
    """A writer fed as the run goes, for one group of instances (``simulate(sinks=...)``).

    ``chunk`` gets the group's step rows starting before ``cut`` (``rank.STEP_FIELDS``
    columns, sorted by start then rank, the rank as its global index; step ids from
    ``first_id``), their batch members (``SimResult.members`` rows, when recorded) and the
    requests' state: every event before ``cut`` is final. ``close`` ends the run and returns
    a picklable summary (it may be made in a worker process)."""

    def chunk(
        self,
        rows: NDArray[np.float64],
        members: pl.DataFrame | None,
        first_id: int,
        cut: float,
        reqs: RequestState,
    ) -> None: ...

    def close(self, reqs: RequestState) -> Any: ...


class SinkFactory(Protocol):
    """Makes the sink of instances ``[lo, hi)`` of a run (its workload, every rank, its
    duration in run seconds); picklable (sent to worker processes)."""

    def __call__(
        self, lo: int, hi: int, wl: Workload, ranks: list[RankInfo], duration: float
    ) -> StepSink: ...


@dataclass
class Sinks:
    """Several sinks fed the same chunks (``--out`` and ``--openmetrics`` together); the
    summary is theirs, in order."""

    factories: list[SinkFactory]

    def __call__(
        self, lo: int, hi: int, wl: Workload, ranks: list[RankInfo], duration: float
    ) -> StepSink:
        return _AllSinks([f(lo, hi, wl, ranks, duration) for f in self.factories])


class _AllSinks:
    def __init__(self, sinks: list[StepSink]) -> None:
        self.sinks = sinks

    def chunk(
        self,
        rows: NDArray[np.float64],
        members: pl.DataFrame | None,
        first_id: int,
        cut: float,
        reqs: RequestState,
    ) -> None:
        for s in self.sinks:
            s.chunk(rows, members, first_id, cut, reqs)

    def close(self, reqs: RequestState) -> list[Any]:
        return [s.close(reqs) for s in self.sinks]
