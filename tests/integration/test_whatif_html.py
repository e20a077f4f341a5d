"""The what-if HTML report: self-contained like the diagnose report (inline uPlot, CSP, embedded
JSON), names kept as text, and drawn in a real headless Chromium without console errors."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import pytest

from helpers.browser import load
from skewscope.cli import main
from skewscope.sim.engine import simulate
from skewscope.sim.scenario import builtin_scenarios
from skewscope.sim.writers.profiler import write_profiler

PROBE = "<img src=x onerror=document.body.setAttribute('data-xss','1')>"


@pytest.fixture(scope="module")
def page(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, object]]:
    """wrong-weights replayed with a crafted instance folder name, as HTML and as JSON."""
    root = tmp_path_factory.mktemp("whatif-html")
    write_profiler(simulate(builtin_scenarios()["wrong-weights"]), root / "sim")
    (root / "sim" / "inst-1").rename(root / "sim" / PROBE)  # a crafted folder name
    args = [str(root / "sim"), "--jobs", "1", "--policies", "round_robin,least_tokens"]
    out = root / "whatif.html"
    assert main(["whatif", *args, "-o", str(out)]) == 0
    assert main(["whatif", *args, "-o", str(root / "w.json")]) == 0
    return out, json.loads((root / "w.json").read_text())


def test_page_is_self_contained_and_embeds_the_json(page: tuple[Path, dict[str, object]]) -> None:
    path, doc = page
    text = path.read_text()
    assert text.startswith("<!doctype html>") and "default-src 'none'" in text
    assert not re.search(r"""(src|href)\s*=\s*["']?(https?:)?//""", text, re.I)
    m = re.search(
        r'<script type="application/json" id="skewscope-report">(.*?)</script>', text, re.S
    )
    assert m and json.loads(m.group(1)) == doc
    assert "uPlot" in text and text.count("<script") == 5 and "<img" not in text
    for p in doc["policies"]:  # type: ignore[attr-defined]
        assert f"<td>{p['name']}" in text


def test_chromium_draws_the_charts_and_keeps_names_as_text(
    page: tuple[Path, dict[str, object]],
) -> None:
    if shutil.which("chromium") is None and shutil.which("chromium-browser") is None:
        pytest.fail("chromium is not installed (apt-get install chromium; scripts/test.sh does)")
    shown = load(page[0])
    assert shown.console == []
    attrs = shown.body_attrs()
    assert attrs["data-charts-drawn"] == "3"  # two bar charts and the load-share table
    assert attrs["data-charts-failed"] == "0"
    assert shown.dom.count("<canvas") >= 2
    assert "data-xss" not in attrs and "<img src=x" not in shown.dom
    assert shown.dom.count("&lt;img src=x") >= 2  # in the tables and the share table's header
    # the log TTFT axis starts at least 4x under the lowest bar, so the recommended (lowest) bar
    # is drawn as a bar, not a sliver on the axis
    ranges = dict(re.findall(r'data-metric="(\w+)"[^>]*data-y-range="([^"]+)"', shown.dom))
    low, _ = map(float, ranges["ttft_p99_ms"].split(","))
    ttft = [p["predicted"]["ttft_p99_ms"] for p in page[1]["policies"]]  # type: ignore[index]
    assert 0 < low <= min(ttft) / 4
