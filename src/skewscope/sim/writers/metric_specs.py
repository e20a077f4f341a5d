"""The metric families each simulated exporter exposes: names, types, labels, buckets, roles.

The names of every dialect the simulator writes live here and nowhere else (the simulator's
side; the online reader keeps its own alias table, sources/dialects.py, for reading), so a
change of a name is one edit. ``exposition`` evaluates the families at simulated times.
"""

from __future__ import annotations

from dataclasses import dataclass

from skewscope.catalogue import SIMULATED_DEVICE_EXPORTERS, SIMULATED_DIALECTS, MetricType

# The table below spells the types short.
COUNTER, GAUGE, HISTOGRAM = MetricType.COUNTER, MetricType.GAUGE, MetricType.HISTOGRAM
DIALECTS: tuple[str, ...] = tuple(SIMULATED_DIALECTS)
DEVICE_EXPORTERS: tuple[str, ...] = SIMULATED_DEVICE_EXPORTERS

# The label a dialect's stack names an instance's prefill/decode pool with (a PD scenario,
# sim/pd.py), written on every series of the instance as a scrape-time label: ms-service-metric
# ``role``, Dynamo ``worker_type``, and llm-d's pod label ``llm-d.ai/role`` as a Prometheus that
# maps pod labels writes it (``llm_d_ai_role``) for the engines llm-d runs; MindIE: none (a
# ``--role-label`` case). The reader's table is sources/pools.py.
ROLE_LABELS: dict[str, str] = {
    "vllm": "llm_d_ai_role",
    "ms-service-metric": "role",
    "sglang": "llm_d_ai_role",
    "dynamo": "worker_type",
    "llm-d": "llm_d_ai_role",
}

# ----------------------------------------------------------------------------- buckets
# vLLM v1 (vllm/v1/metrics/loggers.py), checked against the real captures in samples/.
VLLM_TTFT = (
    0.001,
    0.005,
    0.01,
    0.02,
    0.04,
    0.06,
    0.08,
    0.1,
    0.25,
    0.5,
    0.75,
    1.0,
    2.5,
    5.0,
    7.5,
    10.0,
    20.0,
    40.0,
    80.0,
    160.0,
    640.0,
    2560.0,
)
VLLM_ITL = (
    0.01,
    0.025,
    0.05,
    0.075,
    0.1,
    0.15,
    0.2,
    0.3,
    0.4,
    0.5,
    0.75,
    1.0,
    2.5,
    5.0,
    7.5,
    10.0,
    20.0,
    40.0,
    80.0,
)
VLLM_REQUEST_LATENCY = (
    0.3,
    0.5,
    0.8,
    1.0,
    1.5,
    2.0,
    2.5,
    5.0,
    10.0,
    15.0,
    20.0,
    30.0,
    40.0,
    50.0,
    60.0,
    120.0,
    240.0,
    480.0,
    960.0,
    1920.0,
    7680.0,
)
VLLM_ITERATION_TOKENS = (
    1.0,
    8.0,
    16.0,
    32.0,
    64.0,
    128.0,
    256.0,
    512.0,
    1024.0,
    2048.0,
    4096.0,
    8192.0,
    16384.0,
)
# SGLang (python/sglang/srt/metrics/collector.py defaults; approximate across versions).
SGLANG_TTFT = (
    0.1,
    0.2,
    0.4,
    0.6,
    0.8,
    1.0,
    2.0,
    4.0,
    6.0,
    8.0,
    10.0,
    20.0,
    40.0,
    60.0,
    80.0,
    100.0,
    200.0,
    400.0,
)
SGLANG_E2E = (
    0.1,
    0.2,
    0.4,
    0.6,
    0.8,
    1.0,
    2.0,
    4.0,
    6.0,
    8.0,
    10.0,
    20.0,
    40.0,
    60.0,
    80.0,
    100.0,
    200.0,
    400.0,
    600.0,
    1200.0,
    1800.0,
    2400.0,
)
# queue_time_seconds as a real SGLang 0.5.23 exports it (tests/data/samples/sglang-0.5.23-*).
SGLANG_QUEUE = (
    0.0,
    0.001,
    0.005,
    0.01,
    0.05,
    0.1,
    0.2,
    0.5,
    1.0,
    2.0,
    3.0,
    4.0,
    5.0,
    10.0,
    15.0,
    20.0,
    30.0,
    40.0,
    50.0,
    60.0,
    70.0,
    80.0,
    90.0,
    100.0,
    200.0,
    300.0,
    400.0,
    500.0,
    600.0,
    700.0,
    800.0,
    900.0,
    1000.0,
    1200.0,
    1400.0,
    1600.0,
    1800.0,
    2000.0,
    2500.0,
    3000.0,
)
SGLANG_ITL = (
    0.002,
    0.004,
    0.006,
    0.008,
    0.01,
    0.015,
    0.02,
    0.025,
    0.03,
    0.035,
    0.04,
    0.06,
    0.08,
    0.1,
    0.2,
    0.4,
    0.6,
    0.8,
    1.0,
    2.0,
    4.0,
    6.0,
    8.0,
)
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
    kind: MetricType
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
    # a label naming the unit itself (a router or frontend exporting one series per backend:
    # Dynamo ``worker_id``, llm-d ``model_server_endpoint``); its value is the instance name
    unit_label: str | None = None
    # one series per rank, the unit label's value ``<instance>-rank-<n>`` (llm-d endpoints of a
    # DP pod; a single-rank pod is just ``<instance>``)
    rank_in_unit: bool = False
    host_label: str | None = None  # a label carrying the rank's host name (DCGM ``Hostname``)

    @property
    def per_rank(self) -> bool:
        return self.rank_label is not None or self.rank_in_unit


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


