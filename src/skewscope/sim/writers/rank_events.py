"""A DP rank's events and what each metric counts of them: the requests' and steps' times, which
event moves which counter and which histogram observes what (``counter_feeds``,
``hist_feeds``), and each gauge from the counters (``gauge_values``); for one rank
(``rank_model``) or a group of ranks at once (``rank_group``).

What is derived from what (the SimResult contract has no token timeline per request):
- running / waiting gauges: from the request table (scheduled-not-finished, arrived-not-
  scheduled), so they are exact at any time, including idle gaps between steps;
- KV usage: the last step's used blocks (0 once nothing runs);
- prompt tokens: counted at the first token (as vLLM does); generation tokens: 1 at the first
  token plus each step's decode tokens at its end;
- TTFT at the first token; e2e, queue time, TPOT and per-request token histograms at finish
  (vLLM records those with the finished request); ITL per decode token at each step end, as the
  gap to the previous step end of the same rank.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np

from skewscope.sim.writers.specs_devices import DEVICE_AVERAGE_S, DEVICE_BLOCK_MB, DEVICE_MODEL_MB

if TYPE_CHECKING:
    from collections.abc import Callable

    from numpy.typing import NDArray

    F64 = NDArray[np.float64]


COUNTERS = ("arrived", "scheduled", "finished", "prompt_tokens", "generation_tokens", "preemptions")
HISTOGRAMS = (
    "ttft",
    "e2e",
    "queue",
    "queue_at_schedule",
    "tpot",
    "request_prompt_tokens",
    "request_generation_tokens",
    "input_tokens",
    "itl",
    "iteration_tokens",
    "batch_size",
    "waiting_batch_size",
)
# step columns a rank model reads (``_feed_steps``), in this order
STEP_COLUMNS = (
    "start_s",
    "end_s",
    "decode_tokens",
    "preempted",
    "prefill_tokens",
    "batch_size",
    "waiting",
    "used_blocks",
)


@dataclass
class RequestEvents:
    """Requests of one rank in request order: their times (NaN: never) and lengths, and the
    times of the events to count now (NaN: not now — earlier, later or never)."""

    arrival: F64
    sched: F64
    first: F64
    finish: F64
    inp: F64
    out: F64
    accepted: NDArray[np.bool_]
    at_arrival: F64
    at_sched: F64
    at_first: F64
    at_finish: F64
    rank: NDArray[np.int64] = field(default_factory=lambda: np.zeros(0, dtype=np.int64))

    def __post_init__(self) -> None:
        if len(self.rank) != len(self.arrival):  # one rank's requests
            self.rank = np.zeros(len(self.arrival), dtype=np.int64)


@dataclass
class StepEvents:
    """A rank's (or a group's, the ranks telling them apart) steps to count now: those that
    ended (their end, the end of the step before each, decode and prefill tokens, batch size,
    waiting requests) and those that started (start, preempted requests)."""

    end_rank: NDArray[np.int64]
    end: F64
    prev_end: F64
    decode: F64
    prefill: F64
    batch: F64
    waiting: F64
    start_rank: NDArray[np.int64]
    start: F64
    preempted: F64


if TYPE_CHECKING:
    Feed = tuple[NDArray[np.int64], F64, F64 | None]  # rank, event times, weights
    ObsFeed = tuple[NDArray[np.int64], F64, F64, F64 | None]  # rank, times, values, weights


def counter_feeds(req: RequestEvents, sev: StepEvents) -> dict[str, Feed]:
    """What each counter counts now: the events' times and weights (the one place that says
    which event moves which counter, for a rank or a group of ranks at once)."""
    t_end, decode = sev.end, sev.decode
    r = req.rank
    return {
        "arrived": (r, np.where(req.accepted, req.at_arrival, np.nan), None),
        "scheduled": (r, req.at_sched, None),
        "finished": (r, req.at_finish, None),
        "prompt_tokens": (r, req.at_first, req.inp),
        "generation_tokens": (
            np.concatenate([r, sev.end_rank]),
            np.concatenate([req.at_first, t_end]),
            np.concatenate([np.ones(len(r)), decode]),
        ),
        "preemptions": (sev.start_rank, sev.start, sev.preempted),
    }


def hist_feeds(req: RequestEvents, sev: StepEvents) -> dict[str, ObsFeed]:
    """What each histogram observes now: times, values, weights (see ``counter_feeds``)."""
    a, s, f, e, out, r = req.arrival, req.sched, req.first, req.finish, req.out, req.rank
    with np.errstate(divide="ignore", invalid="ignore"):
        tpot = np.where(out > 1, (e - f) / (out - 1), np.nan)
    sr, t_end, decode = sev.end_rank, sev.end, sev.decode
    return {
        "ttft": (r, req.at_first, f - a, None),
        "e2e": (r, req.at_finish, e - a, None),
        "queue": (r, req.at_finish, s - a, None),
        "queue_at_schedule": (r, req.at_sched, s - a, None),
        "tpot": (r, req.at_finish, tpot, None),
        "request_prompt_tokens": (r, req.at_finish, req.inp, None),
        "request_generation_tokens": (r, req.at_finish, out, None),
        "input_tokens": (r, req.at_arrival, req.inp, None),
        "itl": (sr, t_end, t_end - sev.prev_end, decode),
        "iteration_tokens": (sr, t_end, sev.prefill + decode, None),
        "batch_size": (sr, t_end, sev.batch, None),
        "waiting_batch_size": (sr, t_end, sev.waiting, None),
    }


def gauge_values(
    role: str,
    t: F64,
    count: Callable[[str], F64],
    used: Callable[[F64, F64], F64],
    busy: Callable[[F64], F64],
    total: F64,
    block_size: int | NDArray[np.int64],
    max_running: int | NDArray[np.int64],
) -> F64:
    """A gauge of one rank (``total`` of shape [time]) or of many ([rank, time], the per-rank
    numbers as [rank, 1] columns): ``count(role)`` a counter at ``t``, ``used(t, running)``
    the KV blocks in use, ``busy(times)`` the time spent in steps up to each of ``times``."""
    running = count("scheduled") - count("finished")
    if role == "running":
        return running
    if role == "waiting":
        return count("arrived") - count("scheduled")
    if role == "total_blocks":
        return total
    if role == "kv_capacity_tokens":
        return total * block_size
    if role == "cache_config":
        return np.ones(total.shape)
    if role == "max_running":
        return np.zeros(total.shape) + max_running
    if role == "device_util":
        util: F64 = (busy(t) - busy(t - DEVICE_AVERAGE_S)) / DEVICE_AVERAGE_S
        return util
    u = used(t, running)
    if role == "used_blocks":
        return u
    if role == "free_blocks":
        return total - u
    if role == "kv_usage":
        usage: F64 = u / total
        return usage
    if role == "device_mem":
        mem: F64 = DEVICE_MODEL_MB + u * DEVICE_BLOCK_MB
        return mem
    raise KeyError(role)
