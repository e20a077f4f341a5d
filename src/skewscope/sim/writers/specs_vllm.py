"""vLLM's metric families, and msServiceProfiler's ms_service_metric (vLLM's own plus
``vllm_profiling_*``)."""

from __future__ import annotations

from skewscope.catalogue import MetricType
from skewscope.sim.writers.bucket_bounds import (
    BATCH_SIZE,
    VLLM_ITERATION_TOKENS,
    VLLM_ITL,
    VLLM_REQUEST_LATENCY,
    VLLM_TTFT,
    buckets_1_2_5,
)
from skewscope.sim.writers.metric_spec import COUNTER, GAUGE, HISTOGRAM, MetricSpec

# The real vLLM 0.32 label set of cache_config_info (values that the simulator knows are
# replaced per rank: block_size, num_gpu_blocks, kv_cache_size_tokens).
_VLLM_CACHE_CONFIG = (
    ("_block_size_resolved", "True"),
    ("cache_dtype", "auto"),
    ("cache_hit_alignment_tokens", "None"),
    ("enable_mamba_shared_prefix_checkpoint", "False"),
    ("enable_prefix_caching", "True"),
    ("gpu_memory_utilization", "0.92"),
    ("hash_block_size", "None"),
    ("is_attention_free", "False"),
    ("kv_cache_dtype_skip_layers", "[]"),
    ("kv_cache_layout", "None"),
    ("kv_cache_max_concurrency", "None"),
    ("kv_cache_memory_bytes", "None"),
    ("kv_offloading_backend", "native"),
    ("kv_offloading_size", "None"),
    ("kv_sharing_fast_prefill", "False"),
    ("mamba_block_size", "None"),
    ("mamba_cache_dtype", "auto"),
    ("mamba_cache_mode", "none"),
    ("mamba_page_size_padded", "None"),
    ("mamba_ssm_cache_dtype", "auto"),
    ("num_cpu_blocks", "None"),
    ("num_gpu_blocks_override", "None"),
    ("prefix_cache_retention_interval", "0"),
    ("prefix_caching_hash_algo", "sha256"),
    ("prefix_match_unit", "None"),
    ("replayssm_buffer_len", "16"),
    ("skip_page_size_padded", "None"),
    ("sliding_window", "None"),
    ("swa_bounded_replay", "True"),
    ("use_kda_recoverssm", "False"),
    ("use_replayssm", "False"),
    ("user_specified_block_size", "False"),
)


def vllm_specs(max_model_len: int) -> list[MetricSpec]:
    e = "engine"
    tokens = buckets_1_2_5(max_model_len)
    return [
        MetricSpec(
            "vllm:num_requests_running",
            GAUGE,
            "running",
            "Number of requests in model execution batches.",
            e,
        ),
        MetricSpec(
            "vllm:num_requests_waiting",
            GAUGE,
            "waiting",
            "Number of requests waiting to be processed.",
            e,
        ),
        MetricSpec(
            "vllm:kv_cache_usage_perc",
            GAUGE,
            "kv_usage",
            "KV-cache usage. 1 means 100 percent usage.",
            e,
        ),
        MetricSpec(
            "vllm:cache_config_info",
            GAUGE,
            "cache_config",
            "Information of the LLMEngine CacheConfig",
            e,
            labels=_VLLM_CACHE_CONFIG,
            model_label=False,
        ),
        MetricSpec(
            "vllm:request_prompt_tokens",
            HISTOGRAM,
            "request_prompt_tokens",
            "Number of prefill tokens processed.",
            e,
            buckets=tokens,
        ),
        MetricSpec(
            "vllm:request_generation_tokens",
            HISTOGRAM,
            "request_generation_tokens",
            "Number of generation tokens processed.",
            e,
            buckets=tokens,
        ),
        MetricSpec(
            "vllm:iteration_tokens_total",
            HISTOGRAM,
            "iteration_tokens",
            "Histogram of number of tokens per engine_step.",
            e,
            buckets=VLLM_ITERATION_TOKENS,
        ),
        MetricSpec(
            "vllm:time_to_first_token_seconds",
            HISTOGRAM,
            "ttft",
            "Histogram of time to first token in seconds.",
            e,
            buckets=VLLM_TTFT,
        ),
        MetricSpec(
            "vllm:inter_token_latency_seconds",
            HISTOGRAM,
            "itl",
            "Histogram of inter-token latency in seconds.",
            e,
            buckets=VLLM_ITL,
        ),
        MetricSpec(
            "vllm:request_time_per_output_token_seconds",
            HISTOGRAM,
            "tpot",
            "Histogram of time_per_output_token_seconds per request.",
            e,
            buckets=VLLM_ITL,
        ),
        MetricSpec(
            "vllm:e2e_request_latency_seconds",
            HISTOGRAM,
            "e2e",
            "Histogram of e2e request latency in seconds.",
            e,
            buckets=VLLM_REQUEST_LATENCY,
        ),
        MetricSpec(
            "vllm:request_queue_time_seconds",
            HISTOGRAM,
            "queue",
            "Histogram of time spent in WAITING phase for request.",
            e,
            buckets=VLLM_REQUEST_LATENCY,
        ),
        MetricSpec(
            "vllm:num_preemptions",
            COUNTER,
            "preemptions",
            "Cumulative number of preemption from the engine.",
            e,
        ),
        MetricSpec(
            "vllm:prompt_tokens", COUNTER, "prompt_tokens", "Number of prefill tokens processed.", e
        ),
        MetricSpec(
            "vllm:generation_tokens",
            COUNTER,
            "generation_tokens",
            "Number of generation tokens processed.",
            e,
        ),
        MetricSpec(
            "vllm:request_success",
            COUNTER,
            "finished",
            "Count of successfully processed requests.",
            e,
            split=("finished_reason", ("stop", "length", "abort", "error", "repetition"), "stop"),
        ),
    ]


