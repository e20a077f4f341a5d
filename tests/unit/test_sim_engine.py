"""Engine, policies and workload tests: invariants a correct simulator keeps, with known truth."""

from __future__ import annotations

import dataclasses
import json
import re
from datetime import UTC, datetime, timedelta
from pathlib import Path

import numpy as np
import polars as pl
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from skewscope.sim import engine, loop
from skewscope.sim.engine import START_S, simulate
from skewscope.sim.policies import Router, RoutingSpec
from skewscope.sim.records import SimResult
from skewscope.sim.scenario import load_scenario
from skewscope.sim.spec import GroundTruth, Health, RankSpec, Scenario
from skewscope.sim.workload import (
    Burst,
    LengthDist,
    OnOff,
    RequestClass,
    TraceSpec,
    WorkloadSpec,
    generate,
    load_trace,
    parse_azure_timestamp,
    read_azure_csv,
    read_mooncake_jsonl,
)

REQUEST_COLUMNS = [
    "rid",
    "instance",
    "dp_rank",
    "arrival_s",
    "input_tokens",
    "output_tokens",
    "first_scheduled_s",
    "first_token_s",
    "finish_s",
    "preemptions",
    "status",
]
STEP_COLUMNS = [
    "step_id",
    "instance",
    "dp_rank",
    "start_s",
    "end_s",
    "batch_size",
    "prefill_batch_size",
    "decode_batch_size",
    "prefill_tokens",
    "decode_tokens",
    "running",
    "waiting",
    "total_blocks",
    "used_blocks",
    "free_blocks",
    "blocks_allocated",
    "blocks_freed",
    "preempted",
]
MEMBER_COLUMNS = [
    "step_id",
    "rid",
    "iter",
    "type",
    "num_scheduled_tokens",
    "num_prompt_tokens",
    "num_computed_tokens",
]
SMALL_RANK = RankSpec(
    max_running=16,
    token_budget=2048,
    total_blocks=1024,
    fixed_ms=30.0,
    per_prefill_token_ms=0.08,
    per_decode_seq_ms=2.5,
)
SHORT = WorkloadSpec(
    rate=8.0,
    input=LengthDist(median=512, sigma=0.5, min=16, max=4096),
    output=LengthDist(median=64, sigma=0.5, min=2, max=1024),
)


def make(
    *,
    instances: int = 4,
    dp: int = 1,
    duration: float = 60.0,
    rate: float = 8.0,
    gateway: RoutingSpec | None = None,
    dispatcher: RoutingSpec | None = None,
    rank: RankSpec = SMALL_RANK,
    workload: WorkloadSpec | None = None,
    seed: int = 3,
    overrides: tuple[tuple[str, RankSpec], ...] = (),
    health: tuple[Health, ...] = (),
) -> Scenario:
    wl = dataclasses.replace(workload or SHORT, rate=rate)
    return Scenario(
        name="t",
        summary="test",
        truth=GroundTruth("t", "balanced", "instance"),
        duration_s=duration,
        seed=seed,
        instances=instances,
        dp_ranks=dp,
        rank=rank,
        overrides=overrides,
        health=health,
        gateway=gateway or RoutingSpec(),
        dispatcher=dispatcher or RoutingSpec(),
        workload=wl,
    )


def per_instance(res: SimResult) -> dict[str, int]:
    counts = res.requests.group_by("instance").len()
    return dict(zip(counts["instance"].to_list(), counts["len"].to_list(), strict=True))


@pytest.fixture(scope="module")
def drained() -> SimResult:
    """Arrivals only in the first 20 s of 90 s, so every request finishes."""
    wl = dataclasses.replace(SHORT, arrival="onoff", onoff=OnOff(on_s=20.0, off_s=1e6))
    return simulate(
        make(
            duration=90.0, dp=2, workload=wl, rank=dataclasses.replace(SMALL_RANK, total_blocks=300)
        )
    )


