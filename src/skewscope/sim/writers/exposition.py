"""The /metrics of every simulated instance at any simulated time, per engine dialect.

One model, three consumers: live HTTP endpoints (one scalar time per scrape), OpenMetrics history
and VictoriaMetrics import lines (hundreds of times at once).  So all state is precomputed once
per DP rank as sorted event arrays; a value at times ``T`` is a ``searchsorted`` away and a
histogram at ``T`` is one ``bincount``.  Every function takes a *sorted array* of times, the
scalar case is just ``T`` of length 1.

The metric names of each dialect live in :data:`DIALECT_SPECS` and nowhere else (this is the
simulator's side; the online reader keeps its own alias table for reading).

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

import math
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Literal

import numpy as np
import polars as pl

from skewscope.catalogue import SIMULATED_DIALECTS

if TYPE_CHECKING:
    from collections.abc import Iterable, Mapping

    from numpy.typing import NDArray

    from skewscope.sim.records import RankInfo, SimResult

    F64 = NDArray[np.float64]

Kind = Literal["counter", "gauge", "histogram"]
DIALECTS: tuple[str, ...] = tuple(SIMULATED_DIALECTS)
CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"

# ----------------------------------------------------------------------------- buckets
# vLLM v1 (vllm/v1/metrics/loggers.py), checked against the real captures in samples/.
VLLM_TTFT = (0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0,
             7.5, 10.0, 20.0, 40.0, 80.0, 160.0, 640.0, 2560.0)
VLLM_ITL = (0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5,
            10.0, 20.0, 40.0, 80.0)
VLLM_REQUEST_LATENCY = (0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0,
                        50.0, 60.0, 120.0, 240.0, 480.0, 960.0, 1920.0, 7680.0)
VLLM_ITERATION_TOKENS = (1.0, 8.0, 16.0, 32.0, 64.0, 128.0, 256.0, 512.0, 1024.0, 2048.0,
                         4096.0, 8192.0, 16384.0)
# SGLang (python/sglang/srt/metrics/collector.py defaults; approximate across versions).
SGLANG_TTFT = (0.1, 0.2, 0.4, 0.6, 0.8, 1.0, 2.0, 4.0, 6.0, 8.0, 10.0, 20.0, 40.0, 60.0, 80.0,
               100.0, 200.0, 400.0)
SGLANG_E2E = (0.1, 0.2, 0.4, 0.6, 0.8, 1.0, 2.0, 4.0, 6.0, 8.0, 10.0, 20.0, 40.0, 60.0, 80.0,
              100.0, 200.0, 400.0, 600.0, 1200.0, 1800.0, 2400.0)
# queue_time_seconds as a real SGLang 0.5.23 exports it (tests/data/samples/sglang-0.5.23-*).
SGLANG_QUEUE = (0.0, 0.001, 0.005, 0.01, 0.05, 0.1, 0.2, 0.5, 1.0, 2.0, 3.0, 4.0, 5.0, 10.0,
                15.0, 20.0, 30.0, 40.0, 50.0, 60.0, 70.0, 80.0, 90.0, 100.0, 200.0, 300.0, 400.0,
                500.0, 600.0, 700.0, 800.0, 900.0, 1000.0, 1200.0, 1400.0, 1600.0, 1800.0, 2000.0,
                2500.0, 3000.0)
SGLANG_ITL = (0.002, 0.004, 0.006, 0.008, 0.01, 0.015, 0.02, 0.025, 0.03, 0.035, 0.04, 0.06,
              0.08, 0.1, 0.2, 0.4, 0.6, 0.8, 1.0, 2.0, 4.0, 6.0, 8.0)
BATCH_SIZE = (1.0, 2.0, 4.0, 8.0, 16.0, 32.0, 64.0, 128.0, 256.0, 512.0)


def buckets_1_2_5(max_value: int) -> tuple[float, ...]:
    """vLLM's request-token buckets: 1, 2, 5, 10, 20, 50, ... up to ``max_value``."""
    out: list[float] = []
    exp = 0
    while True:
        for m in (1, 2, 5):
            v = m * 10**exp
            if v > max_value:
                return tuple(out)
            out.append(float(v))
        exp += 1


