"""The query plan's spare ``_count`` queries (``prom_plan``): a latency histogram's mean takes
its count from the buckets its percentile fetches, wherever both are planned at rank level."""

from __future__ import annotations

from skewscope.frame import Level
from skewscope.sources.dialects import get_dialect, resolve
from skewscope.sources.prom_plan import BUCKETS, COUNT, plan_jobs

HISTOGRAMS = (
    "time_to_first_token_seconds",
    "e2e_request_latency_seconds",
    "request_queue_time_seconds",
)
NAMES = [f"vllm:{h}_{part}" for h in HISTOGRAMS for part in ("bucket", "sum", "count")] + [
    "vllm:request_success_total",
    "vllm:num_requests_running",
    "vllm:kv_cache_usage_perc",
]


def _jobs(names: list[str]) -> list:  # type: ignore[type-arg]
    dialect = get_dialect("vllm")
    resolved = {lvl: resolve(dialect, names, lvl) for lvl in (Level.INSTANCE, Level.DP)}
    return plan_jobs(resolved, [Level.INSTANCE, Level.DP], window_s=60, selector="")


def test_each_latency_mean_counts_from_its_percentiles_buckets() -> None:
    jobs = _jobs(NAMES)
    buckets = {j.signal: j.counts for j in jobs if j.part == BUCKETS}
    assert buckets == {
        "ttft_p99_ms": "ttft_mean_ms",
        "e2e_p99_ms": "e2e_mean_ms",
        "queue_wait_p95_ms": "queue_wait_mean_ms",
    }
    counts = [j for j in jobs if j.part == COUNT]
    assert {j.signal for j in counts} == set(buckets.values())
    assert all(j.spare and "_count" in j.query for j in counts)


def test_a_histogram_without_buckets_sends_its_count() -> None:
    names = [n for n in NAMES if not n.startswith("vllm:time_to_first_token_seconds_bucket")]
    jobs = _jobs(names)
    ttft = [j for j in jobs if j.signal == "ttft_mean_ms" and j.part == COUNT]
    assert len(ttft) == 1 and not ttft[0].spare
    assert not any(j.counts == "ttft_mean_ms" for j in jobs)
