"""End to end, online: simulated scenario histories loaded into a REAL Prometheus (promtool
backfill) and a REAL VictoriaMetrics (import API); `diagnose` over PromQL must equal each
scenario's ground truth on both backends, exactly as the offline path does."""

from __future__ import annotations

import re
from collections.abc import Iterator

import httpx
import pytest

from helpers.backends import backfill, running, serve_prometheus, wait_until
from helpers.binaries import need
from helpers.online_servers import free_port
from helpers.truth import check_against_truth
from skewscope.analysis.diagnose import diagnose
from skewscope.report.document import report_document
from skewscope.sim.engine import simulate
from skewscope.sim.records import SimResult
from skewscope.sim.scenario import builtin_scenarios
from skewscope.sim.writers.openmetrics import iter_import_lines, write_openmetrics

SCENARIOS = sorted(builtin_scenarios())
SCALE_IN = "scale-in"  # the balanced run with inst-3's series stopping half way
STEP_S = 2.0  # sampling interval of the history (a scrape every 2 s)
_TS = re.compile(r" (\d+(?:\.\d+)?)$")


@pytest.fixture(scope="module")
def runs() -> dict[str, SimResult]:
    return {name: simulate(builtin_scenarios()[name]) for name in SCENARIOS}


def _scale_in_keep(result: SimResult, line: str, ts_scale: float) -> bool:
    """Drop inst-3's samples after the middle of the run (the unit was scaled in)."""
    if 'instance="inst-3"' not in line:
        return True
    m = _TS.search(line)
    mid = (result.start_s + result.end_s) / 2
    return m is None or float(m.group(1)) / ts_scale <= mid


def _labels(result: SimResult) -> dict[str, str]:
    return {i: i for i in result.instances}


@pytest.fixture(scope="module")
def prometheus_scenarios(
    tmp_path_factory: pytest.TempPathFactory, runs: dict[str, SimResult]
) -> Iterator[str]:
    prom, promtool = need("prometheus", "prometheus"), need("promtool", "prometheus")
    tmp = tmp_path_factory.mktemp("prom-scenarios")
    for job, result in [*runs.items(), (SCALE_IN, runs["balanced"])]:
        om = write_openmetrics(
            result, tmp / f"{job}.om", "vllm", STEP_S, job=job, instance_labels=_labels(result)
        )
        if job == SCALE_IN:
            kept = [ln for ln in om.read_text().splitlines() if _scale_in_keep(result, ln, 1.0)]
            om.write_text("\n".join(kept) + "\n")
        backfill(promtool, om, tmp / "blocks")
    with serve_prometheus(prom, tmp / "blocks", tmp) as url:
        yield url


@pytest.fixture(scope="module")
def victoria_scenarios(
    tmp_path_factory: pytest.TempPathFactory, runs: dict[str, SimResult]
) -> Iterator[str]:
    vm = need("victoria-metrics", "victoria-metrics")
    tmp = tmp_path_factory.mktemp("vm-scenarios")
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    cmd = [
        vm,
        f"-storageDataPath={tmp / 'vm'}",
        f"-httpListenAddr=127.0.0.1:{port}",
        "-retentionPeriod=100y",
        "-search.disableCache",
    ]
    with running(cmd, tmp / "vm.log") as proc:
        wait_until(
            lambda: proc.poll() is None and httpx.get(f"{url}/health").status_code == 200,
            "VictoriaMetrics",
        )
        for job, result in [*runs.items(), (SCALE_IN, runs["balanced"])]:
            lines = iter_import_lines(
                result, "vllm", STEP_S, job=job, instance_labels=_labels(result)
            )
            if job == SCALE_IN:
                lines = (ln for ln in lines if _scale_in_keep(result, ln, 1000.0))
            body = "\n".join(lines) + "\n"
            resp = httpx.post(f"{url}/api/v1/import/prometheus", content=body, timeout=60)
            assert resp.status_code == 204, resp.text
        httpx.get(f"{url}/internal/force_flush")

        span = runs["balanced"]

        def last_job_queryable() -> bool:
            r = httpx.get(
                f"{url}/api/v1/series",
                params={
                    "match[]": f'{{job="{SCALE_IN}"}}',
                    "start": span.start_s,
                    "end": span.end_s,
                },
            )
            return bool(r.json().get("data"))

        wait_until(last_job_queryable, "VictoriaMetrics import")
        yield url


@pytest.fixture(params=["prometheus", "victoria"], scope="module")
def store(request: pytest.FixtureRequest) -> str:
    return str(request.getfixturevalue(f"{request.param}_scenarios"))


def _diagnose(url: str, job: str, result: SimResult) -> dict:  # type: ignore[type-arg]
    from skewscope.sources.prometheus import load_prometheus

    evidence = load_prometheus(
        url, start=result.start_s, end=result.end_s, selector=f'{{job="{job}"}}'
    )
    return report_document(diagnose(evidence))


@pytest.mark.parametrize("name", SCENARIOS)
def test_scenario_history_diagnoses_to_truth(
    store: str, runs: dict[str, SimResult], name: str
) -> None:
    doc = _diagnose(store, name, runs[name])
    assert doc["source"] == "prometheus"
    check_against_truth(doc, runs[name].truth.to_dict())


def test_scale_in_is_explained_not_reported_as_skew(store: str, runs: dict[str, SimResult]) -> None:
    doc = _diagnose(store, SCALE_IN, runs["balanced"])
    assert doc["verdict"] == "balanced"
    assert doc["starved_units"] == []
    assert any("inst-3" in note for note in doc["notes"]), doc["notes"]