# ----------------------------------------------------------------------------- specs
@dataclass(frozen=True)
class MetricSpec:
    """One metric family of a dialect.

    ``name`` is the family name as OpenMetrics sees it (counters without ``_total``).
    ``rank_label`` names the label that carries the DP rank; ``None`` means the family is one
    series per instance, summed over its ranks (MindIE, SGLang's tokenizer-side metrics).
    ``split`` = (label, values, value carrying the data): the other values are exposed as 0,
    like vLLM's ``finished_reason``.
    """

    name: str
    kind: Kind
    role: str
    help: str
    rank_label: str | None = None
    rank_label_single: bool = True  # keep the rank label on an instance with one rank
    labels: tuple[tuple[str, str], ...] = ()
    model_label: bool = True
    buckets: tuple[float, ...] = ()
    scale: float = 1.0
    split: tuple[str, tuple[str, ...], str] | None = None
    # (label, ((value, role), ...)): one series per value, each carrying its own counter role
    # ("" = always 0), like SGLang's realtime_tokens_total{mode}
    parts: tuple[str, tuple[tuple[str, str], ...]] | None = None


# The real vLLM 0.32 label set of cache_config_info (values that the simulator knows are
# replaced per rank: block_size, num_gpu_blocks, kv_cache_size_tokens).
_VLLM_CACHE_CONFIG = (
    ("_block_size_resolved", "True"), ("cache_dtype", "auto"),
    ("cache_hit_alignment_tokens", "None"), ("enable_mamba_shared_prefix_checkpoint", "False"),
    ("enable_prefix_caching", "True"), ("gpu_memory_utilization", "0.92"),
    ("hash_block_size", "None"), ("is_attention_free", "False"),
    ("kv_cache_dtype_skip_layers", "[]"), ("kv_cache_layout", "None"),
    ("kv_cache_max_concurrency", "None"), ("kv_cache_memory_bytes", "None"),
    ("kv_offloading_backend", "native"), ("kv_offloading_size", "None"),
    ("kv_sharing_fast_prefill", "False"), ("mamba_block_size", "None"),
    ("mamba_cache_dtype", "auto"), ("mamba_cache_mode", "none"),
    ("mamba_page_size_padded", "None"), ("mamba_ssm_cache_dtype", "auto"),
    ("num_cpu_blocks", "None"), ("num_gpu_blocks_override", "None"),
    ("prefix_cache_retention_interval", "0"), ("prefix_caching_hash_algo", "sha256"),
    ("prefix_match_unit", "None"), ("replayssm_buffer_len", "16"),
    ("skip_page_size_padded", "None"), ("sliding_window", "None"),
    ("swa_bounded_replay", "True"), ("use_kda_recoverssm", "False"),
    ("use_replayssm", "False"), ("user_specified_block_size", "False"),
)


def _vllm_specs(max_model_len: int) -> list[MetricSpec]:
    e = "engine"
    tokens = buckets_1_2_5(max_model_len)
    return [
        MetricSpec("vllm:num_requests_running", "gauge", "running",
                   "Number of requests in model execution batches.", e),
        MetricSpec("vllm:num_requests_waiting", "gauge", "waiting",
                   "Number of requests waiting to be processed.", e),
        MetricSpec("vllm:kv_cache_usage_perc", "gauge", "kv_usage",
                   "KV-cache usage. 1 means 100 percent usage.", e),
        MetricSpec("vllm:cache_config_info", "gauge", "cache_config",
                   "Information of the LLMEngine CacheConfig", e, labels=_VLLM_CACHE_CONFIG,
                   model_label=False),
        MetricSpec("vllm:request_prompt_tokens", "histogram", "request_prompt_tokens",
                   "Number of prefill tokens processed.", e, buckets=tokens),
        MetricSpec("vllm:request_generation_tokens", "histogram", "request_generation_tokens",
                   "Number of generation tokens processed.", e, buckets=tokens),
        MetricSpec("vllm:iteration_tokens_total", "histogram", "iteration_tokens",
                   "Histogram of number of tokens per engine_step.", e,
                   buckets=VLLM_ITERATION_TOKENS),
        MetricSpec("vllm:time_to_first_token_seconds", "histogram", "ttft",
                   "Histogram of time to first token in seconds.", e, buckets=VLLM_TTFT),
        MetricSpec("vllm:inter_token_latency_seconds", "histogram", "itl",
                   "Histogram of inter-token latency in seconds.", e, buckets=VLLM_ITL),
        MetricSpec("vllm:request_time_per_output_token_seconds", "histogram", "tpot",
                   "Histogram of time_per_output_token_seconds per request.", e,
                   buckets=VLLM_ITL),
        MetricSpec("vllm:e2e_request_latency_seconds", "histogram", "e2e",
                   "Histogram of e2e request latency in seconds.", e,
                   buckets=VLLM_REQUEST_LATENCY),
        MetricSpec("vllm:request_queue_time_seconds", "histogram", "queue",
                   "Histogram of time spent in WAITING phase for request.", e,
                   buckets=VLLM_REQUEST_LATENCY),
        MetricSpec("vllm:num_preemptions", "counter", "preemptions",
                   "Cumulative number of preemption from the engine.", e),
        MetricSpec("vllm:prompt_tokens", "counter", "prompt_tokens",
                   "Number of prefill tokens processed.", e),
        MetricSpec("vllm:generation_tokens", "counter", "generation_tokens",
                   "Number of generation tokens processed.", e),
        MetricSpec("vllm:request_success", "counter", "finished",
                   "Count of successfully processed requests.", e,
                   split=("finished_reason", ("stop", "length", "abort", "error", "repetition"),
                          "stop")),
    ]


