"""The simulator's msServiceProfiler writer produces what the real tool writes.

Header strings below are copied from /work/shared/reference/profiler-formats.md on purpose (not
imported from the writer), so a drift in the writer's constants fails here.
"""

from __future__ import annotations

import ast
import json
import re
from datetime import UTC, datetime, timedelta, timezone
from pathlib import Path

import polars as pl
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from helpers.sim_fixtures import make_result
from skewscope.sim.records import SimResult
from skewscope.sim.writers.profiler import format_datetimes, res_list_frame, write_profiler
from skewscope.sim.writers.truth import write_truth

REQUEST_CURRENT = (
    "http_rid,start_datetime,recv_token_size,reply_token_size,execution_time(ms),"
    "queue_wait_time(ms),first_token_latency(ms),cache_hit_rate,start_time(ms)"
)
REQUEST_DEC2025 = (
    "http_rid,start_time,start_datetime,recv_token_size,reply_token_size,"
    "execution_time(ms),queue_wait_time(ms),first_token_latency(ms),cache_hit_rate"
)
REQUEST_CANN2025 = (
    "http_rid,start_time(ms),recv_token_size,reply_token_size,execution_time(ms),"
    "queue_wait_time(ms),first_token_latency(ms),cache_hit_rate"
)
BATCH_CURRENT = (
    "name,res_list,start_datetime,end_datetime,during_time(ms),batch_type,prof_id,batch_size,"
    "total_blocks,used_blocks,free_blocks,blocks_allocated,blocks_freed,kvcache_usage_rate,"
    "prefill_batch_size,decode_batch_size,prefill_scheduled_tokens,decode_scheduled_tokens,"
    "total_scheduled_tokens,dp_rank,start_time(ms),end_time(ms)"
)
BATCH_DEC2025 = (
    BATCH_CURRENT.replace("start_datetime", "start_time", 1)
    .replace("end_datetime", "end_time", 1)
    .replace(",batch_size,", ",total_batch_size,", 1)
)
BATCH_CANN2025 = (
    "name,res_list,start_time(ms),end_time(ms),during_time(ms),batch_type,prof_id,"
    "total_batch_size,Prefill_batch_size,Decode_batch_size,Prefill_scheduled_tokens,"
    "Decode_scheduled_tokens,total_scheduled_tokens"
)
BATCH_MINDIE = BATCH_CURRENT.replace(
    "total_blocks,used_blocks,free_blocks,blocks_allocated,blocks_freed,kvcache_usage_rate,", ""
)
KV_VLLM = (
    "name,start_time,total_blocks,used_blocks,free_blocks,blocks_allocated,blocks_freed,"
    "kvcache_usage_rate"
)
KV_MINDIE = "rid,name,start_time,device_kvcache_left,kvcache_usage_rate"
FORWARD = (
    "name,relative_start_time(ms),start_datetime,end_datetime,during_time(ms),"
    "bubble_time(ms),batch_size,batch_type,forward_iter,dp_rank,prof_id,hostname,"
    "start_time(ms),end_time(ms)"
)
# exporter_forward.py generations (Cztk5380/msserviceprofiler): Dec 2025 renames the datetimes
# to start_time/end_time and drops the epoch columns; CANN 2025 has the epoch ms columns only
FORWARD_DEC2025 = (
    "name,relative_start_time(ms),start_time,end_time,during_time(ms),"
    "bubble_time(ms),batch_size,batch_type,forward_iter,dp_rank,prof_id,hostname"
)
FORWARD_CANN2025 = FORWARD_DEC2025.replace("start_time,end_time", "start_time(ms),end_time(ms)")
REQUEST_STATUS = (
    "hostuid,pid,start_datetime,relative_timestamp(ms),waiting,running,swapped,timestamp(ms)"
)

