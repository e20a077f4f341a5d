"""Percentiles from histogram buckets that are only bucket bounds are marked as such
(frame.py ``<signal>_bound``): in the scrape reduction and in the Prometheus path."""

from __future__ import annotations

import math

from hypothesis import given
from hypothesis import strategies as st

from skewscope.frame import BOUND_LOWER, BOUND_UPPER
from skewscope.sources.dialects import SIGNAL_SPECS, Alias
from skewscope.sources.promql import bound_marks, bucket_bounds_query
from skewscope.sources.scrape import Snapshot, evidence_from_snapshots, parse_exposition
from skewscope.sources.scrape_windows import bucket_quantile, bucket_quantile_bound

LES = (0.1, 0.5, 1.0)


def test_bound_flags_of_known_bucket_counts() -> None:
    # interpolated inside (0.5, 1]: an estimate, not a bound
    assert math.isnan(bucket_quantile_bound(0.99, {0.1: 0, 0.5: 60, 1.0: 120, math.inf: 120}))
    # 99 of 100 at or below 0.1: p99 is exactly the bound 0.1, the truth is at most that
    assert bucket_quantile(0.99, {0.1: 99, 0.5: 100, math.inf: 100}) == 0.1
    assert bucket_quantile_bound(0.99, {0.1: 99, 0.5: 100, math.inf: 100}) == BOUND_UPPER
    # half the observations above the last finite bound: PromQL answers 0.5, truth is above
    assert bucket_quantile_bound(0.99, {0.1: 0, 0.5: 5, math.inf: 10}) == BOUND_LOWER
    assert math.isnan(bucket_quantile_bound(0.5, {0.1: 0, math.inf: 0}))


@given(
    counts=st.lists(st.integers(0, 50), min_size=4, max_size=4),
    q=st.sampled_from([0.5, 0.95, 0.99]),
)
def test_a_marked_quantile_is_a_bucket_bound_and_an_unmarked_one_is_not(
    counts: list[int], q: float
) -> None:
    cum = [sum(counts[: i + 1]) for i in range(4)]
    buckets = dict(zip((*LES, math.inf), map(float, cum), strict=True))
    value, flag = bucket_quantile(q, buckets), bucket_quantile_bound(q, buckets)
    if math.isnan(value):
        assert math.isnan(flag)
    elif flag == BOUND_LOWER:
        assert value == LES[-1] and q * cum[-1] > cum[-2]
    elif flag == BOUND_UPPER:
        assert value in LES
    else:
        assert value not in LES


def _exposition(inst_le: dict[float, int], k: int) -> str:
    """vLLM TTFT histogram after k steps, each step adding ``inst_le`` (per-bucket counts)."""
    lines, cum = [], 0
    for le in (*LES, math.inf):
        cum += inst_le.get(le, 0)
        text = "+Inf" if le == math.inf else repr(le)
        lines.append(f'vllm:time_to_first_token_seconds_bucket{{le="{text}"}} {cum * k}')
    lines += [
        f"vllm:time_to_first_token_seconds_count {cum * k}",
        f"vllm:time_to_first_token_seconds_sum {cum * k * 0.5}",
        f"vllm:request_success_total {cum * k}",
        "vllm:num_requests_running 3",
        "vllm:num_requests_waiting 0",
    ]
    return "\n".join(lines) + "\n"


def test_scrape_marks_the_inf_bucket_and_a_quantile_on_a_bound() -> None:
    # a: every request slower than the last finite bound (1 s) -> p99 "> 1000 ms";
    # b: 99 of 100 within 0.1 s and one in (0.1, 0.5] -> p99 exactly 100 ms, "< 100 ms";
    # c: spread inside (0.1, 0.5] -> interpolated, not marked
    per_step = {
        "a": {math.inf: 10},
        "b": {0.1: 99, 0.5: 1},
        "c": {0.5: 40},
    }
    snaps = {
        inst: [Snapshot(float(t), parse_exposition(_exposition(le, t)).samples) for t in range(13)]
        for inst, le in per_step.items()
    }
    ev = evidence_from_snapshots(snaps, t0=0.0, window_s=2.0, n_windows=6, dialect="vllm")
    df = ev.instance.df
    rows = {u: df.filter(df["unit"] == u) for u in per_step}
    assert rows["a"]["ttft_p99_ms"].to_list() == [1000.0] * 6
    assert rows["a"]["ttft_p99_ms_bound"].to_list() == [BOUND_LOWER] * 6
    assert rows["b"]["ttft_p99_ms"].to_list() == [100.0] * 6
    assert rows["b"]["ttft_p99_ms_bound"].to_list() == [BOUND_UPPER] * 6
    assert rows["c"]["ttft_p99_ms_bound"].null_count() == 6
    assert rows["c"]["ttft_p99_ms"].to_list()[0] < 500.0


def test_prometheus_marks_answers_equal_to_a_bucket_bound() -> None:
    spec = next(s for s in SIGNAL_SPECS if s.signal == "ttft_p99_ms")
    alias = Alias("vllm:time_to_first_token_seconds", "engine")
    q = bucket_bounds_query(alias, 3600.0, '{job="v"}')
    assert q.startswith("count by (le) (last_over_time(") and "_bucket" in q
    values = {(0.0, "a", None): 1000.0, (0.0, "b", None): 100.0, (0.0, "c", None): 312.5}
    marks = bound_marks(values, {0.1, 0.5, 1.0, math.inf}, 1000.0)
    assert marks == {(0.0, "a", None): BOUND_LOWER, (0.0, "b", None): BOUND_UPPER}
    assert spec.over_time == "quantile"


def test_real_backend_lists_the_bucket_bounds_and_marks_no_interpolated_answer(
    backend: str,
) -> None:
    # the known history's TTFT p99 values are all interpolated inside a bucket (990 ms in
    # (0.5, 1], 99 ms in (0, 0.1]): the bounds query must list 0.1/0.5/1/+Inf and mark nothing
    from helpers.online_history import SPAN, T0, TTFT_BOUNDS, WINDOW
    from skewscope.sources.prom_client import PromClient
    from skewscope.sources.prometheus import load_prometheus

    client = PromClient(backend)
    try:
        name = next(
            n
            for n in client.metric_names(T0, T0 + SPAN, "")
            if n.endswith("time_to_first_token_seconds_bucket")
        )
        alias = Alias(name.removesuffix("_bucket"), "engine")
        result = client.query_range(
            bucket_bounds_query(alias, SPAN, '{job="vllm-dp"}'), T0 + SPAN, T0 + SPAN, SPAN
        )
    finally:
        client.close()
    les = {r["metric"]["le"] for r in result}
    assert {float(x) for x in les} == {float(x) for x in TTFT_BOUNDS}
    ev = load_prometheus(backend, start=T0, end=T0 + SPAN, step_s=WINDOW, selector='job="vllm-dp"')
    assert ev.dp is not None
    for frame in (ev.instance, ev.dp):
        assert frame.df["ttft_p99_ms"].null_count() < frame.df.height
        assert frame.df["ttft_p99_ms_bound"].null_count() == frame.df.height