_SGL_SCHED = (("engine_type", "unified"), ("moe_ep_rank", "0"), ("pp_rank", "0"),
              ("tp_rank", "0"))


def _sglang_specs() -> list[MetricSpec]:
    d = "dp_rank"

    def sched(name: str, kind: Kind, role: str, help_: str, **kw: object) -> MetricSpec:
        return MetricSpec(name, kind, role, help_, d, rank_label_single=False,
                          labels=_SGL_SCHED, **kw)  # type: ignore[arg-type]

    return [
        sched("sglang:num_running_reqs", "gauge", "running", "The number of running requests."),
        sched("sglang:num_queue_reqs", "gauge", "waiting",
              "The number of requests in the waiting queue."),
        sched("sglang:token_usage", "gauge", "kv_usage", "The token usage."),
        sched("sglang:max_total_num_tokens", "gauge", "kv_capacity_tokens",
              "Maximum total number of tokens in the KV cache pool."),
        sched("sglang:num_retracted_requests", "counter", "preemptions",
              "The number of retracted requests."),
        # observed when a request leaves the waiting queue, so its _count is a per-rank
        # request rate (collector.py, sgl-project/sglang@00ae9c1590d2)
        sched("sglang:queue_time_seconds", "histogram", "queue_at_schedule",
              "Histogram of queueing time in seconds.", buckets=SGLANG_QUEUE),
        sched("sglang:realtime_tokens", "counter", "realtime_tokens",
              "Total number of tokens processed (updated on each log interval). "
              "mode: prefill_compute, prefill_cache, decode.",
              parts=("mode", (("prefill_compute", "prompt_tokens"), ("prefill_cache", ""),
                              ("decode", "generation_tokens")))),
        MetricSpec("sglang:prompt_tokens", "counter", "prompt_tokens",
                   "Number of prefill tokens processed."),
        MetricSpec("sglang:generation_tokens", "counter", "generation_tokens",
                   "Number of generation tokens processed."),
        MetricSpec("sglang:num_requests", "counter", "finished",
                   "Number of requests processed."),
        MetricSpec("sglang:time_to_first_token_seconds", "histogram", "ttft",
                   "Histogram of time to first token in seconds.", buckets=SGLANG_TTFT),
        MetricSpec("sglang:inter_token_latency_seconds", "histogram", "itl",
                   "Histogram of inter-token latency in seconds.", buckets=SGLANG_ITL),
        MetricSpec("sglang:e2e_request_latency_seconds", "histogram", "e2e",
                   "Histogram of End-to-end request latency in seconds", buckets=SGLANG_E2E),
    ]


