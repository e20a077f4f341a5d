"""What-if predictions against what really happens (issue 22): the simulated scenario re-run
under a candidate serves the same requests, a prediction made from the evidence alone comes
close to that re-run, a placement correlated with request length is recognised (and its
count-based candidates never recommended), a weight skew's replay reproduces the queue, an idle
tail is not a unit leaving the pool, and the fix is spelled as each stack's setting."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

import polars as pl
import pytest

from helpers.report_schema import assert_valid
from skewscope.cli import main
from skewscope.config import WHATIF
from skewscope.report.whatif_model import Metrics
from skewscope.sim.counterfactual import rerouted
from skewscope.sim.engine import simulate
from skewscope.sim.policies import RoutingSpec
from skewscope.sim.scenario import builtin_scenarios
from skewscope.sim.spec import Scenario
from skewscope.sim.workload import LengthDist, RequestClass
from skewscope.sim.writers.profiler import write_profiler
from skewscope.whatif.fixes import fix_settings
from skewscope.whatif.predict import calibration_rows, whatif
from skewscope.whatif.truth import ape, check, request_log

GATEWAY = ("round_robin", "least_requests", "least_tokens")


def weight_skew(duration: float = 120.0) -> Scenario:
    """Held out of the built-ins: heavy requests (both sides ~4x) pinned to inst-1 while the
    gateway counts requests (equal counts), near inst-1's saturation."""
    sc = builtin_scenarios()["long-input"]
    heavy = RequestClass(
        "long",
        0.1,
        LengthDist("lognormal", median=1800, sigma=0.5, min=16, max=8192),
        LengthDist("lognormal", median=300, sigma=0.5, min=2, max=2048),
    )
    return dataclasses.replace(
        sc,
        name="weight-heldout",
        seed=31,
        duration_s=duration,
        rank=dataclasses.replace(
            sc.rank,
            max_running=32,
            total_blocks=2048,
            fixed_ms=20.0,
            per_prefill_token_ms=0.06,
            per_decode_seq_ms=1.5,
        ),
        gateway=dataclasses.replace(sc.gateway, pin_units=(1,)),
        workload=dataclasses.replace(
            sc.workload,
            rate=7.0,
            classes=(heavy,),
            input=LengthDist("lognormal", median=400, sigma=0.6, min=16, max=4096),
            output=LengthDist("lognormal", median=80, sigma=0.6, min=2, max=1024),
        ),
    )


