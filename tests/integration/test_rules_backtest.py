"""The generated rules evaluated at explicit instants (``skewscope backtest``'s evaluator) on
every built-in scenario's history, backfilled into a REAL Prometheus: no wall clock, no race.

Each scenario is one scrape job of the same Prometheus (one peer group each). The rule window
is the window the diagnosis judges most runs by; the rules are evaluated every half window. The
expected alerts come from each run's ground truth (``truth_dict``): each skew scenario alerts
on its hot (or starved) unit at the truth's level, the kind it names first is the truth's, and
the balanced and idle scenarios never alert. (The wall-clock form of this test, on live
simulated clusters, is the opt-in smoke test tests/live/test_rules_live.py.)
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from helpers.backends import backfill, serve_prometheus
from helpers.binaries import need
from skewscope.frame import WINDOWS
from skewscope.monitor.backtest import backtest_url
from skewscope.monitor.backtest_score import STARVED_KIND
from skewscope.monitor.rules import HOT_ALERT, STARVED_ALERT
from skewscope.report.backtest_model import AlertEpisode
from skewscope.sim.engine import simulate
from skewscope.sim.records import SimResult
from skewscope.sim.scenario import builtin_scenarios
from skewscope.sim.writers.openmetrics import write_openmetrics
from skewscope.sim.writers.truth import truth_dict

DIALECT = "vllm"
STEP_S = 2.0  # the history's scrape interval
# At the shortest run's window (10 s), transient-burst's 20 s burst and its 40 s drain keep
# inst-0 hot for about six windows: longer than the alerts' horizon (alert_windows = 4), i.e.
# a skew by the alerts' definition, as a 30 min skew is at the 5 min window. The diagnosis
# calls the run balanced because it judges the whole 240 s range. Bursts shorter than a
# window stay quiet: tests/integration/test_rules_promtool.py (burst).
WINDOW_SCALED_SKEW = {"transient-burst"}
# Stale load (bursts taking turns over the DP ranks) is a pattern of the diagnosis
# (analysis/stale.py), not of the rules: their short horizon sees one rank hot for a window or
# two at a time and alerts on it, kind unknown. Known gap, kept as a strict xfail below.
STALE = "stale-load"
# sticky-sessions: while inst-0 queues for seconds, inst-2's mean queue wait rises to ~170 ms
# for three windows, against the 100 ms floor (its peers wait ~25 ms). Averaged over the
# smoothing span that was hot for half the horizon and alerted (kind unknown); the rules now
# smooth by the median of the span's evaluations, which such a rise does not move for long.
FLOOR_FALSE = ("sticky-sessions", "inst-2")


@pytest.fixture(scope="module")
def fired(
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[tuple[dict[str, dict[str, Any]], dict[str, list[AlertEpisode]]]]:
    tmp = tmp_path_factory.mktemp("rules-backtest")
    runs: dict[str, SimResult] = {n: simulate(s) for n, s in sorted(builtin_scenarios().items())}
    for job, result in runs.items():
        om = write_openmetrics(
            result,
            tmp / f"{job}.om",
            DIALECT,
            STEP_S,
            job=job,
            instance_labels={i: i for i in result.instances},
        )
        backfill(need("promtool", "prometheus"), om, tmp / "blocks")
    # the window the diagnosis judges most runs by (10 s; the two 120 s runs get 5 s)
    chosen = [WINDOWS.choose(r.end_s - r.start_s) for r in runs.values()]
    window = max(set(chosen), key=chosen.count)
    start = min(r.start_s for r in runs.values())
    end = max(r.end_s for r in runs.values())
    with serve_prometheus(need("prometheus", "prometheus"), tmp / "blocks", tmp) as url:
        episodes = backtest_url(
            url, start, end, dialect=DIALECT, window_s=window, step_s=window / 2
        )
    by_job: dict[str, list[AlertEpisode]] = {job: [] for job in runs}
    for e in episodes:
        by_job[dict(e.labels)["job"]].append(e)
    yield {job: truth_dict(r) for job, r in runs.items()}, by_job


def _unit(e: AlertEpisode) -> str:
    return e.instance if e.dp_rank is None else f"{e.instance}/dp{e.dp_rank}"


def _story(eps: list[AlertEpisode]) -> str:
    return (
        "; ".join(f"{e.alert} {_unit(e)} {e.level} {e.kind} {e.start:.0f}-{e.end:.0f}" for e in eps)
        or "no alert"
    )


def test_skew_scenarios_alert_on_their_unit(
    fired: tuple[dict[str, dict[str, Any]], dict[str, list[AlertEpisode]]],
) -> None:
    """The truth's units alert at the truth's level, the first alert on each names the truth's
    kind; any other unit that alerts is a hot peer of a starved unit (the documented
    Alertmanager inhibit rule silences those): nothing else may alert."""
    truths, by_job = fired
    skewed = [
        j
        for j, t in truths.items()
        if t["verdict"] == "imbalanced" and j not in WINDOW_SCALED_SKEW | {STALE}
    ]
    assert skewed
    for job in skewed:
        t, eps = truths[job], by_job[job]
        want = {(u, STARVED_KIND) for u in t["idle_units"]}
        want |= {(u, t["kind"]) for u in t["hot_units"]}
        first: dict[str, AlertEpisode] = {}
        for e in sorted(eps, key=lambda e: e.start):
            if e.alert in (HOT_ALERT, STARVED_ALERT):  # the gap alert names no kind
                first.setdefault(_unit(e), e)
        for unit, kind in want:
            assert unit in first, f"{job}: {unit} never alerted; {_story(eps)}"
            got = first[unit]
            assert (got.level, got.kind) == (t["level"], kind), f"{job}: {_story(eps)}"
        extra = {u: e for u, e in first.items() if u not in {u for u, _ in want}}
        starved = bool(t["idle_units"])
        assert not extra or (starved and all(e.kind != STARVED_KIND for e in extra.values())), (
            f"{job}: unexplained alerts on {sorted(extra)}; {_story(eps)}"
        )


def test_quiet_scenarios_never_alert(
    fired: tuple[dict[str, dict[str, Any]], dict[str, list[AlertEpisode]]],
) -> None:
    truths, by_job = fired
    quiet = [
        j for j, t in truths.items() if t["verdict"] != "imbalanced" and j not in WINDOW_SCALED_SKEW
    ]
    assert {"balanced", "idle"} <= set(quiet)
    for job in quiet:
        assert not by_job[job], f"{job} alerted: {_story(by_job[job])}"


@pytest.mark.xfail(
    strict=True,
    reason="the rules have no stale-load pattern: rotating bursts "
    "alert on single ranks for a window or two (known gap, issue 21)",
)
def test_stale_load_does_not_alert_on_its_rotating_ranks(
    fired: tuple[dict[str, dict[str, Any]], dict[str, list[AlertEpisode]]],
) -> None:
    truths, by_job = fired
    assert not truths[STALE]["hot_units"]
    hot = [e for e in by_job[STALE] if e.alert == HOT_ALERT]
    assert not hot, _story(hot)


def test_a_peer_queueing_slightly_above_the_floor_does_not_alert(
    fired: tuple[dict[str, dict[str, Any]], dict[str, list[AlertEpisode]]],
) -> None:
    _, by_job = fired
    job, unit = FLOOR_FALSE
    assert not [e for e in by_job[job] if _unit(e) == unit], _story(by_job[job])