def _mindie_specs() -> list[MetricSpec]:
    return [
        MetricSpec("num_requests_running", "gauge", "running", "Number of running requests."),
        MetricSpec("num_requests_waiting", "gauge", "waiting", "Number of waiting requests."),
        # MindIE reports NPU KV usage in percent (0-100), unlike vLLM's fraction.
        MetricSpec("npu_cache_usage_perc", "gauge", "kv_usage", "NPU KV-cache usage in percent.",
                   scale=100.0),
        MetricSpec("prompt_tokens", "counter", "prompt_tokens",
                   "Number of prefill tokens processed."),
        MetricSpec("generation_tokens", "counter", "generation_tokens",
                   "Number of generation tokens processed."),
        MetricSpec("request_success", "counter", "finished",
                   "Count of successfully processed requests."),
        MetricSpec("num_preemptions", "counter", "preemptions",
                   "Cumulative number of preemption from the engine."),
        MetricSpec("time_to_first_token_seconds", "histogram", "ttft",
                   "Histogram of time to first token in seconds.", buckets=VLLM_TTFT),
        MetricSpec("time_per_output_token_seconds", "histogram", "itl",
                   "Histogram of time per output token in seconds.", buckets=VLLM_ITL),
        MetricSpec("e2e_request_latency_seconds", "histogram", "e2e",
                   "Histogram of end to end request latency in seconds.",
                   buckets=VLLM_REQUEST_LATENCY),
    ]


def _ms_service_specs(max_model_len: int) -> list[MetricSpec]:
    """msServiceProfiler's ms_service_metric: ``vllm_profiling_*`` on top of vLLM's own."""
    tokens = buckets_1_2_5(max_model_len)

    def core(name: str, kind: Kind, role: str, help_: str, **kw: object) -> MetricSpec:
        return MetricSpec(name, kind, role, help_, "dp", model_label=False,
                          **kw)  # type: ignore[arg-type]

    def api(name: str, role: str, help_: str, buckets: tuple[float, ...]) -> MetricSpec:
        return MetricSpec(name, "histogram", role, help_, "engine", buckets=buckets)

    return [
        *_vllm_specs(max_model_len),
        core("vllm_profiling_free_kvcache_blocks", "gauge", "free_blocks",
             "Free KV cache blocks."),
        core("vllm_profiling_total_kvcache_blocks", "gauge", "total_blocks",
             "Total KV cache blocks."),
        core("vllm_profiling_allocated_kvcache_blocks", "gauge", "used_blocks",
             "Allocated KV cache blocks."),
        # type unconfirmed in the real tool; exposed as a cumulative gauge (no _total suffix)
        core("vllm_profiling_running_to_waiting_count", "gauge", "preemptions",
             "Requests moved from running back to waiting (preemptions), cumulative."),
        core("vllm_profiling_scheduler:phase_scheduled_tokens", "histogram", "iteration_tokens",
             "Tokens scheduled per scheduler step.", buckets=VLLM_ITERATION_TOKENS),
        api("vllm_profiling_batch_size", "batch_size", "Running batch size per step.",
            BATCH_SIZE),
        api("vllm_profiling_waiting_batch_size", "waiting_batch_size",
            "Waiting requests per step.", BATCH_SIZE),
        api("vllm_profiling_input", "input_tokens", "Input tokens per request.", tokens),
        api("vllm_profiling_output", "request_generation_tokens", "Output tokens per request.",
            tokens),
        api("vllm_profiling_fine_grained_ttft", "ttft", "Time to first token in seconds.",
            VLLM_TTFT),
        api("vllm_profiling_fine_grained_tpot", "tpot", "Time per output token in seconds.",
            VLLM_ITL),
    ]


def dialect_specs(dialect: str, max_model_len: int = 32768) -> list[MetricSpec]:
    """The families a dialect exposes, in exposition order."""
    if dialect == "vllm":
        return _vllm_specs(max_model_len)
    if dialect == "sglang":
        return _sglang_specs()
    if dialect == "mindie":
        return _mindie_specs()
    if dialect == "ms-service-metric":
        return _ms_service_specs(max_model_len)
    raise ValueError(f"unknown metrics dialect {dialect!r}; expected one of {DIALECTS}")


# ----------------------------------------------------------------------------- event arrays
class _Events:
    """A step function: the weighted count of events at or before each queried time."""

    def __init__(self, times: F64, weights: F64 | None = None) -> None:
        ok = np.isfinite(times)
        order = np.argsort(times[ok], kind="stable")
        self.times: F64 = times[ok][order]
        w = np.ones(len(self.times)) if weights is None else weights[ok][order]
        self.cum: F64 = np.concatenate([[0.0], np.cumsum(w, dtype=np.float64)])

    def at(self, t: F64) -> F64:
        return self.cum[np.searchsorted(self.times, t, side="right")]


