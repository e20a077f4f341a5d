"""Deterministic metric history with known per-window truth, for real Prometheus / VictoriaMetrics.

Samples every 15 s over 20 min; windows of 60 s aligned to T0 (a multiple of 3600), so each
window holds samples on both of its boundaries and ``increase`` is exact on both backends.
Rendered as OpenMetrics (timestamps in seconds, for ``promtool tsdb create-blocks-from
openmetrics``) and as VictoriaMetrics import lines (timestamps in milliseconds).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

T0 = 1_699_999_200  # 2023-11-14T22:00:00Z, a multiple of 3600
STEP = 15
SPAN = 1200
WINDOW = 60
N_WINDOWS = SPAN // WINDOW
TTFT_BOUNDS = ("0.1", "0.5", "1.0", "+Inf")


@dataclass(frozen=True)
class Sample:
    name: str
    labels: tuple[tuple[str, str], ...]
    t: int
    value: float


def _lab(**kw: str) -> tuple[tuple[str, str], ...]:
    return tuple(sorted(kw.items()))


# vLLM job: instance a (colon names) 2x the request rate of b (escaped "vllm_" names, as
# prometheus_client 0.26 + OpenMetrics negotiation stores them); a's rank 0 runs 8 / waits 16.
# Per 15 s step and rank: (requests length, requests stop, prompt tok/req, running, waiting, kv,
# ttft observations (<=0.1, (0.1,0.5], (0.5,1]), steps)
VLLM_RANKS = {
    ("a:8000", "0"): (24.0, 6.0, 100.0, 8.0, 16.0, 0.9, (0, 15, 15), 150.0),
    ("a:8000", "1"): (15.0, 0.0, 100.0, 0.0, 0.0, 0.25, (10, 0, 0), 75.0),
    ("b:8000", "0"): (12.0, 0.0, 300.0, 2.0, 0.0, 0.25, (10, 0, 0), 75.0),
    ("b:8000", "1"): (10.5, 0.0, 300.0, 2.0, 0.0, 0.25, (10, 0, 0), 75.0),
}
RESET = ("b:8000", "1", 600)  # b's rank 1 restarts right after the sample at T0+600
GEN_PER_REQ = 50.0


def _vllm(t_off: int) -> Iterator[Sample]:
    k = t_off // STEP
    for (inst, eng), (n_len, n_stop, ptok, run, wait, kv, ttft, steps) in VLLM_RANKS.items():
        colon = inst.startswith("a")
        pre = "vllm:" if colon else "vllm_"
        kk = k
        if (inst, eng) == RESET[:2] and t_off > RESET[2]:
            kk = k - RESET[2] // STEP  # counted from 0 again after the restart
        base = {"job": "vllm-dp", "instance": inst, "engine": eng, "model_name": "m"}

        def s(
            name: str, value: float, _b: dict[str, str] = base, _p: str = pre, **extra: str
        ) -> Sample:
            return Sample(_p + name, _lab(**_b, **extra), T0 + t_off, value)

        yield s("request_success_total", n_len * kk, finished_reason="length")
        yield s("request_success_total", n_stop * kk, finished_reason="stop")
        reqs = n_len + n_stop
        yield s("prompt_tokens_total", reqs * ptok * kk)
        yield s("generation_tokens_total", reqs * GEN_PER_REQ * kk)
        yield s("num_requests_running", run)
        yield s("num_requests_waiting", wait)
        yield s("kv_cache_usage_perc", kv)
        yield s("iteration_tokens_total_count", steps * kk)
        yield s("iteration_tokens_total_sum", steps * 10 * kk)
        cum = 0
        for bound, n in zip(TTFT_BOUNDS[:3], ttft, strict=True):
            cum += n
            yield s("time_to_first_token_seconds_bucket", cum * kk, le=bound)
        yield s("time_to_first_token_seconds_bucket", cum * kk, le="+Inf")
        yield s("time_to_first_token_seconds_count", cum * kk)
        ttft_sum = ttft[0] * 0.05 + ttft[1] * 0.3 + ttft[2] * 0.75
        yield s("time_to_first_token_seconds_sum", ttft_sum * kk)


SUMMED = ("requests", "prompt_tokens", "generation_tokens", "running", "waiting", "kv_usage")
SUMMED += ("steps", "scheduled_tokens")


def vllm_truth() -> dict[str, dict[str, float]]:
    """Per-window truth by unit id, for every window."""
    out: dict[str, dict[str, float]] = {}
    per_w = WINDOW // STEP
    for (inst, eng), (n_len, n_stop, ptok, run, wait, kv, _, steps) in VLLM_RANKS.items():
        reqs = (n_len + n_stop) * per_w
        out[f"{inst}/dp{eng}"] = {
            "requests": reqs,
            "prompt_tokens": reqs * ptok,
            "generation_tokens": reqs * GEN_PER_REQ,
            "running": run,
            "waiting": wait,
            "kv_usage": kv,
            "kv_usage_max": kv,
            "steps": steps * per_w,
            "scheduled_tokens": steps * 10 * per_w,
        }
    # TTFT (bucket-interpolated, as histogram_quantile): a/dp0 has 120 obs per window, 60 in
    # (0.1,0.5] and 60 in (0.5,1]: rank 118.8 -> 0.5 + 0.5 * 58.8/60 = 0.99 s; mean 63/120 s.
    out["a:8000/dp0"] |= {"ttft_p99_ms": 990.0, "ttft_mean_ms": 525.0}
    for unit in ("a:8000/dp1", "b:8000/dp0", "b:8000/dp1"):
        out[unit] |= {"ttft_p99_ms": 99.0, "ttft_mean_ms": 50.0}
    for inst in ("a:8000", "b:8000"):
        r0, r1 = out[f"{inst}/dp0"], out[f"{inst}/dp1"]
        out[inst] = {
            sig: (r0[sig] + r1[sig]) / (2 if sig in ("kv_usage",) else 1) for sig in SUMMED
        }
        out[inst]["kv_usage_max"] = max(r0["kv_usage_max"], r1["kv_usage_max"])
    # a pooled: cumulative buckets 40, 100, 160 -> rank 158.4 in (0.5,1]: 0.5 + 0.5*58.4/60.
    out["a:8000"] |= {"ttft_p99_ms": 1000 * (0.5 + 0.5 * 58.4 / 60), "ttft_mean_ms": 406.25}
    out["b:8000"] |= {"ttft_p99_ms": 99.0, "ttft_mean_ms": 50.0}
    return out


def _scale(t_off: int) -> Iterator[Sample]:
    """Scale in/out: c present for the first half, d joins at 300 s."""
    k = t_off // STEP
    for inst, lo, hi in (("c:8000", 0, 600), ("d:8000", 300, 1200)):
        if lo <= t_off <= hi:
            lab = _lab(job="vllm-scale", instance=inst, engine="0", model_name="m")
            yield Sample("vllm:num_requests_running", lab, T0 + t_off, 3.0)
            yield Sample("vllm:request_success_total", lab, T0 + t_off, 15.0 * (k - lo // STEP))


MINDIE = {"m1:1025": (20.0, 6.0, 90.0), "m2:1025": (10.0, 3.0, 45.0)}  # req/step, running, kv %


def _mindie(t_off: int) -> Iterator[Sample]:
    k = t_off // STEP
    for inst, (req, run, kv_pct) in MINDIE.items():
        lab = _lab(job="mindie", instance=inst, model_name="m")
        yield Sample("request_success_total", lab, T0 + t_off, req * k)
        yield Sample("num_requests_running", lab, T0 + t_off, run)
        yield Sample("npu_cache_usage_perc", lab, T0 + t_off, kv_pct)


# SGLang: per dp_rank: (requests/step, running, input tokens/request); every tp_rank repeats the
# scheduler series and rank 0 also exports per-priority parts next to the priority="" aggregate.
# Neither may be double counted. Finished requests are a tokenizer-side counter: one series per
# instance, no dp_rank; per rank, requests leaving the queue (queue_time_seconds_count) and
# realtime_tokens_total{mode} (input = prefill_compute + prefill_cache, output = decode).
SGLANG = {"0": (20.0, 5.0, 100.0), "1": (4.0, 1.0, 400.0)}
SGLANG_CACHED = 0.25  # share of the input served from the prefix cache (mode prefill_cache)


def _sglang(t_off: int) -> Iterator[Sample]:
    k = t_off // STEP
    for dp, (req, run, inp) in SGLANG.items():
        for tp in ("0", "1"):
            base = {"job": "sglang", "instance": "s1:30000", "dp_rank": dp, "tp_rank": tp}
            at = T0 + t_off
            yield Sample("sglang:num_running_reqs", _lab(**base, priority=""), at, run)
            yield Sample("sglang:queue_time_seconds_count", _lab(**base, priority=""), at, req * k)
            for mode, per_req in (
                ("prefill_compute", inp * (1 - SGLANG_CACHED)),
                ("prefill_cache", inp * SGLANG_CACHED),
                ("decode", GEN_PER_REQ),
            ):
                lab = _lab(**base, priority="", mode=mode)
                yield Sample("sglang:realtime_tokens_total", lab, at, req * per_req * k)
            if dp == "0":
                for prio, part in (("1", 0.6), ("2", 0.4)):
                    lab = _lab(**base, priority=prio)
                    yield Sample("sglang:num_running_reqs", lab, at, run * part)
                    yield Sample("sglang:queue_time_seconds_count", lab, at, req * part * k)


# SGLang with --enable-dp-attention (attention TP 2 per DP rank, TP 4): the schedulers carry the
# global tp_rank, so DP rank 1's series come from tp_rank 2 and 3, never tp_rank 0.
SGLANG_DPA = {"0": (6.0, 3.0), "1": (2.0, 1.0)}  # requests/step, running


def _sglang_dp_attention(t_off: int) -> Iterator[Sample]:
    k, at = t_off // STEP, T0 + t_off
    for dp, (req, run) in SGLANG_DPA.items():
        for tp in (str(2 * int(dp)), str(2 * int(dp) + 1)):
            lab = _lab(
                job="sglang-dpa", instance="s2:30000", dp_rank=dp, tp_rank=tp, moe_ep_rank=tp
            )
            yield Sample("sglang:num_running_reqs", lab, at, run)
            yield Sample("sglang:queue_time_seconds_count", lab, at, req * k)


def _sglang_tokenizer(t_off: int) -> Iterator[Sample]:
    total = sum(req for req, _, _ in SGLANG.values())
    lab = _lab(job="sglang", instance="s1:30000")
    yield Sample("sglang:num_requests_total", lab, T0 + t_off, total * (t_off // STEP))


# Device exporters on the vLLM hosts (joined by host: a:9400 is on host a like a:8000):
# DCGM (GPU_UTIL in percent, FB_USED MiB) per gpu on a, npu-exporter (percent, MB) per id on b.
DEVICES = {
    ("dcgm", "a:9400", "0"): (95.0, 30000.0),
    ("dcgm", "a:9400", "1"): (30.0, 10000.0),
    ("npu", "b:9101", "0"): (40.0, 20000.0),
    ("npu", "b:9101", "1"): (45.0, 21000.0),
}


def _devices(t_off: int) -> Iterator[Sample]:
    for (kind, inst, dev), (util, mem) in DEVICES.items():
        at = T0 + t_off
        if kind == "dcgm":
            lab = _lab(job="dcgm", instance=inst, gpu=dev, Hostname="node-a", UUID=f"GPU-{dev}")
            yield Sample("DCGM_FI_DEV_GPU_UTIL", lab, at, util)
            yield Sample("DCGM_FI_DEV_FB_USED", lab, at, mem)
        else:
            lab = _lab(job="npu", instance=inst, id=dev)
            yield Sample("npu_chip_info_utilization", lab, at, util)
            yield Sample("npu_chip_info_hbm_used_memory", lab, at, mem)


# NVIDIA Dynamo: one Prometheus target exposing two workers' component metrics (named by the
# auto-injected worker_id label); w1 finishes 3x the requests of w2. Per 15 s step:
# (requests, inflight, kv usage fraction). The non-generate endpoint must not be counted.
DYNAMO = {"7587888160958628": (30.0, 9.0, 0.8), "7587888160958701": (10.0, 3.0, 0.3)}
# Per DP rank, from the frontend's per-worker gauges (worker_id, dp_rank, worker_type): (request
# slots in use, requests waiting). Two frontends export the same worker load: read once.
DYNAMO_RANKS = {
    ("7587888160958628", "0"): (7.0, 6.0),
    ("7587888160958628", "1"): (2.0, 0.0),
    ("7587888160958701", "0"): (1.5, 1.0),
    ("7587888160958701", "1"): (1.5, 1.0),
}
DYNAMO_FRONTENDS = ("fe-a:8000", "fe-b:8000")


def _dynamo(t_off: int) -> Iterator[Sample]:
    k, at = t_off // STEP, T0 + t_off
    for worker, (req, inflight, kv) in DYNAMO.items():
        base = {
            "job": "dynamo",
            "instance": "dyn:9090",
            "worker_id": worker,
            "dynamo_namespace": "dynamo",
            "dynamo_component": "backend",
        }
        gen = _lab(**base, dynamo_endpoint="generate")
        yield Sample("dynamo_component_requests_total", gen, at, req * k)
        yield Sample("dynamo_component_inflight_requests", gen, at, inflight)
        other = _lab(**base, dynamo_endpoint="clear_kv_blocks")
        yield Sample("dynamo_component_requests_total", other, at, 1000.0 * k)
        yield Sample("dynamo_component_kvstats_gpu_cache_usage_percent", _lab(**base), at, kv)
    for frontend in DYNAMO_FRONTENDS:
        for (worker, rank), (active, waiting) in DYNAMO_RANKS.items():
            lab = _lab(
                job="dynamo",
                instance=frontend,
                worker_id=worker,
                dp_rank=rank,
                worker_type="decode",
            )
            yield Sample("dynamo_frontend_worker_request_active_slots", lab, at, active)
            yield Sample("dynamo_frontend_worker_num_requests_waiting", lab, at, waiting)
            yield Sample("dynamo_frontend_worker_active_decode_blocks", lab, at, 100.0 * active)


# llm-d endpoint picker: per-endpoint queue of two DP pods (endpoints "<pod>-rank-<n>").
LLMD = {"vllm-a-rank-0": 12.0, "vllm-a-rank-1": 1.0, "vllm-b-rank-0": 2.0, "vllm-b-rank-1": 2.0}


def _llmd(t_off: int) -> Iterator[Sample]:
    for endpoint, queue in LLMD.items():
        lab = _lab(job="llm-d", instance="epp:9090", name="pool", model_server_endpoint=endpoint)
        yield Sample("llm_d_router_epp_per_endpoint_queue_size", lab, T0 + t_off, queue)


def history() -> list[Sample]:
    out: list[Sample] = []
    for t_off in range(0, SPAN + 1, STEP):
        for gen in (
            _vllm,
            _scale,
            _mindie,
            _sglang,
            _sglang_tokenizer,
            _devices,
            _dynamo,
            _llmd,
            _sglang_dp_attention,
        ):
            out.extend(gen(t_off))
    return out


def _labels_text(labels: tuple[tuple[str, str], ...]) -> str:
    return ",".join(f'{k}="{v}"' for k, v in labels)


def to_openmetrics(samples: list[Sample]) -> str:
    """OpenMetrics text (untyped families, grouped by series, seconds, ``# EOF``)."""
    by_series: dict[tuple[str, tuple[tuple[str, str], ...]], list[Sample]] = {}
    for s in samples:
        by_series.setdefault((s.name, s.labels), []).append(s)
    lines = []
    for name in sorted({n for n, _ in by_series}):
        for (n, labels), pts in sorted(by_series.items()):
            if n != name:
                continue
            lines += [f"{n}{{{_labels_text(labels)}}} {p.value!r} {p.t}" for p in pts]
    return "\n".join(lines) + "\n# EOF\n"


def to_vm_import(samples: list[Sample]) -> str:
    """VictoriaMetrics /api/v1/import/prometheus lines (timestamps in milliseconds)."""
    return "".join(
        f"{s.name}{{{_labels_text(s.labels)}}} {s.value!r} {s.t * 1000}\n" for s in samples
    )
