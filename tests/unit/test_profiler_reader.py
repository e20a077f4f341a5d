"""Offline profiler source: known-truth fixtures -> Evidence, every header generation and the
bad-input cases (one-line errors naming file, line, column)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import polars as pl
import pytest

from helpers.profiler_fixtures import (
    T0,
    BatchOptions,
    KvSnap,
    Req,
    Step,
    simple_instance,
    write_batch,
    write_kvcache,
    write_requests,
    write_status,
)
from skewscope.errors import InputError, SchemaError
from skewscope.frame import SIGNAL_COLUMNS, Level
from skewscope.sources.profiler import load_profiler


def _row(df: pl.DataFrame, unit: str, window_start: float) -> dict[str, object]:
    rows = df.filter((pl.col("unit") == unit) & (pl.col("window_start_s") == window_start))
    assert rows.height == 1, (unit, window_start, df)
    return rows.row(0, named=True)


def _total(df: pl.DataFrame, col: str, unit: str | None = None) -> float:
    if unit is not None:
        df = df.filter(pl.col("unit") == unit)
    return float(df[col].sum())


# --------------------------------------------------------------------------- known truth
def test_per_window_numbers_equal_hand_computed_truth(tmp_path: Path) -> None:
    # GIVEN 35 requests, one a second from T0, with varied latencies (window 10 s)
    rng = np.random.default_rng(7)
    reqs = [
        Req(
            f"q{i}",
            T0 + i,
            prompt=int(rng.integers(10, 900)),
            output=int(rng.integers(1, 300)),
            e2e_ms=float(rng.uniform(50, 5000)),
            queue_ms=float(rng.uniform(0, 300)),
            ttft_ms=float(rng.uniform(10, 900)),
        )
        for i in range(35)
    ]
    write_requests(tmp_path / "a" / "request.csv", reqs)
    write_requests(tmp_path / "b" / "request.csv", reqs[:5])
    # WHEN loaded with a 10 s window
    ev = load_profiler([str(tmp_path)], window_s=10)
    df = ev.instance.df
    # THEN every window of instance a equals the numbers computed from the rows
    first = np.floor(T0 / 10) * 10
    for w in np.arange(first, T0 + 35, 10):
        mine = [r for r in reqs if w <= r.start_s < w + 10]
        got = _row(df, "a", float(w))
        assert got["requests"] == len(mine)
        assert got["prompt_tokens"] == sum(r.prompt for r in mine)
        assert got["generation_tokens"] == sum(r.output for r in mine)
        assert got["e2e_p99_ms"] == pytest.approx(np.percentile([r.e2e_ms for r in mine], 99))
        assert got["ttft_p99_ms"] == pytest.approx(np.percentile([r.ttft_ms for r in mine], 99))
        assert got["queue_wait_p95_ms"] == pytest.approx(
            np.percentile([r.queue_ms for r in mine], 95)
        )
        assert got["queue_wait_mean_ms"] == pytest.approx(np.mean([r.queue_ms for r in mine]))
    # AND instance b is on the same grid, with 0 requests (not null) where it had none
    assert sorted(df.filter(pl.col("unit") == "b")["window_start_s"]) == sorted(
        df.filter(pl.col("unit") == "a")["window_start_s"]
    )
    assert df.filter(pl.col("unit") == "b")["requests"].null_count() == 0
    assert _total(df, "requests", "b") == 5
    # AND signals without a source are null, never 0
    assert df["steps"].null_count() == df.height
    assert df["kv_usage"].null_count() == df.height
    assert ev.dp is None
    assert any("b: batch.csv missing" in n for n in ev.notes)


def test_dp_level_steps_busy_kv_and_placement(tmp_path: Path) -> None:
    reqs, steps = simple_instance(tmp_path / "inst-0", 20, ranks=2)
    ev = load_profiler([f"x={tmp_path / 'inst-0'}"], window_s=5)
    assert ev.instance.units == ["x"]
    assert ev.dp is not None and ev.dp.level is Level.DP
    assert ev.dp.units == ["x/dp0", "x/dp1"]
    assert ev.dp.placed_share == 1.0
    dp = ev.dp.df
    assert _total(dp, "requests", "x/dp0") == 10
    assert _total(dp, "prompt_tokens", "x/dp1") == sum(r.prompt for r in reqs[1::2])
    assert _total(dp, "steps") == len(steps)  # one scheduling row per step, counted once
    assert _total(dp, "busy_ms") == pytest.approx(15.0 * len(steps))  # execution rows
    assert _total(dp, "scheduled_tokens") == sum(s.scheduled_tokens for s in steps)
    assert dp["kv_usage"].drop_nulls().to_list() == pytest.approx([0.1] * dp["kv_usage"].count())
    # instance level computed directly from the instance's rows
    inst = ev.instance.df
    assert _total(inst, "requests") == 20
    assert _total(inst, "blocks_allocated") == 5 * len(steps)


def test_request_percentiles_at_instance_level_are_not_rolled_up_from_dp(tmp_path: Path) -> None:
    simple_instance(tmp_path / "i", 20, ranks=2)
    ev = load_profiler([str(tmp_path / "i")], window_s=600)
    (row,) = ev.instance.df.filter(pl.col("requests") > 0).iter_rows(named=True)
    assert row["e2e_p99_ms"] == pytest.approx(np.percentile([100.0 + i for i in range(20)], 99))


# --------------------------------------------------------------------------- header generations
@pytest.mark.parametrize("req_gen", ["current", "dec2025", "cann2025"])
@pytest.mark.parametrize("batch_gen", ["current", "dec2025", "cann2025"])
def test_header_generations(tmp_path: Path, req_gen: str, batch_gen: str) -> None:
    opts = BatchOptions(generation=batch_gen)
    _reqs, steps = simple_instance(
        tmp_path / "i", 12, ranks=2, opts=opts, request_generation=req_gen
    )
    ev = load_profiler([str(tmp_path / "i")], window_s=5)
    inst = ev.instance.df
    assert _total(inst, "requests") == 12
    assert _total(inst, "steps") == len(steps)
    assert _total(inst, "scheduled_tokens") == sum(s.scheduled_tokens for s in steps)
    assert _total(inst, "busy_ms") == pytest.approx(15.0 * len(steps))
    # times line up across files (datetimes are local time, epoch columns UTC)
    assert inst["window_start_s"].min() == np.floor(T0 / 5) * 5
    if batch_gen == "cann2025":  # no dp_rank column: ranks from the two prof_ids
        assert ev.dp is not None and ev.dp.units == ["i/dp0", "i/dp1"]
        assert ev.instance.df["kv_usage"].null_count() == inst.height
    else:
        assert ev.dp is not None
        assert _total(ev.dp.df, "requests", "i/dp1") == 6


def test_mindie_variant(tmp_path: Path) -> None:
    # GIVEN MindIE names, no KV columns in batch.csv, res_list without 'type', MindIE kvcache.csv
    opts = BatchOptions(
        generation="mindie", sched_name="BatchSchedule", exec_name="Execute", typed=False
    )
    _, steps = simple_instance(tmp_path / "m", 10, ranks=1, opts=opts)
    write_kvcache(
        tmp_path / "m" / "kvcache.csv", [KvSnap(T0 + i, 200 + 10 * i) for i in range(10)], "mindie"
    )
    ev = load_profiler([str(tmp_path / "m")], window_s=600)
    (row,) = ev.instance.df.iter_rows(named=True)
    assert row["steps"] == len(steps)
    assert row["busy_ms"] == pytest.approx(15.0 * len(steps))
    assert row["kv_usage"] == pytest.approx(np.mean([(200 + 10 * i) / 1000 for i in range(10)]))
    assert row["kv_usage_max"] == pytest.approx(0.29)
    # device_kvcache_left is no free-block count (test_profiler_real: the action format)
    assert row["free_blocks_min"] is None
    assert row["blocks_allocated"] is None  # MindIE has no allocation counts anywhere
    assert "free_blocks_min" not in ev.instance.aliases


def test_running_from_res_list_iter_when_no_decode_batch_size(tmp_path: Path) -> None:
    steps = [Step(T0, prefill=["a", "b"], decode=["c"]), Step(T0 + 1, decode=["a", "b", "c"])]
    write_batch(
        tmp_path / "i" / "batch.csv", steps, BatchOptions(generation="cann2025", typed=False)
    )
    df = pl.read_csv(tmp_path / "i" / "batch.csv", infer_schema=False)
    df.drop("Decode_batch_size").write_csv(tmp_path / "i" / "batch.csv")
    ev = load_profiler([str(tmp_path / "i")], window_s=600)
    assert ev.instance.df["running"][0] == pytest.approx(2.0)  # (1 + 3) / 2
    assert "res_list" in ev.instance.aliases["running"]


def test_running_fallback_counts_a_rid_holding_rid_text_once(tmp_path: Path) -> None:
    # a rid whose text reads like an entry key is one entry (it was counted twice)
    odd = "x'rid': y"
    steps = [Step(T0, prefill=["a"], decode=[odd]), Step(T0 + 1, decode=["a", odd, "c"])]
    write_batch(
        tmp_path / "i" / "batch.csv", steps, BatchOptions(generation="cann2025", typed=False)
    )
    df = pl.read_csv(tmp_path / "i" / "batch.csv", infer_schema=False)
    assert odd in df["res_list"][0]
    df.drop("Decode_batch_size").write_csv(tmp_path / "i" / "batch.csv")
    ev = load_profiler([str(tmp_path / "i")], window_s=600)
    assert ev.instance.df["running"][0] == pytest.approx(2.0)  # (1 + 3) / 2


@pytest.mark.parametrize("unit", ["us", "ms"])
def test_epoch_unit_detected_by_magnitude(tmp_path: Path, unit: str) -> None:
    opts = BatchOptions(generation="cann2025", epoch_unit=unit)
    simple_instance(tmp_path / "i", 10, ranks=1, opts=opts)
    ev = load_profiler([str(tmp_path / "i")], window_s=5)
    df = ev.instance.df
    assert df["window_start_s"].min() == np.floor(T0 / 5) * 5
    assert df["window_start_s"].max() < T0 + 15
    assert _total(df, "steps") == 20


def test_colon_datetimes_only_are_aligned_with_learnt_timezone(tmp_path: Path) -> None:
    # Dec 2025 batch.csv has only local datetimes; request.csv (current) has both -> offset
    simple_instance(tmp_path / "i", 10, ranks=2, opts=BatchOptions(generation="dec2025"))
    ev = load_profiler([str(tmp_path / "i")], window_s=5)
    assert ev.dp is not None
    first = ev.dp.df.filter(pl.col("steps") > 0)["window_start_s"].min()
    assert first == np.floor(T0 / 5) * 5
    assert not any("guessed" in n for n in ev.notes)


def test_timezone_guessed_when_no_file_holds_both(tmp_path: Path) -> None:
    simple_instance(
        tmp_path / "i",
        10,
        ranks=2,
        opts=BatchOptions(generation="dec2025"),
        request_generation="cann2025",
    )
    ev = load_profiler([str(tmp_path / "i")], window_s=5)
    assert any("guessed offset of +8.00 h" in n for n in ev.notes)
    assert ev.instance.df["window_start_s"].max() < T0 + 15


# --------------------------------------------------------------------------- DP identity
@pytest.mark.parametrize("cell", ["empty", "<NA>"])
def test_missing_dp_rank_falls_back_to_sorted_prof_ids(tmp_path: Path, cell: str) -> None:
    steps = [
        Step(T0 + i, f"ms_service_host-{pid}", None, prefill=[f"r{i}"])
        for i, pid in enumerate([300, 200, 300, 200, 300])
    ]
    write_batch(tmp_path / "i" / "batch.csv", steps, BatchOptions(rank_cell=cell))
    write_requests(tmp_path / "i" / "request.csv", [Req(f"r{i}", T0 + i) for i in range(5)])
    ev = load_profiler([str(tmp_path / "i")], window_s=600)
    assert ev.dp is not None
    dp = ev.dp.df
    assert _total(dp, "steps", "i/dp0") == 2  # host-200 sorts first
    assert _total(dp, "requests", "i/dp1") == 3


def test_single_process_without_rank_is_no_dp(tmp_path: Path) -> None:
    simple_instance(tmp_path / "i", 6, ranks=1, opts=BatchOptions(rank_cell="<NA>"))
    ev = load_profiler([str(tmp_path / "i")])
    assert ev.dp is None
    assert ev.instance.units == ["i"]  # one unit still loads; the analysis decides


@pytest.mark.parametrize("suffix", [False, True])
def test_res_list_join_and_placed_share(tmp_path: Path, suffix: bool) -> None:
    opts = BatchOptions(rid_suffix=suffix)
    reqs, _ = simple_instance(tmp_path / "i", 20, ranks=2, opts=opts)
    # one request whose rid never appears in res_list
    reqs[7].rid = "ghost"
    write_requests(tmp_path / "i" / "request.csv", reqs)
    ev = load_profiler([str(tmp_path / "i")], window_s=600)
    assert ev.dp is not None
    assert ev.dp.placed_share == pytest.approx(0.95)
    assert any("1 of 20 requests (5.0%) could not be placed" in n for n in ev.notes)
    assert _total(ev.dp.df, "requests") == 19
    assert _total(ev.instance.df, "requests") == 20


def test_http_rid_with_suffix_matches_plain_res_list_rid(tmp_path: Path) -> None:
    reqs, _ = simple_instance(tmp_path / "i", 4, ranks=2)
    for r in reqs:
        r.rid += "-0badf00d"
    write_requests(tmp_path / "i" / "request.csv", reqs)
    ev = load_profiler([str(tmp_path / "i")], window_s=600)
    assert ev.dp is not None and ev.dp.placed_share == 1.0


# --------------------------------------------------------------------------- dirty cells
def test_na_cells_and_float_integers(tmp_path: Path) -> None:
    path = tmp_path / "i" / "request.csv"
    write_requests(path, [Req("a", T0, ttft_ms=0.0), Req("b", T0 + 1, ttft_ms=40.0)])
    text = path.read_text().replace(",500.0,10.0,", ",500.0,N/A,", 1)
    path.write_text(text)
    ev = load_profiler([str(tmp_path / "i")], window_s=600)
    (row,) = ev.instance.df.iter_rows(named=True)
    assert row["generation_tokens"] == 40  # written as 20.0
    assert row["ttft_mean_ms"] == 40.0  # 0 = not recorded
    assert row["queue_wait_mean_ms"] == 10.0  # N/A skipped


def test_waiting_from_request_status_mapped_to_ranks(tmp_path: Path) -> None:
    simple_instance(tmp_path / "i", 10, ranks=2)
    write_status(
        tmp_path / "i" / "request_status.csv",
        [(T0, 100, 4), (T0 + 1, 100, 6), (T0, 101, 1), (T0 + 7, 999, 3)],
    )
    ev = load_profiler([str(tmp_path / "i")], window_s=5)
    assert ev.dp is not None
    w0 = float(np.floor(T0 / 5) * 5)
    assert _row(ev.dp.df, "i/dp0", w0)["waiting"] == 5.0
    assert _row(ev.dp.df, "i/dp1", w0)["waiting"] == 1.0
    assert _row(ev.instance.df, "i", w0)["waiting"] == 6.0
    assert _row(ev.instance.df, "i", w0 + 5)["waiting"] == 6.0 + 1.0  # carried forward
    assert _row(ev.instance.df, "i", w0 + 10)["waiting"] == 6.0 + 1.0 + 3.0


# --------------------------------------------------------------------------- bad input
def test_missing_folder(tmp_path: Path) -> None:
    with pytest.raises(InputError, match=r"nope: no such folder"):
        load_profiler([str(tmp_path / "nope")])


def test_folder_without_profiler_csv(tmp_path: Path) -> None:
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "notes.txt").write_text("x")
    with pytest.raises(InputError, match=r"no msServiceProfiler CSV found"):
        load_profiler([str(tmp_path)])


def test_unknown_header(tmp_path: Path) -> None:
    (tmp_path / "request.csv").write_text("foo,bar\n1,2\n")
    with pytest.raises(SchemaError, match=r"request.csv: line 1: not a msServiceProfiler"):
        load_profiler([str(tmp_path)])


def test_partial_header_names_missing_columns(tmp_path: Path) -> None:
    (tmp_path / "request.csv").write_text("http_rid,recv_token_size,start_time(ms)\na,1,2\n")
    with pytest.raises(SchemaError) as err:
        load_profiler([str(tmp_path)])
    msg = str(err.value)
    assert "reply_token_size" in msg and "execution_time(ms)" in msg and "\n" not in msg


def test_non_numeric_cell_names_file_line_column_value(tmp_path: Path) -> None:
    simple_instance(tmp_path, 5, ranks=1)
    path = tmp_path / "batch.csv"
    lines = path.read_text().splitlines()
    lines[3] = lines[3].replace(",1000,100,900,", ",1000,lots,900,", 1)
    path.write_text("\n".join(lines) + "\n")
    with pytest.raises(SchemaError) as err:
        load_profiler([str(tmp_path)])
    msg = str(err.value)
    assert "batch.csv: line 4, column 'used_blocks': 'lots' is not a number" in msg


def test_bad_datetime_cell(tmp_path: Path) -> None:
    simple_instance(tmp_path, 5, ranks=1, opts=BatchOptions(generation="dec2025"))
    path = tmp_path / "batch.csv"
    lines = path.read_text().splitlines()
    lines[5] = lines[5].replace("2025-04-23", "yesterday", 1)  # the start_time cell
    path.write_text("\n".join(lines) + "\n")
    with pytest.raises(SchemaError, match=r"line 6, column 'start_time': .* not a datetime"):
        load_profiler([str(tmp_path)])


def test_truncated_last_line_is_dropped_with_note(tmp_path: Path) -> None:
    _, steps = simple_instance(tmp_path, 6, ranks=1)
    path = tmp_path / "batch.csv"
    text = path.read_text()
    path.write_text(text + "batchFrameworkProcessing,\"[{'rid': 'r9', 'it")
    ev = load_profiler([str(tmp_path)], window_s=600)
    assert _total(ev.instance.df, "steps") == len(steps)
    assert any("last line" in n and "truncated" in n for n in ev.notes)


def test_empty_file_is_noted_and_others_still_load(tmp_path: Path) -> None:
    simple_instance(tmp_path, 6, ranks=1)
    (tmp_path / "kvcache.csv").write_text("")
    ev = load_profiler([str(tmp_path)], window_s=600)
    assert any("kvcache.csv is empty" in n for n in ev.notes)
    assert _total(ev.instance.df, "requests") == 6


def test_header_only_request_csv_means_zero_requests(tmp_path: Path) -> None:
    simple_instance(tmp_path / "a", 6, ranks=1)
    write_requests(tmp_path / "b" / "request.csv", [])
    ev = load_profiler([str(tmp_path)], window_s=600)
    assert _total(ev.instance.df, "requests", "b") == 0
    assert ev.instance.df.filter(pl.col("unit") == "b")["requests"].null_count() == 0
    assert any("b: request.csv: no data rows" in n for n in ev.notes)


def test_only_request_csv(tmp_path: Path) -> None:
    write_requests(tmp_path / "request.csv", [Req(f"r{i}", T0 + i) for i in range(4)])
    ev = load_profiler([str(tmp_path)])
    df = ev.instance.df
    assert _total(df, "requests") == 4
    assert df["steps"].null_count() == df.height
    assert any("batch.csv missing" in n for n in ev.notes)
    assert any("no KV data" in n for n in ev.notes)
    assert set(ev.instance.missing) >= {"steps", "kv_usage", "busy_ms", "waiting"}


def test_no_rows_anywhere_is_an_input_error(tmp_path: Path) -> None:
    write_requests(tmp_path / "request.csv", [])
    with pytest.raises(InputError, match="no data rows in any profiler file"):
        load_profiler([str(tmp_path)])


def test_duplicate_instance_names(tmp_path: Path) -> None:
    simple_instance(tmp_path / "a", 2, ranks=1)
    with pytest.raises(InputError, match="used by both"):
        load_profiler([str(tmp_path / "a"), f"a={tmp_path / 'a'}"])


def test_nested_output_folder_and_default_window(tmp_path: Path) -> None:
    simple_instance(tmp_path / "inst-7" / "0423-0852", 30, ranks=1, period_s=10)
    ev = load_profiler([str(tmp_path / "inst-7")])
    assert ev.instance.units == ["inst-7"]
    assert ev.instance.window_s == 15.0  # WINDOWS.choose(290 s): 24 windows, at least 5 s -> 15
    assert list(ev.instance.df.columns)[:4] == ["window_start_s", "unit", "instance", "dp_rank"]
    assert set(SIGNAL_COLUMNS) <= set(ev.instance.df.columns)


# --------------------------------------------------------------------------- simulator writer
@pytest.mark.parametrize("generation", ["current", "dec2025", "cann2025", "mindie"])
def test_end_to_end_over_simulator_writer(tmp_path: Path, generation: str) -> None:
    """The reader and the simulator's writer, built from the same spec, agree with the truth."""
    from skewscope.sim.engine import simulate
    from skewscope.sim.scenario import load_scenario
    from skewscope.sim.writers.profiler import write_profiler

    res = simulate(load_scenario("dp-count"), duration_s=40)
    write_profiler(res, tmp_path, generation, rid_suffix=True)
    ev = load_profiler([str(tmp_path)])
    assert ev.instance.units == ["inst-0"]
    assert ev.dp is not None and ev.dp.units == [f"inst-0/dp{r}" for r in range(4)]
    truth_req = res.requests.filter(pl.col("first_scheduled_s").is_not_null())
    got = ev.dp.df.group_by("dp_rank").agg(pl.col("requests", "steps").sum()).sort("dp_rank")
    want_req = truth_req.group_by("dp_rank").len().sort("dp_rank")["len"].to_list()
    want_steps = res.steps.group_by("dp_rank").len().sort("dp_rank")["len"].to_list()
    assert got["requests"].to_list() == want_req
    assert got["steps"].to_list() == want_steps
    assert _total(ev.instance.df, "requests") == res.requests.height
    assert ev.dp.placed_share == pytest.approx(truth_req.height / res.requests.height)
    assert _total(ev.instance.df, "prompt_tokens") == res.requests["input_tokens"].sum()


