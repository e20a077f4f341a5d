"""``skewscope compare``: verdicts on runs whose before/after truth is known, and the CLI."""

from __future__ import annotations

import json
import math
import re
from dataclasses import replace
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from helpers.frame_builder import Spec, make_frame
from skewscope.analysis.compare import compare
from skewscope.analysis.diagnose import diagnose_frame
from skewscope.cli import main
from skewscope.errors import GATE_EXIT_CODE
from skewscope.report.document import compare_document, report_document

EXAMPLES = Path(__file__).parents[1].parent / "examples"


def run(**over: Spec) -> dict[str, object]:
    return report_document(diagnose_frame(make_frame({u: over.get(u, Spec()) for u in "abcd"})))


def by_signal(c: object) -> dict[str, object]:
    return {s.signal: s for s in c.signals}  # type: ignore[attr-defined]


def test_fixed_count_skew_converges() -> None:
    c = compare(run(d=Spec(rate=40.0)), run())
    assert c.focus_units == ("d",)
    req = by_signal(c)["requests_per_s"]
    assert req.before.hot_peer_ratio == pytest.approx(2.0, rel=0.15)
    assert req.after.hot_peer_ratio == pytest.approx(1.0, abs=0.15)
    assert req.before.max_median > 1.5 > req.after.max_median
    assert req.before.cv > req.after.cv
    assert req.verdict == "converged"
    assert c.verdict == "converged"
    doc = compare_document(c)
    assert doc["verdict"] == "converged" and doc["kind"] == "compare"
    sig = {s["signal"]: s for s in doc["signals"]}["requests_per_s"]
    assert {"hot_peer_ratio", "max_median", "cv", "p95", "p99"} <= set(sig["before"])


def test_partial_fix_is_improved_and_a_new_hot_unit_is_worse() -> None:
    half = compare(run(d=Spec(rate=60.0)), run(d=Spec(rate=32.0)))
    assert by_signal(half)["requests_per_s"].verdict == "improved"
    assert half.verdict == "improved"
    broken = compare(run(), run(b=Spec(rate=45.0)))
    assert by_signal(broken)["requests_per_s"].verdict == "worse"
    assert broken.verdict == "worse"
    same = compare(
        run(d=Spec(rate=40.0)),
        run(
            d=Spec(rate=40.0),
        ),
    )
    assert by_signal(same)["requests_per_s"].verdict == "unchanged"


def test_starved_unit_restored_converges() -> None:
    c = compare(run(d=Spec(until=2)), run())
    assert "d" in c.focus_units
    req = by_signal(c)["requests_per_s"]
    assert req.before.hot_peer_ratio < 0.2
    assert req.verdict == "converged"


