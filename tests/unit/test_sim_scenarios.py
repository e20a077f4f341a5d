"""Built-in scenarios really contain the skew their ground truth claims; TOML errors are clear."""

from __future__ import annotations

from pathlib import Path
from statistics import median

import polars as pl
import pytest

from skewscope.catalogue import Cause
from skewscope.errors import SimulationError
from skewscope.frame import dp_unit_id
from skewscope.sim.engine import START_S, simulate
from skewscope.sim.records import SimResult
from skewscope.sim.scenario import builtin_scenarios, load_scenario

BUILTINS = builtin_scenarios()
CLASSIFICATION_ROWS = {"count", "weight", "capability"}
REQUIRED = {
    "balanced",
    "wrong-weights",
    "health-check",
    "sticky-sessions",
    "long-input",
    "long-output",
    "slow-device",
    "kv-exhaustion",
    "transient-burst",
    "dp-count",
    "dp-weight",
    "idle",
}


@pytest.fixture(scope="module")
def runs() -> dict[str, SimResult]:
    return {name: simulate(sc, record_members=False) for name, sc in BUILTINS.items()}


def unit_of(res: SimResult) -> pl.Expr:
    """Unit id expression matching the truth's level."""
    if res.truth.level == "dp":
        return pl.format("{}/dp{}", pl.col("instance"), pl.col("dp_rank"))
    return pl.col("instance")


def per_unit(res: SimResult) -> dict[str, dict[str, float]]:
    """Per unit: requests, mean input/output tokens, mean TTFT, mean step time."""
    u = unit_of(res)
    req = (
        res.requests.with_columns(unit=u)
        .group_by("unit")
        .agg(
            n=pl.len(),
            inp=pl.col("input_tokens").mean(),
            out=pl.col("output_tokens").mean(),
            ttft=(pl.col("first_token_s") - pl.col("arrival_s")).mean(),
        )
    )
    st = (
        res.steps.with_columns(unit=u)
        .group_by("unit")
        .agg(
            step=(pl.col("end_s") - pl.col("start_s")).mean(),
            per_token=(
                (pl.col("end_s") - pl.col("start_s"))
                / (pl.col("prefill_tokens") + pl.col("decode_tokens"))
            ).median(),
            kv=(pl.col("used_blocks") / pl.col("total_blocks")).mean(),
            free_min=(pl.col("free_blocks") / pl.col("total_blocks")).min(),
            preempted=pl.col("preempted").sum(),
        )
    )
    rows = req.join(st, on="unit", how="left").to_dicts()
    return {r.pop("unit"): r for r in rows}


def peers(stats: dict[str, dict[str, float]], hot: str, key: str) -> float:
    return median(v[key] for u, v in stats.items() if u != hot)


def test_builtins_cover_every_row_and_root_cause() -> None:
    assert set(BUILTINS) >= REQUIRED
    kinds = {sc.truth.kind for sc in BUILTINS.values()}
    assert kinds >= CLASSIFICATION_ROWS
    # the simulator models no hung engine: engine_stalled is tested on frames built directly
    # (tests/unit/test_analysis.py); prefix_affinity needs gateway evidence
    # (tests/unit/test_gateway*.py); device_or_process needs device-exporter evidence the
    # simulator does not write, and no scenario's truth names scheduler_bound (both:
    # tests/unit/test_resource.py); kv_shortage is the kv-exhaustion scenario's second finding
    # (tests/unit/test_scenarios_offline.py), its truth names the hot finding's kv_exhaustion;
    # unit_lost is an operations scenario (a hot unit that leaves:
    # tests/data/operations/lost-while-hot.toml, tests/unit/test_presence.py)
    assert {sc.truth.root_cause for sc in BUILTINS.values()} >= set(Cause) - {
        "engine_stalled",
        "prefix_affinity",
        "device_or_process",
        "scheduler_bound",
        "kv_shortage",
        "unit_lost",
        "pd_ratio",  # pd_ratio: the prefill/decode scenarios (sim/scenarios/pd/)
    }
    assert load_scenario("pd-imbalanced").truth.root_cause == "pd_ratio"
    assert {sc.truth.verdict for sc in BUILTINS.values()} == {
        "imbalanced",
        "balanced",
        "insufficient_data",
    }
    assert {sc.truth.level for sc in BUILTINS.values()} == {"instance", "dp"}
    for name, sc in BUILTINS.items():
        assert sc.name == sc.truth.scenario == name
        assert sc.summary and "\n" not in sc.summary
        assert 60 <= sc.duration_s <= 300