def _vllm_specs(max_model_len: int) -> list[MetricSpec]:
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


_SGL_SCHED = (("engine_type", "unified"), ("moe_ep_rank", "0"), ("pp_rank", "0"), ("tp_rank", "0"))


def _sglang_specs() -> list[MetricSpec]:
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


def _mindie_specs() -> list[MetricSpec]:
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


def _ms_service_specs(max_model_len: int) -> list[MetricSpec]:
    """msServiceProfiler's ms_service_metric: ``vllm_profiling_*`` on top of vLLM's own."""
    tokens = buckets_1_2_5(max_model_len)

    def core(name: str, kind: MetricType, role: str, help_: str, **kw: object) -> MetricSpec:
        return MetricSpec(name, kind, role, help_, "dp", model_label=False, **kw)  # type: ignore[arg-type]

    def api(name: str, role: str, help_: str, buckets: tuple[float, ...]) -> MetricSpec:
        return MetricSpec(name, HISTOGRAM, role, help_, "engine", buckets=buckets)

    return [
        *_vllm_specs(max_model_len),
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


# NVIDIA Dynamo (names as sources/dialects.py cites them: lib/runtime/src/metrics/
# prometheus_names.rs, lib/llm/src/kv_router/publisher.rs and metrics.rs at ai-dynamo/dynamo).
# The worker's component metrics carry the auto-injected hierarchy labels and ``worker_id``;
# the frontend's per-worker gauges carry ``worker_id``, ``dp_rank``, ``worker_type``. The
# simulator names a worker by its instance (``worker_id="inst-1"``), so the truth's unit ids hold.
_DYN_HIERARCHY = (("dynamo_component", "backend"), ("dynamo_namespace", "dynamo"))


def _dynamo_specs() -> list[MetricSpec]:
    def component(name: str, kind: MetricType, role: str, help_: str, endpoint: bool) -> MetricSpec:
        labels = _DYN_HIERARCHY + ((("dynamo_endpoint", "generate"),) if endpoint else ())
        return MetricSpec(
            name, kind, role, help_, labels=labels, unit_label="worker_id", model_label=endpoint
        )

    def frontend(name: str, role: str, help_: str) -> MetricSpec:
        return MetricSpec(
            name,
            GAUGE,
            role,
            help_,
            "dp_rank",
            labels=(("worker_type", "decode"),),
            unit_label="worker_id",
            model_label=False,
        )

    return [
        component(
            "dynamo_component_requests",
            COUNTER,
            "finished",
            "Total number of requests processed by work handler",
            True,
        ),
        component(
            "dynamo_component_inflight_requests",
            GAUGE,
            "running",
            "Number of requests currently being processed by work handler",
            True,
        ),
        component(
            "dynamo_component_kvstats_active_blocks",
            GAUGE,
            "used_blocks",
            "Number of active KV cache blocks currently in use",
            False,
        ),
        component(
            "dynamo_component_kvstats_total_blocks",
            GAUGE,
            "total_blocks",
            "Total number of KV cache blocks available",
            False,
        ),
        component(
            "dynamo_component_kvstats_gpu_cache_usage_percent",
            GAUGE,
            "kv_usage",
            "GPU cache usage as a percentage (0.0-1.0)",
            False,
        ),
        frontend(
            "dynamo_frontend_worker_active_decode_blocks",
            "used_blocks",
            "Active KV cache decode blocks per worker",
        ),
        frontend(
            "dynamo_frontend_worker_num_requests_waiting",
            "waiting",
            "Backend requests waiting in the worker scheduler queue",
        ),
        frontend(
            "dynamo_frontend_worker_request_active_slots",
            "running",
            "Active backend request slots per worker",
        ),
        frontend(
            "dynamo_frontend_worker_request_total_slots",
            "max_running",
            "Backend request slot capacity per worker",
        ),
    ]


def _llmd_specs() -> list[MetricSpec]:
    """llm-d endpoint picker (llm-d/llm-d-router pkg/epp/metrics/llm_d_router_metrics.go): the
    model server queue per endpoint, ``<pod>-rank-<n>`` for the ranks of a DP pod."""
    return [
        MetricSpec(
            "llm_d_router_epp_per_endpoint_queue_size",
            GAUGE,
            "waiting",
            "[ALPHA] The total number of requests pending in the model server queue for "
            "each underlying endpoint.",
            labels=(("name", "pool"),),
            unit_label="model_server_endpoint",
            rank_in_unit=True,
            model_label=False,
        ),
    ]


# Device exporters, one device per DP rank (names and labels as sources/device_exporters.py
# cites them:
# NVIDIA dcgm-exporter etc/*.csv, Ascend npu-exporter collector/npu_collector.go).
# ``device_util`` is the share of the last DEVICE_AVERAGE_S the rank spent in steps;
# ``device_mem`` the model's weights plus the KV blocks in use (DEVICE_MODEL_MB, DEVICE_BLOCK_MB).
DEVICE_AVERAGE_S = 5.0
DEVICE_MODEL_MB = 20_000.0
DEVICE_BLOCK_MB = 2.0


def device_specs(exporter: str) -> list[MetricSpec]:
    """The device families of ``exporter`` ("dcgm" or "npu-exporter")."""
    if exporter == "dcgm":

        def dcgm(name: str, role: str, help_: str, scale: float = 1.0) -> MetricSpec:
            return MetricSpec(
                name,
                GAUGE,
                role,
                help_,
                "gpu",
                labels=(
                    ("DCGM_FI_DRIVER_VERSION", "550.54.15"),
                    ("modelName", "NVIDIA A100-SXM4-80GB"),
                ),
                model_label=False,
                scale=scale,
                host_label="Hostname",
            )

        return [
            dcgm("DCGM_FI_DEV_GPU_UTIL", "device_util", "GPU utilization (in %).", 100.0),
            dcgm(
                "DCGM_FI_PROF_GR_ENGINE_ACTIVE",
                "device_util",
                "Ratio of time the graphics engine is active.",
            ),
            dcgm("DCGM_FI_DEV_FB_USED", "device_mem", "Framebuffer memory used (in MiB)."),
        ]
    if exporter == "npu-exporter":

        def npu(name: str, role: str, help_: str, scale: float = 1.0) -> MetricSpec:
            return MetricSpec(name, GAUGE, role, help_, "id", model_label=False, scale=scale)

        return [
            npu("npu_chip_info_utilization", "device_util", "the ai core utilization", 100.0),
            npu("npu_chip_info_hbm_used_memory", "device_mem", "the npu hbm used memory"),
        ]
    raise ValueError(f"unknown device exporter {exporter!r}; expected one of {DEVICE_EXPORTERS}")


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
    if dialect == "dynamo":
        return _dynamo_specs()
    if dialect == "llm-d":
        return _llmd_specs()
    raise ValueError(f"unknown metrics dialect {dialect!r}; expected one of {DIALECTS}")
