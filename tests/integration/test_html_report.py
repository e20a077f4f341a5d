"""The self-contained HTML report: offline, escaped, and drawn in a real headless Chromium."""

from __future__ import annotations

import html as htmllib
import json
import re
import shutil
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from helpers.browser import load, screenshot
from helpers.frame_builder import Spec, make_frame
from skewscope.analysis.diagnose import diagnose_frame
from skewscope.cli import main
from skewscope.frame import Level
from skewscope.report import html, jsonout

EXAMPLE = Path(__file__).parents[1].parent / "examples" / "cluster-skew"
PROBE = "<img src=x onerror=document.body.setAttribute('data-xss','1')>"
SCRIPT_PROBE = "</script><script>document.body.setAttribute('data-xss','2')</script>"


def embedded_json(page: str) -> object:
    m = re.search(
        r'<script type="application/json" id="skewscope-report">(.*?)</script>', page, re.S
    )
    assert m
    return json.loads(m.group(1))


def test_html_embeds_the_json_report_and_fetches_nothing() -> None:
    report = diagnose_frame(make_frame({u: Spec(rate=40.0 if u == "d" else 20.0) for u in "abcd"}))
    page = html.render_text(report)
    assert embedded_json(page) == json.loads(jsonout.render(report))
    # nothing to fetch at view time: no external script, style, image or font reference
    assert not re.search(r"""(src|href)\s*=\s*["']?(https?:)?//""", page, re.I)
    assert "@import" not in page and "url(http" not in page
    assert "default-src 'none'" in page  # and the CSP forbids fetching anyway
    assert "uPlot" in page  # the charting library is inline
    assert len(page) < 400_000


def test_label_values_stay_text_in_the_markup() -> None:
    specs = {name: Spec() for name in ("a", "b", "c")}
    specs[SCRIPT_PROBE + PROBE] = Spec(rate=45.0)
    report = diagnose_frame(make_frame(specs))
    assert report.hot_units == (SCRIPT_PROBE + PROBE,)
    page = html.render_text(report)
    # only our own script elements exist, and the probe appears escaped wherever it is shown
    assert page.count("<script") == 4
    assert "<img" not in page
    assert htmllib.escape(PROBE, quote=False).replace("'", "&#39;") in page


def test_output_extension_picks_html(tmp_path: Path) -> None:
    out = tmp_path / "report.htm"
    assert main(["diagnose", str(EXAMPLE), "-o", str(out)]) == 0
    assert out.read_text().startswith("<!doctype html>")


def test_console_detector_sees_errors(tmp_path: Path) -> None:
    """Control for the checks below: a page that errs is caught."""
    bad = tmp_path / "bad.html"
    bad.write_text("<html><body><script>console.error('boom'); missingFn();</script></body></html>")
    page = load(bad)
    assert any("boom" in c for c in page.console)
    assert any("missingFn" in c for c in page.console)


