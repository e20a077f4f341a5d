"""Timeline of a finding, transient episodes and per-second rates, on data with known times."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from helpers.frame_builder import Spec, make_frame
from skewscope.analysis.diagnose import diagnose, diagnose_frame
from skewscope.catalogue import SERIES
from skewscope.report import jsonout, markdown, terminal
from skewscope.report.document import report_document
from skewscope.sources.profiler import load_profiler

T0 = 1_745_000_000.0  # make_frame's first window
WINDOW = 10.0
EXAMPLE = Path(__file__).parents[1].parent / "examples" / "cluster-skew"


def even(**over: Spec) -> dict[str, Spec]:
    return {u: over.get(u, Spec()) for u in ("a", "b", "c", "d")}


def test_finding_timeline_has_onset_end_and_longest_run() -> None:
    # a doubles its traffic from window 10 to the end (window 23)
    late = {w: 2.0 for w in range(10, 24)}
    report = diagnose_frame(make_frame(even(a=Spec(burst=late)), window_s=WINDOW))
    assert report.hot_units == ("a",)
    t = report.findings[0].timeline
    assert t is not None
    # smoothing over 3 windows may pull the onset one window early, never more
    assert T0 + 9 * WINDOW <= t.onset_s <= T0 + 10 * WINDOW
    assert t.end_s == T0 + 24 * WINDOW
    assert t.longest is not None and t.longest.windows >= 13
    assert t.hot_windows == sum(r.windows for r in t.runs)
    d = report_document(report)["findings"][0]["timeline"]
    assert d["onset"].endswith("Z") and d["onset_s"] == t.onset_s
    assert d["longest_run"]["windows"] == t.longest.windows
    assert "When: " in terminal.render_text(report) and "When: " in markdown.render_text(report)


def test_transient_burst_is_an_episode_with_times_and_queue_impact() -> None:
    burst = {8: 4.0, 9: 4.0, 10: 4.0}
    report = diagnose_frame(make_frame(even(a=Spec(burst=burst)), window_s=WINDOW))
    assert report.verdict == "balanced"
    # noise may add short 1.3-1.5x episodes elsewhere; the burst is a's strongest one
    ep = max((e for e in report.episodes if e.unit == "a"), key=lambda e: e.peak_ratio)
    # smoothing over 3 windows widens the burst (windows 8-10) by at most one on each side
    assert T0 + 7 * WINDOW <= ep.run.start_s <= T0 + 8 * WINDOW
    assert T0 + 11 * WINDOW <= ep.run.end_s <= T0 + 12 * WINDOW
    assert ep.peak_ratio >= 2.0
    # four times the load on the same speed queues far longer than the peers
    assert ep.impact["queue_wait_mean_ms"] > 1.0
    assert set(ep.hurting) == {k for k, v in ep.impact.items() if v >= 1.5}
    d = json.loads(jsonout.render(report))["episodes"]
    assert [e["start_s"] for e in d] == sorted(e["start_s"] for e in d)
    assert any(e["unit"] == "a" and e["start"].endswith("Z") for e in d)
    assert "episode: a:" in terminal.render_text(report)
    assert "Transient episodes" in markdown.render_text(report)


def test_report_carries_series_and_peer_bands_for_every_window() -> None:
    report = diagnose_frame(make_frame(even(d=Spec(rate=40.0)), window_s=WINDOW))
    assert report.series is not None
    n = len(report.series.window_starts)
    assert n == report.windows
    rates = report.series.values["requests_per_s"]
    assert set(rates) == {"a", "b", "c", "d"}
    assert all(len(v) == n for v in rates.values())
    assert set(report.series.values) <= {s.key for s in SERIES}
    (f,) = report.findings
    band = f.peer_bands["requests_per_s"]
    for lo, med, hi in zip(band.low, band.median, band.high, strict=True):
        assert lo <= med <= hi
    # the hot unit draws ~40 req/window against ~20 for its peers
    assert sum(rates["d"]) / n == pytest.approx(4.0, rel=0.15)
    assert sum(band.median) / n == pytest.approx(2.0, rel=0.15)
    assert report.series.hot["d"].count(True) >= n // 2


@pytest.mark.parametrize("key", ["requests_per_s", "tokens_per_s"])
def test_rates_per_second_do_not_change_with_the_window(key: str) -> None:
    fine = diagnose(load_profiler([str(EXAMPLE)], window_s=5.0), level="instance")
    coarse = diagnose(load_profiler([str(EXAMPLE)], window_s=10.0), level="instance")
    for a, b in zip(fine.units, coarse.units, strict=True):
        va, vb = a.metrics[key], b.metrics[key]
        assert math.isfinite(va) and va == pytest.approx(vb, rel=0.15), a.unit
