"""GIVEN known history in a REAL Prometheus / VictoriaMetrics, WHEN load_prometheus reads it,
THEN every unit's per-window values equal the known truth."""

from __future__ import annotations

import math

import polars as pl
import pytest

from helpers.online_history import (
    DEVICES,
    DYNAMO,
    DYNAMO_RANKS,
    GEN_PER_REQ,
    LLMD,
    MINDIE,
    N_WINDOWS,
    SGLANG,
    SGLANG_DPA,
    SPAN,
    STEP,
    T0,
    WINDOW,
    vllm_truth,
)
from skewscope.frame import Level
from skewscope.report.document import report_document
from skewscope.sources.prometheus import load_prometheus


def _by_unit(df: pl.DataFrame) -> dict[str, list[dict[str, object]]]:
    out: dict[str, list[dict[str, object]]] = {}
    for row in df.iter_rows(named=True):
        out.setdefault(str(row["unit"]), []).append(row)
    return out


def _close(got: object, want: float) -> bool:
    return isinstance(got, float) and math.isclose(got, want, rel_tol=1e-9, abs_tol=1e-9)


def test_vllm_dp_history_matches_truth(backend: str) -> None:
    ev = load_prometheus(backend, start=T0, end=T0 + SPAN, step_s=WINDOW, selector='job="vllm-dp"')
    truth = vllm_truth()
    assert ev.dp is not None
    for frame in (ev.instance, ev.dp):
        rows = _by_unit(frame.df)
        want_units = [u for u in truth if ("/dp" in u) == (frame.level is Level.DP)]
        assert sorted(rows) == sorted(want_units)
        for unit in want_units:
            assert len(rows[unit]) == N_WINDOWS, unit
            assert [r["window_start_s"] for r in rows[unit]] == [
                float(T0 + k * WINDOW) for k in range(N_WINDOWS)
            ]
            for row in rows[unit]:
                for signal, want in truth[unit].items():
                    assert _close(row[signal], want), (frame.level, unit, signal, row[signal], want)
    # a gets twice b's requests; a's rank 0 is the hot DP rank
    inst = _by_unit(ev.instance.df)
    assert inst["a:8000"][0]["requests"] == 2 * inst["b:8000"][0]["requests"]
    assert ev.dp.df.filter(pl.col("unit") == "a:8000/dp0")["running"].unique().to_list() == [8.0]
    # absent signals are missing (null), never 0; found aliases recorded with their spelling
    for frame in (ev.instance, ev.dp):
        assert {"preemptions", "queue_wait_p95_ms", "e2e_p99_ms", "busy_ms"} <= set(frame.missing)
        assert frame.df["preemptions"].null_count() == frame.df.height
    assert ev.instance.aliases["running"] == "vllm:num_requests_running|vllm_num_requests_running"
    assert "dialect: vllm (detected)" in ev.notes
    assert any("interpolation" in n for n in ev.notes)
    assert ev.instance.source == "prometheus" and ev.instance.window_s == WINDOW


def test_counter_reset_is_not_a_negative_window(backend: str) -> None:
    ev = load_prometheus(backend, start=T0, end=T0 + SPAN, step_s=WINDOW, selector='job="vllm-dp"')
    assert ev.dp is not None
    b1 = ev.dp.df.filter(pl.col("unit") == "b:8000/dp1")["requests"].to_list()
    assert b1 == [42.0] * N_WINDOWS  # restart at T0+600 counted from 0, like rate()


def test_units_that_come_and_go_have_rows_only_where_present(backend: str) -> None:
    ev = load_prometheus(
        backend, start=T0, end=T0 + SPAN, step_s=WINDOW, selector='job="vllm-scale"'
    )
    rows = _by_unit(ev.instance.df)
    c_windows = {r["window_start_s"] for r in rows["c:8000"]}
    d_windows = {r["window_start_s"] for r in rows["d:8000"]}
    assert float(T0) in c_windows and float(T0 + SPAN - WINDOW) not in c_windows
    assert float(T0 + SPAN - WINDOW) in d_windows and float(T0) not in d_windows
    assert all(r["running"] == 3.0 for r in rows["c:8000"] + rows["d:8000"])
    assert any("c:8000" in n and "windows" in n for n in ev.instance.notes)
    assert any("d:8000" in n and "windows" in n for n in ev.instance.notes)
    assert ev.dp is None  # one rank per instance: nothing to compare inside an instance