def test_instance_running_is_the_sum_of_its_ranks(tmp_path: Path) -> None:
    """Running requests add up across DP ranks, like waiting and request counts do."""
    example = Path(__file__).parents[1].parent / "examples" / "cluster-skew"
    ev = load_profiler([str(example)])
    assert ev.dp is not None
    per_rank = ev.dp.df.group_by("instance", "window_start_s").agg(pl.col("running").sum())
    joined = ev.instance.df.join(per_rank, on=["instance", "window_start_s"], suffix="_dp")
    assert joined.height == ev.instance.df.height
    diff = (joined["running"] - joined["running_dp"]).abs().max()
    assert diff is not None and diff < 1e-9  # type: ignore[operator]


def test_double_quoted_rid_past_the_first_rows_is_read_whole(tmp_path: Path) -> None:
    """A rid holding a ``'`` is written in double quotes and can hold text that reads like
    another rid's prefill. Past the first rows, the prefill matches batch.csv's row pass
    carries do not read that row whole, so the rids come from the prefill pass, which does:
    ``y`` is placed where its own prefill is (rank 0), not in the quoted rid (rank 1)."""
    from skewscope.sources.profiler_instance import load_instance
    from skewscope.sources.profiler_layout import discover_all
    from skewscope.sources.profiler_read import FULL_PREFIX_ROWS

    trick = "x', 'rid': 'y', 'iter': 0, 'z"
    steps = []
    for i in range(2100):  # 4,200 rows with the execution rows
        rank = i % 2
        prefill = ["y"] if i == 2090 else [f"r{i}"] if i < 40 else []
        steps.append(
            Step(
                T0 + i * 0.01,
                prof_id=f"ms_service_host-{100 + rank}",
                dp_rank=rank,
                prefill=prefill,
                decode=[trick] if i == 2085 else [],
            )
        )
    assert FULL_PREFIX_ROWS <= 2 * 2085  # the quoted row is past the rows read whole anyway
    folder = tmp_path / "i"
    write_batch(folder / "batch.csv", steps)
    write_requests(
        folder / "request.csv",
        [Req("y", T0 + 20.9)] + [Req(f"r{i}", T0 + i * 0.01) for i in range(40)],
    )
    inst = load_instance(discover_all([str(folder)])[0])
    assert inst.requests is not None
    ranks = dict(zip(inst.requests["rid"], inst.requests["dp_rank"], strict=True))
    assert ranks["y"] == 0
    assert [ranks[f"r{i}"] for i in range(4)] == [0, 1, 0, 1]


