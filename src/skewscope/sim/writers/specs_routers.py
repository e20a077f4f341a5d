"""The routers' per-backend metric families: NVIDIA Dynamo's workers and frontend, llm-d's
endpoint picker."""

from __future__ import annotations

from skewscope.catalogue import MetricType
from skewscope.sim.writers.metric_spec import COUNTER, GAUGE, MetricSpec

# NVIDIA Dynamo (names as sources/dialects.py cites them: lib/runtime/src/metrics/
# prometheus_names.rs, lib/llm/src/kv_router/publisher.rs and metrics.rs at ai-dynamo/dynamo).
# The worker's component metrics carry the auto-injected hierarchy labels and ``worker_id``;
# the frontend's per-worker gauges carry ``worker_id``, ``dp_rank``, ``worker_type``. The
# simulator names a worker by its instance (``worker_id="inst-1"``), so the truth's unit ids hold.
_DYN_HIERARCHY = (("dynamo_component", "backend"), ("dynamo_namespace", "dynamo"))


def dynamo_specs() -> list[MetricSpec]:
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


def llmd_specs() -> list[MetricSpec]:
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