@pytest.fixture(scope="module")
def tight_kv() -> SimResult:
    """A KV pool far too small for the load: preemption and queueing."""
    rank = dataclasses.replace(SMALL_RANK, total_blocks=260, max_running=64)
    return simulate(make(instances=2, duration=40.0, rate=12.0, rank=rank))


# --- the contract ---------------------------------------------------------------------------


def test_tables_have_exactly_the_contract_columns(drained: SimResult) -> None:
    assert drained.requests.columns == REQUEST_COLUMNS
    assert drained.steps.columns == STEP_COLUMNS
    assert drained.members is not None and drained.members.columns == MEMBER_COLUMNS
    int_cols = [c for c in STEP_COLUMNS if c not in ("instance", "start_s", "end_s")]
    assert all(drained.steps.schema[c] == pl.Int64 for c in int_cols)
    assert drained.requests.schema["dp_rank"] == pl.Int64
    assert drained.requests.schema["first_token_s"] == pl.Float64
    assert drained.start_s == START_S and drained.end_s == START_S + 90.0


def test_rids_unique_and_ranks_distinct(drained: SimResult) -> None:
    rids = drained.requests["rid"]
    assert rids.n_unique() == rids.len()
    assert all(re.fullmatch(r"chatcmpl-[0-9a-f]{16}", r) for r in rids.to_list())
    assert len({r.prof_id for r in drained.ranks}) == len(drained.ranks) == 8
    assert drained.steps["step_id"].to_list() == list(range(drained.steps.height))


def test_every_request_finishes_when_traffic_stops(drained: SimResult) -> None:
    r = drained.requests
    assert (r["status"] == "finished").all()
    assert (r["first_scheduled_s"] >= r["arrival_s"]).all()
    assert (r["first_token_s"] > r["first_scheduled_s"]).all()
    assert (r["finish_s"] >= r["first_token_s"]).all()


def test_kv_blocks_balance_when_every_request_finished(drained: SimResult) -> None:
    per_rank = drained.steps.group_by("instance", "dp_rank").agg(
        pl.col("blocks_allocated").sum(), pl.col("blocks_freed").sum()
    )
    assert (per_rank["blocks_allocated"] == per_rank["blocks_freed"]).all()


def test_status_accounts_for_every_request(tight_kv: SimResult) -> None:
    r = tight_kv.requests
    assert set(r["status"].unique()) <= {"finished", "running", "waiting", "rejected"}
    fin = r.filter(pl.col("status") == "finished")
    assert fin["finish_s"].null_count() == 0
    assert r.filter(pl.col("status") != "finished")["finish_s"].null_count() == (
        r.height - fin.height
    )
    never = r.filter(pl.col("first_scheduled_s").is_null())
    assert set(never["status"].unique()) <= {"waiting", "rejected"}


@pytest.mark.parametrize("which", ["drained", "tight_kv"])
def test_kv_pool_never_overflows(which: str, request: pytest.FixtureRequest) -> None:
    s = request.getfixturevalue(which).steps
    assert (s["used_blocks"] <= s["total_blocks"]).all()
    assert (s["used_blocks"] >= 0).all()
    assert (s["free_blocks"] == s["total_blocks"] - s["used_blocks"]).all()
    assert (s["batch_size"] == s["prefill_batch_size"] + s["decode_batch_size"]).all()
    assert (s["end_s"] > s["start_s"]).all()


def test_exhausted_pool_preempts_and_counts_it(tight_kv: SimResult) -> None:
    assert tight_kv.steps["preempted"].sum() > 0
    assert tight_kv.steps["preempted"].sum() == tight_kv.requests["preemptions"].sum()
    assert tight_kv.steps["free_blocks"].min() < 0.05 * 260


def test_members_match_steps_and_requests(drained: SimResult) -> None:
    m = drained.members
    assert m is not None
    per_step = m.group_by("step_id").len().sort("step_id")
    steps = drained.steps.filter(pl.col("batch_size") > 0).sort("step_id")
    assert per_step["step_id"].to_list() == steps["step_id"].to_list()
    assert per_step["len"].to_list() == steps["batch_size"].to_list()
    req = drained.requests.filter(pl.col("preemptions") == 0)
    got = m.group_by("rid").agg(
        prefill=pl.col("num_scheduled_tokens").filter(pl.col("type") == 0).sum(),
        decodes=(pl.col("type") == 1).sum(),
    )
    j = req.join(got, on="rid")
    assert j.height == req.height
    assert (j["prefill"] == j["input_tokens"]).all()
    assert (j["decodes"] == j["output_tokens"] - 1).all()


