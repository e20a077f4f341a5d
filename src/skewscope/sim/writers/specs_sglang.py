"""SGLang's metric families (scheduler series per DP rank, tokenizer series per instance)."""

from __future__ import annotations

from skewscope.catalogue import MetricType
from skewscope.sim.writers.bucket_bounds import SGLANG_E2E, SGLANG_ITL, SGLANG_QUEUE, SGLANG_TTFT
from skewscope.sim.writers.metric_spec import COUNTER, GAUGE, HISTOGRAM, MetricSpec

_SGL_SCHED = (("engine_type", "unified"), ("moe_ep_rank", "0"), ("pp_rank", "0"), ("tp_rank", "0"))


def sglang_specs() -> list[MetricSpec]:
    d = "dp_rank"

    def sched(name: str, kind: MetricType, role: str, help_: str, **kw: object) -> MetricSpec:
        return MetricSpec(
            name,
            kind,
            role,
            help_,
            d,
            rank_label_single=False,
            labels=_SGL_SCHED,
            **kw,  # type: ignore[arg-type]
        )

    return [
        sched("sglang:num_running_reqs", GAUGE, "running", "The number of running requests."),
        sched(
            "sglang:num_queue_reqs",
            GAUGE,
            "waiting",
            "The number of requests in the waiting queue.",
        ),
        sched("sglang:token_usage", GAUGE, "kv_usage", "The token usage."),
        sched(
            "sglang:max_total_num_tokens",
            GAUGE,
            "kv_capacity_tokens",
            "Maximum total number of tokens in the KV cache pool.",
        ),
        sched(
            "sglang:num_retracted_requests",
            COUNTER,
            "preemptions",
            "The number of retracted requests.",
        ),
        # observed when a request leaves the waiting queue, so its _count is a per-rank
        # request rate (collector.py, sgl-project/sglang@00ae9c1590d2)
        sched(
            "sglang:queue_time_seconds",
            HISTOGRAM,
            "queue_at_schedule",
            "Histogram of queueing time in seconds.",
            buckets=SGLANG_QUEUE,
        ),
        sched(
            "sglang:realtime_tokens",
            COUNTER,
            "realtime_tokens",
            "Total number of tokens processed (updated on each log interval). "
            "mode: prefill_compute, prefill_cache, decode.",
            parts=(
                "mode",
                (
                    ("prefill_compute", "prompt_tokens"),
                    ("prefill_cache", ""),
                    ("decode", "generation_tokens"),
                ),
            ),
        ),
        MetricSpec(
            "sglang:prompt_tokens", COUNTER, "prompt_tokens", "Number of prefill tokens processed."
        ),
        MetricSpec(
            "sglang:generation_tokens",
            COUNTER,
            "generation_tokens",
            "Number of generation tokens processed.",
        ),
        MetricSpec("sglang:num_requests", COUNTER, "finished", "Number of requests processed."),
        MetricSpec(
            "sglang:time_to_first_token_seconds",
            HISTOGRAM,
            "ttft",
            "Histogram of time to first token in seconds.",
            buckets=SGLANG_TTFT,
        ),
        MetricSpec(
            "sglang:inter_token_latency_seconds",
            HISTOGRAM,
            "itl",
            "Histogram of inter-token latency in seconds.",
            buckets=SGLANG_ITL,
        ),
        MetricSpec(
            "sglang:e2e_request_latency_seconds",
            HISTOGRAM,
            "e2e",
            "Histogram of End-to-end request latency in seconds",
            buckets=SGLANG_E2E,
        ),
    ]