def test_every_builtin_runs_and_its_truth_names_real_units(runs: dict[str, SimResult]) -> None:
    for name, res in runs.items():
        units = set(res.instances) | {dp_unit_id(r.instance, r.dp_rank) for r in res.ranks}
        t = res.truth
        assert set(t.hot_units) <= units and set(t.idle_units) <= units, name
        if t.level == "dp":
            assert all("/dp" in u for u in t.hot_units), name
        assert res.requests.height > 0 and res.steps.height > 0, name
        s = res.steps
        assert (s["used_blocks"] <= s["total_blocks"]).all(), name


def test_builtins_stay_small(runs: dict[str, SimResult]) -> None:
    for name, res in runs.items():
        assert res.requests.height < 2500, name
        assert res.steps.height < 20000, name
        assert int(res.requests["output_tokens"].sum()) < 150_000, name  # ~ member rows


@pytest.mark.parametrize("name", ["wrong-weights", "sticky-sessions", "kv-exhaustion", "dp-count"])
def test_count_skew_hot_unit_gets_more_requests_and_suffers(
    name: str, runs: dict[str, SimResult]
) -> None:
    res = runs[name]
    (hot,) = res.truth.hot_units
    s = per_unit(res)
    ratio = s[hot]["n"] / peers(s, hot, "n")
    assert 1.6 <= ratio <= 2.5
    for key in ("inp", "out"):  # the same kind of requests, just more of them
        assert 0.85 < s[hot][key] / peers(s, hot, key) < 1.15
    assert s[hot]["ttft"] > 3 * peers(s, hot, "ttft")


@pytest.mark.parametrize("name", ["long-input", "long-output", "dp-weight"])
def test_weight_skew_hot_unit_gets_heavier_requests_at_equal_counts(
    name: str, runs: dict[str, SimResult]
) -> None:
    res = runs[name]
    (hot,) = res.truth.hot_units
    s = per_unit(res)
    counts = [v["n"] for v in s.values()]
    assert max(counts) - min(counts) <= 0.03 * max(counts)
    side, other = ("inp", "out") if res.truth.weight_side == "input" else ("out", "inp")
    assert s[hot][side] / peers(s, hot, side) >= 1.6
    assert 0.85 < s[hot][other] / peers(s, hot, other) < 1.15
    assert s[hot]["ttft"] > 3 * peers(s, hot, "ttft")


def test_capability_skew_same_load_slower_steps(runs: dict[str, SimResult]) -> None:
    res = runs["slow-device"]
    (hot,) = res.truth.hot_units
    s = per_unit(res)
    counts = [v["n"] for v in s.values()]
    assert max(counts) - min(counts) <= 1
    for key in ("inp", "out"):
        assert 0.85 < s[hot][key] / peers(s, hot, key) < 1.15
    assert s[hot]["per_token"] / peers(s, hot, "per_token") > 1.3
    assert s[hot]["step"] / peers(s, hot, "step") > 1.3
    assert s[hot]["ttft"] > 3 * peers(s, hot, "ttft")


def test_kv_exhaustion_hot_unit_runs_out_of_blocks(runs: dict[str, SimResult]) -> None:
    res = runs["kv-exhaustion"]
    assert res.truth.kv_exhausted and res.truth.root_cause == "kv_exhaustion"
    (hot,) = res.truth.hot_units
    s = per_unit(res)
    assert s[hot]["kv"] >= 0.85 and s[hot]["free_min"] <= 0.05
    assert s[hot]["preempted"] > 0
    assert peers(s, hot, "kv") < 0.6 and peers(s, hot, "preempted") == 0