class _Observations:
    """Histogram observations (time, value, weight), evaluated at many times in one pass."""

    def __init__(self, times: F64, values: F64, weights: F64 | None = None) -> None:
        ok = np.isfinite(times) & np.isfinite(values)
        if weights is not None:
            ok &= weights > 0
        order = np.argsort(times[ok], kind="stable")
        self.times: F64 = times[ok][order]
        self.values: F64 = values[ok][order]
        self.weights: F64 = (np.ones(len(self.times)) if weights is None
                             else weights[ok][order].astype(np.float64))
        self._bucket_index: dict[tuple[float, ...], NDArray[np.int64]] = {}

    def at(self, bounds: tuple[float, ...], t: F64) -> tuple[F64, F64, F64]:
        """(cumulative ``le`` bucket counts [len(t), len(bounds)], count, sum) at times t."""
        idx = self._bucket_index.get(bounds)
        if idx is None:
            idx = np.searchsorted(np.asarray(bounds), self.values, side="left").astype(np.int64)
            self._bucket_index[bounds] = idx
        nb = len(bounds) + 1
        seg = np.searchsorted(t, self.times, side="left")  # first query time >= obs time
        flat = np.bincount(seg * nb + idx, weights=self.weights, minlength=(len(t) + 1) * nb)
        grid: F64 = flat.astype(np.float64).reshape(len(t) + 1, nb)[:-1]
        grid = grid.cumsum(axis=0).cumsum(axis=1)
        sums: F64 = np.bincount(seg, weights=self.weights * self.values,
                                minlength=len(t) + 1).astype(np.float64)[:-1].cumsum()
        return grid[:, :-1], grid[:, -1], sums


def _col(df: pl.DataFrame, name: str) -> F64:
    return df.get_column(name).cast(pl.Float64).fill_null(np.nan).to_numpy()


@dataclass
class RankModel:
    """Precomputed event arrays of one DP rank (built once, queried many times)."""

    info: RankInfo
    counters: dict[str, _Events] = field(default_factory=dict)
    hists: dict[str, _Observations] = field(default_factory=dict)
    step_start: F64 = field(default_factory=lambda: np.empty(0))
    step_used: F64 = field(default_factory=lambda: np.empty(0))

    @classmethod
    def build(cls, result: SimResult, info: RankInfo) -> RankModel:
        req = result.requests.filter((pl.col("instance") == info.instance)
                                     & (pl.col("dp_rank") == info.dp_rank))
        st = result.steps.filter((pl.col("instance") == info.instance)
                                 & (pl.col("dp_rank") == info.dp_rank)).sort("start_s")
        arrival, sched = _col(req, "arrival_s"), _col(req, "first_scheduled_s")
        first, finish = _col(req, "first_token_s"), _col(req, "finish_s")
        inp, out = _col(req, "input_tokens"), _col(req, "output_tokens")
        accepted = (req.get_column("status") != "rejected").to_numpy()
        start, end = _col(st, "start_s"), _col(st, "end_s")
        decode = _col(st, "decode_tokens")
        m = cls(info)
        m.step_start, m.step_used = start, _col(st, "used_blocks")
        c = m.counters
        c["arrived"] = _Events(np.where(accepted, arrival, np.nan))
        c["scheduled"] = _Events(sched)
        c["finished"] = _Events(finish)
        c["prompt_tokens"] = _Events(first, inp)
        c["generation_tokens"] = _Events(np.concatenate([first, end]),
                                         np.concatenate([np.ones(len(first)), decode]))
        c["preemptions"] = _Events(start, _col(st, "preempted"))
        h = m.hists
        h["ttft"] = _Observations(first, first - arrival)
        h["e2e"] = _Observations(finish, finish - arrival)
        h["queue"] = _Observations(finish, sched - arrival)
        h["queue_at_schedule"] = _Observations(sched, sched - arrival)
        with np.errstate(divide="ignore", invalid="ignore"):
            tpot = np.where(out > 1, (finish - first) / (out - 1), np.nan)
        h["tpot"] = _Observations(finish, tpot)
        h["request_prompt_tokens"] = _Observations(finish, inp)
        h["request_generation_tokens"] = _Observations(finish, out)
        h["input_tokens"] = _Observations(arrival, inp)
        gap = np.diff(end, prepend=np.nan)
        h["itl"] = _Observations(end, gap, decode)
        h["iteration_tokens"] = _Observations(end, _col(st, "prefill_tokens") + decode)
        h["batch_size"] = _Observations(end, _col(st, "batch_size"))
        h["waiting_batch_size"] = _Observations(end, _col(st, "waiting"))
        return m

    def gauge(self, role: str, t: F64) -> F64:
        c = self.counters
        running = c["scheduled"].at(t) - c["finished"].at(t)
        if role == "running":
            return running
        if role == "waiting":
            return c["arrived"].at(t) - c["scheduled"].at(t)
        total = np.full(len(t), float(self.info.total_blocks))
        if role == "total_blocks":
            return total
        if role == "kv_capacity_tokens":
            return total * self.info.block_size
        used: F64 = np.zeros(len(t))
        if len(self.step_start):
            i = np.searchsorted(self.step_start, t, side="right") - 1
            used = np.where((i >= 0) & (running > 0), self.step_used[np.maximum(i, 0)], 0.0)
        if role == "used_blocks":
            return used
        if role == "free_blocks":
            return total - used
        if role == "kv_usage":
            usage: F64 = used / total
            return usage
        if role == "cache_config":
            return np.ones(len(t))
        raise KeyError(role)

    def value(self, spec: MetricSpec, t: F64) -> F64:
        if spec.kind == "counter" or (spec.kind == "gauge" and spec.role in self.counters):
            return self.counters[spec.role].at(t)
        return self.gauge(spec.role, t)


