"""Prometheus history of routers in front of engines, with known truth, for the gateway dialects
that cannot run here (llm-d / Gateway API Inference Extension endpoint pickers, vLLM
production-stack's router). Names and label sets are those of the one-scrape samples in
tests/data/gateway/*.prom (written from the projects' sources; a test checks the match).

Three scenarios, each in its own 2 h block so a range sees one router (promtool backfills
2 h blocks and Prometheus lists metric names per block):
- EPP (llm-d): pods vllm-a..d, engines' ``instance`` relabelled to the pod name; the picker
  sends vllm-c three times its peers' requests, vllm-c's queue bursts for one window in six and
  the picker's view of it is the engine's queue two windows late (a long polling interval).
- PS (production-stack): engines 10.0.0.{1..4}:8000, the router sends 10.0.0.3 three times its
  peers' under the session policy and holds 10.0.0.4 unhealthy for 4 of 20 windows.
- GIE (Inference Extension): one pod vllm-a with four DP ranks on ports 8000..8003 (vLLM
  ``engine`` label 0..3); the picker sends rank 2 three times the others'.
"""

from __future__ import annotations

from collections.abc import Iterator

from helpers.online_history import Sample, _lab

STEP, WINDOW, N_WINDOWS = 5, 30, 20
SPAN = WINDOW * N_WINDOWS
T_EPP = 1_700_006_400  # a multiple of 7200
T_PS = T_EPP + 4 * 3600
T_GIE = T_EPP + 8 * 3600
PODS = ("vllm-a", "vllm-b", "vllm-c", "vllm-d")
HOSTS = ("10.0.0.1:8000", "10.0.0.2:8000", "10.0.0.3:8000", "10.0.0.4:8000")
BURSTS = range(2, N_WINDOWS, 6)  # windows in which vllm-c's queue bursts
LAG = 2  # windows the picker's view of the queue is late
DOWN = range(10, 14)  # windows the production-stack router holds 10.0.0.4 unhealthy


