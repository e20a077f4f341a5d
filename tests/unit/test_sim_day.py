"""The fleet day (``skewscope.sim.day``) checked on known truth, read back from the written
OpenMetrics file itself (not the generator's arrays): counters reset only at restarts, units
absent exactly in their gaps, the diurnal ratio, each injected unit's share inside its episode
against outside it, the stale-load ranks' alternation, and truth.json against the contract
(notes/contract-day.md)."""

from __future__ import annotations

import itertools
import json
from pathlib import Path
from typing import Any

import numpy as np
import polars as pl
import pytest
from prometheus_client.openmetrics.parser import text_string_to_metric_families

from skewscope.cli import main
from skewscope.sim.day import DaySpec, make_plan, write_day

KINDS = {"count", "weight", "capability", "starved", "stale_load"}
NOISE = {"diurnal", "night", "burst", "restart", "scale_out", "deploy", "unit_noise"}


@pytest.fixture(scope="module", params=["vllm", "sglang"])
def day(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> tuple[dict[str, Any], pl.DataFrame, Path]:
    dialect = str(request.param)
    out = tmp_path_factory.mktemp(f"day-{dialect}")
    files = write_day(DaySpec.short(dialect=dialect), out)
    truth = json.loads(files.truth.read_text())
    return truth, read_history(files.history), files.history


def read_history(path: Path) -> pl.DataFrame:
    """Every sample line: name, instance, rank, le, value, timestamp."""
    raw = pl.read_csv(
        path,
        separator=" ",
        has_header=False,
        comment_prefix="#",
        new_columns=["head", "value", "ts"],
        quote_char=None,
        schema_overrides={"head": pl.String, "value": pl.Float64, "ts": pl.Int64},
    )
    h = pl.col("head")
    return raw.with_columns(
        name=h.str.extract(r"^([^{]+)"),
        instance=h.str.extract(r'instance="([^"]+)"'),
        rank=h.str.extract(r'(?:engine|dp_rank)="([0-9]+)"'),
        le=h.str.extract(r'le="([^"]+)"'),
    )


def names(dialect: str) -> dict[str, str]:
    """Per-rank request and prompt-token counters as the readers take them
    (sources/dialects.py: vLLM's own; SGLang's scheduler-side ones)."""
    if dialect == "vllm":
        return {
            "requests": 'vllm:request_success_total{.*finished_reason="stop"',
            "prompt": "vllm:prompt_tokens_total",
            "e2e": "vllm:e2e_request_latency_seconds",
        }
    return {
        "requests": "sglang:queue_time_seconds_count",
        "prompt": 'sglang:realtime_tokens_total{.*mode="prefill_compute"',
        "e2e": "sglang:e2e_request_latency_seconds",
    }


def per_step(df: pl.DataFrame, pattern: str) -> dict[tuple[str, str | None], np.ndarray]:
    """A counter's increments per (instance, rank), per scrape of the day (NaN: absent; a
    reset's step counts from 0 as Prometheus' ``increase`` does)."""
    sel = df.filter(pl.col("head").str.contains(pattern.replace("{", r"\{"))).sort("ts")
    stamps = np.unique(df["ts"].to_numpy())
    out = {}
    for (inst, rank), g in sel.group_by(["instance", "rank"], maintain_order=True):
        v = np.full(len(stamps), np.nan)
        v[np.searchsorted(stamps, g["ts"].to_numpy())] = g["value"].to_numpy()
        prev = np.concatenate([[np.nan], v[:-1]])
        inc = v - prev
        fresh = (inc < 0) | (np.isnan(prev) & ~np.isnan(v))  # a reset, a start: from 0
        fresh[0] = False  # the day's first scrape: the engines ran before it
        inc[fresh] = v[fresh]
        out[(str(inst), None if rank is None else str(rank))] = inc
    return out


def instance_sum(series: dict[tuple[str, str | None], np.ndarray]) -> dict[str, np.ndarray]:
    out: dict[str, np.ndarray] = {}
    for (inst, _r), v in series.items():
        out[inst] = out.get(inst, 0) + v
    return out


# ----------------------------------------------------------------------------- truth.json
def test_truth_matches_the_contract(day: tuple[dict[str, Any], pl.DataFrame, Path]) -> None:
    truth, df, _ = day
    assert {"t0", "t1", "step_s", "dialect", "episodes", "noise"} <= set(truth)
    assert truth["step_s"] == 15 and truth["t1"] - truth["t0"] == 90 * 60
    assert truth["t0"] % 3600 == 0
    eps = truth["episodes"]
    assert {e["kind"] for e in eps} == KINDS
    assert {(e["level"], e["kind"]) for e in eps} == {
        ("instance", "count"),
        ("instance", "weight"),
        ("instance", "capability"),
        ("instance", "starved"),
        ("dp", "count"),
        ("dp", "weight"),
        ("dp", "stale_load"),
    }
    labels = set(df["instance"].unique().to_list())
    window = truth["window_s"]
    for e in eps:
        assert set(e) >= {"id", "level", "instance", "dp_rank", "kind", "start", "end"}
        assert e["instance"] in labels
        assert (e["dp_rank"] is not None) == (e["level"] == "dp" and e["kind"] != "stale_load")
        # persistence (3 windows) plus 3 windows at the window the short day is sized for
        assert e["end"] - e["start"] >= 6 * window
    assert len({e["instance"] for e in eps}) == len(eps)
    spans = sorted((e["start"], e["end"]) for e in eps)
    assert all(a[1] < b[0] for a, b in itertools.pairwise(spans))  # no overlap
    noise = truth["noise"]
    assert {n["what"] for n in noise} == NOISE
    restarted = {n["instance"] for n in noise if n["what"] == "restart"}
    assert len(restarted) == truth["instances"]  # every instance of the fleet, once
    assert len([n for n in noise if n["what"] == "scale_out"]) == 2
    for b in (n for n in noise if n["what"] == "burst"):
        assert 30 <= b["end"] - b["start"] <= 90 and b["dp_rank"] is not None
    ops = [(n["start"], n["end"]) for n in noise if n["what"] in ("restart", "deploy")]
    assert not any(s < e1 and e0 < en for s, en in ops for e0, e1 in spans)


def test_the_full_day_has_episodes_of_20_to_40_minutes() -> None:
    plan = make_plan(DaySpec.full())
    lengths = [(e.end - e.start) / 60 for e in plan.episodes]
    assert all(20 <= m <= 40 for m in lengths), lengths
    assert plan.spec.span_s == 6 * 3600 and plan.spec.n_instances == 18
    truth = plan.truth()
    assert len({n["instance"] for n in truth["noise"] if n["what"] == "restart"}) == 16


# ----------------------------------------------------------------------------- the file
def test_scrapes_parse_with_prometheus_clients_openmetrics_parser(
    day: tuple[dict[str, Any], pl.DataFrame, Path],
) -> None:
    """Each scrape of the file (its lines at one timestamp, with the headers) is one valid
    OpenMetrics exposition; the whole file has several MetricPoints per series, which
    prometheus_client 0.26 cannot read (it drops a histogram's later points), promtool can
    (tests/integration/test_sim_day_prometheus.py)."""
    truth, df, path = day
    with path.open("rb") as f:
        f.seek(-6, 2)
        assert f.read() == b"# EOF\n"
    lines = pl.read_csv(
        path, separator="\x01", has_header=False, quote_char=None, new_columns=["line"]
    )["line"]
    stamps = sorted(df["ts"].unique().to_list())
    down = next(n for n in truth["noise"] if n["what"] == "restart")
    for ts in (stamps[1], stamps[len(stamps) // 2], stamps[-1], down["back"]):
        keep = (lines.str.starts_with("#") & (lines != "# EOF")) | lines.str.ends_with(f" {ts}")
        scrape = "\n".join(lines.filter(keep).to_list()) + "\n# EOF\n"
        fams = list(text_string_to_metric_families(scrape))
        types = {f.name: f.type for f in fams}
        if truth["dialect"] == "vllm":
            assert types["vllm:request_success"] == "counter"
            assert types["vllm:time_to_first_token_seconds"] == "histogram"
        else:
            assert types["sglang:queue_time_seconds"] == "histogram"
            assert types["sglang:num_requests"] == "counter"
        n = sum(len(f.samples) for f in fams)
        assert n == int((df["ts"] == ts).sum()) > 0


def test_counters_only_fall_at_restarts(day: tuple[dict[str, Any], pl.DataFrame, Path]) -> None:
    """... from what the engines counted before the day, or from 0 for a unit joining."""
    truth, df, _ = day
    backs = {(n["instance"], n["back"]) for n in truth["noise"] if n["what"] == "restart"}
    cum = df.filter(pl.col("name").str.contains(r"(_total|_count|_bucket|_sum)$"))
    falls = (
        cum.sort("ts").with_columns(d=pl.col("value").diff().over("head")).filter(pl.col("d") < 0)
    )
    seen = {(str(r["instance"]), int(r["ts"])) for r in falls.iter_rows(named=True)}
    assert seen and seen <= backs  # counters fall only at a restarted unit's first scrape back
    assert {i for i, _ in seen} == {i for i, _ in backs}  # ... and every restart shows one
    for key in ("requests", "prompt"):
        pattern = names(truth["dialect"])[key]
        at_t0 = cum.filter(
            (pl.col("ts") == truth["t0"]) & pl.col("head").str.contains(pattern.replace("{", r"\{"))
        )
        assert len(at_t0) and at_t0["value"].min() > 0  # the engines counted before the day
    joined = {n["instance"]: n["start"] for n in truth["noise"] if n["what"] == "scale_out"}
    requests = names(truth["dialect"])["requests"].replace("{", r"\{")
    first = (
        cum.filter(pl.col("instance").is_in(list(joined)) & pl.col("head").str.contains(requests))
        .group_by("head")
        .agg(pl.col("value").sort_by("ts").first(), pl.col("ts").min())
    )
    assert len(first) == 2 * truth["ranks"] and set(first["ts"]) == set(joined.values())
    assert first["value"].max() <= 20  # from 0: the requests of its first 15 s


def test_units_are_absent_exactly_in_their_restart_gaps(
    day: tuple[dict[str, Any], pl.DataFrame, Path],
) -> None:
    truth, df, _ = day
    stamps = np.arange(truth["t0"], truth["t1"] + 1, truth["step_s"])
    have = {
        str(k[0]): set(g["ts"].to_list())
        for k, g in df.filter(
            pl.col("name").str.ends_with("running") | (pl.col("name") == "sglang:num_running_reqs")
        ).group_by("instance")
    }
    gaps = {
        n["instance"]: (n["start"], n["back"]) for n in truth["noise"] if n["what"] == "restart"
    }
    joins = {n["instance"]: n["start"] for n in truth["noise"] if n["what"] == "scale_out"}
    assert set(have) == set(gaps) | set(joins)
    for inst, seen in have.items():
        lo, hi = gaps.get(inst, (np.inf, np.inf))
        want = {int(t) for t in stamps if not lo <= t < hi and t >= joins.get(inst, 0)}
        assert seen == want, inst
        if inst in gaps:
            assert 60 <= hi - lo <= 120


def test_diurnal_ramp_is_three_from_trough_to_peak_after_a_near_idle_night(
    day: tuple[dict[str, Any], pl.DataFrame, Path],
) -> None:
    truth, df, _ = day
    fleet = np.nansum(
        np.stack(list(per_step(df, names(truth["dialect"])["requests"]).values())), axis=0
    )
    per_10m = fleet[1:].reshape(-1, 40).sum(axis=1)  # 10 min of 15 s steps
    night = next(n for n in truth["noise"] if n["what"] == "night")
    k_night = int((night["end"] - truth["t0"]) // 600)
    day_part = per_10m[k_night + 1 :]
    assert 2.5 <= day_part.max() / day_part.min() <= 3.6
    assert per_10m[: max(k_night, 1)].max() < 0.2 * day_part.max()  # the night is near idle


def _share(series: dict[Any, np.ndarray], key: Any, on: np.ndarray, peers: list[Any]) -> float:
    """The unit's counter increase over the steps ``on`` against its peers' median."""
    mine = np.nansum(series[key][on])
    return float(mine / np.median([np.nansum(series[p][on]) for p in peers]))


def test_each_injected_unit_carries_its_skew_inside_its_episode_only(
    day: tuple[dict[str, Any], pl.DataFrame, Path],
) -> None:
    truth, df, _ = day
    n = names(truth["dialect"])
    reqs, prompt = per_step(df, n["requests"]), per_step(df, n["prompt"])
    e2e_sum, e2e_n = per_step(df, n["e2e"] + "_sum"), per_step(df, n["e2e"] + "_count")
    stamps = np.arange(truth["t0"], truth["t1"] + 1, truth["step_s"])
    base = sorted({n["instance"] for n in truth["noise"] if n["what"] == "restart"})
    night = next(n for n in truth["noise"] if n["what"] == "night")
    for e in truth["episodes"]:
        on = (stamps > e["start"]) & (stamps <= e["end"])
        # outside: the day after the night, away from the episode and the unit's restart
        off = (stamps > night["end"] + 600) & ~(
            (stamps > e["start"] - 600) & (stamps <= e["end"] + 600)
        )
        for n in truth["noise"]:
            if n["what"] == "restart" and n["instance"] == e["instance"]:
                off &= ~((stamps >= n["start"]) & (stamps <= n["end"]))
        if e["level"] == "instance":
            peers = [i for i in base if i != e["instance"]]
            r, p = instance_sum(reqs), instance_sum(prompt)
            key = e["instance"]
        else:
            key = (e["instance"], e["dp_rank"] or "0")
            peers = [k for k in reqs if k[0] == e["instance"] and k != key]
            r, p = reqs, prompt
        inside, outside = _share(r, key, on, peers), _share(r, key, off, peers)
        tok_in, tok_out = _share(p, key, on, peers), _share(p, key, off, peers)
        assert 0.85 < outside < 1.15 and 0.8 < tok_out < 1.25, e["id"]
        if e["kind"] == "count":
            assert inside > 1.45 and tok_in > 1.45, (e["id"], inside)
        elif e["kind"] == "weight":
            assert 0.85 < inside < 1.15 and tok_in > 2.0, (e["id"], inside, tok_in)
        elif e["kind"] == "starved":
            assert inside < 0.1, (e["id"], inside)
        elif e["kind"] == "capability":
            sums, ns = instance_sum(e2e_sum), instance_sum(e2e_n)
            slow = np.nansum(sums[key][on]) / np.nansum(ns[key][on])
            fleet = np.median([np.nansum(sums[p][on]) / np.nansum(ns[p][on]) for p in peers])
            assert 0.85 < inside < 1.15 and slow > 1.5 * fleet, (e["id"], inside, slow / fleet)
        else:  # stale load: equal over the episode
            assert 0.8 < inside < 1.25, (e["id"], inside)


def test_stale_load_ranks_alternate_at_the_publish_period(
    day: tuple[dict[str, Any], pl.DataFrame, Path],
) -> None:
    truth, df, _ = day
    (e,) = [e for e in truth["episodes"] if e["kind"] == "stale_load"]
    reqs = per_step(df, names(truth["dialect"])["requests"])
    stamps = np.arange(truth["t0"], truth["t1"] + 1, truth["step_s"])
    on = (stamps > e["start"]) & (stamps <= e["end"])
    r0, r1 = reqs[(e["instance"], "0")][on], reqs[(e["instance"], "1")][on]
    assert np.corrcoef(r0, r1)[0, 1] < -0.7  # one rank's burst is the other's lull
    lag = 2 * e["publish_period_s"] // truth["step_s"]  # one full alternation
    x = r0 - r0.mean()
    assert np.corrcoef(x[:-lag], x[lag:])[0, 1] > 0.5
    assert np.corrcoef(x[: -lag // 2], x[lag // 2 :])[0, 1] < -0.5
    minutes = (
        r0[: len(r0) // 4 * 4].reshape(-1, 4).sum(1),
        r1[: len(r1) // 4 * 4].reshape(-1, 4).sum(1),
    )
    assert 0.8 < minutes[0].sum() / minutes[1].sum() < 1.25  # averages out over minutes
    off = (stamps > e["start"] - 900) & (stamps <= e["start"])
    a, b = reqs[(e["instance"], "0")][off], reqs[(e["instance"], "1")][off]
    assert np.corrcoef(a, b)[0, 1] > -0.3  # before it, the ranks are independent


def test_restarted_and_joining_units_warm_up_cold(
    day: tuple[dict[str, Any], pl.DataFrame, Path],
) -> None:
    truth, df, _ = day
    r = instance_sum(per_step(df, names(truth["dialect"])["requests"]))
    stamps = np.arange(truth["t0"], truth["t1"] + 1, truth["step_s"])
    fleet = np.concatenate([[np.nan], np.nanmedian(np.stack(list(r.values()))[:, 1:], axis=0)])
    for n in (n for n in truth["noise"] if n["what"] in ("restart", "scale_out")):
        back = n.get("back", n["start"])
        first = (stamps > back) & (stamps <= back + 60)
        share = np.nansum(r[n["instance"]][first]) / np.nansum(fleet[first])
        assert share < 0.6, (n, share)  # cold: fewer requests for the first minute


def test_cli_writes_the_short_day(tmp_path: Path) -> None:
    out = tmp_path / "d"
    assert (
        main(
            ["simulate", "day", "--out", str(out), "--short", "--dialect", "sglang", "--seed", "5"]
        )
        == 0
    )
    truth = json.loads((out / "truth.json").read_text())
    assert truth["dialect"] == "sglang" and truth["seed"] == 5
    assert (out / "history.om").read_text().endswith("# EOF\n")
    assert main(["simulate", "day", "--out", str(out), "--short"]) == 2  # not empty


@pytest.mark.heavy
def test_the_full_day_holds_the_same_truth(tmp_path: Path) -> None:
    """The 6 h day (8.8 M samples; ~75 s to write and read back): the file checks above."""
    files = write_day(DaySpec.full(), tmp_path)
    full = (json.loads(files.truth.read_text()), read_history(files.history), files.history)
    for check in (
        test_counters_only_fall_at_restarts,
        test_units_are_absent_exactly_in_their_restart_gaps,
        test_diurnal_ramp_is_three_from_trough_to_peak_after_a_near_idle_night,
        test_each_injected_unit_carries_its_skew_inside_its_episode_only,
        test_stale_load_ranks_alternate_at_the_publish_period,
        test_restarted_and_joining_units_warm_up_cold,
    ):
        check(full)