EXPECTED = {
    "current": {
        "request.csv": REQUEST_CURRENT,
        "batch.csv": BATCH_CURRENT,
        "kvcache.csv": KV_VLLM,
        "forward.csv": FORWARD,
        "request_status.csv": REQUEST_STATUS,
    },
    "dec2025": {
        "request.csv": REQUEST_DEC2025,
        "batch.csv": BATCH_DEC2025,
        "kvcache.csv": KV_VLLM,
        "forward.csv": FORWARD_DEC2025,
    },
    "cann2025": {
        "request.csv": REQUEST_CANN2025,
        "batch.csv": BATCH_CANN2025,
        "kvcache.csv": KV_VLLM,
        "forward.csv": FORWARD_CANN2025,
    },
    "mindie": {
        "request.csv": REQUEST_CURRENT,
        "batch.csv": BATCH_MINDIE,
        "kvcache.csv": KV_MINDIE,
        "forward.csv": FORWARD,
    },
}
COLON_DT = re.compile(r"^\d{4}-\d{2}-\d{2} \d{2}:\d{2}:\d{2}:\d{6}$")
SUFFIX = re.compile(r"-[a-f0-9]{8}$")
SHANGHAI = timezone(timedelta(hours=8))


@pytest.fixture(scope="module")
def result() -> SimResult:
    return make_result()