def _window(t_off: int) -> int:
    """The window (t - W, t] a sample at t_off belongs to."""
    return max(0, (t_off - 1) // WINDOW)


def _engine(
    t0: int, t_off: int, inst: str, engine: str, count: float, running: float, waiting: float
) -> Iterator[Sample]:
    lab = _lab(job="vllm", instance=inst, engine=engine, model_name="m")
    t = t0 + t_off
    yield Sample("vllm:request_success_total", _lab(**dict(lab), finished_reason="stop"), t, count)
    yield Sample("vllm:prompt_tokens_total", lab, t, count * 100.0)
    yield Sample("vllm:generation_tokens_total", lab, t, count * 50.0)
    yield Sample("vllm:num_requests_running", lab, t, running)
    yield Sample("vllm:num_requests_waiting", lab, t, waiting)


def _epp_waiting(pod: str, w: int) -> float:
    return 20.0 if pod == "vllm-c" and w in BURSTS else 0.5


def _epp(t_off: int) -> Iterator[Sample]:
    w, t = _window(t_off), T_EPP + t_off
    for pod in PODS:
        rate = 3.0 if pod == "vllm-c" else 1.0
        yield from _engine(T_EPP, t_off, pod, "0", rate * t_off, 4.0 * rate, _epp_waiting(pod, w))
        epp = _lab(
            job="epp",
            instance="epp:9090",
            endpoint_name=pod,
            namespace="llm",
            port="8000",
            status="success",
            target_model_name="m",
        )
        yield Sample("llm_d_epp_scheduler_attempts_total", epp, t, rate * t_off)
        # llm-d's picker counts every attempt under the Inference Extension's name too
        legacy = _lab(
            job="epp",
            instance="epp:9090",
            pod_name=pod,
            namespace="llm",
            port="8000",
            status="success",
            target_model_name="m",
        )
        yield Sample("inference_extension_scheduler_attempts_total", legacy, t, rate * t_off)
        seen = _epp_waiting(pod, w - LAG) if w >= LAG else 0.5
        yield Sample(
            "llm_d_epp_per_endpoint_queue_size",
            _lab(
                job="epp", instance="epp:9090", model_server_endpoint=f"{pod}-rank-0", name="pool"
            ),
            t,
            seen,
        )
    failed = _lab(
        job="epp",
        instance="epp:9090",
        endpoint_name="",
        namespace="",
        port="",
        status="failure",
        target_model_name="m",
    )
    yield Sample("llm_d_epp_scheduler_attempts_total", failed, t, float(t_off // 60))
    pool = _lab(job="epp", instance="epp:9090", name="pool")
    yield Sample("llm_d_epp_ready_endpoints", pool, t, 4.0)
    yield Sample("llm_d_epp_average_kv_cache_utilization", pool, t, 0.4)
    yield Sample("llm_d_epp_average_queue_size", pool, t, 1.0)


def _ps_rate(host: str, w: int) -> float:
    if host == HOSTS[3] and w in DOWN:
        return 0.0
    return 3.0 if host == HOSTS[2] else 1.0


def _ps_count(host: str, t_off: int) -> float:
    """Requests sent to ``host`` up to t_off (the rate of each elapsed step)."""
    return sum(_ps_rate(host, _window(s)) * STEP for s in range(STEP, t_off + 1, STEP))


def _ps(t_off: int) -> Iterator[Sample]:
    w, t = _window(t_off), T_PS + t_off
    for host in HOSTS:
        count = _ps_count(host, t_off)
        yield from _engine(T_PS, t_off, host, "0", count, 4.0 * _ps_rate(host, w), 0.5)
        server = f"http://{host}"
        lat = _lab(job="router", instance="router:8001", model="m", server=server, status="success")
        yield Sample("vllm:request_latency_seconds_count", lat, t, count)
        yield Sample("vllm:request_latency_seconds_sum", lat, t, count * 0.5)
        router = _lab(job="router", instance="router:8001", server=server)
        yield Sample(
            "vllm:healthy_pods_total", router, t, 0.0 if host == HOSTS[3] and w in DOWN else 1.0
        )
        yield Sample("vllm:num_requests_running", router, t, 4.0 * _ps_rate(host, w))
        yield Sample("vllm:current_qps", router, t, _ps_rate(host, w))
    decisions = _lab(
        job="router",
        instance="router:8001",
        algorithm="session",
        decision="unknown",
        reason="unknown",
    )
    yield Sample("vllm:routing_decisions_total", decisions, t, 6.0 * t_off)


def _gie(t_off: int) -> Iterator[Sample]:
    t = T_GIE + t_off
    for rank in range(4):
        rate = 3.0 if rank == 2 else 1.0
        yield from _engine(T_GIE, t_off, "vllm-a", str(rank), rate * t_off, 4.0 * rate, 0.5)
        gie = _lab(
            job="epp",
            instance="epp:9090",
            namespace="llm",
            pod_name="vllm-a",
            port=str(8000 + rank),
            status="success",
            target_model_name="m",
        )
        yield Sample("inference_extension_scheduler_attempts_total", gie, t, rate * t_off)
        yield Sample(
            "inference_pool_per_pod_queue_size",
            _lab(
                job="epp", instance="epp:9090", model_server_pod=f"vllm-a-rank-{rank}", name="pool"
            ),
            t,
            0.5,
        )
    pool = _lab(job="epp", instance="epp:9090", name="pool")
    yield Sample("inference_pool_ready_pods", pool, t, 4.0)
    yield Sample("inference_pool_average_kv_cache_utilization", pool, t, 0.3)


def gateway_history() -> list[Sample]:
    out: list[Sample] = []
    for t_off in range(0, SPAN + 1, STEP):
        for gen in (_epp, _ps, _gie):
            out.extend(gen(t_off))
    return out
