"""``skewscope dashboard``: every panel query, with the variables at their defaults, parses and
returns data on a REAL Prometheus holding a simulated history of every dialect.

The history is the simulator's OpenMetrics output (one scenario with DP ranks, one job per
dialect), backfilled with promtool; Grafana's variables are replaced the way Grafana would
with the defaults the JSON declares (``All`` -> the variable's ``allValue``).
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from helpers.backends import backfill, serve_prometheus
from helpers.binaries import need
from skewscope.catalogue import SIMULATED_DIALECTS
from skewscope.cli import main
from skewscope.monitor.dashboard import PANELS, build_dashboard
from skewscope.monitor.dashboard_options import DashboardOptions
from skewscope.sim.engine import simulate
from skewscope.sim.scenario import load_scenario
from skewscope.sim.writers.openmetrics import write_openmetrics
from skewscope.sources.dialects import DIALECTS

SCENARIO = "kv-exhaustion"  # several instances; ranks come from a second, DP scenario
DP_SCENARIO = "dp-count"
STEP_S = 5.0
RATE_INTERVAL = "30s"  # what Grafana's $__rate_interval gives for a 5 s scrape at this range


@pytest.fixture(scope="module")
def history(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, float, float]]:
    """(Prometheus URL, start, end) with both scenarios in every simulated dialect, one job
    each (the all-dialect dashboard also joins the dialects the simulator does not write)."""
    prom = need("prometheus", "prometheus")
    promtool = need("promtool", "prometheus")
    tmp = tmp_path_factory.mktemp("dashboard")
    blocks = tmp / "blocks"
    span = (float("inf"), float("-inf"))
    for scenario in (SCENARIO, DP_SCENARIO):
        result = simulate(load_scenario(scenario))
        span = (min(span[0], result.start_s), max(span[1], result.end_s))
        for dialect in SIMULATED_DIALECTS:
            om = write_openmetrics(
                result,
                tmp / f"{scenario}-{dialect}.om",
                dialect=dialect,
                step_s=STEP_S,
                job=f"{scenario}-{dialect}",
                instance_labels={i: f"{scenario}-{dialect}-{i}:8000" for i in result.instances},
            )
            backfill(promtool, om, blocks)
    with serve_prometheus(prom, blocks, tmp) as url:
        yield url, span[0], span[1]


def defaults(dashboard: dict[str, Any]) -> dict[str, str]:
    """Variable name -> the value Grafana substitutes with the declared default."""
    out = {"__rate_interval": RATE_INTERVAL}
    for var in dashboard["templating"]["list"]:
        current = var.get("current") or {}
        value = current.get("value", "")
        out[var["name"]] = var.get("allValue", ".*") if value == "$__all" else str(value)
    return out


def substitute(expr: str, values: dict[str, str]) -> str:
    def repl(m: re.Match[str]) -> str:
        return values[m.group(1) or m.group(2)]

    return re.sub(r"\$\{([A-Za-z_]\w*)\}|\$([A-Za-z_]\w*)", repl, expr)


def targets(dashboard: dict[str, Any], pools: bool = False) -> list[tuple[str, str]]:
    """(panel title, query) of every panel; the prefill/decode row's only with ``pools`` (it
    has data for a disaggregated fleet only: tests/integration/test_pd_pools.py)."""
    from skewscope.monitor.pd_dashboard import PD_PANELS

    skip = set() if pools else {title for title, _, _ in PD_PANELS}
    return [
        (p["title"], t["expr"])
        for p in dashboard["panels"]
        if p["type"] != "row" and p["title"] not in skip
        for t in p.get("targets", [])
    ]


def query_range(url: str, expr: str, start: float, end: float) -> list[Any]:
    r = httpx.get(
        f"{url}/api/v1/query_range",
        params={"query": expr, "start": start, "end": end, "step": 15},
        timeout=60,
    )
    body = r.json()
    assert r.status_code == 200 and body["status"] == "success", body.get("error", body)
    result: list[Any] = body["data"]["result"]
    return result


@pytest.mark.parametrize("dialect", [None, *SIMULATED_DIALECTS])
def test_every_panel_returns_data(history: tuple[str, float, float], dialect: str | None) -> None:
    url, start, end = history
    opts = DashboardOptions(dialects=(dialect,) if dialect else tuple(DIALECTS))
    dash = build_dashboard(opts)
    values = defaults(dash)
    found = targets(dash)
    assert found
    for title, expr in found:
        result = query_range(url, substitute(expr, values), start, end)
        assert result, f"{dialect or 'all dialects'}: panel {title!r} returned no data: {expr}"


def test_variables_and_annotation_parse(history: tuple[str, float, float]) -> None:
    url, start, end = history
    dash = build_dashboard(DashboardOptions())
    values = defaults(dash)
    for var in dash["templating"]["list"]:
        if var["type"] != "query":
            continue
        m = re.fullmatch(r"label_values\((\{.*\}), (\w+)\)", var["query"])
        assert m, var["query"]
        r = httpx.get(
            f"{url}/api/v1/series",
            params={"match[]": substitute(m.group(1), values), "start": start, "end": end},
            timeout=60,
        )
        series = r.json()["data"]
        assert any(m.group(2) in s for s in series), f"variable {var['name']} has no values"
    for ann in dash["annotations"]["list"]:
        query_range(url, substitute(ann["expr"], values), start, end)  # parses (no alerts here)


def test_dashboard_shape(tmp_path: Path) -> None:
    """Variables for the datasource, each group label and the instance; an instance row and a
    DP row with the side-by-side panels; every query on the datasource variable."""
    out = tmp_path / "d.json"
    assert main(["dashboard", "--group-by", "cluster,job", "-o", str(out)]) == 0
    dash = json.loads(out.read_text())
    names = [v["name"] for v in dash["templating"]["list"]]
    assert names == ["datasource", "cluster", "job", "instance"]
    rows = [p["title"] for p in dash["panels"] if p["type"] == "row"]
    assert len(rows) == 3 and rows[0].startswith("Instances") and rows[1].startswith("DP")
    assert rows[2] == "Prefill / decode pools"
    titles = [p["title"] for p in dash["panels"] if p["type"] != "row"]
    for panel in PANELS:
        assert titles.count(panel.title) == 2, panel.title
    assert titles.count("Max / median across peers") == 2
    for p in dash["panels"]:
        if p["type"] != "row":
            assert p["datasource"]["uid"] == "${datasource}"
            for t in p["targets"]:
                assert 'cluster=~"$cluster"' in t["expr"] and 'job=~"$job"' in t["expr"]
    assert "Skewscope" in dash["annotations"]["list"][0]["expr"]
    assert main(["dashboard", "-o", str(out)]) == 2  # exists, no --force


def test_mindie_dashboard_has_no_dp_row() -> None:
    dash = build_dashboard(DashboardOptions(dialects=("mindie",)))
    rows = [p["title"] for p in dash["panels"] if p["type"] == "row"]
    assert rows == ["Instances"]