def test_mindie_is_instance_level_with_percent_kv_normalised(backend: str) -> None:
    ev = load_prometheus(backend, start=T0, end=T0 + SPAN, step_s=WINDOW, selector='job="mindie"')
    assert ev.dp is None
    assert "dialect: mindie (detected)" in ev.notes
    rows = _by_unit(ev.instance.df)
    for inst, (req, run, kv_pct) in MINDIE.items():
        assert [r["requests"] for r in rows[inst]] == [req * WINDOW / STEP] * N_WINDOWS
        assert all(r["running"] == run for r in rows[inst])
        assert all(_close(r["kv_usage"], kv_pct / 100) for r in rows[inst])
    assert any("percent" in n for n in ev.notes)


def test_sglang_tp_ranks_and_priority_parts_are_not_double_counted(backend: str) -> None:
    """Per-rank requests and tokens come from the schedulers' counters (queue_time _count,
    realtime_tokens_total{mode}); the tokenizer's counters stay the instance-level source."""
    ev = load_prometheus(backend, start=T0, end=T0 + SPAN, step_s=WINDOW, selector='job="sglang"')
    assert ev.dp is not None
    rows = _by_unit(ev.dp.df)
    per_w = WINDOW / STEP
    for dp, (req, run, inp) in SGLANG.items():
        unit = rows[f"s1:30000/dp{dp}"]
        assert all(r["running"] == run for r in unit)
        assert all(_close(r["requests"], req * per_w) for r in unit)
        assert all(_close(r["prompt_tokens"], req * inp * per_w) for r in unit)
        assert all(_close(r["generation_tokens"], req * GEN_PER_REQ * per_w) for r in unit)
    assert ev.dp.aliases["requests"] == "sglang:queue_time_seconds_count"
    assert ev.dp.aliases["prompt_tokens"] == (
        'sglang:realtime_tokens_total{mode=~"prefill_compute|prefill_cache"}'
    )
    assert ev.dp.aliases["generation_tokens"] == 'sglang:realtime_tokens_total{mode="decode"}'
    inst = _by_unit(ev.instance.df)["s1:30000"]
    assert all(r["running"] == 6.0 for r in inst)
    assert all(r["requests"] == 24 * per_w for r in inst)
    assert ev.instance.aliases["requests"] == "sglang:num_requests_total"


@pytest.mark.parametrize("dialect", ["vllm", "ms-service-metric"])
def test_dialect_override(prometheus_url: str, dialect: str) -> None:
    ev = load_prometheus(
        prometheus_url,
        start=T0,
        end=T0 + SPAN,
        step_s=WINDOW,
        selector='job="vllm-dp"',
        dialect=dialect,
    )
    assert f"dialect: {dialect} (given)" in ev.notes
    assert "free_blocks_min" in ev.instance.missing  # ms-service names absent in this history


def test_default_window_comes_from_the_window_policy(prometheus_url: str) -> None:
    ev = load_prometheus(prometheus_url, start=T0, end=T0 + SPAN, selector='{job="vllm-dp"}')
    assert ev.instance.window_s == 60.0  # 1200 s / 24 target windows -> 50 -> 60
    assert ev.instance.df.height == 2 * N_WINDOWS


def test_device_exporters_join_the_engine_units_by_host(backend: str) -> None:
    """DCGM on host a and npu-exporter on host b are separate jobs: the engine selector does not
    reach them, yet their GPUs/NPUs land on a's and b's DP ranks in device order."""
    ev = load_prometheus(backend, start=T0, end=T0 + SPAN, step_s=WINDOW, selector='job="vllm-dp"')
    assert ev.dp is not None
    rows = _by_unit(ev.dp.df)
    for (_, target, dev), (util, mem) in DEVICES.items():
        unit = f"{target.split(':')[0]}:8000/dp{dev}"
        assert all(_close(r["device_util"], util / 100) for r in rows[unit]), unit
        assert all(_close(r["device_mem_mb"], mem) for r in rows[unit]), unit
    inst = _by_unit(ev.instance.df)
    assert all(_close(r["device_util"], 0.625) for r in inst["a:8000"])
    assert all(_close(r["device_mem_mb"], 41000.0) for r in inst["b:8000"])
    assert ev.dp.aliases["device_util"] == "DCGM_FI_DEV_GPU_UTIL|npu_chip_info_utilization"
    assert any("2 of 2 instance(s) joined to devices (2 by host)" in n for n in ev.notes)