def ms_service_specs(max_model_len: int) -> list[MetricSpec]:
    """msServiceProfiler's ms_service_metric: ``vllm_profiling_*`` on top of vLLM's own."""
    tokens = buckets_1_2_5(max_model_len)

    def core(name: str, kind: MetricType, role: str, help_: str, **kw: object) -> MetricSpec:
        return MetricSpec(name, kind, role, help_, "dp", model_label=False, **kw)  # type: ignore[arg-type]

    def api(name: str, role: str, help_: str, buckets: tuple[float, ...]) -> MetricSpec:
        return MetricSpec(name, HISTOGRAM, role, help_, "engine", buckets=buckets)

    return [
        *vllm_specs(max_model_len),
        core("vllm_profiling_free_kvcache_blocks", GAUGE, "free_blocks", "Free KV cache blocks."),
        core(
            "vllm_profiling_total_kvcache_blocks", GAUGE, "total_blocks", "Total KV cache blocks."
        ),
        core(
            "vllm_profiling_allocated_kvcache_blocks",
            GAUGE,
            "used_blocks",
            "Allocated KV cache blocks.",
        ),
        # type unconfirmed in the real tool; exposed as a cumulative gauge (no _total suffix)
        core(
            "vllm_profiling_running_to_waiting_count",
            GAUGE,
            "preemptions",
            "Requests moved from running back to waiting (preemptions), cumulative.",
        ),
        core(
            "vllm_profiling_scheduler:phase_scheduled_tokens",
            HISTOGRAM,
            "iteration_tokens",
            "Tokens scheduled per scheduler step.",
            buckets=VLLM_ITERATION_TOKENS,
        ),
        api("vllm_profiling_batch_size", "batch_size", "Running batch size per step.", BATCH_SIZE),
        api(
            "vllm_profiling_waiting_batch_size",
            "waiting_batch_size",
            "Waiting requests per step.",
            BATCH_SIZE,
        ),
        api("vllm_profiling_input", "input_tokens", "Input tokens per request.", tokens),
        api(
            "vllm_profiling_output",
            "request_generation_tokens",
            "Output tokens per request.",
            tokens,
        ),
        api(
            "vllm_profiling_fine_grained_ttft", "ttft", "Time to first token in seconds.", VLLM_TTFT
        ),
        api(
            "vllm_profiling_fine_grained_tpot",
            "tpot",
            "Time per output token in seconds.",
            VLLM_ITL,
        ),
    ]
