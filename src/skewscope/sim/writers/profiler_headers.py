"""The msServiceProfiler files' headers in each generation the readers meet (request.csv,
batch.csv, kvcache.csv, forward.csv), the step row names and the ``res_list`` keys."""

from __future__ import annotations

from skewscope.catalogue import Generation

GENERATIONS: tuple[str, ...] = tuple(g.value for g in Generation)

REQUEST_HEADERS: dict[str, tuple[str, ...]] = {
    Generation.CURRENT: (
        "http_rid",
        "start_datetime",
        "recv_token_size",
        "reply_token_size",
        "execution_time(ms)",
        "queue_wait_time(ms)",
        "first_token_latency(ms)",
        "cache_hit_rate",
        "start_time(ms)",
    ),
    Generation.DEC2025: (
        "http_rid",
        "start_time",
        "start_datetime",
        "recv_token_size",
        "reply_token_size",
        "execution_time(ms)",
        "queue_wait_time(ms)",
        "first_token_latency(ms)",
        "cache_hit_rate",
    ),
    Generation.CANN2025: (
        "http_rid",
        "start_time(ms)",
        "recv_token_size",
        "reply_token_size",
        "execution_time(ms)",
        "queue_wait_time(ms)",
        "first_token_latency(ms)",
        "cache_hit_rate",
    ),
}
REQUEST_HEADERS[Generation.MINDIE] = REQUEST_HEADERS[Generation.CURRENT]

KV_COLUMNS = (
    "total_blocks",
    "used_blocks",
    "free_blocks",
    "blocks_allocated",
    "blocks_freed",
    "kvcache_usage_rate",
)
_BATCH_CURRENT = (
    "name",
    "res_list",
    "start_datetime",
    "end_datetime",
    "during_time(ms)",
    "batch_type",
    "prof_id",
    "batch_size",
    *KV_COLUMNS,
    "prefill_batch_size",
    "decode_batch_size",
    "prefill_scheduled_tokens",
    "decode_scheduled_tokens",
    "total_scheduled_tokens",
    "dp_rank",
    "start_time(ms)",
    "end_time(ms)",
)
DEC2025_RENAMES = {
    "start_datetime": "start_time",
    "end_datetime": "end_time",
    "batch_size": "total_batch_size",
}
BATCH_HEADERS: dict[str, tuple[str, ...]] = {
    Generation.CURRENT: _BATCH_CURRENT,
    Generation.DEC2025: tuple(DEC2025_RENAMES.get(c, c) for c in _BATCH_CURRENT),
    Generation.CANN2025: (
        "name",
        "res_list",
        "start_time(ms)",
        "end_time(ms)",
        "during_time(ms)",
        "batch_type",
        "prof_id",
        "total_batch_size",
        "Prefill_batch_size",
        "Decode_batch_size",
        "Prefill_scheduled_tokens",
        "Decode_scheduled_tokens",
        "total_scheduled_tokens",
    ),
    Generation.MINDIE: tuple(c for c in _BATCH_CURRENT if c not in KV_COLUMNS),
}
KVCACHE_HEADERS: dict[str, tuple[str, ...]] = {
    Generation.CURRENT: ("name", "start_time", *KV_COLUMNS),
    Generation.MINDIE: ("rid", "name", "start_time", "device_kvcache_left", "kvcache_usage_rate"),
}
KVCACHE_HEADERS[Generation.DEC2025] = KVCACHE_HEADERS[Generation.CURRENT]
KVCACHE_HEADERS[Generation.CANN2025] = KVCACHE_HEADERS[Generation.CURRENT]

_FORWARD_CURRENT = (
    "name",
    "relative_start_time(ms)",
    "start_datetime",
    "end_datetime",
    "during_time(ms)",
    "bubble_time(ms)",
    "batch_size",
    "batch_type",
    "forward_iter",
    "dp_rank",
    "prof_id",
    "hostname",
    "start_time(ms)",
    "end_time(ms)",
)
# forward.csv per generation (exporter_forward.py and its docs/checks at
# Cztk5380/msserviceprofiler): Dec 2025 renames the datetimes to start_time/end_time and has no
# epoch columns; CANN 2025 has the epoch ms columns only.
FORWARD_HEADERS: dict[str, tuple[str, ...]] = {
    Generation.CURRENT: _FORWARD_CURRENT,
    Generation.DEC2025: (
        "name",
        "relative_start_time(ms)",
        "start_time",
        "end_time",
        "during_time(ms)",
        "bubble_time(ms)",
        "batch_size",
        "batch_type",
        "forward_iter",
        "dp_rank",
        "prof_id",
        "hostname",
    ),
    Generation.CANN2025: (
        "name",
        "relative_start_time(ms)",
        "start_time(ms)",
        "end_time(ms)",
        "during_time(ms)",
        "bubble_time(ms)",
        "batch_size",
        "batch_type",
        "forward_iter",
        "dp_rank",
        "prof_id",
        "hostname",
    ),
    Generation.MINDIE: _FORWARD_CURRENT,
}

# (scheduling row name, execution row name) per generation.
STEP_NAMES: dict[str, tuple[str, str]] = {
    Generation.CURRENT: ("batchFrameworkProcessing", "modelExec"),
    Generation.DEC2025: ("batchFrameworkProcessing", "modelExec"),
    Generation.CANN2025: ("batchFrameworkProcessing", "modelExec"),
    Generation.MINDIE: ("BatchSchedule", "Execute"),
}
RES_KEYS_VLLM = (
    "rid",
    "iter",
    "type",
    "num_scheduled_tokens",
    "num_prompt_tokens",
    "num_computed_tokens",
)
RES_KEYS_MINDIE = ("rid", "iter")
