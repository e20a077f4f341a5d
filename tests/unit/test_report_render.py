"""Every renderer over the same reports: they format the model, they never compute."""

from __future__ import annotations

import io
import json

from rich.console import Console

from helpers.frame_builder import Spec, make_frame
from skewscope.analysis.diagnose import diagnose_frame
from skewscope.report import jsonout, markdown, terminal
from skewscope.report.document import report_document, summary

HOT = diagnose_frame(make_frame({u: Spec(rate=44.0) if u == "c" else Spec() for u in "abcd"}))
BALANCED = diagnose_frame(make_frame({u: Spec() for u in "abcd"}))
SOLO = diagnose_frame(make_frame({"solo": Spec()}))


def _terminal(report: object) -> str:
    buf = io.StringIO()
    terminal.render(report, Console(file=buf, width=160, color_system=None))  # type: ignore[arg-type]
    return buf.getvalue()


def test_terminal_shows_verdict_finding_cause_and_side_by_side() -> None:
    text = _terminal(HOT)
    assert "Imbalanced at instance level: hot c (count skew)" in text
    assert "count skew — c" in text
    assert "Routing weights favour some units" in text
    assert "request rate (req/s)" in text and "peers (median)" in text
    # the ratio column agrees with the model
    row = HOT.findings[0].side_by_side[0]
    assert row.ratio == row.hot / row.reference
    assert f"{row.ratio:.2f}x" in text


def test_terminal_balanced_and_insufficient() -> None:
    assert "Balanced: no persistent hot instance unit across 4 units." in _terminal(BALANCED)
    assert "Insufficient data: only one unit (solo)" in _terminal(SOLO)


def test_markdown_has_headline_finding_table_and_units() -> None:
    md = markdown.render(HOT)
    assert md.startswith("# skewscope report")
    assert "**Imbalanced at instance level: hot c (count skew).**" in md
    assert "| metric | c | peers (median) | unit / peers |" in md
    rows = [line for line in md.splitlines() if line.startswith("| c | hot |")]
    assert len(rows) == 1


def test_json_equals_model_and_has_no_nan() -> None:
    text = jsonout.render(HOT)
    doc = json.loads(text)
    assert doc == json.loads(json.dumps(report_document(HOT)))
    assert "NaN" not in text
    assert doc["findings"][0]["units"] == ["c"]


def test_infinite_ratio_is_the_same_number_in_tables_summary_and_json() -> None:
    # every request pinned to rank 0, rank 1 serves nothing: the ratio is inf, not missing
    from skewscope.frame import Level

    specs = {"v/dp0": Spec(rate=30.0), "v/dp1": Spec(until=0)}
    report = diagnose_frame(make_frame(specs, level=Level.DP))
    hot = next(f for f in report.findings if f.units == ("v/dp0",))
    assert hot.severity == "high"
    assert hot.evidence["count_ratio"] == float("inf")
    row = next(r for r in hot.side_by_side if r.metric == "requests_per_s")
    assert row.reference == 0 and row.ratio == float("inf")
    doc = json.loads(jsonout.render(report))
    jhot = next(f for f in doc["findings"] if f["units"] == ["v/dp0"])
    assert jhot["evidence"]["count_ratio"] == "inf"
    jrow = next(r for r in jhot["side_by_side"] if r["metric"] == "requests_per_s")
    assert jrow["ratio"] == "inf"
    assert "∞x the requests" in summary(hot)
    text = _terminal(report)
    assert "∞x" in text
    assert "∞x" in markdown.render(report)


