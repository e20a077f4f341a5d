"""The simulator's router dialects (Dynamo, llm-d) and device exporters (DCGM, npu-exporter),
backfilled into a REAL Prometheus: built-in scenarios are diagnosed to their truth through each.

Dynamo and llm-d count no requests per DP rank (a frontend's gauges, a router's queue): there
the verdict, level and hot unit are the truth's, the kind stays ``unknown``. With a device
exporter every simulated device steps all the time (busy ~100 %), so the slow device is named
by its device time against its peers' cost model, not by being "busier"."""

from __future__ import annotations

import math
from collections.abc import Iterator
from typing import Any

import pytest

from helpers.backends import backfill, serve_prometheus
from helpers.binaries import need
from helpers.truth import check_against_truth
from skewscope.analysis.diagnose import diagnose
from skewscope.report.document import report_document
from skewscope.sim.engine import simulate
from skewscope.sim.records import SimResult
from skewscope.sim.scenario import builtin_scenarios
from skewscope.sim.writers.openmetrics import write_openmetrics
from skewscope.sources.prometheus import load_prometheus

SCENARIOS = ("slow-device", "dp-count")
# job suffix -> (metrics dialect, device exporter)
WRITES = {
    "dynamo": ("dynamo", None),
    "llmd": ("llm-d", None),
    "dcgm": ("vllm", "dcgm"),
    "npu": ("sglang", "npu-exporter"),
}
STEP_S = 2.0


@pytest.fixture(scope="module")
def runs() -> dict[str, SimResult]:
    return {name: simulate(builtin_scenarios()[name]) for name in SCENARIOS}


@pytest.fixture(scope="module")
def prom(tmp_path_factory: pytest.TempPathFactory, runs: dict[str, SimResult]) -> Iterator[str]:
    prometheus, promtool = need("prometheus", "prometheus"), need("promtool", "prometheus")
    tmp = tmp_path_factory.mktemp("prom-sim-dialects")
    for name, result in runs.items():
        for suffix, (dialect, devices) in WRITES.items():
            job = f"{name}-{suffix}"
            om = write_openmetrics(
                result,
                tmp / f"{job}.om",
                dialect,
                STEP_S,
                job=job,
                instance_labels={i: i for i in result.instances},
                devices=devices,
            )
            backfill(promtool, om, tmp / "blocks")
    with serve_prometheus(prometheus, tmp / "blocks", tmp) as url:
        yield url


def _diagnose(url: str, result: SimResult, job: str) -> tuple[Any, dict[str, Any]]:
    sel = f'{{job="{job}"}}'
    ev = load_prometheus(
        url, start=result.start_s, end=result.end_s, selector=sel, device_selector=sel
    )
    return ev, report_document(diagnose(ev))


@pytest.mark.parametrize("name", SCENARIOS)
def test_with_a_device_exporter_the_diagnosis_is_the_truth(
    prom: str, runs: dict[str, SimResult], name: str
) -> None:
    result = runs[name]
    for suffix, alias in (
        ("dcgm", "DCGM_FI_PROF_GR_ENGINE_ACTIVE"),
        ("npu", "npu_chip_info_utilization"),
    ):
        ev, doc = _diagnose(prom, result, f"{name}-{suffix}")
        check_against_truth(doc, result.truth.to_dict())
        assert ev.instance.aliases["device_util"] == alias
        assert any(
            f"{len(result.instances)} of {len(result.instances)} instance(s) joined to devices" in n
            for n in ev.notes
        ), ev.notes
        assert ev.instance.df["device_util"].min() > 0.9  # the simulated devices never idle
        assert ev.instance.df["device_mem_mb"].min() >= 20_000.0  # weights + KV in use
    if name == "slow-device":  # vLLM names give steps and tokens: the device's cost is known
        _, doc = _diagnose(prom, result, f"{name}-dcgm")
        (f,) = doc["findings"]
        assert f["root_causes"][0]["key"] == "device_or_process"
        assert f["evidence"]["device_busier"] is False
        assert math.isclose(f["evidence"]["device_cost_ratio"], 1.8, rel_tol=0.1)


@pytest.mark.parametrize("name", SCENARIOS)
@pytest.mark.parametrize("suffix", ["dynamo", "llmd"])
def test_through_a_router_dialect_the_hot_unit_is_the_truth(
    prom: str, runs: dict[str, SimResult], name: str, suffix: str
) -> None:
    result = runs[name]
    truth = result.truth.to_dict()
    ev, doc = _diagnose(prom, result, f"{name}-{suffix}")
    assert f"dialect: {WRITES[suffix][0]} (detected)" in ev.notes
    assert (doc["verdict"], doc["level"]) == (truth["verdict"], truth["level"])
    assert sorted(doc["hot_units"]) == sorted(truth["hot_units"])
    (f,) = doc["findings"]
    keys = [c["key"] for c in f["root_causes"]]
    if suffix == "dynamo" and truth["level"] == "instance":
        # per worker Dynamo counts requests: equal requests, more in service -> capability
        check_against_truth(doc, truth)
        assert f["evidence"]["capability_basis"].startswith("time in service")
    else:
        assert f["kind"] == "unknown" and truth["root_cause"] in keys
    if suffix == "llmd":
        assert any("counts no requests" in n for n in doc["notes"])