def test_dynamo_workers_are_units_named_by_worker_id(backend: str) -> None:
    """One target, two workers: units are worker ids; only the generate endpoint counts. Per DP
    rank the frontend's per-worker gauges (dp_rank) give running and waiting, read once though
    two frontends export them, and the hot rank is found."""
    from skewscope.analysis.diagnose import diagnose

    ev = load_prometheus(backend, start=T0, end=T0 + SPAN, step_s=WINDOW, selector='job="dynamo"')
    assert "dialect: dynamo (detected)" in ev.notes
    rows = _by_unit(ev.instance.df)
    assert set(rows) == set(DYNAMO)
    for worker, (req, inflight, kv) in DYNAMO.items():
        assert all(_close(r["requests"], req * WINDOW / STEP) for r in rows[worker])
        assert all(_close(r["running"], inflight) for r in rows[worker])
        assert all(_close(r["kv_usage"], kv) for r in rows[worker])
        waiting = sum(w for (wk, _), (_, w) in DYNAMO_RANKS.items() if wk == worker)
        assert all(_close(r["waiting"], waiting) for r in rows[worker])
    assert ev.dp is not None
    dp = _by_unit(ev.dp.df)
    assert set(dp) == {f"{w}/dp{r}" for w, r in DYNAMO_RANKS}
    for (worker, rank), (active, waiting) in DYNAMO_RANKS.items():
        assert all(_close(r["running"], active) for r in dp[f"{worker}/dp{rank}"])
        assert all(_close(r["waiting"], waiting) for r in dp[f"{worker}/dp{rank}"])
    assert ev.dp.aliases["waiting"] == "dynamo_frontend_worker_num_requests_waiting"
    assert ev.dp.aliases["running"] == "dynamo_frontend_worker_request_active_slots"
    assert ev.instance.aliases["running"] == "dynamo_component_inflight_requests"
    doc = report_document(diagnose(ev, level="dp"))
    assert doc["verdict"] == "imbalanced" and doc["hot_units"] == ["7587888160958628/dp0"], doc


def test_llmd_endpoint_queue_splits_pods_into_ranks(backend: str) -> None:
    """Endpoints "<pod>-rank-<n>" are rank n of the pod; the pod sums its ranks' queues, and
    the hot rank is found from the router's queue alone."""
    from skewscope.analysis.diagnose import diagnose

    ev = load_prometheus(backend, start=T0, end=T0 + SPAN, step_s=WINDOW, selector='job="llm-d"')
    assert "dialect: llm-d (detected)" in ev.notes
    assert ev.dp is not None
    rows = _by_unit(ev.dp.df)
    for endpoint, queue in LLMD.items():
        pod, rank = endpoint.rsplit("-rank-", 1)
        assert all(r["waiting"] == queue for r in rows[f"{pod}/dp{rank}"])
    inst = _by_unit(ev.instance.df)
    assert all(r["waiting"] == 13.0 for r in inst["vllm-a"])
    # a queue is no request count, yet pods are judged by their summed queues (13 against 4),
    # and the auto level drills into the hot pod
    doc = report_document(diagnose(ev))
    assert doc["verdict"] == "imbalanced" and doc["hot_units"] == ["vllm-a"], doc
    assert [d["hot_units"] for d in doc["drilldown"]] == [["vllm-a/dp0"]]
    assert any("counts no requests" in n for n in doc["notes"])
    doc = report_document(diagnose(ev, level="dp"))
    assert doc["verdict"] == "imbalanced" and doc["hot_units"] == ["vllm-a/dp0"]


def test_sglang_dp_attention_ranks_are_all_read_once(backend: str) -> None:
    """Under --enable-dp-attention DP rank 1's schedulers are tp_rank 2 and 3: it is still read,
    and its two TP copies count once."""
    ev = load_prometheus(
        backend, start=T0, end=T0 + SPAN, step_s=WINDOW, selector='job="sglang-dpa"'
    )
    assert ev.dp is not None
    rows = _by_unit(ev.dp.df)
    for dp, (req, run) in SGLANG_DPA.items():
        unit = rows[f"s2:30000/dp{dp}"]
        assert all(r["running"] == run for r in unit)
        assert all(_close(r["requests"], req * WINDOW / STEP) for r in unit)
    assert all(r["running"] == 4.0 for r in _by_unit(ev.instance.df)["s2:30000"])
