"""Prefill/decode pools through the real online path: the simulator's PD scenarios (sim/pd.py)
written in dialects that label pools, backfilled into a REAL Prometheus and diagnosed. Known
truth: the scenario says which instances are prefill and decode, which pool is saturated, and
which decode rank is slow."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from helpers.backends import backfill, serve_prometheus
from helpers.binaries import need
from skewscope.analysis.diagnose import diagnose
from skewscope.catalogue import Kind
from skewscope.errors import SourceError
from skewscope.sim.engine import simulate
from skewscope.sim.records import SimResult
from skewscope.sim.scenario import load_scenario
from skewscope.sources.prometheus import load_prometheus

STEP = 5.0
WINDOW = 15.0
CASES = [
    ("pd-imbalanced", "vllm"),
    ("pd-imbalanced", "ms-service-metric"),
    ("pd-imbalanced", "dynamo"),
    ("pd-hot-decode-rank", "vllm"),
    ("pd-imbalanced", "mindie"),
]


@pytest.fixture(scope="module")
def runs() -> dict[str, SimResult]:
    return {name: simulate(load_scenario(name)) for name in {n for n, _ in CASES}}


@pytest.fixture(scope="module")
def prom(tmp_path_factory: pytest.TempPathFactory, runs: dict[str, SimResult]) -> Iterator[str]:
    from skewscope.sim.writers.openmetrics import write_openmetrics

    prometheus, promtool = need("prometheus", "prometheus"), need("promtool", "prometheus")
    tmp = tmp_path_factory.mktemp("pdprom")
    for name, dialect in CASES:
        om = write_openmetrics(
            runs[name],
            tmp / f"{name}-{dialect}.om",
            dialect,
            STEP,
            job=f"{name}-{dialect}",
            role_label="pool" if dialect == "mindie" else None,
        )
        backfill(promtool, om, tmp / "blocks")
    with serve_prometheus(prometheus, tmp / "blocks", tmp) as url:
        yield url


def _load(prom: str, result: SimResult, job: str, **kw: object):  # type: ignore[no-untyped-def]
    return load_prometheus(
        prom,
        start=result.start_s,
        end=result.end_s - STEP,
        step_s=WINDOW,
        selector=f'job="{job}"',
        **kw,
    )  # type: ignore[arg-type]


@pytest.mark.parametrize("dialect", ["vllm", "ms-service-metric", "dynamo"])
def test_pd_imbalance_found_in_each_labelling_dialect(
    prom: str, runs: dict[str, SimResult], dialect: str
) -> None:
    result = runs["pd-imbalanced"]
    ev = _load(prom, result, f"pd-imbalanced-{dialect}")
    pools = dict(ev.instance.df.select("instance", "pool").unique().iter_rows())
    assert sorted(pools.values()).count("prefill") == 2 and len(pools) == 8
    assert any("pools from label" in n for n in ev.notes)
    report = diagnose(ev)
    (pd,) = [f for f in report.findings if f.kind == Kind.PD_IMBALANCE]
    assert pd.evidence["saturated_pool"] == "prefill" and pd.evidence["pd_ratio"] == "2:6"
    assert len(pd.units) == 2 and all(pools[u] == "prefill" for u in pd.units)
    # a prefill worker is no count hot spot against decode workers
    assert not [
        f
        for f in report.findings
        if f.kind == "count" and set(f.units) & {u for u, p in pools.items() if p == "prefill"}
    ]


def test_hot_decode_rank_found_inside_its_pool(prom: str, runs: dict[str, SimResult]) -> None:
    result = runs["pd-hot-decode-rank"]
    report = diagnose(_load(prom, result, "pd-hot-decode-rank-vllm"))
    assert not [f for f in report.findings if f.kind == Kind.PD_IMBALANCE]
    assert [u.split(":")[-1] for u in report.hot_units] == ["inst-5"]  # a decode instance
    drilled = {
        u.split(":")[-1]: f.kind for d in report.drilldown for f in d.findings for u in f.units
    }
    assert drilled == {"inst-5/dp1": "capability"}, drilled


def test_role_label_names_a_label_the_dialect_does_not_know(
    prom: str, runs: dict[str, SimResult]
) -> None:
    result = runs["pd-imbalanced"]
    job = "pd-imbalanced-mindie"  # MindIE names no pool: its history was written with "pool"
    plain = _load(prom, result, job)
    assert plain.instance.df["pool"].is_null().all()
    assert not [f for f in diagnose(plain).findings if f.kind == Kind.PD_IMBALANCE]
    ev = _load(prom, result, job, role_label="pool")
    pools = dict(ev.instance.df.select("instance", "pool").unique().iter_rows())
    assert sorted(pools.values()) == ["decode"] * 6 + ["prefill"] * 2
    (pd,) = [f for f in diagnose(ev).findings if f.kind == Kind.PD_IMBALANCE]
    assert pd.evidence["saturated_pool"] == "prefill"
    with pytest.raises(SourceError, match=r"^--role-label worker_type: no series carries this"):
        _load(prom, result, job, role_label="worker_type")


def test_pd_alert_fires_on_the_imbalanced_fleet_only(prom: str, runs: dict[str, SimResult]) -> None:
    """The generated SkewscopePDImbalance, evaluated at explicit times (every 5 s of the
    backfilled history, its recorded series inlined), fires on the saturated prefill pool of
    pd-imbalanced for longer than its ``for:`` and never on pd-hot-decode-rank, whose split
    fits (its slow decode rank is a hot unit, not a pool problem)."""
    from helpers.rule_eval import evaluate, longest_run
    from skewscope.monitor.rules import PD_ALERT, RuleOptions, build_rules

    window, for_s = 15.0, 45.0
    rules = build_rules(RuleOptions(dialects=("vllm",), window_s=window, for_s=for_s))
    fired = {}
    for name in ("pd-imbalanced", "pd-hot-decode-rank"):
        result = runs[name]
        rules_job = build_rules(
            RuleOptions(
                dialects=("vllm",), window_s=window, for_s=for_s, selector=f'job="{name}-vllm"'
            )
        )
        series = evaluate(
            prom, rules_job, PD_ALERT, result.start_s + 2 * window, result.end_s - STEP, STEP
        )
        fired[name] = {s["metric"].get("pool"): longest_run(s["values"], STEP) for s in series}
    assert fired["pd-hot-decode-rank"] == {}
    assert set(fired["pd-imbalanced"]) == {"prefill"}
    assert fired["pd-imbalanced"]["prefill"] >= for_s
    assert rules["groups"][0]["name"] == "skewscope-vllm"


def test_dashboard_pool_row_shows_the_saturated_pool(prom: str, runs: dict[str, SimResult]) -> None:
    """The dashboard's prefill/decode row, queried as Grafana would (variables at their
    defaults, the job chosen), draws the prefill pool's queue above the decode pool's."""
    import httpx
    from test_dashboard_prometheus import defaults, substitute, targets

    from skewscope.monitor.dashboard import build_dashboard
    from skewscope.monitor.dashboard_options import DashboardOptions

    dash = build_dashboard(DashboardOptions(dialects=("vllm",)))
    values = {**defaults(dash), "job": "pd-imbalanced-vllm", "__rate_interval": "15s"}
    result = runs["pd-imbalanced"]
    (expr,) = [e for t, e in targets(dash, pools=True) if t.startswith("Waiting requests per")]
    got = httpx.get(
        f"{prom}/api/v1/query_range",
        params={
            "query": substitute(expr, values),
            "start": result.start_s + 30,
            "end": result.end_s - STEP,
            "step": 15,
        },
        timeout=60,
    ).json()["data"]["result"]
    mean = {
        s["metric"]["pool"]: sum(float(v) for _, v in s["values"]) / len(s["values"]) for s in got
    }
    assert set(mean) == {"prefill", "decode"} and mean["prefill"] > 1.0 > 10 * mean["decode"]
