"""Gateway dialects: which metric names and labels carry each router's decisions, defined once.

A router in the Prometheus the engines are read from is detected by its request counter; each
entry of :data:`ROUTERS` says, for one router (version), where the per-worker requests, health,
circuit-breaker state, policy, the router's own view of each worker's queue and its pool-wide
figures are. Where an engine dialect already names a series (the llm-d endpoint picker's
per-endpoint queue is also the llm-d *engine* dialect's ``waiting``), the name is taken from
``dialects.DIALECTS``, not written twice. Where each name was verified: docs/gateway.md.
"""

from __future__ import annotations

from dataclasses import dataclass

from skewscope.catalogue import EPP_POLICY, GatewaySource
from skewscope.sources.dialects import DIALECTS


@dataclass(frozen=True)
class WorkerSeries:
    """One router metric with a series per worker (endpoint, backend URL)."""

    name: str
    worker: str  # the label naming the worker
    select: str = ""  # PromQL label matchers the series must satisfy, e.g. status="success"
    # The label carrying the worker's port (endpoint pickers name a pod, one endpoint per
    # port): a pod's ports in ascending order are its DP ranks 0, 1, ...
    port: str | None = None
    # The worker label reads ``<pod>-rank-<n>`` (llm-d endpoints of a DP pod).
    rank_suffix: bool = False


@dataclass(frozen=True)
class RouterNames:
    """A router's metric names. ``requests`` is a counter unless ``requests_per_s`` (a gauge of
    the worker's current request rate, integrated over the range)."""

    source: GatewaySource
    requests: WorkerSeries
    requests_per_s: bool = False
    health: WorkerSeries | None = None  # gauge: 1 healthy, 0 unhealthy (-1 removed)
    cb_state: WorkerSeries | None = None  # gauge: 0 closed, 1 open, 2 half-open
    policy: str | None = None  # counter with a policy label: routing decisions
    policy_label: str = "policy"
    fixed_policy: str | None = None  # the policy when the router exports none (EPP scorers)
    # The load the router believes each worker has (first present wins). ``load_polled``: it is
    # the engines' queue as the router last polled it (what a load-aware policy decides on,
    # compared with the engine's own measured queue for the stale-load note); otherwise the
    # router's own count of its in-flight requests.
    load: tuple[WorkerSeries, ...] = ()
    load_polled: bool = False
    # Pool-wide gauges (label ``name`` = the pool): (what, metric name).
    pool: tuple[tuple[str, str], ...] = ()


# The llm-d engine dialect's per-endpoint queue names are the endpoint picker's view of each
# engine's waiting queue: one table, read by both sides. Every EPP names an endpoint of a DP pod
# ``<pod>-rank-<n>`` (GIE since release-1.3 too: datastore createEndpointNamespacedName), so the
# suffix is read as the rank here whatever the engine alias says.
_EPP_QUEUE: tuple[WorkerSeries, ...] = tuple(
    WorkerSeries(a.name, a.unit_label or "instance", rank_suffix=True)
    for a in DIALECTS["llm-d"].roles["waiting"]
)
_EPP_LLMD_QUEUE = tuple(s for s in _EPP_QUEUE if s.name.startswith("llm_d_"))
_EPP_GIE_QUEUE = tuple(s for s in _EPP_QUEUE if s.name.startswith("inference_pool_"))


def _epp(
    source: GatewaySource,
    prefix: str,
    endpoint_label: str,
    queue: tuple[WorkerSeries, ...],
    pool_prefix: str,
    ready: str,
) -> RouterNames:
    return RouterNames(
        source,
        WorkerSeries(
            f"{prefix}_scheduler_attempts_total",
            endpoint_label,
            select='status="success"',
            port="port",
        ),
        fixed_policy=EPP_POLICY,
        load=queue,
        load_polled=True,
        pool=(
            ("ready endpoints", f"{pool_prefix}_{ready}"),
            ("average KV utilisation", f"{pool_prefix}_average_kv_cache_utilization"),
            ("average queue", f"{pool_prefix}_average_queue_size"),
        ),
    )