@pytest.fixture(scope="module")
def fixed_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The bundled cluster-skew scenario with its gateway and DP weights set even."""
    root = tmp_path_factory.mktemp("fixed")
    scenario = (EXAMPLES / "cluster-skew.toml").read_text()
    scenario = scenario.replace("weights = [1.0, 1.8, 1.0]", "weights = [1.0, 1.0, 1.0]")
    scenario = scenario.replace("weights = [1.7, 1.0]", "weights = [1.0, 1.0]")
    (root / "fixed.toml").write_text(scenario)
    assert main(["simulate", str(root / "fixed.toml"), "--out", str(root / "run")]) == 0
    return root / "run"


def test_cli_compare_folders_and_json_with_the_gate(
    fixed_run: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    before = tmp_path / "before.json"
    skewed = str(EXAMPLES / "cluster-skew")
    assert main(["diagnose", skewed, "--level", "instance", "-o", str(before)]) == 0
    # the skewed run gates as imbalanced
    assert (
        main(["diagnose", skewed, "--fail-on", "imbalanced", "--format", "json"]) == GATE_EXIT_CODE
    )
    capsys.readouterr()
    assert (
        main(
            [
                "compare",
                str(before),
                str(fixed_run),
                "--level",
                "instance",
                "--format",
                "json",
                "--fail-on",
                "imbalanced",
            ]
        )
        == 0
    )
    doc = json.loads(capsys.readouterr().out)
    assert doc["verdict"] == "converged", doc
    assert doc["focus_units"] == ["inst-1"]
    req = {s["signal"]: s for s in doc["signals"]}["requests_per_s"]
    assert req["before"]["hot_peer_ratio"] > 1.5 > req["after"]["hot_peer_ratio"]
    # the other way round the fix is undone: worse, and both gates trip
    assert (
        main(["compare", str(fixed_run), skewed, "--level", "instance", "--fail-on", "worse"])
        == GATE_EXIT_CODE
    )
    text = capsys.readouterr().out
    assert "Worse:" in text and "req/s" in text and " → " in text
    for fmt in ("markdown", "html"):
        out = tmp_path / f"c.{fmt}"
        assert (
            main(
                [
                    "compare",
                    str(before),
                    str(fixed_run),
                    "--level",
                    "instance",
                    "--format",
                    fmt,
                    "-o",
                    str(out),
                ]
            )
            == 0
        )
        assert "converged" in out.read_text()
    # two saved reports keep their windows and level: --level / --window would do nothing
    assert main(["compare", str(before), str(before), "--format", "json"]) == 0
    capsys.readouterr()
    for flag in (["--level", "dp"], ["--window", "10s"], ["--step", "15s"]):
        assert main(["compare", str(before), str(before), *flag]) == 2
        err = capsys.readouterr().err
        assert f"compare: {flag[0]} applies to" in err and "saved JSON reports" in err


def test_cli_compare_rejects_bad_input(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    old = tmp_path / "old.json"
    old.write_text(json.dumps({"schema_version": 1, "verdict": "balanced", "units": []}))
    assert main(["compare", str(old), str(old)]) == 3
    err = capsys.readouterr().err
    assert "schema_version 1" in err and err[-1] == "\n" and err.count("\n") == 1
    broken = tmp_path / "broken.json"
    broken.write_text("{")
    assert main(["compare", str(broken), str(old)]) == 3
    assert "not JSON" in capsys.readouterr().err
    assert main(["compare", str(old)]) == 2
    assert main(["compare", "--prometheus", "http://127.0.0.1:9", "--before-start", "0"]) == 2
    assert "--before-end" in capsys.readouterr().err


def test_compare_html_opens_cleanly_in_chromium(tmp_path: Path) -> None:
    from helpers.browser import load
    from skewscope.report import html

    c = compare(run(d=Spec(rate=40.0)), run(), labels=("<b>before</b>", "after"))
    out = tmp_path / "compare.html"
    out.write_text(html.render_comparison(c))
    page = load(out)
    assert page.console == []
    assert page.body_attrs()["data-charts-failed"] == "0"
    assert 'class="verdict converged"' in page.dom
    assert "&lt;b&gt;before&lt;/b&gt;" in page.dom  # a label stays text
    assert page.dom.count('<td class="verdict ') == len(c.signals)
    # one before/after chart per signal, each a canvas
    assert page.body_attrs()["data-charts-drawn"] == str(len(c.signals))
    charts = re.findall(
        r'<div class="compare-chart" data-signal="\d+"[^>]*>(.*?)</div></figure>', page.dom, re.S
    )
    assert len(charts) == len(c.signals) and all("<canvas" in ch for ch in charts)


def _doc(rates: list[list[float]]) -> dict[str, object]:
    """A minimal diagnose report dict: one unit per row of per-window request rates."""
    units = [f"u{i}" for i in range(len(rates))]
    return {
        "verdict": "balanced",
        "level": "instance",
        "units": [{"unit": u} for u in units],
        "hot_units": [],
        "starved_units": [],
        "series": {
            "window_starts": list(range(len(rates[0]))),
            "values": {"requests_per_s": dict(zip(units, rates, strict=True))},
        },
    }


rates_st = st.lists(
    st.lists(st.floats(0.0, 1e4, allow_nan=False), min_size=6, max_size=6), min_size=2, max_size=6
)


@given(rates=rates_st, scale=st.floats(0.01, 100.0))
def test_same_run_is_never_better_or_worse_and_scale_does_not_matter(
    rates: list[list[float]], scale: float
) -> None:
    doc = _doc(rates)
    same = compare(doc, doc)
    assert same.verdict in ("converged", "unchanged")
    scaled = _doc([[v * scale for v in row] for row in rates])
    a = by_signal(compare(doc, doc)).get("requests_per_s")
    b = by_signal(compare(scaled, scaled)).get("requests_per_s")
    if a is not None and b is not None:
        assert math.isclose(a.before.cv, b.before.cv, rel_tol=1e-6, abs_tol=1e-9) or (
            math.isnan(a.before.cv) and math.isnan(b.before.cv)
        )


def test_saturated_wrong_weights_fixed_converge_despite_queue_bursts(tmp_path: Path) -> None:
    """wrong-weights queues hard on inst-1; with even weights every instance still bursts now
    and then near saturation. Bursts must not keep queue wait and TTFT from converging."""
    from skewscope.analysis.diagnose import diagnose
    from skewscope.sim.engine import simulate
    from skewscope.sim.scenario import builtin_scenarios
    from skewscope.sim.writers.profiler import write_profiler
    from skewscope.sources.profiler import load_profiler

    skewed = builtin_scenarios()["wrong-weights"]
    fixed = replace(skewed, gateway=replace(skewed.gateway, weights=(1.0, 1.0, 1.0, 1.0)))
    docs = []
    for name, scenario in (("skewed", skewed), ("fixed", fixed)):
        write_profiler(simulate(scenario), tmp_path / name)
        docs.append(report_document(diagnose(load_profiler([str(tmp_path / name)]))))
    c = compare(*docs)
    sig = by_signal(c)
    assert sig["queue_wait_mean_ms"].before.hot_peer_ratio > 10  # inst-1 queued, badly
    assert {s.verdict for s in c.signals} == {"converged"}, [
        (s.signal, s.verdict) for s in c.signals
    ]
    assert c.verdict == "converged"
    assert compare(docs[1], docs[0]).verdict == "worse"


def test_terminal_comparison_reads_from_80_columns() -> None:
    from skewscope.report.compare_text import render_comparison

    c = compare(run(d=Spec(rate=400.0)), run(d=Spec(rate=39.0)))
    text = render_comparison(c, width=80)
    assert all(len(line) <= 80 for line in text.splitlines())
    assert "…" not in text  # no value cut
    req = by_signal(c)["requests_per_s"]
    assert f"{req.before.p95:,.0f} → " in text or f"{req.before.p95:.1f} → " in text


def test_spread_does_not_depend_on_the_unit_of_measure_for_tiny_rates() -> None:
    """Found by hypothesis: squaring ~1e-157 rates underflowed and changed the CV with scale."""
    rates = [[3e-157] * 6, [1e-157] * 6, [2e-157] * 6]
    cvs = []
    for scale in (0.01, 1.0, 1e150):
        d = _doc([[v * scale for v in row] for row in rates])
        f = by_signal(compare(d, d))["requests_per_s"]
        cvs.append(f.before.cv)
    assert all(math.isclose(c, cvs[-1], rel_tol=1e-9) for c in cvs)
    assert math.isclose(cvs[-1], (2 / 3) ** 0.5 / 2, rel_tol=1e-9)  # std of 3,1,2 over mean 2


def test_gateway_share_of_the_hot_unit_before_and_after() -> None:
    """Routing weights fixed at the router: the gateway's share of requests to the hot unit
    falls from 40% to 25%, and every form of the comparison says so."""
    from skewscope.analysis.diagnose import diagnose
    from skewscope.frame import Evidence, GatewayEvidence, GatewayUnit
    from skewscope.report import compare_text, markdown

    def side(hot: Spec, weights: dict[str, float]) -> dict[str, object]:
        frame = make_frame({u: hot if u == "d" else Spec() for u in "abcd"}, source="prometheus")
        gw = GatewayEvidence(
            source="vllm-router",
            policy="round_robin",
            units=tuple(GatewayUnit(upstream=u, requests=w) for u, w in weights.items()),
        )
        return report_document(diagnose(Evidence(instance=frame, gateway=gw)))

    before = side(Spec(rate=40.0), {"a": 20.0, "b": 20.0, "c": 20.0, "d": 40.0})
    after = side(Spec(), {u: 20.0 for u in "abcd"})
    c = compare(before, after)
    (g,) = c.gateway
    assert (g.unit, g.before, g.after) == ("d", 0.4, 0.25)
    assert g.source_before == g.source_after == "vllm-router"
    line = "gateway share of d (vllm-router): 40% → 25%"
    assert compare_text.gateway_lines(c) == [line]
    assert line in compare_text.render_comparison(c, width=120)
    assert line in markdown.render_comparison(c)
    assert compare_document(c)["gateway"] == [
        {
            "unit": "d",
            "before": 0.4,
            "after": 0.25,
            "source_before": "vllm-router",
            "source_after": "vllm-router",
        }
    ]
    assert compare(run(d=Spec(rate=40.0)), run()).gateway == ()  # no gateway on either side
    from helpers.report_schema import assert_valid

    assert_valid(json.loads(json.dumps(compare_document(c))), "compare")