def test_step_time_follows_the_cost_model(drained: SimResult) -> None:
    s = drained.steps
    expect = (30.0 + 0.08 * s["prefill_tokens"] + 2.5 * s["decode_batch_size"]) / 1000.0
    assert np.allclose((s["end_s"] - s["start_s"]).to_numpy(), expect.to_numpy())


def test_speed_factor_slows_steps() -> None:
    slow = dataclasses.replace(SMALL_RANK, speed=2.0)
    res = simulate(make(duration=30.0, overrides=(("inst-1", slow),)), record_members=False)
    s = res.steps.with_columns(
        per=(pl.col("end_s") - pl.col("start_s"))
        / (30.0 + 0.08 * pl.col("prefill_tokens") + 2.5 * pl.col("decode_batch_size"))
        * 1000.0
    )
    ratio = s.group_by("instance").agg(pl.col("per").mean())
    got = dict(zip(ratio["instance"].to_list(), ratio["per"].to_list(), strict=True))
    assert got["inst-1"] == pytest.approx(2.0) and got["inst-0"] == pytest.approx(1.0)


# --- determinism and queueing ----------------------------------------------------------------


def test_same_seed_same_tables_other_seed_differs() -> None:
    sc = make(duration=30.0, dp=2, gateway=RoutingSpec("power_of_two"))
    a, b = simulate(sc), simulate(sc)
    assert a.requests.equals(b.requests) and a.steps.equals(b.steps)
    assert a.members is not None and b.members is not None and a.members.equals(b.members)
    c = simulate(sc, seed=99)
    assert not a.requests.equals(c.requests)