def test_request_without_a_prefill_past_the_first_rows_is_searched(tmp_path: Path) -> None:
    """A served request whose rid shows no prefill entry past the first rows (only decode
    entries) is not placed by the prefills the row pass carries: the rows holding its rid are
    searched once the row table is released, and it is placed where it first appears."""
    from skewscope.sources.profiler_instance import load_instance
    from skewscope.sources.profiler_layout import discover_all
    from skewscope.sources.profiler_read import FULL_PREFIX_ROWS

    steps = []
    for i in range(2100):  # 4,200 rows with the execution rows
        rank = i % 2
        steps.append(
            Step(
                T0 + i * 0.01,
                prof_id=f"ms_service_host-{100 + rank}",
                dp_rank=rank,
                prefill=[f"r{i}"] if i < 40 else [],
                decode=["late"] if i in (2095, 2098) else [],
            )
        )
    assert FULL_PREFIX_ROWS <= 2 * 2095  # its rows are past the rows read whole anyway
    folder = tmp_path / "i"
    write_batch(folder / "batch.csv", steps)
    reqs = [Req("late", T0 + 20.9), Req("never", T0 + 1.0)]
    write_requests(folder / "request.csv", reqs + [Req(f"r{i}", T0 + i * 0.01) for i in range(40)])
    inst = load_instance(discover_all([str(folder)])[0])
    assert inst.requests is not None
    ranks = dict(zip(inst.requests["rid"], inst.requests["dp_rank"], strict=True))
    assert (ranks["late"], ranks["never"]) == (1, None)
    assert [ranks[f"r{i}"] for i in range(4)] == [0, 1, 0, 1]
