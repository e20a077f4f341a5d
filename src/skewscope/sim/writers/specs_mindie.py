"""MindIE's metric families (one series per instance, vLLM's histogram buckets)."""

from __future__ import annotations

from skewscope.sim.writers.bucket_bounds import VLLM_ITL, VLLM_REQUEST_LATENCY, VLLM_TTFT
from skewscope.sim.writers.metric_spec import COUNTER, GAUGE, HISTOGRAM, MetricSpec


def mindie_specs() -> list[MetricSpec]:
    return [
        MetricSpec("num_requests_running", GAUGE, "running", "Number of running requests."),
        MetricSpec("num_requests_waiting", GAUGE, "waiting", "Number of waiting requests."),
        # MindIE reports NPU KV usage in percent (0-100), unlike vLLM's fraction.
        MetricSpec(
            "npu_cache_usage_perc", GAUGE, "kv_usage", "NPU KV-cache usage in percent.", scale=100.0
        ),
        MetricSpec(
            "prompt_tokens", COUNTER, "prompt_tokens", "Number of prefill tokens processed."
        ),
        MetricSpec(
            "generation_tokens",
            COUNTER,
            "generation_tokens",
            "Number of generation tokens processed.",
        ),
        MetricSpec(
            "request_success", COUNTER, "finished", "Count of successfully processed requests."
        ),
        MetricSpec(
            "num_preemptions",
            COUNTER,
            "preemptions",
            "Cumulative number of preemption from the engine.",
        ),
        MetricSpec(
            "time_to_first_token_seconds",
            HISTOGRAM,
            "ttft",
            "Histogram of time to first token in seconds.",
            buckets=VLLM_TTFT,
        ),
        MetricSpec(
            "time_per_output_token_seconds",
            HISTOGRAM,
            "itl",
            "Histogram of time per output token in seconds.",
            buckets=VLLM_ITL,
        ),
        MetricSpec(
            "e2e_request_latency_seconds",
            HISTOGRAM,
            "e2e",
            "Histogram of end to end request latency in seconds.",
            buckets=VLLM_REQUEST_LATENCY,
        ),
    ]
