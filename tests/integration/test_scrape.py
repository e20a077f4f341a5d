"""Direct /metrics scraping: real vLLM captures and changing expositions with known truth."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import polars as pl
import pytest

from helpers.online_history import N_WINDOWS, STEP, WINDOW, _vllm, vllm_truth
from helpers.online_servers import Quiet, free_port, serve
from skewscope.clock import ManualClock
from skewscope.errors import SourceError
from skewscope.sources.dialects import detect_dialect
from skewscope.sources.scrape import (
    Snapshot,
    evidence_from_snapshots,
    load_scrape,
    parse_exposition,
)
from skewscope.sources.scrape_windows import bucket_quantile

SAMPLES = Path(__file__).parents[1] / "data" / "samples"
PINNED = SAMPLES / "vllm-0.32-cpu-dp2-rank0-pinned.metrics.txt"


def static_handler(text: str) -> type[Quiet]:
    body = text.encode()

    class Handler(Quiet):
        def do_GET(self) -> None:
            self.send_response(200)
            self.send_header("Content-Type", "text/plain; version=0.0.4")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

    return Handler


def stepping_handler(instance: str) -> type[Quiet]:
    """Serves the known vLLM history of ``instance``, one 15 s history step per scrape, so the
    per-window truth does not depend on wall-clock jitter."""
    state = {"n": 0}

    class Handler(Quiet):
        def do_GET(self) -> None:
            lines = []
            for s in _vllm(state["n"] * STEP):
                labels = {k: v for k, v in s.labels if k not in ("job", "instance")}
                if dict(s.labels)["instance"] != instance:
                    continue
                text = ",".join(f'{k}="{v}"' for k, v in labels.items())
                lines.append(f"{s.name}{{{text}}} {s.value!r}\n")
            state["n"] += 1
            body = "".join(lines).encode()
            self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

    return Handler


@pytest.mark.parametrize(
    ("name", "ranks"),
    [("single", 1), ("dp2", 2), ("dp2-rank0-pinned", 2)],
)
def test_real_captures_parse_into_vllm_units(name: str, ranks: int) -> None:
    samples = parse_exposition((SAMPLES / f"vllm-0.32-cpu-{name}.metrics.txt").read_text()).samples
    assert detect_dialect(s[0] for s in samples) == "vllm"
    snap = Snapshot(0.0, samples)
    ev = evidence_from_snapshots(
        {"h:8000": [snap, Snapshot(5.0, samples)]}, t0=0.0, window_s=5.0, n_windows=1
    )
    assert ev.instance.units == ["h:8000"]
    if ranks == 1:
        assert ev.dp is None
    else:
        assert ev.dp is not None and ev.dp.units == ["h:8000/dp0", "h:8000/dp1"]
    assert ev.instance.aliases["requests"] == "vllm:request_success_total"


def test_pinned_capture_served_over_http_shows_the_hot_rank() -> None:
    with serve(static_handler(PINNED.read_text())) as url:
        ev = load_scrape(
            [url + "/metrics"], duration_s=1.0, interval_s=0.25, window_s=0.5, progress=False
        )
    inst = url.removeprefix("http://")
    assert ev.dp is not None
    rows = {
        r["unit"]: r
        for r in ev.dp.df.filter(
            pl.col("window_start_s") == ev.dp.df["window_start_s"].min()
        ).iter_rows(named=True)
    }
    assert (rows[f"{inst}/dp0"]["running"], rows[f"{inst}/dp0"]["waiting"]) == (8.0, 16.0)
    assert (rows[f"{inst}/dp1"]["running"], rows[f"{inst}/dp1"]["waiting"]) == (0.0, 0.0)
    assert ev.dp.df.height == 4  # 2 windows x 2 ranks
    assert ev.instance.source == "scrape"


def _close(got: Any, want: float) -> bool:
    return isinstance(got, float) and math.isclose(got, want, rel_tol=1e-9, abs_tol=1e-9)


def test_live_scrape_matches_truth_with_reset_and_one_target_down() -> None:
    """Two changing targets plus one dead port: per-window values equal the known truth
    (counter reset on b's rank 1 after history step 40, histogram quantiles interpolated)."""
    n_windows = 12  # 48 history steps (4 a window): past b's restart at step 40
    # The servers step their history once per scrape, so the truth holds only when no round is
    # skipped: a ManualClock runs the rounds back to back at the history's own step.
    with serve(stepping_handler("a:8000")) as url_a, serve(stepping_handler("b:8000")) as url_b:
        dead = f"http://127.0.0.1:{free_port()}/metrics"
        ev = load_scrape(
            [url_a + "/metrics", url_b + "/metrics", dead],
            duration_s=n_windows * WINDOW,
            interval_s=STEP,
            window_s=WINDOW,
            progress=False,
            clock=ManualClock(1000.0),
        )
    names = {url_a.removeprefix("http://"): "a:8000", url_b.removeprefix("http://"): "b:8000"}
    truth = vllm_truth()
    assert any("is down" in n and dead.split("/")[2] in n for n in ev.notes)
    assert not any("rounds were skipped" in n for n in ev.notes), ev.notes
    assert ev.dp is not None
    for frame in (ev.instance, ev.dp):
        assert frame.df.height == n_windows * (2 if frame is ev.instance else 4)
        for row in frame.df.iter_rows(named=True):
            inst = names[row["instance"]]
            unit = inst if row["dp_rank"] is None else f"{inst}/dp{row['dp_rank']}"
            for signal, want in truth[unit].items():
                assert _close(row[signal], want), (
                    unit,
                    row["window_start_s"],
                    signal,
                    row[signal],
                    want,
                )
    assert n_windows <= N_WINDOWS


def test_all_targets_down_is_source_error() -> None:
    urls = [f"http://127.0.0.1:{free_port()}/metrics" for _ in range(2)]
    with pytest.raises(
        SourceError,
        match=r"no /metrics target answered .*all 2 targets: cannot "
        "connect",
    ):
        load_scrape(urls, duration_s=0.2, interval_s=0.1, window_s=0.2, progress=False)


def test_bucket_quantile_interpolates_like_promql() -> None:
    buckets = {0.1: 0.0, 0.5: 60.0, 1.0: 120.0, math.inf: 120.0}
    assert math.isclose(bucket_quantile(0.99, buckets), 0.99)
    assert bucket_quantile(0.99, {0.1: 5.0, math.inf: 10.0}) == 0.1  # +Inf bucket -> last bound
    assert math.isnan(bucket_quantile(0.5, {0.1: 0.0, math.inf: 0.0}))