# ----------------------------------------------------------------------------- families
Labels = tuple[tuple[str, str], ...]


@dataclass
class Series:
    """One exposed sample name + label set, with a value per queried time."""

    name: str
    labels: Labels
    values: F64


@dataclass
class Family:
    """A metric family at the queried times.  ``metrics`` holds one group per label set
    (a single series for counters/gauges; buckets, ``_count``, ``_sum`` for histograms):
    OpenMetrics wants each group's points together, so the grouping is kept."""

    spec: MetricSpec
    metrics: list[list[Series]]


class InstanceModel:
    """All metric families of one instance in one dialect."""

    def __init__(self, result: SimResult, instance: str, dialect: str) -> None:
        self.instance = instance
        self.model_name = result.model_name
        max_len = int(result.meta.get("max_model_len", 32768))
        self.specs = dialect_specs(dialect, max_len)
        self.ranks = [RankModel.build(result, r) for r in
                      sorted((r for r in result.ranks if r.instance == instance),
                             key=lambda r: r.dp_rank)]

    def _labels(self, spec: MetricSpec, rank: RankModel | None) -> dict[str, str]:
        labels = dict(spec.labels)
        if spec.model_label:
            labels["model_name"] = self.model_name
        if rank is not None and spec.rank_label is not None and (
                spec.rank_label_single or len(self.ranks) > 1):
            labels[spec.rank_label] = str(rank.info.dp_rank)
        if spec.role == "cache_config" and rank is not None:
            bs, nb = rank.info.block_size, rank.info.total_blocks
            labels.update(block_size=str(bs), effective_attention_block_size=str(bs),
                          num_gpu_blocks=str(nb), kv_cache_size_tokens=str(bs * nb))
        return labels

    def _scalar(self, spec: MetricSpec, ranks: list[RankModel], t: F64) -> F64:
        if spec.role == "kv_usage" and len(ranks) > 1:  # pooled, not averaged
            used = sum(r.gauge("used_blocks", t) for r in ranks)
            total = sum(r.gauge("total_blocks", t) for r in ranks)
            return np.asarray(used / total) * spec.scale
        return np.asarray(sum(r.value(spec, t) for r in ranks)) * spec.scale

    def _hist(self, spec: MetricSpec, ranks: list[RankModel], t: F64,
              labels: dict[str, str]) -> list[Series]:
        parts = [r.hists[spec.role].at(spec.buckets, t) for r in ranks]
        buckets = sum(p[0] for p in parts)
        count = sum(p[1] for p in parts)
        total = sum(p[2] for p in parts)
        out = [Series(spec.name + "_bucket", _sorted({**labels, "le": format_value(b)}),
                      np.asarray(buckets)[:, i]) for i, b in enumerate(spec.buckets)]
        out.append(Series(spec.name + "_bucket", _sorted({**labels, "le": "+Inf"}),
                          np.asarray(count)))
        out.append(Series(spec.name + "_count", _sorted(labels), np.asarray(count)))
        out.append(Series(spec.name + "_sum", _sorted(labels), np.asarray(total)))
        return out

    def families(self, t: F64) -> list[Family]:
        """Every family of this instance at the sorted times ``t``."""
        t = np.asarray(t, dtype=np.float64)
        fams: list[Family] = []
        for spec in self.specs:
            groups: list[tuple[list[RankModel], RankModel | None]] = (
                [([r], r) for r in self.ranks] if spec.rank_label is not None
                else [(self.ranks, None)])
            metrics: list[list[Series]] = []
            for ranks, rank in groups:
                labels = self._labels(spec, rank)
                if spec.kind == "histogram":
                    metrics.append(self._hist(spec, ranks, t, labels))
                    continue
                sample = spec.name + ("_total" if spec.kind == "counter" else "")
                if spec.parts is not None:
                    key, roles = spec.parts
                    metrics.extend(
                        [Series(sample, _sorted({**labels, key: v}),
                                np.asarray(sum(r.counters[role].at(t) for r in ranks))
                                if role else np.zeros(len(t)))]
                        for v, role in roles)
                    continue
                values = self._scalar(spec, ranks, t)
                if spec.split is None:
                    metrics.append([Series(sample, _sorted(labels), values)])
                    continue
                key, options, carrier = spec.split
                metrics.extend(
                    [Series(sample, _sorted({**labels, key: o}),
                            values if o == carrier else np.zeros(len(t)))]
                    for o in options)
            fams.append(Family(spec, metrics))
        return fams