def whatif_doc(folder: Path, capsys: pytest.CaptureFixture[str], *extra: str) -> Any:
    assert main(["whatif", str(folder), "--format", "json", "--jobs", "1", *extra]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert_valid(doc, "whatif")
    return doc


def test_a_rerouted_scenario_serves_the_same_requests() -> None:
    sc = dataclasses.replace(builtin_scenarios()["long-input"], duration_s=30.0)
    a = simulate(sc, record_members=False).requests.sort("arrival_s")
    b = simulate(
        rerouted(sc, gateway=RoutingSpec("least_tokens")), record_members=False
    ).requests.sort("arrival_s")
    for col in ("arrival_s", "input_tokens", "output_tokens"):
        assert a[col].to_list() == b[col].to_list()
    assert a["instance"].to_list() != b["instance"].to_list()  # only the placement changed


def test_predictions_come_true_on_a_weight_skew() -> None:
    c = check(weight_skew(90.0), GATEWAY, ())
    assert c.report.trusted
    for p in c.report.policies[1:]:
        true = c.actual_of(p.name).predicted
        assert (
            ape(p.predicted.max_over_median_load, true.max_over_median_load, "max_over_median_load")
            < 0.10
        ), p.name
        assert ape(p.predicted.e2e_p50_ms, true.e2e_p50_ms, "e2e_p50_ms") < 0.07, p.name
        assert ape(p.predicted.ttft_p99_ms, true.ttft_p99_ms, "ttft_p99_ms") < 0.30, p.name
    assert c.report.recommended != "round_robin"  # the current policy class is no fix
    assert c.pick_ok(WHATIF.pick_margin), (c.report.recommended, c.truly_best)


def test_the_weight_skew_replay_reproduces_the_queue_and_names_the_correlation(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # from the profiler files: unfinished requests show no output length there; the heavy
    # unit's are the long ones, drawn from its own uncensored requests (was: queue P95 -36 %)
    write_profiler(simulate(weight_skew()), tmp_path)
    doc = whatif_doc(tmp_path, capsys, "--policies", ",".join(GATEWAY))
    for metric in ("queue_wait_p95_ms", "ttft_p99_ms", "max_over_median_load"):
        assert abs(doc["calibration"][metric]["error"]) <= WHATIF.calibration_max_error, metric
    assert doc["trusted"]
    corr = [n for n in doc["note_facts"] if n["code"] == "whatif_correlated"]
    assert len(corr) == 1 and corr[0]["units"] == ["inst-1"] and corr[0]["ratio"] > 1.5
    said = (
        "placement is correlated with request length: the router is not round robin, or a "
        "client pins its long requests"
    )
    assert any(n.startswith(said) for n in doc["notes"])
    assert "correlated with request length" in doc["inferred"]["instance"]
    assert doc["ranking"]["excluded"] == ["round_robin"] and doc["ranking"]["robust"]
    assert doc["recommended"] in ("least_requests", "least_tokens")
    by = {p["name"]: p for p in doc["policies"]}
    assert by["round_robin"]["robust"] is None and by["current"]["robust"] is None
    # ranked on the worse TTFT P99 of plain and pinned (heavy requests kept on inst-1)
    worse = {
        n: max(by[n]["predicted"]["ttft_p99_ms"], by[n]["robust"]["ttft_p99_ms"])
        for n in ("least_requests", "least_tokens")
    }
    assert doc["recommended"] == min(worse, key=worse.get)
    settings = {f["stack"]: f for f in doc["fix"]["settings"]}
    assert doc["fix"]["policy"] == doc["recommended"]
    assert settings["nginx"]["setting"] == "least_conn;"


def test_no_correlation_when_lengths_do_not_follow_the_unit() -> None:
    for name in ("balanced", "wrong-weights"):
        sc = dataclasses.replace(builtin_scenarios()[name], duration_s=60.0)
        r = whatif(request_log(simulate(sc)), name, ("round_robin",), ())
        assert not any(n.code == "whatif_correlated" for n in r.notes), name
        assert r.ranking.excluded == () and not r.ranking.robust


def test_an_idle_tail_is_not_a_unit_leaving_the_pool() -> None:
    sc = dataclasses.replace(builtin_scenarios()["balanced"], duration_s=60.0)
    log = request_log(simulate(sc))
    idle = dataclasses.replace(log, end_s=log.end_s + 120.0)  # the range runs on, no traffic
    r = whatif(idle, "idle-tail", ("round_robin",), ())
    assert not any(n.code in ("whatif_left_early", "whatif_joined_late") for n in r.notes)
    assert "restore_pool" not in [p.name for p in r.policies]
    # a unit that stops while the others go on did leave
    sc = dataclasses.replace(builtin_scenarios()["health-check"], duration_s=60.0)
    r = whatif(request_log(simulate(sc)), "hc", ("round_robin",), ())
    assert [n.values["instance"] for n in r.notes if n.code == "whatif_left_early"] == ["inst-3"]


def test_the_calibration_tolerance_is_relative_to_the_service() -> None:
    def metrics(q: float) -> Metrics:
        return Metrics(1.0, 1.0, q, 100.0, 100.0, 100.0, 0.5, 1.0)

    # +117 % on a 3 ms-step engine: the old 50 ms floor called it fine
    row = {r.metric: r for r in calibration_rows(metrics(10.0), metrics(21.7), WHATIF, 3.0)}
    assert not row["queue_wait_p95_ms"].ok
    # a wait within one step of the observed one is scheduling granularity
    row = {r.metric: r for r in calibration_rows(metrics(1.0), metrics(3.5), WHATIF, 3.0)}
    assert row["queue_wait_p95_ms"].ok


def test_fix_settings_per_stack() -> None:
    names = ("10.0.0.5:8000", "10.0.0.6:8000")
    by = {f.stack: f for f in fix_settings("least_tokens", "instance", "vllm", names)}
    assert (by["nginx"].setting, by["nginx"].match) == ("least_conn;", "closest")
    assert (by["sglang-router"].setting, by["vllm-router"].setting) == (
        "--policy power_of_two",
        "--policy power_of_two",
    )
    assert "kv-cache-utilization-scorer" in by["llm-d"].setting
    by = {f.stack: f for f in fix_settings("power_of_two", "instance", "llm-d", names)}
    assert by["nginx"].setting == "random two least_conn;" and by["llm-d"].in_use
    assert by["vllm-router"].match == "exact"
    by = {
        f.stack: f for f in fix_settings("fix_weights", "instance", "profiler", names, (0.36, 0.64))
    }
    assert by["nginx"].setting == (
        "server 10.0.0.5:8000 weight=10; server 10.0.0.6:8000 weight=18;"
    )
    by = {f.stack: f for f in fix_settings("dp:minimum_tokens", "dp", "sglang", names)}
    assert by["sglang"].setting.startswith("--load-balance-method minimum_tokens")
    assert by["sglang"].match == "exact" and by["sglang"].in_use and not by["vllm"].in_use
    by = {f.stack: f for f in fix_settings("dp:vllm_dp", "dp", "vllm", names)}
    assert by["vllm"].match == "exact" and "no X-data-parallel-rank header" in by["vllm"].setting
    by = {
        f.stack: f
        for f in fix_settings(
            "remove_slow_unit", "instance", "profiler", names, units=("10.0.0.6:8000",)
        )
    }
    assert by["nginx"].setting == "server 10.0.0.6:8000 down;"
    assert fix_settings("current", "observed", "vllm", names) == ()


def test_the_fix_is_in_every_format(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    write_profiler(simulate(builtin_scenarios()["dp-weight"]), tmp_path)
    doc = whatif_doc(tmp_path, capsys, "--dp-policies", "round_robin,minimum_tokens")
    assert doc["recommended"] == "dp:minimum_tokens"
    sglang = next(f for f in doc["fix"]["settings"] if f["stack"] == "sglang")
    assert sglang["setting"].startswith("--load-balance-method minimum_tokens")
    assert "dp:round_robin" in doc["ranking"]["excluded"]  # long prompts pinned to dp3
    for fmt, needle in (
        ("markdown", "| sglang | `--load-balance-method minimum_tokens"),
        ("terminal", "sglang: --load-balance-method minimum_tokens"),
        ("html", "<code>--load-balance-method minimum_tokens"),
    ):
        assert (
            main(
                [
                    "whatif",
                    str(tmp_path),
                    "--format",
                    fmt,
                    "--jobs",
                    "1",
                    "--dp-policies",
                    "round_robin,minimum_tokens",
                ]
            )
            == 0
        )
        out = capsys.readouterr().out
        assert needle in out, fmt
        assert "TTFT P99" in out


def test_simulate_reroutes_from_the_command_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["simulate", "long-input", "--out", str(tmp_path / "x"), "--gateway", "nope"]) == 2
    assert "--gateway: unknown policy 'nope'" in capsys.readouterr().err
    assert not (tmp_path / "x").exists()


def test_request_log_hides_what_the_profiler_does_not_show() -> None:
    res = simulate(dataclasses.replace(weight_skew(), duration_s=40.0))
    log = request_log(res)
    open_ = log.requests.filter(pl.col("e2e_ms").is_null())
    assert open_.height > 0 and set(open_["output_tokens"].to_list()) == {1}
    done = res.requests.filter(pl.col("finish_s").is_not_null()).sort("arrival_s")
    shown = log.requests.filter(pl.col("e2e_ms").is_not_null()).sort("arrival_s")
    assert shown["output_tokens"].to_list() == done["output_tokens"].to_list()


def test_online_load_comes_from_the_e2e_counters_when_they_are_there() -> None:
    from skewscope.whatif.extract import Layout
    from skewscope.whatif.online import exact_spent, spent_load

    df = pl.DataFrame(
        {
            "instance": ["a", "a", "b", "b"],
            "dp_rank": [0, 0, 0, 0],
            "requests": [2.0, 0.0, 4.0, 1.0],
            "e2e_mean_ms": [500.0, None, 250.0, 1000.0],
        }
    )
    assert exact_spent(df, at_start=False)
    assert not exact_spent(df, at_start=True)  # SGLang counts requests leaving the queue
    assert not exact_spent(df.with_columns(pl.lit(None, pl.Float64).alias("e2e_mean_ms")), False)
    wl = request_log(simulate(dataclasses.replace(builtin_scenarios()["balanced"], duration_s=5.0)))
    obs = dataclasses.replace(whatif_obs(wl), layout=Layout(("a", "b"), 1), duration_s=10.0)
    load = spent_load(df, obs, {("a", 0): 0, ("b", 0): 0})
    # seconds spent by the finished requests (E2E sum increases) over the 10 s run
    assert load.tolist() == pytest.approx([0.1, 0.2])


def whatif_obs(log: Any) -> Any:
    from skewscope.whatif.extract import extract

    return extract(log)
