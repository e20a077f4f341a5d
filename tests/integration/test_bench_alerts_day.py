"""The fleet-day alert benchmark end to end (benchmarks/bench_alerts.py, issue 21 s.1): the
simulator's day backfilled into a real Prometheus, every source evaluated at explicit times and
scored against the day's truth.json.

The short day (default suite) checks the benchmark itself on known truth: every source scored at
both levels, the field rules naming no unit or kind, the spread rule firing on noise as the issue
reports, watch finding injected skews. The full day (opt-in, ``-m heavy``) holds skewscope to the
issue's goals."""

from __future__ import annotations

from pathlib import Path

import pytest

from alert_score import Score
from bench_alerts import LEVELS, SHORT_WATCH, WATCH_LAST_S, DayRun, run_day, write_day
from helpers.binaries import need

GRACE_S = 600.0


def _run(tmp_path: Path, dialect: str, short: bool, every_s: float) -> DayRun:
    """The benchmark's run of one day (watch with the short day's look-back on the short day,
    its defaults on the full one)."""
    need("prometheus", "prometheus")
    need("promtool", "prometheus")
    day = tmp_path / "day"
    write_day(dialect, short, None, day)
    work = tmp_path / "eval"
    work.mkdir()
    watch = SHORT_WATCH if short else {}
    return run_day(
        day,
        work,
        grace_s=GRACE_S,
        watch_every_s=every_s,
        watch_last_s=watch.get("last_s", WATCH_LAST_S),
        watch_window_s=watch.get("window_s"),
        log=False,
    )


def _by(run: DayRun) -> dict[tuple[str, str], Score]:
    return {(s.source, s.level): s for s in run.scores}


@pytest.mark.timeout(900)
def test_short_day_scores_every_source_on_known_truth(tmp_path: Path) -> None:
    # watch runs every 120 s here (its default is 30 s) to keep the default suite short
    run = _run(tmp_path, "vllm", short=True, every_s=120.0)
    by = _by(run)
    levels = {e.level for e in run.truth.episodes}
    assert levels == set(LEVELS), "the short day has skews at both levels"
    for rule in ("smg_load_distribution", "vllm_doctor_replica_imbalance", "mstt_spread"):
        for level in LEVELS:
            s = by[rule, level]
            assert s.episodes == sum(e.level == level for e in run.truth.episodes)
            assert s.kind_correct is None  # a group rule names no kind
            assert s.tp + s.misses == s.episodes
    # the spread rule fires on per-unit noise (issue 21: "mstt's rule fires 96 % of the time"):
    # at the instance level one alert all day long (it "finds" every skew, and is charged for
    # the quiet hours), between the ranks of an instance alerts that match no skew
    mstt = by["mstt_spread", "instance"]
    assert mstt.tp == mstt.episodes and mstt.false_time_share > 0.2
    assert by["mstt_spread", "dp"].false_alerts > 0
    watch = [by["skewscope watch", level] for level in LEVELS]
    assert sum(s.tp for s in watch) > 0, "watch found none of the injected skews"
    for s in watch:
        assert s.kind_correct is not None and s.kind_correct <= s.tp


@pytest.mark.heavy
@pytest.mark.timeout(3600)
@pytest.mark.parametrize("dialect", ["vllm", "sglang"])
def test_full_day_meets_the_goals(tmp_path: Path, dialect: str) -> None:
    """Issue 21's goals for skewscope on the full day: F1 >= 0.98, no false alert, every kind
    right, at both levels (the rules when this tree has the backtest evaluator, else watch)."""
    run = _run(tmp_path, dialect, short=False, every_s=30.0)
    by = _by(run)
    source = (
        "skewscope rules"
        if any(s.source == "skewscope rules" for s in run.scores)
        else "skewscope watch"
    )
    for level in LEVELS:
        s = by[source, level]
        assert s.false_alerts == 0, (level, s)
        assert s.f1 >= 0.98, (level, s)
        assert s.kind_correct == s.tp, (level, s)
