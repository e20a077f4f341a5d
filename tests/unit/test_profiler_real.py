"""What real msServiceProfiler output holds that the format tables do not say (issue 26), read
from its exporters (``ms_service_profiler/exporters/``, ``data_source/db_data_source.py``) and
reproduced in fixtures of known truth, one test per class:

1. request.csv: a latency the exporter did not record is written 0 (``fillna(0)``);
2. kvcache.csv ``Free`` rows, one-second ``start_time``, the older action format;
3. datetimes are Asia/Shanghai time, whatever the host's zone;
4. the ``None`` / ``<NA>`` / ``0.0`` cells and absent KV columns of batch.csv and forward.csv.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import polars as pl
import pytest

from helpers.profiler_fixtures import T0, Req, Step, local_dt, write_batch, write_requests
from skewscope.cli import main
from skewscope.sim.engine import simulate
from skewscope.sim.scenario import builtin_scenarios
from skewscope.sim.writers.profiler import write_profiler
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


# --------------------------------------------------------------------------- 2. kvcache.csv
def _csv(path: Path, header: str, rows: list[list[object]]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    text = "\n".join([header] + [",".join("" if v is None else str(v) for v in r) for r in rows])
    path.write_text(text + "\n")
    return path


KV_HEADER = (
    "name,start_time,total_blocks,used_blocks,free_blocks,blocks_allocated,blocks_freed,"
    "kvcache_usage_rate"
)


def test_free_rows_of_kvcache_carry_no_block_counts(tmp_path: Path) -> None:
    # GIVEN KVCacheStatus snapshots (free 900, 850, 800) and, between them, the exporter's
    # Free rows: 0.0 in every block column, a real usage; start_time at one-second resolution
    # (the default --format db,csv,json truncates it), an epoch request.csv beside it
    rows: list[list[object]] = []
    for i, free in enumerate((900, 850, 800)):
        t = W + 2 * i
        rows.append(
            [
                "KVCacheStatus",
                local_dt(t).rsplit(":", 1)[0],
                1000,
                1000 - free,
                free,
                5,
                0,
                (1000 - free) / 1000,
            ]
        )
        rows.append(["Free", local_dt(t + 1).rsplit(":", 1)[0], 0.0, 0.0, 0.0, 0.0, 0.0, 0.12])
    _csv(tmp_path / "i" / "kvcache.csv", KV_HEADER, rows)
    write_requests(tmp_path / "i" / "request.csv", [Req("r", W + 0.5)], "cann2025")
    ev = load_profiler([str(tmp_path / "i")], window_s=10)
    (row,) = ev.instance.df.iter_rows(named=True)
    assert row["free_blocks_min"] == 800  # not 0
    assert row["blocks_allocated"] == 15  # the Free rows' 0.0 are no allocation counts
    assert row["kv_usage"] == pytest.approx((0.1 + 0.15 + 0.2 + 3 * 0.12) / 6)
    assert any("3 row(s) carry 0 in every block column, e.g. Free rows" in n for n in ev.notes)
    # the one-second datetimes are placed by the Asia/Shanghai offset: windows from W
    assert row["window_start_s"] == W


def test_datetimes_only_are_asia_shanghai_time_with_an_override(tmp_path: Path) -> None:
    # GIVEN a folder whose files hold local datetimes only (kvcache.csv, Dec 2025 batch.csv)
    rows = [["KVCacheStatus", local_dt(W + i), 1000, 100, 900, 1, 0, 0.1] for i in range(5)]
    _csv(tmp_path / "i" / "kvcache.csv", KV_HEADER, rows)
    ev = load_profiler([str(tmp_path / "i")], window_s=10)
    # THEN it is read as UTC+8 (the exporter's zone whatever the host's), not as UTC
    assert ev.instance.df["window_start_s"].to_list() == [W]
    assert any("read as UTC+8 h" in n and "profiler_utc_offset_h" in n for n in ev.notes)
    # AND --config [sources] profiler_utc_offset_h sets another zone
    config = tmp_path / "c.toml"
    config.write_text("[sources]\nprofiler_utc_offset_h = 0\n")
    out = tmp_path / "r.json"
    assert (
        main(
            [
                "diagnose",
                str(tmp_path / "i"),
                "--window",
                "10s",
                "--config",
                str(config),
                "--format",
                "json",
                "-o",
                str(out),
            ]
        )
        == 0
    )
    assert json.loads(out.read_text())["start_s"] == W + 8 * 3600


ACTION_HEADER = "rid,name,start_time,device_kvcache_left,kvcache_usage_rate"


def test_action_format_kvcache_usage_only_where_the_exporter_computed_it(tmp_path: Path) -> None:
    # GIVEN vLLM v0's action rows: device_kvcache_left = len(block_tables) (a count), usage
    # computed by the exporter as (max Free count - count) / max Free count on Allocate,
    # AppendSlot and Free rows (below 0 where a count exceeds it), 0 on the others
    counts = [
        ("Allocate", 2),
        ("AppendSlot", 3),
        ("blocks", 17),
        ("Free", 4),
        ("SwapIn", 3),
        ("SwapOut", 2),
        ("Allocate", 5),
    ]
    rows = [
        [
            f"r{i}",
            name,
            local_dt(W + i),
            n,
            (4 - n) / 4 if name in ("Allocate", "AppendSlot", "Free") else 0,
        ]
        for i, (name, n) in enumerate(counts)
    ]
    _csv(tmp_path / "i" / "kvcache.csv", ACTION_HEADER, rows)
    write_requests(tmp_path / "i" / "request.csv", [Req("r", W + 0.5)])
    ev = load_profiler([str(tmp_path / "i")], window_s=10)
    (row,) = ev.instance.df.iter_rows(named=True)
    # usage of Allocate 2, AppendSlot 3, Free 4 (0.5, 0.25, 0); the -0.25 and the others' 0s
    # are no usage; the counts are no free blocks
    assert row["kv_usage"] == pytest.approx(0.25)
    assert row["free_blocks_min"] is None
    assert any("device_kvcache_left counts block tables" in n for n in ev.notes)
    assert any("3 row(s) of other actions" in n for n in ev.notes)
    assert any("kvcache_usage_rate outside 0..100 (first: -0.25" in n for n in ev.notes)


def test_mid_2025_kvcache_with_timestamp_ms_and_no_usage_reads(tmp_path: Path) -> None:
    rows = [["KVCache", f"r{i}", round((W + i) * 1000), "Allocate", 3] for i in range(4)]
    _csv(tmp_path / "i" / "kvcache.csv", "domain,rid,timestamp(ms),name,device_kvcache_left", rows)
    write_requests(tmp_path / "i" / "request.csv", [Req("r", W + 0.5)])
    ev = load_profiler([str(tmp_path / "i")], window_s=10)
    assert "kv_usage" in ev.instance.missing
    assert any("without kvcache_usage_rate" in n for n in ev.notes)


def test_2024_request_header_in_microseconds(tmp_path: Path) -> None:
    header = (
        "http_rid,start_time_httpReq(microsecond),recv_token_size,reply_token_size,"
        "execution_time(microsecond),queue_wait_time(microsecond)"
    )
    rows = [
        [f"{i}", round((W + i) * 1e6), 100, 20, 1_500_000 + i * 1000, 20_000 + i * 1000]
        for i in range(3)
    ]
    _csv(tmp_path / "i" / "request.csv", header, rows)
    ev = load_profiler([str(tmp_path / "i")], window_s=10)
    (row,) = ev.instance.df.iter_rows(named=True)
    assert row["window_start_s"] == W and row["requests"] == 3
    assert row["e2e_mean_ms"] == pytest.approx(1501.0)
    assert row["queue_wait_mean_ms"] == pytest.approx(21.0)
    assert row["ttft_mean_ms"] is None  # no TTFT column in this generation


# --------------------------------------------------------------------------- 3. batch/forward
def test_batch_kv_as_the_exporter_writes_it(tmp_path: Path) -> None:
    # GIVEN batch.csv without DP (<NA>), execution rows with 0.0 KV cells, scheduling rows
    # without a matching KVCacheStatus (all KV 0), and only the KV columns that were non-zero
    # somewhere (no total_blocks, no blocks_freed: the exporter leaves those out)
    header = (
        "name,res_list,start_datetime,end_datetime,during_time(ms),batch_type,prof_id,"
        "batch_size,used_blocks,free_blocks,blocks_allocated,kvcache_usage_rate,"
        "prefill_batch_size,decode_batch_size,dp_rank,start_time(ms),end_time(ms)"
    )
    rows: list[list[object]] = []
    for i in range(6):
        t = W + i
        used, free = (0.0, 0.0) if i % 3 == 2 else (100.0 + i, 900.0 - i)
        usage = 0.0 if i % 3 == 2 else used / 1000
        res = f"\"[{{'rid': 'r{i}', 'iter': 0, 'type': 0}}]\""
        us = round(t * 1e6)
        rows.append(
            [
                "batchFrameworkProcessing",
                res,
                local_dt(t),
                local_dt(t + 0.02),
                20.0,
                "Prefill",
                "ms_service_h-1",
                1,
                used,
                free,
                2.0,
                usage,
                1,
                0,
                "<NA>",
                us,
                us + 20_000,
            ]
        )
        rows.append(
            [
                "modelExec",
                "[]",
                local_dt(t),
                local_dt(t + 0.015),
                15.0,
                "Prefill",
                "ms_service_h-1",
                1,
                0.0,
                0.0,
                0.0,
                0.0,
                1,
                0,
                "<NA>",
                us,
                us + 15_000,
            ]
        )
    _csv(tmp_path / "i" / "batch.csv", header, rows)
    ev = load_profiler([str(tmp_path / "i")], window_s=10)
    assert ev.dp is None  # one process, <NA> ranks: no DP
    (row,) = ev.instance.df.iter_rows(named=True)
    assert row["steps"] == 6 and row["busy_ms"] == pytest.approx(90.0)
    assert row["free_blocks_min"] == 896  # the unmatched rows' 0s are no reading
    assert row["kv_usage"] == pytest.approx((100 + 101 + 103 + 104) / 4 / 1000)
    assert "blocks_freed" in ev.instance.missing
    assert any("2 row(s) carry 0 in every block column" in n for n in ev.notes)


def test_forward_dp_rank_written_none_falls_back_to_the_process(tmp_path: Path) -> None:
    result = simulate(builtin_scenarios()["dp-count"])
    write_profiler(result, tmp_path / "a", "current")
    before = load_profiler([str(tmp_path / "a")], window_s=10)
    for fwd in (tmp_path / "a").rglob("forward.csv"):
        df = pl.read_csv(fwd, infer_schema=False)
        df.with_columns(pl.lit("None").alias("dp_rank")).write_csv(fwd)
    after = load_profiler([str(tmp_path / "a")], window_s=10)
    assert before.dp is not None and after.dp is not None
    cols = ["unit", "window_start_s", "device_util"]
    assert after.dp.df.select(cols).sort(cols[:2]).equals(before.dp.df.select(cols).sort(cols[:2]))
    assert after.dp.df["device_util"].drop_nulls().len() > 0
