"""Dialect samples through the scrape path: real SGLang 0.5.23 DP=2 captures (per-rank requests
and tokens from the schedulers' counters, never doubled across tp_rank, the tokenizer's counters
keep the instance level) and faithfully written Dynamo / llm-d router expositions (units named
by a label, not by the target)."""

from __future__ import annotations

from pathlib import Path

import pytest

from skewscope.sources.dialects import detect_dialect
from skewscope.sources.scrape import Snapshot, evidence_from_snapshots, parse_exposition

SAMPLES = Path(__file__).parents[1] / "data" / "samples"


def _samples(name: str) -> tuple[tuple[str, tuple[tuple[str, str], ...], float], ...]:
    text = (SAMPLES / f"sglang-0.5.23-cpu-dp2{name}.metrics.txt").read_text()
    return tuple(parse_exposition(text).samples)


def test_two_real_scrapes_give_per_rank_requests_and_tokens() -> None:
    """Between the idle capture and the in-flight one (two long requests pinned to rank 1),
    rank 1's queue-time count rose 5 -> 8, its input tokens (prefill_compute + prefill_cache)
    35 -> 50 and decode tokens 23 -> 28; rank 0 did not move. The tokenizer's finished-request
    counter stayed at 9 (the requests were still running)."""
    before, after = _samples(""), _samples("-inflight")
    assert detect_dialect(s[0] for s in before) == "sglang"
    ev = evidence_from_snapshots(
        {"h:30100": [Snapshot(0.0, before), Snapshot(5.0, after)]},
        t0=0.0,
        window_s=5.0,
        n_windows=1,
    )
    assert ev.dp is not None
    rows = {r["unit"]: r for r in ev.dp.df.iter_rows(named=True)}
    r0, r1 = rows["h:30100/dp0"], rows["h:30100/dp1"]
    assert (r0["requests"], r0["prompt_tokens"], r0["generation_tokens"]) == (0.0, 0.0, 0.0)
    assert (r1["requests"], r1["prompt_tokens"], r1["generation_tokens"]) == (3.0, 15.0, 5.0)
    assert (r0["running"], r1["running"]) == (0.0, 1.0)  # mean of the two scrapes: 0 and 2
    inst = ev.instance.df.row(0, named=True)
    assert inst["requests"] == 0.0  # num_requests_total counts finished requests
    assert ev.instance.aliases["requests"] == "sglang:num_requests_total"
    assert ev.dp.aliases["requests"] == "sglang:queue_time_seconds_count"


def test_capture_without_all_schedulers_flag_still_has_ranks() -> None:
    """With plain DP the dp_rank series appear even without --enable-metrics-for-all-schedulers."""
    samples = _samples("-no-allsched")
    ev = evidence_from_snapshots(
        {"h:30100": [Snapshot(0.0, samples), Snapshot(5.0, samples)]},
        t0=0.0,
        window_s=5.0,
        n_windows=1,
    )
    assert ev.dp is not None and ev.dp.units == ["h:30100/dp0", "h:30100/dp1"]
    assert {"requests", "prompt_tokens", "generation_tokens"} <= set(ev.dp.aliases)


