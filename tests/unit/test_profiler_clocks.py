"""Clocks of a capture (issue 26): local datetimes that jump an hour while the epoch columns run
on (a DST change), and clocks near 1970 whose epoch unit the numbers' size mis-tells, must not
stretch the window grid over the gap (13 windows of 300 s for 150 s of data, windows of 3e7 s,
every row dropped) and must not give a false verdict."""

from __future__ import annotations

import json
from pathlib import Path

import polars as pl
import pytest
from hypothesis import given
from hypothesis import strategies as st

from helpers.profiler_fixtures import (
    BatchOptions,
    KvSnap,
    Req,
    Step,
    local_dt,
    write_batch,
    write_kvcache,
    write_requests,
)
from skewscope.cli import main
from skewscope.errors import InputError
from skewscope.sources import profiler_clock as pc
from skewscope.sources.profiler import load_profiler

T = 1_743_296_400.0  # 2025-03-30 01:00 UTC: Europe's clocks go from +1 h to +2 h here


def _dst(t: float) -> float:
    return 3600.0 if t < T else 7200.0


def _write_dst_capture(folder: Path) -> None:
    """150 s around the change, written by a host that prints its own zone: request.csv with an
    epoch and a datetime column, kvcache.csv with datetimes only, batch.csv epoch + datetime."""
    folder.mkdir(parents=True)
    times = [T - 75 + i for i in range(150)]
    rows = [
        "http_rid,start_datetime,recv_token_size,reply_token_size,execution_time(ms),"
        "queue_wait_time(ms),first_token_latency(ms),cache_hit_rate,start_time(ms)"
    ]
    rows += [
        f"r{i},{local_dt(t, _dst(t))},100,20,500.0,10.0,50.0,N/A,{t * 1000:.3f}"
        for i, t in enumerate(times)
    ]
    (folder / "request.csv").write_text("\n".join(rows) + "\n")
    kv = [
        "name,start_time,total_blocks,used_blocks,free_blocks,blocks_allocated,blocks_freed,"
        "kvcache_usage_rate"
    ]
    kv += [
        f"KVCacheStatus,{local_dt(t, _dst(t))},1000,{100 + i},{900 - i},1,0,{(100 + i) / 1000}"
        for i, t in enumerate(times)
    ]
    (folder / "kvcache.csv").write_text("\n".join(kv) + "\n")
    write_batch(
        folder / "batch.csv", [Step(t + 0.01, prefill=[f"r{i}"]) for i, t in enumerate(times)]
    )


def test_a_dst_change_does_not_stretch_the_windows(tmp_path: Path) -> None:
    _write_dst_capture(tmp_path / "i")
    ev = load_profiler([str(tmp_path / "i")])
    df = ev.instance.df.sort("window_start_s")
    # THEN the grid covers the 150 s (10 s windows), not 1 h 2.5 min in 300 s windows
    assert ev.instance.window_s == 10 and df.height <= 17
    # AND every window's KV rows are the snapshots of its own seconds (truth: used = 100 + i)
    for row in df.iter_rows(named=True):
        lo, hi = row["window_start_s"], row["window_start_s"] + 10
        used = [100 + i for i in range(150) if lo <= T - 75 + i < hi]
        assert row["free_blocks_min"] == 1000 - max(used)
        assert row["kv_usage"] == pytest.approx(sum(used) / len(used) / 1000)
    assert any(
        "change their UTC offset during the capture (+1.00 h to +2.00 h" in n for n in ev.notes
    )


def test_a_dst_change_gives_no_false_verdict(tmp_path: Path) -> None:
    _write_dst_capture(tmp_path / "a")
    _write_dst_capture(tmp_path / "b")
    out = tmp_path / "r.json"
    assert (
        main(
            [
                "diagnose",
                str(tmp_path / "a"),
                str(tmp_path / "b"),
                "--format",
                "json",
                "-o",
                str(out),
            ]
        )
        == 0
    )
    report = json.loads(out.read_text())
    assert report["window_s"] == 10 and report["verdict"] != "stalled"
    assert not any(u.get("role") == "stalled" for u in report["units"])