def test_bucket_bounded_percentiles_are_marked_and_never_form_a_ratio() -> None:
    # c is hot; its TTFT p99 fell in the +Inf bucket (PromQL answers the last bound, 10 s) and
    # its peers' p99 sit exactly on the 300 ms bound: no "33x" may be built from them
    import polars as pl

    from skewscope.frame import BOUND_LOWER, BOUND_UPPER, Level, UnitFrame

    frame = make_frame(
        {u: Spec(rate=44.0) if u == "c" else Spec() for u in "abcd"}, source="prometheus"
    )
    hot = pl.col("unit") == "c"
    df = frame.df.with_columns(
        pl.when(hot).then(10_000.0).otherwise(300.0).alias("ttft_p99_ms"),
        pl.when(hot).then(BOUND_LOWER).otherwise(BOUND_UPPER).alias("ttft_p99_ms_bound"),
    )
    report = diagnose_frame(
        UnitFrame(df=df, level=Level.INSTANCE, window_s=10.0, source="prometheus")
    )
    (f,) = report.findings
    row = next(r for r in f.side_by_side if r.metric == "ttft_p99_ms")
    assert (row.hot_bound, row.reference_bound) == ("lower", "upper")
    assert row.ratio != row.ratio  # NaN: no ratio from bounds
    assert f.evidence["impact_ratios"]["ttft_p99_ms"] != f.evidence["impact_ratios"]["ttft_p99_ms"]
    assert "TTFT p99" not in summary(f).split("Histogram bucket bounds")[0]
    assert "TTFT p99 > 10,000 ms vs < 300 ms" in summary(f)
    units = {u.unit: u for u in report.units}
    assert units["c"].bounds == {"ttft_p99_ms": "lower"}
    assert units["a"].bounds == {"ttft_p99_ms": "upper"}
    text = _terminal(report)
    assert "> 10,000" in text and "< 300" in text
    md = markdown.render(report)
    assert "| &gt; 10,000 | &lt; 300 | — |" in md  # escaped: renders as > and <
    doc = json.loads(jsonout.render(report))
    jrow = next(r for r in doc["findings"][0]["side_by_side"] if r["metric"] == "ttft_p99_ms")
    assert jrow["ratio"] is None and jrow["hot_bound"] == "lower"
    assert doc["units"][2]["bounds"] == {"ttft_p99_ms": "lower"}
    # an unmarked source keeps its ratio
    plain = next(r for r in HOT.findings[0].side_by_side if r.metric == "ttft_p99_ms")
    assert plain.ratio == plain.ratio and plain.hot_bound == ""


def test_stalled_and_fleet_findings_read_as_what_they_are() -> None:
    quiet = Spec(rate=0.3)
    stalled = diagnose_frame(
        make_frame({"a": quiet, "b": quiet, "c": quiet, "d": Spec(rate=0.3, stalled_from=0)})
    )
    text = _terminal(stalled)
    assert "hot d (stalled engine)." in text and "[HIGH] stalled engine — d" in text
    assert "stalled skew" not in text and "stalled skew" not in markdown.render(stalled)


def test_a_fleet_lists_its_hot_units_first_and_summarises_the_rest() -> None:
    """More units than ``table_units_max``: the per-unit table lists that many, hot first, and a
    spread table (min/median/p90/max over every unit) stands for the rest, in every format."""
    from skewscope.config import Thresholds

    specs = {f"i{k:02d}": Spec(rate=20.0) for k in range(30)}
    specs["i17"] = Spec(rate=40.0)
    th = Thresholds(table_units_max=8)
    report = diagnose_frame(make_frame(specs), th)
    assert report.hot_units == ("i17",)
    assert report.fleet is not None and report.fleet.units == 30
    assert report.fleet.shown[0] == "i17" and len(report.fleet.shown) == 8
    assert report.fleet.roles == {"hot": 1, "normal": 29}
    lo, med, p90, hi = report.fleet.spread["requests_per_s"]
    assert lo <= med <= p90 < hi == report.units[17].metrics["requests_per_s"]
    assert report_document(report)["fleet"]["shown"][0] == "i17"
    md = markdown.render(report)
    listed = [u.unit for u in report.units if f"| {u.unit} |" in md]
    assert sorted(listed) == sorted(report.fleet.shown)
    assert "Fleet: 30 units (1 hot, 29 normal)" in md and "| request rate (req/s) |" in md
    text = terminal.render_text(report, width=200)
    assert "Fleet: 30 units" in text
    table = text.split("Per-unit load")[1].split("└")[0]
    assert {u.unit for u in report.units if f" {u.unit} " in table} == set(report.fleet.shown)
    few = diagnose_frame(make_frame(dict(list(specs.items())[:6])), th)
    assert few.fleet is None and report_document(few)["fleet"] is None