@pytest.mark.parametrize(
    ("sample", "dialect", "inst_units", "dp_units"),
    [
        (
            "dynamo",
            "dynamo",
            ["7587888160958628", "7587888160958701"],
            ["7587888160958628/dp0", "7587888160958628/dp1", "7587888160958701/dp0"],
        ),
        (
            "llm-d-epp",
            "llm-d",
            ["qwen-decode-7d9f-b4k8q", "qwen-decode-7d9f-x97w2"],
            [
                "qwen-decode-7d9f-b4k8q/dp0",
                "qwen-decode-7d9f-b4k8q/dp1",
                "qwen-decode-7d9f-x97w2/dp0",
                "qwen-decode-7d9f-x97w2/dp1",
            ],
        ),
    ],
)
def test_router_side_samples_name_units_by_label(
    sample: str, dialect: str, inst_units: list[str], dp_units: list[str] | None
) -> None:
    """A frontend or endpoint picker exports one series per backend: units are named by the
    backend's label (Dynamo worker_id, llm-d endpoint "<pod>-rank-<n>"), not by the target."""
    text = (SAMPLES / f"{sample}.faithful.metrics.txt").read_text()
    samples = tuple(parse_exposition(text).samples)
    assert detect_dialect(s[0] for s in samples) == dialect
    ev = evidence_from_snapshots(
        {"router:9090": [Snapshot(0.0, samples), Snapshot(5.0, samples)]},
        t0=0.0,
        window_s=5.0,
        n_windows=1,
    )
    assert ev.instance.units == inst_units
    rows = {r["unit"]: r for r in ev.instance.df.iter_rows(named=True)}
    if dialect == "dynamo":
        assert rows["7587888160958628"]["running"] == 14.0
        assert rows["7587888160958628"]["kv_usage"] == 0.83
        assert rows["7587888160958701"]["requests"] == 0.0  # the same value twice: no increase
        assert rows["7587888160958628"]["waiting"] == 5.0  # the frontend's gauges, summed
        assert ev.dp is not None and ev.dp.units == dp_units
        dp = {r["unit"]: r for r in ev.dp.df.iter_rows(named=True)}
        assert (dp["7587888160958628/dp0"]["running"], dp["7587888160958628/dp0"]["waiting"]) == (
            11.0,
            5.0,
        )
        assert dp["7587888160958628/dp1"]["running"] == 3.0
    else:
        assert rows["qwen-decode-7d9f-x97w2"]["waiting"] == 9.0
        assert ev.dp is not None and ev.dp.units == dp_units


def test_sglang_tp_copies_are_read_once_by_the_scraper_too() -> None:
    """DP attention: rank 1's schedulers are tp_rank 2 and 3 (copies of one series); both
    ranks are read, each once."""

    def text(k: int) -> str:
        lines = []
        for dp, tps, run, req in (("0", ("0", "1"), 3.0, 6), ("1", ("2", "3"), 1.0, 2)):
            for tp in tps:
                lab = f'dp_rank="{dp}",tp_rank="{tp}",moe_ep_rank="{tp}",engine_type="unified"'
                lines.append(f"sglang:num_running_reqs{{{lab}}} {run}")
                lines.append(f"sglang:queue_time_seconds_count{{{lab}}} {req * k}")
        return "\n".join(lines) + "\n"

    snaps = [Snapshot(float(k), tuple(parse_exposition(text(k)).samples)) for k in range(3)]
    ev = evidence_from_snapshots({"s:1": snaps}, t0=0.0, window_s=2.0, n_windows=1)
    assert ev.dp is not None
    rows = {r["unit"]: r for r in ev.dp.df.iter_rows(named=True)}
    assert (rows["s:1/dp0"]["running"], rows["s:1/dp0"]["requests"]) == (3.0, 12.0)
    assert (rows["s:1/dp1"]["running"], rows["s:1/dp1"]["requests"]) == (1.0, 4.0)


def test_inference_extension_queue_per_pod_rank_is_a_dp_unit() -> None:
    """The Inference Extension picker's per-pod queue (tests/data/gateway/
    inference-extension-epp.prom, names from its source) names a DP pod's endpoints
    ``<pod>-rank-<n>``: the ranks are DP units and the pod is the instance."""
    text = (
        Path(__file__).parents[1] / "data" / "gateway" / "inference-extension-epp.prom"
    ).read_text()
    samples = tuple(
        s for s in parse_exposition(text).samples if s[0] == "inference_pool_per_pod_queue_size"
    )
    assert detect_dialect(s[0] for s in samples) == "llm-d"
    ev = evidence_from_snapshots(
        {"epp:9090": [Snapshot(0.0, samples), Snapshot(5.0, samples)]},
        t0=0.0,
        window_s=5.0,
        n_windows=1,
    )
    assert ev.instance.units == ["vllm-a"]
    assert ev.dp is not None and ev.dp.units == ["vllm-a/dp0", "vllm-a/dp1"]
    dp = {r["unit"]: r["waiting"] for r in ev.dp.df.iter_rows(named=True)}
    assert dp == {"vllm-a/dp0": 0.0, "vllm-a/dp1": 4.0}