@pytest.mark.parametrize("dispatcher", ["least_requests", "round_robin", "power_of_two"])
@pytest.mark.parametrize("members", [False, True])
def test_lazy_loop_gives_the_heap_loops_tables(
    dispatcher: str, members: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A gateway that reads no load lets ranks advance lazily (and decode-only steps take a
    short path): the tables must be those of the global-heap loop, row for row, also under KV
    pressure (preemptions) and with batch members recorded."""
    rank = dataclasses.replace(SMALL_RANK, total_blocks=260, max_running=32)
    sc = make(
        instances=3, dp=3, duration=40.0, rate=16.0, rank=rank, dispatcher=RoutingSpec(dispatcher)
    )
    lazy = simulate(sc, record_members=members)
    monkeypatch.setattr(loop, "reads_load", lambda spec: True)  # every loop on the heap
    heap = simulate(sc, record_members=members)
    assert lazy.steps["preempted"].sum() > 0
    assert lazy.requests.equals(heap.requests) and lazy.steps.equals(heap.steps)
    if members:
        assert lazy.members is not None and heap.members is not None
        assert lazy.members.equals(heap.members)


@pytest.mark.parametrize("gateway", ["least_requests", "least_tokens", "cache_aware"])
@pytest.mark.parametrize("dp", [1, 2])
def test_a_large_pool_read_at_once_picks_what_a_scan_of_it_picks(
    gateway: str, dp: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A gateway over 70 instances reads their loads as one array kept up to date
    (``GroupLoad.vector``: only the touched units and those decoding in a segment worked out
    again); the tables must be those of a per-unit scan, row for row, also under KV pressure
    (preemptions), with KV tokens growing inside segments and with a unit failing."""
    from skewscope.sim import policies

    rank = dataclasses.replace(SMALL_RANK, total_blocks=260, max_running=32)
    sc = make(
        instances=70,
        dp=dp,
        duration=30.0,
        rate=160.0,
        rank=rank,
        gateway=RoutingSpec(gateway),
        dispatcher=RoutingSpec("least_requests"),
        health=(Health("inst-5", fail_at_s=12.0),),
    )
    vector = simulate(sc, record_members=False)
    monkeypatch.setattr(policies, "VECTOR_MIN", 10**9)  # every pick a scan of the pool
    scan = simulate(sc, record_members=False)
    assert vector.steps["preempted"].sum() > 0
    assert vector.requests["instance"].n_unique() == 70
    assert vector.requests.equals(scan.requests) and vector.steps.equals(scan.steps)


@pytest.mark.parametrize(
    ("block_size", "total_blocks", "max_running", "chunked"),
    [(16, 260, 32, True), (1, 4000, 8, True), (7, 700, 64, False), (64, 70, 16, True)],
)
def test_decode_segments_give_the_step_by_step_tables(
    block_size: int,
    total_blocks: int,
    max_running: int,
    chunked: bool,
) -> None:
    """Without batch members, runs of decode-only steps are executed as segments (times from
    their anchor, KV growth from the block pattern); with members every step is executed one
    by one. Both must give the same steps and requests, row for row, also when a segment ends
    on a finish, a KV shortfall (preemption) or an arrival, and for any block size."""
    rank = dataclasses.replace(
        SMALL_RANK,
        block_size=block_size,
        total_blocks=total_blocks,
        max_running=max_running,
        chunked_prefill=chunked,
    )
    sc = make(
        instances=2,
        dp=2,
        duration=40.0,
        rate=14.0,
        rank=rank,
        dispatcher=RoutingSpec("least_tokens"),
    )
    fast, slow = simulate(sc, record_members=False), simulate(sc, record_members=True)
    assert fast.requests.equals(slow.requests)
    assert fast.steps.equals(slow.steps)
    assert fast.steps.height > 500


@pytest.mark.parametrize("gateway", ["round_robin", "least_tokens"])
def test_time_chunks_and_streamed_steps_give_the_same_tables(
    gateway: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Cutting the run into time chunks (every rank advanced to the cut, its steps flushed)
    changes nothing; ``on_steps`` gets those chunks in order and the result keeps none."""
    rank = dataclasses.replace(SMALL_RANK, total_blocks=260, max_running=32)
    sc = make(
        instances=3,
        dp=2,
        duration=40.0,
        rate=16.0,
        rank=rank,
        gateway=RoutingSpec(gateway),
        dispatcher=RoutingSpec("least_requests"),
    )
    whole = simulate(sc)
    monkeypatch.setattr(engine, "CHUNK_ROWS", 200)
    cut = simulate(sc)
    chunks: list[pl.DataFrame] = []
    streamed = simulate(sc, on_steps=chunks.append)
    assert len(chunks) > 5 and all(c.height for c in chunks[:-1])
    assert cut.requests.equals(whole.requests) and cut.steps.equals(whole.steps)
    assert cut.members is not None and whole.members is not None
    assert cut.members.equals(whole.members)
    assert pl.concat(chunks).equals(whole.steps) and streamed.requests.equals(whole.requests)
    assert streamed.steps.is_empty() and streamed.steps.columns == whole.steps.columns
    assert streamed.meta["n_steps"] == whole.steps.height


@pytest.mark.parametrize("dispatcher", ["least_tokens", "power_of_two"])
def test_instances_run_apart_in_processes_give_the_same_requests(dispatcher: str) -> None:
    """A load-free gateway's choices are made first; then groups of instances run in worker
    processes (steps dropped, only their stats kept): the requests, step count and KV peak
    are those of one process keeping every step (also with failed and late instances, pins
    drawn at random and a random dispatcher, each instance's on its own stream)."""
    rank = dataclasses.replace(SMALL_RANK, total_blocks=400, max_running=32)
    health = (Health("inst-1", fail_at_s=20.0), Health("inst-3", join_at_s=10.0))
    sc = make(
        instances=5,
        dp=2,
        duration=40.0,
        rate=20.0,
        rank=rank,
        health=health,
        gateway=RoutingSpec(
            "weighted", weights=(1, 2, 1, 1, 3), pin_tag="", pin_units=(4,), pin_share=0.3
        ),
        dispatcher=RoutingSpec(dispatcher),
    )
    whole = simulate(sc, record_members=False)
    apart = simulate(sc, keep_steps=False, jobs=3)
    assert apart.requests.equals(whole.requests)
    assert apart.steps.is_empty() and apart.steps.columns == whole.steps.columns
    assert apart.run_stats["steps"] == whole.steps.height == whole.meta["n_steps"]
    kv = whole.steps.select((pl.col("used_blocks") / pl.col("total_blocks")).max()).item()
    assert apart.run_stats["kv_peak"] == pytest.approx(kv, rel=1e-12)
    assert whole.requests["status"].n_unique() >= 2


def test_queueing_grows_only_when_arrivals_exceed_service() -> None:
    """One rank: capacity ~3.5 req/s with these lengths; 2 req/s is fine, 6 req/s is not."""
    under = simulate(make(instances=1, rate=2.0, duration=120.0), record_members=False)
    over = simulate(make(instances=1, rate=6.0, duration=120.0), record_members=False)

    def waiting_by_third(res: SimResult) -> list[float]:
        s = res.steps.with_columns(third=((pl.col("start_s") - START_S) // 40).cast(pl.Int64))
        g = s.group_by("third").agg(pl.col("waiting").mean()).sort("third")
        return [float(v) for v in g["waiting"].to_list()]

    u, o = waiting_by_third(under), waiting_by_third(over)
    assert max(u) < 1.0
    assert o[0] < o[1] < o[2] and o[2] > 20
    qw = (pl.col("first_scheduled_s") - pl.col("arrival_s")).mean()
    assert over.requests.select(qw).item() > 10 * under.requests.select(qw).item()


# --- routing policies ---------------------------------------------------------------------------


def test_round_robin_gives_near_equal_counts() -> None:
    counts = per_instance(simulate(make(duration=30.0), record_members=False))
    assert max(counts.values()) - min(counts.values()) <= 1


def test_weighted_follows_weights() -> None:
    gw = RoutingSpec("weighted", weights=(1.0, 2.0, 1.0, 3.0))
    counts = per_instance(simulate(make(duration=30.0, gateway=gw), record_members=False))
    n = sum(counts.values())
    for i, w in enumerate((1, 2, 1, 3)):
        assert abs(counts[f"inst-{i}"] - n * w / 7) <= 1.5


def test_dispatcher_weights_apply_per_instance() -> None:
    disp = RoutingSpec("weighted", weights=(3.0, 1.0))
    res = simulate(make(duration=30.0, instances=2, dp=2, dispatcher=disp), record_members=False)
    c = res.requests.group_by("instance", "dp_rank").len().sort("instance", "dp_rank")
    for inst in ("inst-0", "inst-1"):
        n0, n1 = c.filter(pl.col("instance") == inst)["len"].to_list()
        assert abs(n0 - 3 * n1) <= 4


class _FakeLoad:
    def __init__(self, reqs: list[int], toks: list[int]) -> None:
        self.reqs, self.toks = reqs, toks

    def outstanding_requests(self, unit: int) -> int:
        return self.reqs[unit]

    def outstanding_tokens(self, unit: int) -> int:
        return self.toks[unit]


def test_sticky_pins_sessions_and_repins_when_unit_leaves() -> None:
    r = Router(RoutingSpec("sticky"), 4, np.random.default_rng(0), ("",))
    load = _FakeLoad([0] * 4, [0] * 4)
    every = (0, 1, 2, 3)
    first = {s: r.choose(0, s, every, load) for s in range(20)}
    for _ in range(3):
        assert all(r.choose(0, s, every, load) == u for s, u in first.items())
    assert first[0] == 0 and first[5] == 1  # hash pin: session % units
    rest = (0, 2, 3)
    moved = {s: r.choose(0, s, rest, load) for s in range(20) if first[s] == 1}
    assert all(u in rest for u in moved.values())
    assert all(r.choose(0, s, rest, load) == u for s, u in moved.items())


def test_least_requests_and_tokens_pick_the_lightest() -> None:
    load = _FakeLoad([5, 2, 7, 2], [100, 900, 50, 400])
    lr = Router(RoutingSpec("least_requests"), 4, np.random.default_rng(0), ("",))
    assert {lr.choose(0, -1, (0, 1, 2, 3), load) for _ in range(6)} == {1, 3}  # ties rotate
    lt = Router(RoutingSpec("least_tokens"), 4, np.random.default_rng(0), ("",))
    assert lt.choose(0, -1, (0, 1, 2, 3), load) == 2
    p2 = Router(RoutingSpec("power_of_two"), 4, np.random.default_rng(0), ("",))
    assert all(p2.choose(0, -1, (0, 1, 2, 3), load) != 2 for _ in range(50))


@pytest.mark.parametrize("policy", ["least_requests", "least_tokens", "power_of_two"])
def test_load_aware_policies_shed_load_from_a_slow_unit(policy: str) -> None:
    slow = (("inst-1", dataclasses.replace(SMALL_RANK, speed=2.0)),)
    rr = per_instance(simulate(make(rate=10.0, overrides=slow), record_members=False))
    la = simulate(
        make(rate=10.0, overrides=slow, gateway=RoutingSpec(policy)), record_members=False
    )
    got = per_instance(la)
    assert got["inst-1"] < 0.85 * rr["inst-1"]
    assert got["inst-1"] < min(got[f"inst-{i}"] for i in (0, 2, 3))


def test_pins_concentrate_a_class_but_keep_counts_equal() -> None:
    long = RequestClass(
        "long", 0.1, LengthDist(median=2048, sigma=0.3, min=16, max=8192), SHORT.output
    )
    wl = dataclasses.replace(SHORT, classes=(long,))
    gw = RoutingSpec("round_robin", pin_tag="long", pin_units=(2,))
    res = simulate(make(duration=60.0, workload=wl, gateway=gw), record_members=False)
    g = res.requests.group_by("instance").agg(pl.len(), pl.col("input_tokens").mean())
    counts = g["len"].to_list()
    assert max(counts) - min(counts) <= 2
    means = dict(zip(g["instance"].to_list(), g["input_tokens"].to_list(), strict=True))
    assert means["inst-2"] > 1.8 * max(v for k, v in means.items() if k != "inst-2")


def test_failed_and_late_instances_get_no_traffic_outside_their_window() -> None:
    health = (Health("inst-1", fail_at_s=10.0), Health("inst-2", join_at_s=20.0))
    res = simulate(make(duration=40.0, health=health), record_members=False)
    r = res.requests.with_columns(t=pl.col("arrival_s") - START_S)
    assert r.filter((pl.col("instance") == "inst-1") & (pl.col("t") >= 10.0)).height == 0
    assert r.filter((pl.col("instance") == "inst-2") & (pl.col("t") < 20.0)).height == 0
    late = r.filter((pl.col("t") >= 20.0) & (pl.col("instance") != "inst-1"))
    c = late.group_by("instance").len()["len"].to_list()
    assert max(c) - min(c) <= 2  # the late joiner gets its share, not a catch-up flood


def test_trace_replay_uses_trace_times_and_lengths() -> None:
    spec = dataclasses.replace(SHORT, arrival="trace", trace=TraceSpec("azure-conv"))
    res = simulate(make(duration=60.0, workload=spec), record_members=False)
    tr = load_trace(TraceSpec("azure-conv"))
    keep = tr.arrival_s < 60.0
    assert res.requests.height == int(keep.sum())
    assert np.allclose(res.requests["arrival_s"].to_numpy() - START_S, tr.arrival_s[keep])
    assert res.requests["input_tokens"].to_list() == tr.input_tokens[keep].tolist()


# --- workloads and traces (properties) -------------------------------------------------------

lengths = st.builds(
    LengthDist,
    dist=st.sampled_from(["lognormal", "pareto", "fixed"]),
    median=st.floats(1, 5000),
    sigma=st.floats(0, 2),
    scale=st.floats(1, 3000),
    alpha=st.floats(0.3, 4),
    min=st.integers(1, 100),
    max=st.integers(100, 20000),
)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    inp=lengths,
    out=lengths,
    rate=st.floats(0, 50),
    dur=st.floats(1, 60),
    seed=st.integers(0, 2**32 - 1),
    burst=st.booleans(),
)
def test_generated_workloads_are_sorted_and_clipped(
    inp: LengthDist, out: LengthDist, rate: float, dur: float, seed: int, burst: bool
) -> None:
    spec = WorkloadSpec(
        rate=rate, input=inp, output=out, burst=Burst(dur / 3, dur / 3, 2.0) if burst else None
    )
    wl = generate(spec, dur, np.random.default_rng(seed))
    a = wl.arrival_s
    assert np.all(np.diff(a) >= 0) and np.all(a >= 0) and np.all(a < dur)
    assert np.all((wl.input_tokens >= inp.min) & (wl.input_tokens <= inp.max))
    assert np.all((wl.output_tokens >= out.min) & (wl.output_tokens <= out.max))
    assert len(wl) == wl.input_tokens.shape[0] == wl.tag.shape[0] == wl.session.shape[0]


@settings(max_examples=40, deadline=None)
@given(share=st.floats(0, 1), sessions=st.integers(1, 50), seed=st.integers(0, 1000))
def test_session_ids_in_range_and_heavy_share_holds(share: float, sessions: int, seed: int) -> None:
    spec = WorkloadSpec(rate=200.0, sessions=sessions, heavy_session_share=share)
    wl = generate(spec, 20.0, np.random.default_rng(seed))
    assert wl.session.min() >= 0 and wl.session.max() < sessions
    if sessions > 1:
        assert abs(float(np.mean(wl.session == 0)) - share) < 0.05


@settings(max_examples=60, deadline=None)
@given(
    start=st.datetimes(min_value=datetime(2020, 1, 1), max_value=datetime(2030, 1, 1)),
    frac=st.integers(0, 9_999_999),
)
def test_azure_timestamps_with_seven_digits(start: datetime, frac: int) -> None:
    base = start.replace(microsecond=0, tzinfo=UTC)
    text = base.strftime("%Y-%m-%d %H:%M:%S") + f".{frac:07d}"
    assert parse_azure_timestamp(text) == pytest.approx(base.timestamp() + frac / 1e7, abs=1e-6)
    assert parse_azure_timestamp(text[:-1] + "+00:00") == pytest.approx(
        base.timestamp() + (frac // 10) / 1e6, abs=1e-6
    )


rows = st.lists(
    st.tuples(st.floats(0, 3600, allow_nan=False), st.integers(1, 100_000), st.integers(1, 5000)),
    min_size=1,
    max_size=40,
)


@settings(
    max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(data=rows)
def test_trace_files_roundtrip(data: list[tuple[float, int, int]], tmp_path: Path) -> None:
    t0 = datetime(2023, 11, 16, 18, 15, 46, tzinfo=UTC)
    us = [round(t * 1e6) for t, _, _ in data]
    csv_lines = ["TIMESTAMP,ContextTokens,GeneratedTokens"] + [
        (t0 + timedelta(microseconds=u)).strftime("%Y-%m-%d %H:%M:%S.%f") + f"0,{i},{o}"
        for u, (_, i, o) in zip(us, data, strict=True)
    ]
    (tmp_path / "a.csv").write_text("\n".join(csv_lines))  # no trailing newline, like Azure
    (tmp_path / "m.jsonl").write_text(
        "\n".join(
            json.dumps(
                {"timestamp": u // 1000, "input_length": i, "output_length": o, "hash_ids": []}
            )
            for u, (_, i, o) in zip(us, data, strict=True)
        )
    )
    order = sorted(range(len(data)), key=lambda k: us[k])
    for tr, div in (
        (read_azure_csv(tmp_path / "a.csv"), 1e6),
        (read_mooncake_jsonl(tmp_path / "m.jsonl"), None),
    ):
        assert tr.arrival_s[0] == 0.0 and np.all(np.diff(tr.arrival_s) >= 0)
        assert sorted(tr.input_tokens.tolist()) == sorted(i for _, i, _ in data)
        if div is not None:
            want = np.array([us[k] for k in order]) / div
            assert np.allclose(tr.arrival_s, want - want[0], atol=1e-5)


def test_shipped_trace_excerpts_parse() -> None:
    for name, rows_, span in (
        ("azure-code", 2000, 853),
        ("azure-conv", 2000, 424),
        ("mooncake", 1000, 330),
    ):
        tr = load_trace(TraceSpec(name))
        assert tr.arrival_s.shape[0] == rows_
        assert tr.arrival_s[0] == 0.0 and np.all(np.diff(tr.arrival_s) >= 0)
        assert abs(tr.arrival_s[-1] - span) < 1, name
        assert tr.input_tokens.min() >= 1 and tr.output_tokens.min() >= 1
    conv = load_trace(TraceSpec("azure-conv"))
    assert conv.input_tokens[:2].tolist() == [374, 396]
    assert conv.arrival_s[1] == pytest.approx(4.3145790, abs=1e-6)


def test_bad_trace_lines_name_file_and_line(tmp_path: Path) -> None:
    from skewscope.errors import SchemaError

    p = tmp_path / "bad.csv"
    p.write_text("TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:17:03.97,10,x\n")
    with pytest.raises(SchemaError, match=r"bad\.csv: line 2"):
        read_azure_csv(p)
    m = tmp_path / "bad.jsonl"
    m.write_text('{"timestamp": 0, "input_length": 5, "output_length": 1}\n{"timestamp": 1}\n')
    with pytest.raises(SchemaError, match=r"bad\.jsonl: line 2"):
        read_mooncake_jsonl(m)


def test_builtin_scenarios_keep_the_same_tables_across_calls() -> None:
    sc = load_scenario("dp-count")
    assert simulate(sc, duration_s=20.0).steps.equals(simulate(sc, duration_s=20.0).steps)


@pytest.mark.parametrize(
    ("name", "text", "message"),
    [
        ("m.jsonl", '{"timestamp": 1, "input_length": 1e400, "output_length": 1}\n', "line 1: bad"),
        (
            "m.jsonl",
            '{"timestamp": 1, "input_length": ' + "9" * 30 + ', "output_length": 1}\n',
            "line 1: bad Mooncake record (a length of",
        ),
        (
            "m.jsonl",
            '{"timestamp": 1e999, "input_length": 1, "output_length": 1}\n',
            "line 1: bad Mooncake record (timestamp inf",
        ),
        ("m.jsonl", "[" * 50_000 + "\n", "line 1: bad Mooncake record"),
        (
            "a.csv",
            "TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:15:46.0,-1,2\n",
            "line 2: a length of -1 tokens",
        ),
    ],
)
def test_hostile_trace_lines_are_one_located_error(
    tmp_path: Path, name: str, text: str, message: str
) -> None:
    from skewscope.errors import SchemaError

    (tmp_path / name).write_text(text)
    read = read_mooncake_jsonl if name.endswith("jsonl") else read_azure_csv
    with pytest.raises(SchemaError, match=re.escape(message)):
        read(tmp_path / name)


def test_a_trace_that_is_no_regular_file_is_refused(tmp_path: Path) -> None:
    import os

    from skewscope.errors import InputError

    os.mkfifo(tmp_path / "fifo.jsonl")
    for path in (tmp_path / "fifo.jsonl", Path("/dev/zero"), tmp_path):
        with pytest.raises(InputError, match=r"not a regular file|is a directory"):
            read_mooncake_jsonl(path)
    (tmp_path / "latin.jsonl").write_bytes(b'{"timestamp": "caf\xe9"}\n')
    with pytest.raises(InputError, match="line 1: not UTF-8"):
        read_mooncake_jsonl(tmp_path / "latin.jsonl")
