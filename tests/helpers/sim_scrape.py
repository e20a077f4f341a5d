"""What scraping every simulated instance's /metrics would collect, without a server or a wall
clock: the simulator's exposition text at each time, parsed by the scrape path's parser."""

from __future__ import annotations

import numpy as np

from skewscope.sim.records import SimResult
from skewscope.sim.writers.exposition import ClusterModel, render_text
from skewscope.sources.collect import Snapshot
from skewscope.sources.exposition import parse_exposition
from skewscope.sources.scrape import ScrapeRun


def scrape_run(result: SimResult, dialect: str, every_s: float, window_s: float) -> ScrapeRun:
    """A scrape every ``every_s`` over the run, reduced in ``window_s`` windows."""
    model = ClusterModel(result, dialect)
    n = int((result.end_s - result.start_s) // every_s)
    times = result.start_s + every_s * np.arange(n + 1)
    snaps: dict[str, list[Snapshot]] = {}
    for k, inst in enumerate(result.instances):
        fams = model.instances[inst].families(times)  # every time at once, then one text each
        snaps[f"http://10.0.0.{k + 1}:8000/metrics"] = [
            Snapshot(j * every_s, parse_exposition(render_text(fams, j)).samples)
            for j in range(n + 1)
        ]
    return ScrapeRun(snaps, result.start_s, window_s, int(n * every_s // window_s), ())
