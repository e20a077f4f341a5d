"""The stale-load pattern through the real online path: the simulator's OpenMetrics history of
a DP balancer deciding on counts published every 4 s, backfilled into a REAL Prometheus, is
diagnosed as one ``stale_load`` finding (finished requests per rank, as vLLM counts them), and
the same cluster with local in-flight accounting is balanced."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import replace

import pytest

from helpers.backends import backfill, serve_prometheus
from helpers.binaries import need
from skewscope.analysis.diagnose import diagnose
from skewscope.report.document import report_document
from skewscope.sim.engine import simulate
from skewscope.sim.records import SimResult
from skewscope.sim.scenario import load_scenario
from skewscope.sources.prometheus import load_prometheus

WINDOW, STEP = 5.0, 1.0


@pytest.fixture(scope="module")
def runs() -> dict[str, SimResult]:
    sc = load_scenario("stale-load")
    fixed = replace(sc, dispatcher=replace(sc.dispatcher, local_accounting=True))
    return {"stale": simulate(sc), "fixed": simulate(fixed)}


@pytest.fixture(scope="module")
def prom(tmp_path_factory: pytest.TempPathFactory, runs: dict[str, SimResult]) -> Iterator[str]:
    from skewscope.sim.writers.openmetrics import write_openmetrics

    prometheus, promtool = need("prometheus", "prometheus"), need("promtool", "prometheus")
    tmp = tmp_path_factory.mktemp("staleprom")
    for name, result in runs.items():
        om = write_openmetrics(result, tmp / f"{name}.om", "vllm", STEP, job=name)
        backfill(promtool, om, tmp / "blocks")
    with serve_prometheus(prometheus, tmp / "blocks", tmp) as url:
        yield url


@pytest.mark.parametrize("name", ["stale", "fixed"])
def test_rotating_bursts_are_one_stale_load_finding_online(
    prom: str, runs: dict[str, SimResult], name: str
) -> None:
    result = runs[name]
    ev = load_prometheus(
        prom, start=result.start_s, end=result.end_s, step_s=WINDOW, selector=f'job="{name}"'
    )
    doc = report_document(diagnose(ev))
    assert doc["level"] == "dp" and doc["hot_units"] == [], doc["findings"]
    if name == "fixed":
        assert doc["verdict"] == "balanced", doc["findings"]
        return
    (f,) = doc["findings"]
    assert f["kind"] == "stale_load" and len(f["units"]) == 4, f
    assert f["facts"]["anticorrelation"] < -0.3 and f["facts"]["range_ratio"] < 1.3