def test_health_check_unit_is_starved_and_others_share_evenly(runs: dict[str, SimResult]) -> None:
    res = runs["health-check"]
    (idle,) = res.truth.idle_units
    s = per_unit(res)
    assert s[idle]["n"] < 0.15 * peers(s, idle, "n")
    others = [v["n"] for u, v in s.items() if u != idle]
    assert max(others) - min(others) <= 2
    assert not res.truth.hot_units and res.truth.kind == "count"


def test_late_join_unit_is_starved_until_it_joins(runs: dict[str, SimResult]) -> None:
    res = runs["late-join"]
    (idle,) = res.truth.idle_units
    r = res.requests.with_columns(t=pl.col("arrival_s") - START_S)
    assert r.filter((pl.col("instance") == idle) & (pl.col("t") < 100)).height == 0
    assert r.filter((pl.col("instance") == idle) & (pl.col("t") >= 100)).height > 50


def test_transient_burst_is_short_and_recovers(runs: dict[str, SimResult]) -> None:
    res = runs["transient-burst"]
    assert res.truth.verdict == "balanced" and not res.truth.hot_units
    r = res.requests.with_columns(w=((pl.col("arrival_s") - START_S) // 10).cast(pl.Int64))
    c = r.group_by("w", "instance").len()
    hot_windows = 0
    for w in range(24):
        row = c.filter(pl.col("w") == w)
        n0 = row.filter(pl.col("instance") == "inst-0")["len"].sum()
        rest = median(row.filter(pl.col("instance") != "inst-0")["len"].to_list())
        hot_windows += n0 > 1.3 * rest
    assert 1 <= hot_windows <= 3  # the burst is there, but short
    st = res.steps.with_columns(w=((pl.col("start_s") - START_S) // 10).cast(pl.Int64))
    late = st.filter((pl.col("w") >= 18) & (pl.col("instance") == "inst-0"))
    assert late["waiting"].mean() < 0.5  # recovered well before the end


def test_balanced_and_idle(runs: dict[str, SimResult]) -> None:
    s = per_unit(runs["balanced"])
    counts = [v["n"] for v in s.values()]
    assert max(counts) - min(counts) <= 1
    ttft = [v["ttft"] for v in s.values()]
    assert max(ttft) < 1.3 * min(ttft)
    assert runs["idle"].requests.height < 100  # below the analysis' minimum volume
    assert runs["idle"].truth.verdict == "insufficient_data"


def test_dp_scenarios_are_one_instance_with_four_ranks() -> None:
    for name in ("dp-count", "dp-weight"):
        sc = BUILTINS[name]
        assert (sc.instances, sc.dp_ranks, sc.truth.level) == (1, 4, "dp")


# --- loading and errors -------------------------------------------------------------------------


def test_load_by_name_and_by_path(tmp_path: Path) -> None:
    assert load_scenario("dp-count") is BUILTINS["dp-count"]
    p = tmp_path / "mine.toml"
    p.write_text(Path(BUILTINS["wrong-weights"].source).read_text())
    sc = load_scenario(str(p))
    assert sc.name == "wrong-weights" and sc.gateway.weights == (1.0, 1.8, 1.0, 1.0)
    assert simulate(sc, duration_s=10.0).requests.height > 0
    with pytest.raises(SimulationError, match="unknown scenario 'nope'; built-ins: balanced"):
        load_scenario("nope")


MINIMAL = """
[cluster]
instances = 2
[truth]
verdict = "balanced"
"""


@pytest.mark.parametrize(
    ("extra", "key", "message"),
    [
        ("duration_s = 'long'\n", "duration_s", "expected float, got str"),
        ("colour = 1\n", "colour", "unknown key"),
        ("[gateway]\npolicy = 'random'\n", "gateway.policy", "must be one of round_robin"),
        ("[gateway]\npolicy = 'weighted'\nweights = [1.0]\n", "gateway.weights", "needs 2"),
        ("[workload]\nrate = -1\n", "workload.rate", "must be >= 0"),
        ("[workload.input]\ndist = 'zipf'\n", "workload.input.dist", "must be one of"),
        ("[workload]\narrival = 'trace'\n", "workload.arrival", "needs a [workload.trace]"),
        ("[workload.trace]\nsource = 'missing.csv'\n", "workload.trace.source", "no such trace"),
        ("[[cluster.override]]\nunit = 'inst-9'\n", "cluster.override[0].unit", "unknown unit"),
        (
            "[[cluster.health]]\ninstance = 'inst-1'\nfail_at_s = true\n",
            "cluster.health[0].fail_at_s",
            "expected float, got bool",
        ),
        ("[cluster.rank]\nblock_size = 0\n", "cluster.rank.block_size", "must be >= 1"),
    ],
)
def test_toml_errors_name_file_and_key(tmp_path: Path, extra: str, key: str, message: str) -> None:
    p = tmp_path / "bad.toml"
    top, _, rest = MINIMAL.partition("[cluster]")
    lines = extra if not extra.startswith("[") else ""
    tables = extra if extra.startswith("[") else ""
    text = f"{lines}{top}[cluster]{rest}{tables}"
    if "[cluster." in tables:  # subtables of cluster must follow its own keys
        text = f"{lines}[cluster]\ninstances = 2\n{tables}\n[truth]\nverdict = 'balanced'\n"
    p.write_text(text)
    with pytest.raises(SimulationError) as exc:
        load_scenario(str(p))
    msg = str(exc.value)
    assert msg.startswith(f"{p}: key '{key}': ") and message in msg
    assert "\n" not in msg


@pytest.mark.parametrize(
    ("truth", "key", "message"),
    [
        ("verdict = 'hot'\n", "truth.verdict", "must be one of imbalanced"),
        ("verdict = 'imbalanced'\nhot_units = ['inst-7']\n", "truth.hot_units", "inst-7"),
        ("verdict = 'imbalanced'\nkind = 'weight'\n", "truth.weight_side", "is required"),
        ("verdict = 'imbalanced'\nroot_cause = 'gremlins'\n", "truth.root_cause", "one of"),
        ("level = 'dp'\n", "truth.verdict", "required key is missing"),
    ],
)
def test_truth_errors(tmp_path: Path, truth: str, key: str, message: str) -> None:
    p = tmp_path / "t.toml"
    p.write_text(f"[cluster]\ninstances = 2\n[truth]\n{truth}")
    with pytest.raises(SimulationError, match=rf"^{p}: key '{key}': .*{message}"):
        load_scenario(str(p))


def test_missing_truth_and_bad_toml(tmp_path: Path) -> None:
    p = tmp_path / "nt.toml"
    p.write_text("[cluster]\ninstances = 2\n")
    with pytest.raises(SimulationError, match="key 'truth': required table is missing"):
        load_scenario(str(p))
    p.write_text("[cluster\n")
    with pytest.raises(SimulationError, match=r"nt\.toml: not TOML"):
        load_scenario(str(p))
    with pytest.raises(SimulationError, match="no such scenario file"):
        load_scenario(str(tmp_path / "absent.toml"))


def test_relative_trace_paths_resolve_next_to_the_scenario(tmp_path: Path) -> None:
    data = Path(__file__).resolve().parents[2] / "src/skewscope/sim/data"
    src = data / "azure_conv_2023_head2000.csv"
    (tmp_path / "conv.csv").write_text(src.read_text())
    p = tmp_path / "replay.toml"
    p.write_text(
        "duration_s = 30\n[workload]\narrival = 'trace'\n[workload.trace]\nsource = 'conv.csv'\n"
        "time_scale = 2.0\n[truth]\nverdict = 'balanced'\n"
    )
    res = simulate(load_scenario(str(p)))
    assert res.requests.height > 50
    assert res.meta["arrival"].startswith("trace ") and res.meta["scenario"] == "replay"