def _worker_router(
    source: GatewaySource, requests: str, health: str, cb_state: str, policy: str
) -> RouterNames:
    """sglang-router and its fork vllm-router: every series by the ``worker`` URL."""
    return RouterNames(
        source,
        WorkerSeries(requests, "worker"),
        health=WorkerSeries(health, "worker"),
        cb_state=WorkerSeries(cb_state, "worker"),
        policy=policy,
    )


def _production_stack(requests: str, per_s: bool) -> RouterNames:
    """vLLM production-stack's router: every series by the backend URL in ``server``."""
    return RouterNames(
        GatewaySource.PRODUCTION_STACK,
        WorkerSeries(requests, "server"),
        requests_per_s=per_s,
        health=WorkerSeries("vllm:healthy_pods_total", "server"),
        policy="vllm:routing_decisions_total",
        policy_label="algorithm",
        load=(WorkerSeries("vllm:num_requests_running", "server"),),
    )


ROUTERS: tuple[RouterNames, ...] = (
    # sglang-router 0.3.2 (SGLang Model Gateway) and vllm-router 0.1.17 (a fork of it): read
    # from their live /metrics in front of the simulator (tests/live/test_gateway_router.py).
    _worker_router(
        GatewaySource.SGLANG_ROUTER,
        "smg_worker_cb_outcomes_total",
        "smg_worker_health",
        "smg_worker_cb_state",
        "smg_worker_selection_total",
    ),
    _worker_router(
        GatewaySource.VLLM_ROUTER,
        "vllm_router_processed_requests_total",
        "vllm_router_worker_health",
        "vllm_router_cb_state",
        "vllm_router_policy_decisions_total",
    ),
    # llm-d router (llm-d/llm-d-router pkg/epp/metrics/llm_d_router_metrics.go): subsystem
    # ``llm_d_epp`` (v0.10.0 and later), ``llm_d_router_epp`` at 047069960690;
    # scheduler_attempts_total{status, target_model_name, endpoint_name, namespace, port}.
    _epp(
        GatewaySource.LLM_D_EPP,
        "llm_d_epp",
        "endpoint_name",
        _EPP_LLMD_QUEUE,
        "llm_d_epp",
        "ready_endpoints",
    ),
    _epp(
        GatewaySource.LLM_D_EPP,
        "llm_d_router_epp",
        "endpoint_name",
        _EPP_LLMD_QUEUE,
        "llm_d_router_epp",
        "ready_endpoints",
    ),
    # Gateway API Inference Extension EPP (kubernetes-sigs/gateway-api-inference-extension
    # pkg/epp/metrics/metrics.go, release-1.5; also llm-d/llm-d-inference-scheduler):
    # inference_extension_scheduler_attempts_total{status, target_model_name, pod_name,
    # namespace, port}; pool gauges inference_pool_*{name}.
    _epp(
        GatewaySource.INFERENCE_EXTENSION_EPP,
        "inference_extension",
        "pod_name",
        _EPP_GIE_QUEUE,
        "inference_pool",
        "ready_pods",
    ),
    # vLLM production-stack router (vllm-project/production-stack
    # src/vllm_router/services/metrics_service/__init__.py, routers/metrics_router.py): engine
    # names re-exported per backend URL in ``server``. vllm:request_latency_seconds{server,
    # model, status} (since #940, 2026-05) observes every proxied request; older routers only
    # have the vllm:current_qps{server} gauge. vllm:healthy_pods_total{server} is 1 / 0 per
    # endpoint; vllm:num_requests_running{server} is the router's own count of its in-flight
    # requests to the backend (not polled).
    _production_stack("vllm:request_latency_seconds_count", per_s=False),
    _production_stack("vllm:current_qps", per_s=True),
)
CB_OPEN = 1  # circuit-breaker gauge value of an open breaker
# A router that also exports another's names: llm-d's endpoint picker counts every scheduling
# attempt under its own and the Inference Extension's names (llm-d-router pkg/epp/metrics/
# metrics.go RecordSchedulerAttempt; collectors/inference_pool.go both queue gauges) — one
# router, not two.
ALSO_EXPORTS: dict[GatewaySource, set[GatewaySource]] = {
    GatewaySource.LLM_D_EPP: {GatewaySource.INFERENCE_EXTENSION_EPP},
}