@pytest.fixture(scope="module")
def probe_report(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The bundled example diagnosed with a crafted folder name and a crafted NAME= label."""
    root = tmp_path_factory.mktemp("xss")
    for inst in ("inst-0", "inst-1", "inst-2"):
        shutil.copytree(EXAMPLE / inst, root / (PROBE if inst == "inst-1" else inst))
    out = root / "report.html"
    args = [f"{SCRIPT_PROBE}={root / PROBE}", f"a={root / 'inst-0'}", f"b={root / 'inst-2'}"]
    assert main(["diagnose", *args, "-o", str(out)]) == 0
    return out


def test_chromium_draws_every_chart_without_console_errors(probe_report: Path) -> None:
    text = probe_report.read_text()
    expected = text.count('<div class="plot"') + text.count('<div class="heatmap"')
    assert expected >= 9  # a finding's eight signals and a heatmap, at least
    page = load(probe_report)
    assert page.console == []
    attrs = page.body_attrs()
    assert attrs["data-charts-drawn"] == str(expected)
    assert attrs["data-charts-failed"] == "0"
    assert page.dom.count("<canvas") >= expected - text.count('<div class="heatmap"')
    # the XSS probes in a folder name and an instance label stayed inert text
    assert "data-xss" not in attrs
    assert "<img src=x" not in page.dom
    assert "&lt;/script&gt;&lt;script&gt;document.body.setAttribute" in page.dom


def test_screenshot_shows_charts(probe_report: Path, tmp_path: Path) -> None:
    shot = Image.open(screenshot(probe_report, tmp_path / "shot.png")).convert("RGB")
    colors = shot.getcolors(maxcolors=1 << 20)
    assert colors is not None and len(colors) > 200  # not a blank page
    pixels = np.asarray(shot, dtype=np.int16)

    def near(rgb: tuple[int, int, int]) -> int:
        return int((np.abs(pixels - np.array(rgb)).max(axis=2) <= 12).sum())

    assert near((192, 57, 43)) > 500  # the hot unit's line (and the heading)
    assert near((46, 109, 164)) > 200  # the peers' median


def test_dp_level_report_has_a_rank_by_window_heatmap(tmp_path: Path) -> None:
    specs = {f"i0/dp{r}": Spec() for r in range(4)}
    specs["i0/dp2"] = Spec(rate=45.0)
    report = diagnose_frame(make_frame(specs, level=Level.DP))
    out = tmp_path / "dp.html"
    out.write_text(html.render_text(report))
    page = load(out)
    assert page.console == []
    heat = re.search(r'<table class="heatmap">(.*?)</table>', page.dom, re.S)
    assert heat
    rows = re.findall(r"<tr><th>([^<]+)</th>", heat.group(1))
    assert rows == [f"i0/dp{r}" for r in range(4)]  # one row per rank, then the time axis
    assert heat.group(1).count("· hot") >= report.windows // 2  # dp2's hot windows are marked


def test_gateway_table_and_share_chart_are_drawn(tmp_path: Path) -> None:
    """A report with router evidence: the gateway table lists every upstream, and the chart of
    the gateway's share per window is drawn (a canvas, no console error)."""
    from skewscope.analysis.diagnose import diagnose
    from skewscope.frame import Evidence, GatewayEvidence, GatewayUnit

    hosts = [f"10.0.0.{i}:8000" for i in range(1, 5)]
    frame = make_frame(
        {h: Spec(rate=40.0) if i == 2 else Spec() for i, h in enumerate(hosts)}, source="prometheus"
    )
    starts = tuple(float(t) for t in frame.df["window_start_s"].unique().sort())
    gw = GatewayEvidence(
        source="vllm-router",
        policy="round_robin",
        window_starts=starts,
        units=tuple(
            GatewayUnit(
                upstream=h,
                requests=(40.0 if i == 2 else 20.0) * len(starts),
                series=(40.0 if i == 2 else 20.0,) * len(starts),
            )
            for i, h in enumerate(hosts)
        ),
    )
    report = diagnose(Evidence(instance=frame, gateway=gw))
    out = tmp_path / "gateway.html"
    out.write_text(html.render_text(report))
    text = out.read_text()
    assert text.count('<div class="gateway-shares"') == 1
    table = re.search(r'<table class="gateway">(.*?)</table>', text, re.S)
    assert table and all(h in table.group(1) for h in hosts)
    page = load(out)
    assert page.console == []
    attrs = page.body_attrs()
    assert attrs["data-charts-failed"] == "0"
    charts = text.count('<div class="plot"') + text.count('<div class="heatmap"') + 1
    assert attrs["data-charts-drawn"] == str(charts)
    shares = re.search(r'<div class="gateway-shares"[^>]*>(.*?)</div></figure>', page.dom, re.S)
    assert shares and "<canvas" in shares.group(1)


def _finding_sections(text: str) -> dict[str, str]:
    """Each finding's section of a page, by its title."""
    out = {}
    for m in re.finditer(
        r'<section class="finding"[^>]*>\s*<h3[^>]*>(.*?)</h3>(.*?)</section>', text, re.S
    ):
        out[htmllib.unescape(m.group(1))] = m.group(2)
    return out


def _chart_keys(section: str) -> list[str]:
    return re.findall(r'<div class="plot" data-key="([^"]+)"', section)


def test_kv_shortage_and_fleet_findings_show_their_own_figures(tmp_path: Path) -> None:
    """kv-exhaustion: the KV finding charts the KV signals and tabulates their figures, its
    unit's count finding charts the rest (no signal twice); the bundled example's fleet-wide
    dp0 finding has no peers to tabulate, so no table at all (no empty one)."""
    from skewscope.catalogue import KV_SERIES
    from skewscope.sim.engine import simulate
    from skewscope.sim.scenario import builtin_scenarios
    from skewscope.sim.writers.profiler import write_profiler

    write_profiler(simulate(builtin_scenarios()["kv-exhaustion"]), tmp_path / "kv")
    out = tmp_path / "kv.html"
    assert main(["diagnose", str(tmp_path / "kv"), "-o", str(out)]) == 0
    text = out.read_text()
    found = _finding_sections(text)
    kv = next(s for t, s in found.items() if "KV block shortage" in t)
    hot = next(s for t, s in found.items() if "count skew" in t)
    assert _chart_keys(kv) == list(KV_SERIES)
    assert _chart_keys(hot) and not set(_chart_keys(hot)) & set(KV_SERIES)
    rows = re.findall(r"<tr><td>([^<]+)</td>", kv.split('<table class="side">')[1])
    assert "free KV blocks (lowest) (blocks)" in rows
    assert not any(r.startswith("request rate") for r in rows)
    page = load(out)
    assert page.console == [] and page.body_attrs()["data-charts-failed"] == "0"

    fleet_out = tmp_path / "fleet.html"
    assert main(["diagnose", str(EXAMPLE), "-o", str(fleet_out)]) == 0
    text = fleet_out.read_text()
    (fleet,) = [s for s in _finding_sections(text).values() if "dp0 is hot in 3 of 3" in s]
    assert "<table" not in fleet and '<div class="plot"' not in fleet
    for section in _finding_sections(text).values():  # no finding shows a header-only table
        for table in re.findall(r'<table class="side">(.*?)</table>', section, re.S):
            assert table.count("<tr>") > 1
