"""The fleet-day benchmark's own pieces on known truth (benchmarks/bench_alerts.py): Prometheus'
``for:`` semantics over evaluation stamps, and the scoring of alert episodes against truth."""

from __future__ import annotations

import pytest

from alert_eval import Fired, firing_runs
from alert_score import Episode, Truth, score

STEP = 15.0


def test_for_fires_after_the_pending_time_and_a_gap_resets_it() -> None:
    stamps = [0, 15, 30, 45, 60, 75, 120, 135, 300, 315, 330, 345, 360]  # three runs
    assert firing_runs(stamps, STEP, 0.0) == [(0, 75), (120, 135), (300, 360)]
    # for: 60s needs 60 s of truth: the 2-point run never fires, the others from +60 s
    assert firing_runs(stamps, STEP, 60.0) == [(60, 75), (360, 360)]
    assert firing_runs([], STEP, 0.0) == []


def _truth() -> Truth:
    eps = (
        Episode("a", "instance", "i1", None, "count", 1000, 2000),
        Episode("b", "dp", "i2", "1", "weight", 3000, 4000),
        Episode("c", "dp", "i3", "0", "capability", 5000, 6000),
    )
    return Truth(0, 86400, STEP, "vllm", 300, eps, ())


def test_score_counts_units_kinds_delays_and_false_alerts() -> None:
    t = _truth()
    fired = [
        Fired("x", "dp", "i2", "1", "weight", 3300, 3900),  # b, 300 s late, right kind
        Fired("x", "dp", "i2", "0", "weight", 3300, 3900),  # the sibling rank: false
        Fired("x", "dp", "i3", "0", "count", 6500, 6600),  # c within the grace, wrong kind
        Fired("x", "instance", "i9", None, "count", 1500, 1600),  # wrong instance: false
    ]
    s = score("x", "dp", fired, t, grace_s=600)
    assert (s.episodes, s.tp, s.misses, s.false_alerts) == (2, 2, 0, 1)
    assert s.precision == pytest.approx(2 / 3) and s.recall == 1.0
    assert s.f1 == pytest.approx(0.8)
    assert dict(s.delays) == {"b": 300, "c": 1500}
    assert s.delay_median_s == 900 and s.delay_p90_s == 1500
    assert s.kind_correct == 1 and s.false_per_day == 1.0
    assert score("x", "dp", fired, t, grace_s=0).misses == 1  # c ended before 6500
    inst = score("x", "instance", fired, t, grace_s=600)
    assert (inst.tp, inst.misses, inst.false_alerts, inst.f1) == (0, 1, 1, 0.0)


def test_the_kind_is_the_first_alert_naming_one_as_the_backtest_scores_it() -> None:
    # the DP gap-widening alert (no kind label) fires first, the hot-unit alert names the kind
    t = _truth()
    fired = [
        Fired("x", "dp", "i2", "1", None, 3100, 3400),
        Fired("x", "dp", "i2", "1", "weight", 3300, 3900),
    ]
    s = score("x", "dp", fired, t, grace_s=600)
    assert dict(s.delays)["b"] == 100 and dict(s.kinds) == {"b": "weight"}
    assert s.kind_correct == 1


def test_a_group_rule_matches_every_unit_of_its_group_and_names_no_kind() -> None:
    t = _truth()
    fleet = [Fired("g", "instance", None, None, None, 0, 86400)]  # fires all day
    s = score("g", "instance", fleet, t, grace_s=0)
    assert (s.tp, s.false_alerts, s.kind_correct, s.names_unit) == (1, 0, None, False)
    per_instance = [
        Fired("g", "dp", "i2", None, None, 2000, 2100),  # before b: false
        Fired("g", "dp", "i3", None, None, 5000, 5100),
    ]  # c
    s = score("g", "dp", per_instance, t, grace_s=0)
    assert (s.tp, s.misses, s.false_alerts) == (1, 1, 1)


def test_false_firing_time_charges_a_rule_for_its_quiet_hours() -> None:
    t = _truth()
    # fires all day: matches "a", but 86400 - (1000 + 600 grace) s of it is outside any episode
    fleet = [Fired("g", "instance", None, None, None, 0, 86400)]
    s = score("g", "instance", fleet, t, grace_s=600)
    assert s.false_alerts == 0 and s.false_time_share == pytest.approx((86400 - 1600) / 86400)
    # a unit alert inside its episode costs nothing; the sibling rank's alert its whole span
    fired = [
        Fired("x", "dp", "i2", "1", "weight", 3300, 3900),
        Fired("x", "dp", "i2", "0", "weight", 3300, 3900),
    ]
    assert score("x", "dp", fired, t, grace_s=600).false_time_share == pytest.approx(600 / 86400)