@pytest.fixture(scope="module")
def folders(result: SimResult, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    base = tmp_path_factory.mktemp("prof")
    out = {}
    for gen in EXPECTED:
        write_profiler(result, base / gen, gen)
        out[gen] = base / gen
    write_profiler(result, base / "suffixed", "current", rid_suffix=True)
    out["suffixed"] = base / "suffixed"
    return out


def _read(path: Path) -> pl.DataFrame:
    return pl.read_csv(path, infer_schema=False)  # all text, as a careful reader would


def _rids(res_list: str) -> list[str]:
    return [d["rid"] for d in ast.literal_eval(res_list)]


@pytest.mark.parametrize("gen", list(EXPECTED))
def test_exact_header_lines(folders: dict[str, Path], result: SimResult, gen: str) -> None:
    for inst in result.instances:
        files = sorted(p.name for p in (folders[gen] / inst).iterdir())
        assert files == sorted(EXPECTED[gen])
        for name, header in EXPECTED[gen].items():
            first = (folders[gen] / inst / name).read_text().split("\n", 1)[0]
            assert first == header, f"{gen}/{inst}/{name}"


def test_datetimes_have_colon_microseconds_in_shanghai_time(
    folders: dict[str, Path], result: SimResult
) -> None:
    req = _read(folders["current"] / "inst-0" / "request.csv")
    batch = _read(folders["current"] / "inst-0" / "batch.csv")
    kv = _read(folders["current"] / "inst-0" / "kvcache.csv")
    for col in (
        req["start_datetime"],
        batch["start_datetime"],
        batch["end_datetime"],
        kv["start_time"],
    ):
        assert col.str.contains(COLON_DT.pattern).all()
    first = (
        result.requests.filter(pl.col("instance") == "inst-0").sort("arrival_s").row(0, named=True)
    )
    expected = datetime.fromtimestamp(first["arrival_s"], SHANGHAI).strftime("%Y-%m-%d %H:%M:%S:%f")
    assert req["start_datetime"][0] == expected


def test_time_column_magnitudes(folders: dict[str, Path]) -> None:
    cur = _read(folders["current"] / "inst-0" / "batch.csv")
    us = cur["start_time(ms)"].cast(pl.Int64).to_numpy()
    assert us.min() > 1e15 and us.max() < 1e16  # µs, as the current code really writes
    cann = _read(folders["cann2025"] / "inst-0" / "batch.csv")
    ms = cann["start_time(ms)"].cast(pl.Float64).to_numpy()
    assert ms.min() > 1e12 and ms.max() < 1e13
    fwd = _read(folders["current"] / "inst-0" / "forward.csv")
    assert fwd["start_time(ms)"].cast(pl.Float64).to_numpy().max() < 1e13
    # during_time(ms) really is ms: equals the µs span / 1000 on execution rows
    ex = cur.filter(pl.col("name") == "modelExec")
    span = (ex["end_time(ms)"].cast(pl.Int64) - ex["start_time(ms)"].cast(pl.Int64)) / 1000
    assert ((span - ex["during_time(ms)"].cast(pl.Float64)).abs() < 0.002).all()


def test_counts_equal_simresult_tables(folders: dict[str, Path], result: SimResult) -> None:
    assert result.members is not None
    for inst in result.instances:
        d = folders["current"] / inst
        req = _read(d / "request.csv")
        batch = _read(d / "batch.csv")
        steps = result.steps.filter(pl.col("instance") == inst)
        assert req.height == result.requests.filter(pl.col("instance") == inst).height
        sched = batch.filter(pl.col("name") == "batchFrameworkProcessing")
        execs = batch.filter(pl.col("name") == "modelExec")
        assert sched.height == execs.height == steps.height
        assert _read(d / "kvcache.csv").height == steps.height
        fwd = _read(d / "forward.csv")
        assert fwd.height == steps.height
        # as exporter_forward.py: forward_iter counts each device's forwards from 1, the
        # bubble is the gap to the device's next forward (empty on its last)
        for _, dev in fwd.group_by("prof_id"):
            assert dev["forward_iter"].cast(pl.Int64).sort().to_list() == list(
                range(1, dev.height + 1)
            )
            assert dev["bubble_time(ms)"].null_count() == 1
        members = result.members.join(steps.select("step_id"), on="step_id")
        assert sum(len(_rids(s)) for s in sched["res_list"]) == members.height
        assert sched["batch_size"].cast(pl.Int64).sum() == steps["batch_size"].sum()
        assert (
            sched["total_scheduled_tokens"].cast(pl.Int64).sum()
            == (steps["prefill_tokens"] + steps["decode_tokens"]).sum()
        )
        # KV columns filled on scheduling rows, 0 on execution rows
        assert sched["used_blocks"].cast(pl.Int64).sum() == steps["used_blocks"].sum()
        assert (execs["used_blocks"].cast(pl.Int64) == 0).all()


def test_res_list_rids_match_request_rids_after_stripping_suffix(
    folders: dict[str, Path], result: SimResult
) -> None:
    for inst in result.instances:
        d = folders["suffixed"] / inst
        http = set(_read(d / "request.csv")["http_rid"])
        batch = _read(d / "batch.csv")
        rids = {r for s in batch["res_list"] for r in _rids(s)}
        assert rids and all(SUFFIX.search(r) for r in rids)
        assert {SUFFIX.sub("", r) for r in rids} <= http
        plain = {
            r for s in _read(folders["current"] / inst / "batch.csv")["res_list"] for r in _rids(s)
        }
        assert plain == {SUFFIX.sub("", r) for r in rids}


def test_one_prof_id_per_dp_rank_and_no_dp_column_where_none(
    folders: dict[str, Path], result: SimResult
) -> None:
    batch = _read(folders["current"] / "inst-0" / "batch.csv")  # 2 DP ranks
    per_rank = batch.group_by("dp_rank").agg(
        pl.col("prof_id").n_unique().alias("n"), pl.col("prof_id").first()
    )
    assert sorted(per_rank["dp_rank"].to_list()) == ["0", "1"]
    assert per_rank["n"].to_list() == [1, 1]
    expected = {str(r.dp_rank): r.prof_id for r in result.ranks if r.instance == "inst-0"}
    assert dict(zip(per_rank["dp_rank"], per_rank["prof_id"], strict=True)) == expected
    single = _read(folders["current"] / "inst-1" / "batch.csv")  # one rank, no DP
    assert single["dp_rank"].null_count() == single.height
    for name in ("request.csv", "kvcache.csv"):
        cols = _read(folders["current"] / "inst-0" / name).columns
        assert not any("dp" in c for c in cols)


def test_request_csv_values(folders: dict[str, Path], result: SimResult) -> None:
    req = _read(folders["current"] / "inst-0" / "request.csv")
    sim = result.requests.filter(pl.col("instance") == "inst-0")
    never = set(sim.filter(pl.col("first_scheduled_s").is_null())["rid"])
    assert never  # the fixture has waiting and rejected requests
    rows = req.filter(pl.col("http_rid").is_in(list(never)))
    assert (rows["cache_hit_rate"] == "N/A").all()
    assert (rows["queue_wait_time(ms)"] == "0.0").all()
    assert (rows["first_token_latency(ms)"] == "0.0").all()
    done = req.filter(pl.col("execution_time(ms)").is_not_null())
    assert done["reply_token_size"].str.ends_with(".0").all()  # pandas float column
    assert done.height == sim.filter(pl.col("finish_s").is_not_null()).height
    total = done["reply_token_size"].cast(pl.Float64).sum()
    assert total == sim.filter(pl.col("finish_s").is_not_null())["output_tokens"].sum()


def test_mindie_variant(folders: dict[str, Path]) -> None:
    batch = _read(folders["mindie"] / "inst-0" / "batch.csv")
    assert set(batch["name"]) == {"BatchSchedule", "Execute"}
    keys = {k for s in batch["res_list"] for d in ast.literal_eval(s) for k in d}
    assert keys == {"rid", "iter"}


def test_truth_json(result: SimResult, tmp_path: Path) -> None:
    data = json.loads(write_truth(result, tmp_path).read_text())
    assert data["hot_units"] == ["inst-0/dp0"] and data["verdict"] == "imbalanced"
    assert data["meta"]["scenario"] == "fixture-dp-hot"
    assert len(data["run"]["units"]) == len(result.ranks)


def test_unknown_generation_is_refused(result: SimResult, tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="generation"):
        write_profiler(result, tmp_path, "2019")


def test_on_real_simulator_output(tmp_path: Path) -> None:
    """The simulator engine's output goes through the same writer."""
    from skewscope.sim import engine, scenario

    res = engine.simulate(scenario.load_scenario("balanced"), duration_s=60.0)
    written = write_profiler(res, tmp_path, "current", rid_suffix=True)
    assert len(written) == 5 * len(res.instances)
    for inst in res.instances:
        batch = _read(tmp_path / inst / "batch.csv")
        http = set(_read(tmp_path / inst / "request.csv")["http_rid"])
        sched = batch.filter(pl.col("name") == "batchFrameworkProcessing")
        assert sched.height == res.steps.filter(pl.col("instance") == inst).height
        rids = {SUFFIX.sub("", r) for s in sched["res_list"][:200] for r in _rids(s)}
        assert rids <= http


# ----------------------------------------------------------------------------- properties
@settings(max_examples=200, deadline=None)
@given(st.floats(min_value=1.0e9, max_value=2.5e9, allow_nan=False))
def test_datetime_formatter_round_trips(t: float) -> None:
    (text,) = format_datetimes([t])
    assert COLON_DT.match(text)
    back = datetime.strptime(text, "%Y-%m-%d %H:%M:%S:%f").replace(tzinfo=SHANGHAI)
    assert abs(back.astimezone(UTC).timestamp() - t) <= 1e-6 + 1e-12 * t


_member = st.fixed_dictionaries(
    {
        "rid": st.one_of(
            st.from_regex(r"[A-Za-z0-9_.:\-]{1,20}", fullmatch=True),
            st.text(min_size=1, max_size=12),
        ),  # quotes/backslashes: repr fallback
        "iter": st.integers(0, 10_000),
        "type": st.integers(0, 1),
        "num_scheduled_tokens": st.integers(0, 100_000),
        "num_prompt_tokens": st.integers(0, 10**6),
        "num_computed_tokens": st.integers(0, 10**6),
    }
)


@settings(max_examples=50, deadline=None)
@given(st.lists(st.lists(_member, min_size=1, max_size=6), min_size=1, max_size=5))
def test_res_list_formatter_round_trips(steps: list[list[dict[str, object]]]) -> None:
    rows = [{"step_id": i, **m} for i, ms in enumerate(steps) for m in ms]
    members = pl.DataFrame(
        rows,
        schema={
            "step_id": pl.Int64,
            "rid": pl.Utf8,
            "iter": pl.Int64,
            "type": pl.Int64,
            "num_scheduled_tokens": pl.Int64,
            "num_prompt_tokens": pl.Int64,
            "num_computed_tokens": pl.Int64,
        },
    )
    out = res_list_frame(members).sort("step_id")
    assert out["step_id"].to_list() == list(range(len(steps)))
    for i, text in enumerate(out["res_list"]):
        assert ast.literal_eval(text) == steps[i]
