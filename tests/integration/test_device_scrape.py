"""Device exporters scraped next to an engine: a real vLLM DP=2 capture and a faithfully written
dcgm-exporter (or npu-exporter) exposition, served over HTTP on one host, join rank by rank."""

from __future__ import annotations

from pathlib import Path

import polars as pl
import pytest

from helpers.online_servers import Quiet, serve
from skewscope.sources.scrape import load_scrape

SAMPLES = Path(__file__).parents[1] / "data" / "samples"


def static(text: str) -> type[Quiet]:
    body = text.encode()

    class Handler(Quiet):
        def do_GET(self) -> None:
            self.send_response(200)
            self.send_header("Content-Type", "text/plain; version=0.0.4")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

    return Handler


@pytest.mark.parametrize(
    ("sample", "utils", "mem", "alias"),
    [
        ("dcgm-exporter", (0.97, 0.12), (38211.0, 38205.0), "DCGM_FI_PROF_GR_ENGINE_ACTIVE"),
        ("npu-exporter", (0.92, 0.38), (29100.0, 28900.0), "npu_chip_info_utilization"),
    ],
)
def test_device_exporter_joins_the_engine_on_its_host(
    sample: str, utils: tuple[float, float], mem: tuple[float, float], alias: str
) -> None:
    engine = (SAMPLES / "vllm-0.32-cpu-dp2-rank0-pinned.metrics.txt").read_text()
    device = (SAMPLES / f"{sample}.faithful.metrics.txt").read_text()
    with serve(static(engine)) as e_url, serve(static(device)) as d_url:
        ev = load_scrape(
            [e_url + "/metrics", d_url + "/metrics"],
            duration_s=1.0,
            interval_s=0.25,
            window_s=0.5,
            progress=False,
        )
    inst = e_url.removeprefix("http://")
    assert ev.dp is not None
    rows = ev.dp.df.group_by("unit").agg(
        pl.col("device_util").mean(), pl.col("device_mem_mb").mean()
    )
    got = {r["unit"]: r for r in rows.iter_rows(named=True)}
    for rank in (0, 1):
        assert got[f"{inst}/dp{rank}"]["device_util"] == pytest.approx(utils[rank])
        assert got[f"{inst}/dp{rank}"]["device_mem_mb"] == pytest.approx(mem[rank])
    assert ev.instance.units == [inst]  # the exporter is not an engine unit
    assert ev.dp.aliases["device_util"] == alias
    assert any("placed by host and position" in n for n in ev.notes)