E = 1_000_000.0  # 1970-01-12: a device whose clock was never set


def _near_1970(folder: Path, request_generation: str) -> list[Req]:
    reqs = [Req(f"r{i}", E + i, queue_ms=5.0) for i in range(60)]
    write_requests(folder / "request.csv", reqs, request_generation)
    steps = [Step(r.start_s + 0.01, prefill=[r.rid]) for r in reqs]
    write_batch(folder / "batch.csv", steps, BatchOptions(generation="cann2025"))
    write_kvcache(folder / "kvcache.csv", [KvSnap(E + i, 100 + i) for i in range(60)])
    return reqs


@pytest.mark.parametrize("request_generation", ["cann2025", "current"])
def test_a_clock_near_1970_is_read_in_the_units_its_files_agree_on(
    tmp_path: Path, request_generation: str
) -> None:
    # GIVEN request.csv epoch ms near 1970 (1e9: "seconds" by size), batch.csv µs (1e12: "ms"
    # by size; its durations say µs), kvcache.csv datetimes of 1970
    _near_1970(tmp_path / "i", request_generation)
    ev = load_profiler([str(tmp_path / "i")])
    df = ev.instance.df
    # THEN one capture of 60 s in 5 s windows, every request and step counted where it was
    assert ev.instance.window_s == 5 and df.height == 12
    assert df["steps"].sum() == 60 and df["window_start_s"].min() == E
    assert df.sort("window_start_s")["requests"].to_list() == [5.0] * 12
    if request_generation == "cann2025":
        assert any("start_time(ms) read as ms, not s" in n for n in ev.notes)


def test_files_that_no_unit_brings_together_are_one_clean_error(tmp_path: Path) -> None:
    # GIVEN kvcache.csv datetimes of 1970 next to a request.csv of 2025
    folder = tmp_path / "i"
    write_requests(
        folder / "request.csv", [Req(f"r{i}", 1_745_398_333.0 + i) for i in range(5)], "cann2025"
    )
    write_kvcache(folder / "kvcache.csv", [KvSnap(E + i, 100) for i in range(5)])
    with pytest.raises(
        InputError,
        match=r"instance i: its files disagree on the time "
        r"\(kvcache.csv around 1970-01-12T.*request.csv around 2025-04-23",
    ):
        load_profiler([str(folder)])


# --------------------------------------------------------------------------- properties
ZONES = st.integers(-48, 56).map(lambda q: q * 900.0)  # UTC-12 .. UTC+14 in quarter hours


@given(st.floats(1e5, 4e9), st.sampled_from(pc.UNITS), ZONES)
def test_unit_from_a_datetime_beside_it_is_the_true_unit(
    t: float, unit: float, zone: float
) -> None:
    times = pl.Series([t + i * 0.5 for i in range(20)])
    got = pc.unit_from_pair(times / unit, times + zone)
    assert got == unit


@given(st.floats(1e5, 4e9), ZONES, ZONES, st.integers(1, 98))
def test_offset_segments_put_every_local_time_back_on_its_epoch(
    t: float, before: float, after: float, change: int
) -> None:
    epoch = pl.Series([t + i for i in range(100)], dtype=pl.Float64)
    zone = pl.Series([before if i < change else after for i in range(100)])
    local = epoch + zone
    segments = pc.offset_segments(epoch, local)
    if before == after:
        assert segments is None
        return
    assert segments is not None
    back = pc.to_utc(local, segments)
    # a local time that both zones show (the hour repeated when the clock goes back) takes the
    # later offset: only those rows may differ
    first_after = float(local.slice(change).min())  # type: ignore[arg-type]
    ambiguous = (local >= first_after) & (pl.Series(range(100)) < change)
    assert (((back - epoch).abs() < 1e-6) | ambiguous).all()
