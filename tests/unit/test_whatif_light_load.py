"""``skewscope whatif`` online on LIGHT load (issue 22): a CPU engine's ~3 ms steps finish each
request between two scrapes, so no window averages a running request and the step-law fit has
nothing to fit. Simulated here with a known step law (3 ms fixed + 0.02 ms per prefill token +
0.3 ms per decode sequence) at a rate where every rank averages well under one request in the
system; the scrape path reduces the simulator's /metrics to evidence, the what-if calibrates
from the ITL and TTFT means, and the predictions are checked against the scenario re-run for
real under the candidate (``whatif.truth.actual_one``)."""

from __future__ import annotations

import dataclasses

import polars as pl
import pytest

from helpers.report_schema import assert_valid
from helpers.sim_scrape import scrape_run
from skewscope.notes import Note
from skewscope.notes import WhatifNoteCode as W
from skewscope.report import phrases
from skewscope.report.whatif import document
from skewscope.sim.engine import simulate
from skewscope.sim.records import SimResult
from skewscope.sim.scenario import builtin_scenarios
from skewscope.sim.spec import Scenario
from skewscope.sources.online_workload import WorkloadEvidence, scrape_workload
from skewscope.whatif.online import MIN_STEP_ROWS, model_from, whatif_online, workload_from
from skewscope.whatif.predict import prepare
from skewscope.whatif.truth import actual_one

EVERY_S, WINDOW_S = 2.0, 5.0  # scrape interval and evidence window
RATE = 3.0  # requests/s over the fleet: ~0.2 requests in the system per rank
# (scenario, the candidate whose E2E median is checked against its real run)
CASES = {"wrong-weights": "round_robin", "dp-count": "dp:round_robin"}
FIXED_TOL = 0.05  # calibrated fixed step vs the true step of a batch of one
PREFILL_TOL = 0.10  # calibrated vs true cost per prefill token
E2E_TOL = 0.07  # predicted vs real E2E median (issue 22's goal)


def light(name: str) -> Scenario:
    """A built-in skew scenario on a fast engine at a low rate."""
    sc = builtin_scenarios()[name]
    rank = dataclasses.replace(
        sc.rank, fixed_ms=3.0, per_prefill_token_ms=0.02, per_decode_seq_ms=0.3
    )
    return dataclasses.replace(
        sc,
        name=f"{name}-light",
        rank=rank,
        workload=dataclasses.replace(sc.workload, rate=RATE),
    )


def scraped(result: SimResult, dialect: str = "vllm") -> WorkloadEvidence:
    """What scraping every simulated instance's /metrics every ``EVERY_S`` would collect,
    reduced by the scrape path."""
    return scrape_workload(scrape_run(result, dialect, EVERY_S, WINDOW_S))


def in_system_per_rank(result: SimResult, sc: Scenario) -> float:
    """The simulator's own mean number of requests in the system per rank (the truth)."""
    rq = result.requests.filter(pl.col("finish_s").is_not_null())
    spent = float((rq["finish_s"] - rq["arrival_s"]).sum())
    return spent / (result.end_s - result.start_s) / (sc.instances * sc.dp_ranks)


@pytest.mark.parametrize("name", sorted(CASES))
def test_light_load_calibrates_the_true_step_law_and_predicts_e2e(name: str) -> None:
    sc = light(name)
    result = simulate(sc)
    assert in_system_per_rank(result, sc) < 0.5  # light: well under one request per rank
    we = scraped(result)
    obs, df, dp = workload_from(we)
    model = model_from(we, obs, df, dp)
    assert model.calibrated
    # the normal fit had too few windows averaging a running request: the light path ran
    assert model.light_load is not None and model.light_load in model.notes
    assert model.light_load.values["decode_windows"] >= MIN_STEP_ROWS
    # the mean ITL is the step of a batch of one: fixed + per-sequence cost
    true_step = sc.rank.fixed_ms + sc.rank.per_decode_seq_ms
    assert abs(model.base.fixed_ms / true_step - 1) <= FIXED_TOL, model.base
    assert model.base.per_decode_seq_ms == 0.0
    rel = model.base.per_prefill_token_ms / sc.rank.per_prefill_token_ms - 1
    assert abs(rel) <= PREFILL_TOL, model.base

    gateway = ("round_robin",)
    report = whatif_online(we, "scrape", gateway, gateway)
    doc = document(report)
    assert_valid(doc, "whatif")
    facts = doc["service_model"]["light_load"]
    assert facts["estimator"] == "mean_itl_ttft" and facts["min_windows"] == MIN_STEP_ROWS
    assert facts["decode_windows"] == model.light_load.values["decode_windows"]
    assert "whatif_light_load" in {n["code"] for n in doc["note_facts"]}
    assert any(n.startswith("light load: fewer than 10 windows") for n in doc["notes"])
    assert doc["trusted"] is True, doc["calibration"]

    candidate = CASES[name]
    _, plans, _, _ = prepare(obs, model, gateway, gateway)
    plan = next(p for p in plans if p.name == candidate)
    true = actual_one(sc, plan, obs).predicted.e2e_p50_ms
    pred = report.policy(candidate).predicted.e2e_p50_ms
    assert pred is not None and true is not None
    assert abs(pred / true - 1) <= E2E_TOL, (pred, true)


def test_an_instance_level_itl_calibrates_too() -> None:
    """SGLang's ITL has no DP label (an instance-level series): each unit takes its instance's
    mean ITL, and the same true step law comes out."""
    sc = light("wrong-weights")
    we = scraped(simulate(sc), "sglang")
    assert all(rank is None for _, _, rank in we.means["itl"])
    obs, df, dp = workload_from(we)
    model = model_from(we, obs, df, dp)
    assert model.calibrated and model.light_load is not None
    true_step = sc.rank.fixed_ms + sc.rank.per_decode_seq_ms
    assert abs(model.base.fixed_ms / true_step - 1) <= FIXED_TOL, model.base
    rel = model.base.per_prefill_token_ms / sc.rank.per_prefill_token_ms - 1
    assert abs(rel) <= PREFILL_TOL, model.base


def test_a_loaded_run_keeps_the_step_law_fit() -> None:
    """At the scenario's own rate (a batch per rank) the normal fit runs: no light-load facts."""
    we = scraped(simulate(builtin_scenarios()["wrong-weights"]))
    obs, df, dp = workload_from(we)
    model = model_from(we, obs, df, dp)
    assert model.calibrated and model.light_load is None
    assert W.LIGHT_LOAD not in {n.code for n in model.notes}
    assert model.base.per_decode_seq_ms > 0


def test_the_light_load_note_reads_its_figures() -> None:
    n = Note(
        W.LIGHT_LOAD,
        {
            "estimator": "mean_itl_ttft",
            "decode_windows": 1234,
            "prefill_windows": 56,
            "min_windows": 10,
        },
    )
    assert phrases.note(n) == (
        "light load: fewer than 10 windows averaged a running request, so the service model is "
        "calibrated from means: the fixed step from the mean inter-token latency of 1,234 "
        "rank-windows (no per-sequence cost: a batch near 1 does not tell it), the prefill cost "
        "from the mean TTFT less the mean queue wait over 56 with finished requests; no batch "
        "ceiling is read from window means under one"
    )
