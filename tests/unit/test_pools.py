"""Prefill/decode disaggregation on known truth (frames built with known pools): units of
different pools are never each other's peers, a hot unit inside a pool is found against its
own pool, and one pool saturated while the other idles is the P/D imbalance finding."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from helpers.frame_builder import Spec, make_frame
from helpers.report_schema import assert_valid
from skewscope.analysis.diagnose import diagnose_frame
from skewscope.catalogue import Kind
from skewscope.config import DEFAULT_THRESHOLDS
from skewscope.errors import SourceError
from skewscope.report.document import actions, report_document, summary


def _fleet(pools: bool, hot_decode: bool = False) -> dict[str, Spec]:
    """One prefill worker (every request's prompt, one output token) beside three decode
    workers (a third of the requests each, the generation): a healthy 1:3 split."""
    pool = (lambda p: p) if pools else (lambda p: None)
    specs = {"p0": Spec(rate=39, prompt=2000, output=1, pool=pool("prefill"))}
    for i in range(3):
        rate = 26 if hot_decode and i == 1 else 13
        specs[f"d{i}"] = Spec(rate=rate, prompt=2000, output=200, pool=pool("decode"))
    return specs


def test_prefill_worker_is_not_a_hot_spot_against_decode_workers() -> None:
    # without pools the prefill worker reads as a 3x count hot spot (issue 21, 2b "Roles")
    mixed = diagnose_frame(make_frame(_fleet(pools=False)), DEFAULT_THRESHOLDS)
    assert mixed.hot_units == ("p0",) and mixed.findings[0].kind == "count"
    report = diagnose_frame(make_frame(_fleet(pools=True)), DEFAULT_THRESHOLDS)
    assert report.verdict == "balanced" and report.hot_units == ()
    assert {u.unit: u.pool for u in report.units} == {
        "p0": "prefill",
        "d0": "decode",
        "d1": "decode",
        "d2": "decode",
    }
    doc = report_document(report)
    assert_valid(doc)
    assert {u["unit"]: u["pool"] for u in doc["units"]}["p0"] == "prefill"


def test_hot_decode_unit_is_found_against_its_own_pool() -> None:
    report = diagnose_frame(make_frame(_fleet(pools=True, hot_decode=True)), DEFAULT_THRESHOLDS)
    assert report.hot_units == ("d1",)
    (f,) = [f for f in report.findings if f.kind != Kind.PD_IMBALANCE]
    assert f.kind == "count" and set(f.reference_units) == {"d0", "d2"}  # never p0


def _saturated(side: str) -> dict[str, Spec]:
    """Two prefill and six decode instances; ``side``'s instances finish at most a fixed number
    of requests per window (a queue builds up), the other pool has room to spare."""
    specs = {}
    for i in range(2):
        specs[f"p{i}"] = Spec(
            rate=40,
            prompt=3000,
            output=1,
            pool="prefill",
            ceiling=30 if side == "prefill" else None,
        )
    for i in range(6):
        specs[f"d{i}"] = Spec(
            rate=13, prompt=3000, output=50, pool="decode", ceiling=10 if side == "decode" else None
        )
    return specs


def test_prefill_pool_saturated_while_decode_idles_is_pd_imbalance() -> None:
    report = diagnose_frame(make_frame(_saturated("prefill")), DEFAULT_THRESHOLDS)
    (pd,) = [f for f in report.findings if f.kind == Kind.PD_IMBALANCE]
    assert pd.units == ("p0", "p1") and len(pd.reference_units) == 6
    assert pd.evidence["saturated_pool"] == "prefill" and pd.evidence["pd_ratio"] == "2:6"
    assert pd.evidence["bound_share"] >= DEFAULT_THRESHOLDS.persist_share
    assert pd.evidence["running_ratio_prefill_decode"] > DEFAULT_THRESHOLDS.pd_running_ratio
    assert pd.root_causes[0] == "pd_ratio"
    assert any("P:D ratio" in a for a in actions(pd))
    rows = {r.metric: r for r in pd.side_by_side}
    assert rows["waiting"].hot > 10 * max(rows["waiting"].reference, 0.1)
    assert "prefill pool is saturated while the decode pool idles" in summary(pd)
    assert_valid(report_document(report))


def test_decode_pool_saturated_while_prefill_idles_is_pd_imbalance() -> None:
    report = diagnose_frame(make_frame(_saturated("decode")), DEFAULT_THRESHOLDS)
    (pd,) = [f for f in report.findings if f.kind == Kind.PD_IMBALANCE]
    assert pd.evidence["saturated_pool"] == "decode" and len(pd.units) == 6


def test_balanced_split_has_no_pd_finding() -> None:
    report = diagnose_frame(make_frame(_saturated("neither")), DEFAULT_THRESHOLDS)
    assert not [f for f in report.findings if f.kind == Kind.PD_IMBALANCE]


# --- the pool labels (sources/pools.py) --------------------------------------------------


def test_each_dialect_reads_its_stacks_pool_label() -> None:
    from skewscope.sources.pools import candidates, pools_from_labels

    assert [r.label for r in candidates("ms-service-metric")] == ["role", "llm_d_ai_role"]
    (dyn,) = candidates("dynamo")
    assert (dyn.label, dyn.unit_label) == ("worker_type", "worker_id")
    assert [r.label for r in candidates("vllm")] == ["llm_d_ai_role"]
    assert [r.label for r in candidates("mindie", "pool")] == ["pool"]  # the user's only
    sets = [
        ({"worker_id": "7", "worker_type": "prefill"}, ""),
        ({"worker_id": "8", "worker_type": "decode"}, ""),
        ({"worker_id": "9", "worker_type": "aggregated"}, ""),
    ]
    assert pools_from_labels(sets, dyn) == {"7": "prefill", "8": "decode"}  # 9: both phases
    # the scraped target names the unit when the series do not
    role = candidates("ms-service-metric")[0]
    assert pools_from_labels([({"role": "Decode"}, "h:1"), ({"role": "mixed"}, "h:1")], role) == {
        "h:1": "decode"
    }


def test_a_unit_labelled_with_two_pools_is_one_line_error() -> None:
    from skewscope.sources.pools import candidates, pools_from_labels

    role = candidates("ms-service-metric")[0]
    sets = [
        ({"instance": "h:1", "role": "prefill"}, ""),
        ({"instance": "h:1", "role": "decode"}, ""),
    ]
    with pytest.raises(SourceError) as err:
        pools_from_labels(sets, role)
    assert str(err.value) == (
        "unit h:1 carries role = decode and prefill on different series; "
        "a unit serves one pool: fix the label (or --role-label)"
    )


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (
            ["--role-label", "llm-d.ai/role"],
            "--role-label: 'llm-d.ai/role' is not a label name (letters, digits, _; e.g. role, "
            "worker_type, llm_d_ai_role)",
        ),
        (["--role-label", "__name__"], "--role-label: '__name__' is not a label name"),
    ],
)
def test_bad_role_label_is_one_line_usage_error(
    argv: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    from skewscope.cli import main

    # nothing listens on the URL: the name is refused before any request (exit 2, not 4)
    assert main(["diagnose", "--prometheus", "http://127.0.0.1:9", "--last", "5m", *argv]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and message in err[0], err


def test_role_label_in_config_is_checked(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from skewscope.cli import main

    cfg = tmp_path / "c.toml"
    cfg.write_text('[sources]\nrole_label = "a.b"\n')
    assert (
        main(
            ["diagnose", "--prometheus", "http://127.0.0.1:9", "--last", "5m", "--config", str(cfg)]
        )
        == 2
    )
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "[sources] role_label: expected a label name, got 'a.b'" in err[0]


def test_pd_scenario_runs_two_pools_and_bad_split_is_one_line() -> None:
    import tomllib

    from skewscope.errors import SimulationError
    from skewscope.sim.engine import simulate
    from skewscope.sim.scenario import load_scenario, scenario_from_toml

    sc = load_scenario("pd-imbalanced")
    assert sc.pd is not None and sc.pd.prefill_instances == 2
    res = simulate(sc)
    assert res.meta["pools"] == {f"inst-{i}": "prefill" if i < 2 else "decode" for i in range(8)}
    by = res.requests.group_by("instance").len().sort("instance")["len"].to_list()
    # every request passes a prefill instance, then a decode instance: as many on each side
    assert sum(by[:2]) >= sum(by[2:]) > 0.95 * sum(by[:2])
    text = (
        'name = "x"\n[cluster]\ninstances = 2\n[pd]\nprefill_instances = 2\n'
        '[truth]\nverdict = "balanced"\n'
    )
    with pytest.raises(SimulationError) as err:
        scenario_from_toml(tomllib.loads(text), "x.toml")
    assert "\n" not in str(err.value) and "prefill_instances" in str(err.value)
    assert "must be in [1, 1]" in str(err.value)


def _offline(name: str, tmp: Path):  # type: ignore[no-untyped-def]
    from skewscope.analysis.diagnose import diagnose
    from skewscope.sim.engine import simulate
    from skewscope.sim.scenario import load_scenario
    from skewscope.sim.writers.profiler import write_profiler
    from skewscope.sources.profiler import load_profiler

    write_profiler(simulate(load_scenario(name)), tmp)
    ev = load_profiler([str(p) for p in sorted(tmp.iterdir()) if p.is_dir()])
    return ev, diagnose(ev)


def test_offline_pd_imbalance_from_the_simulators_profiler_folders(tmp_path: Path) -> None:
    """Profiler folders carry no pool label: the prefill workers show by generating one token
    per request, and the saturated prefill pool is the P/D finding (known truth: inst-0, 1)."""
    ev, report = _offline("pd-imbalanced", tmp_path)
    assert "pools inferred from output tokens: prefill 2" in ev.notes[-1]
    pools = dict(ev.instance.df.select("instance", "pool").unique().iter_rows())
    assert pools == {f"inst-{i}": "prefill" if i < 2 else "decode" for i in range(8)}
    (pd,) = [f for f in report.findings if f.kind == Kind.PD_IMBALANCE]
    assert pd.units == ("inst-0", "inst-1") and pd.evidence["saturated_pool"] == "prefill"
    assert report.hot_units == ()  # no prefill worker a hot spot against decode workers


def test_offline_hot_decode_rank_inside_its_pool(tmp_path: Path) -> None:
    ev, report = _offline("pd-hot-decode-rank", tmp_path)
    assert "pools inferred from output tokens: prefill 3" in ev.notes[-1]
    assert not [f for f in report.findings if f.kind == Kind.PD_IMBALANCE]
    assert report.hot_units == ("inst-5",)
    drilled = {u: f.kind for d in report.drilldown for f in d.findings for u in f.units}
    assert drilled == {"inst-5/dp1": "capability"}


def test_one_kind_of_instance_is_one_pool() -> None:
    from skewscope.sources.pools import pools_by_output

    every_one = make_frame({f"u{i}": Spec(output=0.5) for i in range(3)}).df
    assert pools_by_output(every_one) == {}  # an embedding/scoring fleet: no pools
    mixed = make_frame({"p": Spec(output=0.9), "d0": Spec(), "d1": Spec()}).df
    assert pools_by_output(mixed) == {"p": "prefill", "d0": "decode", "d1": "decode"}


def test_fleet_dp_pattern_is_looked_for_inside_each_pool() -> None:
    """dp0 hot in all 3 decode instances and in none of the 4 prefill ones: 3 of 7 multi-rank
    instances is under fleet_pattern_share, 3 of the decode pool's 3 is the pattern."""
    from skewscope.analysis.diagnose import diagnose
    from skewscope.frame import Evidence, Level

    inst, dp = {}, {}
    for i in range(4):
        inst[f"p{i}"] = Spec(rate=40, output=1, pool="prefill")
        for r in range(2):
            dp[f"p{i}/dp{r}"] = Spec(rate=20, output=1, pool="prefill")
    for i in range(3):
        inst[f"d{i}"] = Spec(rate=30, output=200, pool="decode")
        for r in range(2):
            dp[f"d{i}/dp{r}"] = Spec(rate=20 if r == 0 else 10, output=200, pool="decode")
    ev = Evidence(instance=make_frame(inst), dp=make_frame(dp, level=Level.DP))
    report = diagnose(ev)
    (pattern,) = [f for f in report.findings if "fleet_dp_pattern" in f.evidence]
    assert pattern.evidence["fleet_dp_pattern"]["of_instances"] == 3
    assert pattern.evidence["fleet_dp_pattern"]["instances"] == ["d0", "d1", "d2"]
    no_pools = Evidence(
        instance=make_frame({k: replace(s, pool=None) for k, s in inst.items()}),
        dp=make_frame({k: replace(s, pool=None) for k, s in dp.items()}, level=Level.DP),
    )
    assert not [f for f in diagnose(no_pools).findings if "fleet_dp_pattern" in f.evidence]


def test_simulate_cli_writes_a_pd_history_with_pool_labels(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from skewscope.cli import main

    om, out = tmp_path / "pd.om", tmp_path / "folders"
    assert (
        main(
            [
                "simulate",
                "pd-imbalanced",
                "--openmetrics",
                str(om),
                "--metrics-interval",
                "15s",
                "--metrics-dialect",
                "dynamo",
                "--out",
                str(out),
            ]
        )
        == 0
    )
    text = om.read_text()
    assert 'worker_type="prefill"' in text and 'worker_type="decode"' in text
    assert sorted(p.name for p in out.iterdir() if p.is_dir()) == [f"inst-{i}" for i in range(8)]


def test_scrape_path_reads_the_pool_from_the_real_ms_service_metric_exposition() -> None:
    """The real ms-service-metric 26.0.0 capture (``role="mixed"`` on every profiling series)
    as three scraped targets whose role says prefill, decode, decode: the scrape path puts
    each target in its pool; as captured (mixed) there is no pool; a target whose series say
    both prefill and decode is one line."""
    from skewscope.sources.scrape import Snapshot, evidence_from_snapshots, parse_exposition

    samples = Path(__file__).parents[1] / "data" / "samples"
    name = "ms-service-metric-26.0.0-vllm-0.32-cpu-dp2-{}-load.metrics.txt"
    texts = [(samples / name.format(w)).read_text() for w in ("rank0", "rank1")]

    def snaps(role: str) -> list[Snapshot]:
        return [
            Snapshot(
                t, tuple(parse_exposition(x.replace('role="mixed"', f'role="{role}"')).samples)
            )
            for t, x in ((0.0, texts[0]), (5.0, texts[1]))
        ]

    roles = {"p:8000": "prefill", "d1:8000": "decode", "d2:8000": "decode"}
    ev = evidence_from_snapshots(
        {t: snaps(r) for t, r in roles.items()}, t0=0.0, window_s=5.0, n_windows=1
    )
    assert dict(ev.instance.df.select("instance", "pool").iter_rows()) == roles
    assert "pools from label role: decode 2, prefill 1; each pool judged on its own" in ev.notes
    mixed = evidence_from_snapshots({"h:8000": snaps("mixed")}, t0=0.0, window_s=5.0, n_windows=1)
    assert mixed.instance.df["pool"].is_null().all()
    both = [
        Snapshot(0.0, snaps("prefill")[0].samples),
        Snapshot(
            5.0,
            snaps("prefill")[1].samples
            + tuple(s for s in snaps("decode")[1].samples if ("role", "decode") in s[1])[:5],
        ),
    ]
    with pytest.raises(SourceError, match=r"^unit h:8000 carries role = decode and prefill"):
        evidence_from_snapshots({"h:8000": both}, t0=0.0, window_s=5.0, n_windows=1)
