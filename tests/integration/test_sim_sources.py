"""Simulated scenarios through the real online path: the simulator's OpenMetrics history backfilled
into a REAL Prometheus, and its live /metrics endpoints scraped, give per-unit request counts that
agree with the simulator's own request table (and so find the scenario's hot unit)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import polars as pl
import pytest

from helpers.backends import backfill, serve_prometheus
from helpers.binaries import need
from skewscope.frame import dp_unit_id
from skewscope.report.document import report_document
from skewscope.sim.engine import simulate
from skewscope.sim.records import SimResult
from skewscope.sim.scenario import load_scenario
from skewscope.sources.prometheus import load_prometheus
from skewscope.sources.scrape import load_scrape

CASES = [
    ("dp-count", "vllm"),
    ("dp-count", "sglang"),
    ("dp-weight", "sglang"),
    ("dp-count", "ms-service-metric"),
    ("wrong-weights", "vllm"),
    ("wrong-weights", "mindie"),
]
WINDOW = 30.0
STEP = 1.0


@pytest.fixture(scope="module")
def sim_runs() -> dict[str, SimResult]:
    return {name: simulate(load_scenario(name)) for name in {n for n, _ in CASES}}


@pytest.fixture(scope="module")
def sim_prometheus(
    tmp_path_factory: pytest.TempPathFactory, sim_runs: dict[str, SimResult]
) -> Iterator[str]:
    from skewscope.sim.writers.openmetrics import write_openmetrics

    prom, promtool = need("prometheus", "prometheus"), need("promtool", "prometheus")
    tmp = tmp_path_factory.mktemp("simprom")
    for name, dialect in CASES:
        om = write_openmetrics(
            sim_runs[name], tmp / f"{name}-{dialect}.om", dialect, STEP, job=f"{name}-{dialect}"
        )
        backfill(promtool, om, tmp / "blocks")
    with serve_prometheus(prom, tmp / "blocks", tmp) as url:
        yield url


def finished_per_unit(
    result: SimResult, lo: float, hi: float, dp: bool, when: str = "finish_s"
) -> dict[str, int]:
    """Requests per unit whose ``when`` (finish, or first scheduling) falls in (lo, hi]."""
    req = result.requests.filter((pl.col(when) > lo) & (pl.col(when) <= hi))
    keys = ["instance", "dp_rank"] if dp else ["instance"]
    out: dict[str, int] = {}
    for row in req.group_by(keys).len().iter_rows(named=True):
        label = f"127.0.0.1:{row['instance']}"
        out[dp_unit_id(label, row["dp_rank"]) if dp else label] = int(row["len"])
    return out


@pytest.mark.parametrize(("scenario", "dialect"), CASES)
def test_backfilled_scenario_requests_match_simulation(
    sim_prometheus: str, sim_runs: dict[str, SimResult], scenario: str, dialect: str
) -> None:
    result = sim_runs[scenario]
    end = float(result.requests["arrival_s"].max())  # type: ignore[arg-type]
    ev = load_prometheus(
        sim_prometheus,
        start=result.start_s,
        end=end,
        step_s=WINDOW,
        selector=f'job="{scenario}-{dialect}"',
    )
    assert ev.notes[0] == f"dialect: {dialect} (detected)"
    use_dp = scenario.startswith("dp-")
    frame = ev.dp if use_dp else ev.instance
    assert frame is not None
    lo = float(frame.df["window_start_s"].min())  # type: ignore[arg-type]
    hi = float(frame.df["window_start_s"].max()) + WINDOW  # type: ignore[arg-type]
    # SGLang per rank counts requests leaving the waiting queue (queue_time_seconds_count)
    when = "first_scheduled_s" if dialect == "sglang" and use_dp else "finish_s"
    truth = finished_per_unit(result, lo, hi, use_dp, when)
    got = dict(frame.df.group_by("unit").agg(pl.col("requests").sum()).iter_rows())
    assert set(got) == set(truth)
    for unit, n in truth.items():
        # increase() extrapolates inside a window from samples STEP apart: small error only
        assert abs(got[unit] - n) <= max(3.0, 0.1 * n), (unit, got[unit], n)
    if result.truth.kind == "weight":  # equal requests: the hot unit carries the tokens
        got = dict(frame.df.group_by("unit").agg(pl.col("prompt_tokens").sum()).iter_rows())
    top = max(got, key=lambda u: got[u])
    assert top.removeprefix("127.0.0.1:") in set(result.truth.hot_units)


def test_live_simulated_endpoints_scrape(sim_runs: dict[str, SimResult]) -> None:
    """One ManualClock moves the scraper and the live servers together: 30 rounds 0.1 s apart
    see the run at 2 s steps (speed 20), with no wall-clock wait and no round lost to a busy
    machine, so each rank's requests are the run's finished requests between the first and
    the last scrape, exactly."""
    from skewscope.clock import ManualClock
    from skewscope.sim.writers.live import serve

    result = sim_runs["dp-count"]
    clock = ManualClock(1000.0)
    with serve(result, "vllm", speed=20.0, grace_s=10.0, clock=clock) as cluster:
        urls = [u if u.endswith("/metrics") else u + "/metrics" for u in cluster.urls.values()]
        # a generous deadline per fetch: the rounds keep no wall-clock schedule here, and a
        # fetch a busy machine answers late must not be lost
        ev = load_scrape(
            urls,
            duration_s=3.0,
            interval_s=0.1,
            window_s=0.5,
            progress=False,
            clock=clock,
            timeout_s=30.0,
        )
    assert ev.dp is not None and len(ev.dp.units) == 4
    assert not any("skipped" in n or "failed" in n for n in ev.notes), ev.notes
    got = dict(ev.dp.df.group_by("unit").agg(pl.col("requests").sum()).iter_rows())
    span = 20.0 * float(
        ev.dp.df["window_start_s"].max()
        + 0.5  # type: ignore[operator]
        - ev.dp.df["window_start_s"].min()
    )
    truth = finished_per_unit(result, result.start_s, result.start_s + span, True)
    port = {u.split("//", 1)[1].split("/", 1)[0]: i for i, u in cluster.urls.items()}
    named = {f"127.0.0.1:{port[u.split('/')[0]]}/{u.split('/')[1]}": n for u, n in got.items()}
    assert named == pytest.approx(truth)
    totals: dict[str, Any] = dict(
        ev.dp.df.group_by("dp_rank").agg(pl.col("requests").sum()).iter_rows()
    )
    assert totals[0] == max(totals.values()) and totals[0] > 0


@pytest.mark.parametrize(("scenario", "kind"), [("dp-count", "count"), ("dp-weight", "weight")])
def test_sglang_dp_skew_is_classified_from_per_rank_counters(
    sim_prometheus: str, sim_runs: dict[str, SimResult], scenario: str, kind: str
) -> None:
    """SGLang's tokenizer counters have no dp_rank, but its schedulers count requests and
    tokens per rank: the hot rank's kind is told like vLLM's (it was ``unknown`` before)."""
    from skewscope.analysis.diagnose import diagnose

    result = sim_runs[scenario]
    ev = load_prometheus(
        sim_prometheus, start=result.start_s, end=result.end_s, selector=f'job="{scenario}-sglang"'
    )
    assert ev.dp is not None and "requests" not in ev.dp.missing
    doc = report_document(diagnose(ev))
    assert doc["verdict"] == "imbalanced"
    assert doc["level"] == "dp"
    assert [u.removeprefix("127.0.0.1:") for u in doc["hot_units"]] == list(result.truth.hot_units)
    finding = doc["findings"][0]
    assert finding["kind"] == kind == result.truth.kind
    assert {f["kind"] for f in doc["findings"][1:]} <= {"kv_shortage"}, doc["findings"]