def _sorted(labels: Mapping[str, str]) -> Labels:
    return tuple(sorted(labels.items()))


class ClusterModel:
    """Every instance's exposition model for one run and dialect."""

    def __init__(self, result: SimResult, dialect: str = "vllm") -> None:
        dialect_specs(dialect)  # validate early
        self.dialect = dialect
        self.start_s, self.end_s = result.start_s, result.end_s
        self.model_name = result.model_name
        self.instances = {i: InstanceModel(result, i, dialect) for i in result.instances}

    def text(self, instance: str, t: float) -> str:
        """Prometheus text format 0.0.4 of ``instance`` at simulated time ``t``."""
        fams = self.instances[instance].families(np.array([t]))
        return render_text(fams)


# ----------------------------------------------------------------------------- rendering
def format_value(v: float) -> str:
    """Go/Prometheus float text: ``1.0``, ``0.001``, ``+Inf``, ``NaN``."""
    if math.isnan(v):
        return "NaN"
    if math.isinf(v):
        return "+Inf" if v > 0 else "-Inf"
    return repr(float(v))


def _escape(v: str) -> str:
    return v.replace("\\", r"\\").replace("\n", r"\n").replace('"', r"\"")


def format_labels(labels: Iterable[tuple[str, str]]) -> str:
    body = ",".join(f'{k}="{_escape(v)}"' for k, v in labels)
    return "{" + body + "}" if body else ""


def type_name(spec: MetricSpec, openmetrics: bool) -> str:
    """Family name on ``# TYPE``: text format keeps ``_total`` on counters, OpenMetrics drops it."""
    return spec.name + ("_total" if spec.kind == "counter" and not openmetrics else "")


def render_text(families: Iterable[Family], index: int = 0,
                extra: Mapping[str, str] | None = None) -> str:
    """Prometheus text exposition (0.0.4) of the ``index``-th queried time, no timestamps."""
    lines: list[str] = []
    for fam in families:
        name = type_name(fam.spec, openmetrics=False)
        lines.append(f"# HELP {name} {fam.spec.help}")
        lines.append(f"# TYPE {name} {fam.spec.kind}")
        for group in fam.metrics:
            for s in group:
                labels = s.labels if not extra else _sorted({**dict(s.labels), **extra})
                lines.append(f"{s.name}{format_labels(labels)} {format_value(s.values[index])}")
    return "\n".join(lines) + "\n"
