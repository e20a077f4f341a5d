"""Backtest scoring (monitor.backtest_score, into report.backtest_model) on hand-built alerts
and truth, the truth file's one-line errors, and the rule manager's pending -> firing ->
resolved semantics (monitor.backtest.firing_intervals), all without a server."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from skewscope.errors import InputError
from skewscope.monitor.backtest import firing_intervals, parse_rules, plan
from skewscope.monitor.backtest_score import load_truth, quantile, score
from skewscope.report.backtest_model import AlertEpisode

H = 3600.0
DAY = 86_400.0


def alert(
    inst: str,
    start: float,
    end: float,
    kind: str = "count",
    rank: str | None = None,
    name: str = "SkewscopeHotUnit",
) -> AlertEpisode:
    return AlertEpisode(
        name, "dp" if rank is not None else "instance", inst, rank, kind, start, end, 2.0
    )


def truth_file(tmp_path: Path, episodes: list[dict[str, object]]) -> Path:
    p = tmp_path / "truth.json"
    p.write_text(json.dumps({"t0": 0, "t1": DAY, "step_s": 15, "episodes": episodes, "noise": []}))
    return p


def test_score_counts_hits_misses_false_alerts_and_delays(tmp_path: Path) -> None:
    truth = load_truth(
        truth_file(
            tmp_path,
            [
                {
                    "id": "a",
                    "level": "instance",
                    "instance": "i1",
                    "dp_rank": None,
                    "kind": "count",
                    "start": 1 * H,
                    "end": 1.5 * H,
                },
                # RFC 3339 times are read too
                {
                    "id": "b",
                    "level": "dp",
                    "instance": "i2",
                    "dp_rank": "1",
                    "kind": "weight",
                    "start": "1970-01-01T03:00:00Z",
                    "end": "1970-01-01T03:30:00+00:00",
                },
                {
                    "id": "c",
                    "level": "instance",
                    "instance": "i3",
                    "dp_rank": None,
                    "kind": "starved",
                    "start": 5 * H,
                    "end": 5.5 * H,
                },
            ],
        )
    )
    alerts = [
        alert("i1", 1 * H + 600, 1.6 * H),  # a: 10 min late, right kind
        alert("i1", 1.5 * H + 1200, 1.7 * H),  # a again, inside the 30 min grace
        alert("i2", 3 * H + 1800, 3.5 * H, kind="count", rank="1"),  # b: 30 min, wrong kind
        alert("i2", 3 * H, 3.5 * H, rank="0"),  # the sibling rank: false
        alert("i2", 3 * H, 3.5 * H),  # the instance level for a DP episode: false
        alert("i1", 2.5 * H, 2.6 * H),  # past the grace: false
    ]
    s = score(alerts, truth, span_s=DAY / 2, grace_s=1800)
    assert (s.detected, s.missed, s.alerts, s.true_alerts) == (2, 1, 6, 3)
    assert [m.truth.id for m in s.matches if not m.detected] == ["c"]
    assert s.precision == pytest.approx(0.5) and s.recall == pytest.approx(2 / 3)
    assert s.f1 == pytest.approx(2 * 0.5 * (2 / 3) / (0.5 + 2 / 3))
    assert s.delays_s == (600.0, 1800.0)
    assert s.median_delay_s == pytest.approx(1200.0)
    assert s.p90_delay_s == pytest.approx(600 + 0.9 * 1200)
    assert s.false_alerts_per_day == pytest.approx(3 / 0.5)
    assert s.kind_correct == 1
    d = s.as_dict()
    assert d["false_alerts"] == 3 and d["matches"][1]["alert_kind"] == "count"


def test_a_starved_alert_names_the_starved_kind() -> None:
    from skewscope.report.backtest_model import TruthEpisode

    t = [TruthEpisode("s", "instance", "i3", None, "starved", 0.0, H)]
    s = score([alert("i3", 900, H, kind="starved", name="SkewscopeStarvedUnit")], t, DAY, 0)
    assert s.kind_correct == 1 and s.false_alerts == () and s.f1 == 1.0
    # a DP-level episode without a rank (a stale-load balancer) is any rank of its instance
    t = [TruthEpisode("st", "dp", "i2", None, "stale_load", 0.0, H)]
    s = score(
        [alert("i2", 900, H, kind="unknown", rank="1"), alert("i3", 900, H, rank="1")], t, DAY, 0
    )
    assert (s.detected, s.true_alerts, len(s.false_alerts), s.kind_correct) == (1, 1, 1, 0)
    empty = score([], [], DAY, 0)
    assert empty.precision is None and empty.recall is None and empty.median_delay_s is None


def test_quantile_interpolates_like_numpy() -> None:
    import numpy as np

    xs = [1.0, 4.0, 9.0, 10.0, 30.0]
    for q in (0.0, 0.5, 0.9, 1.0):
        assert quantile(xs, q) == pytest.approx(float(np.quantile(xs, q)))


@pytest.mark.parametrize(
    "text, message",
    [
        ("{", "not JSON"),
        ("[]", "expected a JSON object"),
        ('{"episodes": 3}', "episodes: expected a list"),
        (
            '{"episodes": [{"level": "pod", "instance": "i", "kind": "count",'
            ' "start": 0, "end": 1}]}',
            "episodes[0].level: expected one of instance, dp",
        ),
        (
            '{"episodes": [{"level": "instance", "instance": "i", "kind": "count", "start": "noon",'
            ' "end": 1}]}',
            "episodes[0].start: expected epoch seconds or an RFC 3339 time",
        ),
        (
            '{"episodes": [{"level": "instance", "kind": "count", "start": 0, "end": 1}]}',
            "episodes[0].instance: expected a non-empty string",
        ),
        (
            '{"episodes": [{"level": "instance", "instance": "i", "kind": "count", "start": 9,'
            ' "end": 1}]}',
            "episodes[0]: end is before start",
        ),
    ],
)
def test_bad_truth_files_are_one_line(tmp_path: Path, text: str, message: str) -> None:
    p = tmp_path / "t.json"
    p.write_text(text)
    with pytest.raises(InputError) as e:
        load_truth(p)
    assert message in str(e.value) and str(p) in str(e.value) and "\n" not in str(e.value)
    with pytest.raises(InputError, match=r"cannot read \(No such file or directory\)"):
        load_truth(tmp_path / "missing.json")


def test_firing_follows_the_rule_managers_for() -> None:
    """Pending from the first instant the series is there, firing once ``for`` has passed,
    resolved (and pending again from scratch) at the first instant it is absent."""
    times = [float(t) for t in range(0, 600, 30)]
    present = {t: 1 + t / 1024 for t in times if not 240 <= t < 270}  # a gap at 240 s
    # for 60 s: fires at 60 (0 + 60), resolved at 240; pending again at 270, fires at 330
    assert firing_intervals(present, times, 60.0) == [
        (60.0, 210.0, 1 + 210 / 1024),
        (330.0, 570.0, 1 + 570 / 1024),
    ]
    assert firing_intervals(present, times, 0.0)[0][0] == 0.0
    assert firing_intervals(present, times, 300.0) == [(570.0, 570.0, 1 + 570 / 1024)]
    assert firing_intervals({}, times, 0.0) == []


def test_recording_rules_are_planned_in_levels() -> None:
    """Records that read no record are level 0; each one is evaluated as far back as the
    longest range and offset chain an alert reads it through."""
    doc = {
        "groups": [
            {
                "name": "g",
                "rules": [
                    {"record": "a:rate", "expr": "rate(x[5m])"},
                    {"record": "a:smooth", "expr": "avg_over_time(a:rate[15m])"},
                    {"record": "a:flag", "expr": "a:smooth > bool 1 and a:rate offset 30m"},
                    {"alert": "A", "expr": "avg_over_time(a:flag[20m]) >= 0.5", "for": "5m"},
                    {"alert": "Raw", "expr": "up == 0"},
                ],
            }
        ]
    }
    p = plan(parse_rules(doc, "f"))
    assert [[r.name for r in lv] for lv in p.levels] == [["a:rate"], ["a:smooth"], ["a:flag"]]
    assert p.back_s == {"a:flag": 1200.0, "a:smooth": 1200.0, "a:rate": 1200.0 + 1800.0 + 0}
    assert p.alert_refs == {"A": True, "Raw": False}
    with pytest.raises(InputError, match=r"f: groups\[0\].rules\[0\].for: expected a duration"):
        parse_rules({"groups": [{"rules": [{"alert": "A", "expr": "1", "for": "soon"}]}]}, "f")
    with pytest.raises(InputError, match="no alerting rule"):
        parse_rules({"groups": [{"rules": [{"record": "r", "expr": "1"}]}]}, "f")


def test_renderers_format_what_the_model_holds() -> None:
    """Every format shows the episodes and the score the model holds; a label value with
    markup or a newline stays one escaped cell."""
    from skewscope.report.backtest import RENDERERS
    from skewscope.report.backtest_model import Backtest, TruthEpisode

    eps = [alert("i<1>\n", H, 2 * H), alert("i2", 3 * H, 3.5 * H, rank="1")]
    truth = [TruthEpisode("a", "instance", "i2", None, "count", H, 2 * H)]
    bt = Backtest(
        start=0.0,
        end=DAY,
        step_s=60.0,
        source="http://prom",
        rules="generated",
        episodes=tuple(eps),
        per_day={"job=j": 2.0},
        score=score(eps, truth, DAY, 0.0),
    )
    text = RENDERERS["text"](bt)
    assert "i2/dp1" in text and "recall: 0.000" in text and "- a (count): missed" in text
    assert "\\x0a" not in text and "i<1>" in text
    md = RENDERERS["markdown"](bt)
    assert "| false alerts | 2 |" in md and "| job=j | 2.00 |" in md
    page = RENDERERS["html"](bt)
    assert "i&lt;1&gt;" in page and "<td>F1</td><td>0.000</td>" in page
    doc = json.loads(RENDERERS["json"](bt))
    assert doc["score"]["false_alerts"] == 2 and doc["episodes"][1]["dp_rank"] == "1"
    quiet = Backtest(0.0, DAY, 60.0, "http://prom", "generated", ())
    assert "No alert would have fired." in RENDERERS["text"](quiet)
