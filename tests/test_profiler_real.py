"""What real msServiceProfiler output holds that the format tables do not say (issue 26), read
from its exporters (``ms_service_profiler/exporters/``, ``data_source/db_data_source.py``) and
reproduced in fixtures of known truth, one test per class:

1. request.csv: a latency the exporter did not record is written 0 (``fillna(0)``);
2. kvcache.csv ``Free`` rows, one-second ``start_time``, the older action format;
3. datetimes are Asia/Shanghai time, whatever the host's zone;
4. the ``None`` / ``<NA>`` / ``0.0`` cells and absent KV columns of batch.csv and forward.csv.
"""

from __future__ import annotations

import math
from pathlib import Path

import polars as pl

from profiler_fixtures import T0, Req, Step, write_batch, write_requests
from skewscope.sources.profiler import load_profiler

W = math.floor(T0 / 10) * 10  # a window edge


def _row(df: pl.DataFrame, unit: str, window_start: float) -> dict[str, object]:
    rows = df.filter((pl.col("unit") == unit) & (pl.col("window_start_s") == window_start))
    assert rows.height == 1, (unit, window_start, df)
    return rows.row(0, named=True)


# --------------------------------------------------------------------------- 1. request.csv
def test_never_scheduled_requests_wait_at_least_until_the_capture_ends(tmp_path: Path) -> None:
    # GIVEN two scheduled requests, one finished without any latency recorded, and three that
    # never left the queue (queue 0, TTFT 0, no execution_time: what the exporter writes)
    reqs = [
        Req("s1", W + 1, queue_ms=100.0, ttft_ms=200.0),
        Req("s2", W + 2, queue_ms=0.0, ttft_ms=40.0),  # scheduled at once: a real 0
        Req("f1", W + 12, queue_ms=0.0, ttft_ms=0.0, e2e_ms=900.0),
        *(Req(f"n{i}", W + 21 + i, queue_ms=0.0, ttft_ms=0.0, e2e_ms=None) for i in range(3)),
    ]
    write_requests(tmp_path / "i" / "request.csv", reqs)
    # the engine stepped until W + 35: the capture's last event
    steps = [Step(W + t, prefill=["s1"] if t == 1 else ()) for t in (1, 2, 35)]
    write_batch(tmp_path / "i" / "batch.csv", steps)
    ev = load_profiler([str(tmp_path / "i")], window_s=10)
    df = ev.instance.df
    first = _row(df, "i", W)
    assert first["queue_wait_mean_ms"] == 50.0 and first["ttft_mean_ms"] == 120.0
    # the finished request's wait and TTFT are unknown, not 0
    assert _row(df, "i", W + 10)["queue_wait_mean_ms"] is None
    assert _row(df, "i", W + 10)["ttft_mean_ms"] is None
    # the waiting ones waited at least from arrival to W + 35: 14, 13, 12 s
    late = _row(df, "i", W + 20)
    assert late["queue_wait_mean_ms"] == 13_000.0 and late["ttft_mean_ms"] is None
    assert any("3 request(s) never scheduled" in n and "lower bound" in n for n in ev.notes)
    assert any("1 finished request(s)" in n for n in ev.notes)
