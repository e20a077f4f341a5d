"""Gateway evidence across levels and over time, on frames with known truth: a DP-aware router's
``url@rank`` workers joined to instances and to DP ranks, per-window routing shares and when they
diverged, and the stale-load note of a load-aware router."""

from __future__ import annotations

import math

from helpers.frame_builder import Spec, make_frame
from skewscope.analysis.diagnose import diagnose
from skewscope.catalogue import EPP_POLICY, Level
from skewscope.frame import Evidence, GatewayEvidence, GatewayUnit
from skewscope.report import fmt
from skewscope.report.document import footer_notes, report_document, summary
from skewscope.report.model import Report

HOSTS = ("10.0.0.1:8000", "10.0.0.2:8000", "10.0.0.3:8000", "10.0.0.4:8000")
HOT = HOSTS[2]
WINDOWS, WINDOW_S, T0 = 24, 10.0, 1_745_000_000.0
STARTS = tuple(T0 + i * WINDOW_S for i in range(WINDOWS))


def _units(per_window: dict[str, list[float]], **kw: object) -> tuple[GatewayUnit, ...]:
    return tuple(
        GatewayUnit(upstream=u, requests=sum(s), series=tuple(s), **kw.get(u, {}))  # type: ignore[arg-type]
        for u, s in per_window.items()
    )


def test_dp_aware_workers_sum_into_their_instance() -> None:
    """sglang-router --dp-aware: one worker per rank, ``url@rank``; at instance level the ranks
    of an instance are one upstream, and the hot instance is the one the router sent more."""
    frame = make_frame(
        {h: Spec(rate=44.0) if h == HOT else Spec() for h in HOSTS}, source="prometheus"
    )
    per = {f"{h}@{r}": [(22.0 if h == HOT else 10.0)] * WINDOWS for h in HOSTS for r in (0, 1)}
    gw = GatewayEvidence(
        source="sglang-router", units=_units(per), policy="round_robin", window_starts=STARTS
    )
    report = diagnose(Evidence(instance=frame, gateway=gw))
    assert report.gateway is not None
    by = {u.upstream: u for u in report.gateway.units}
    assert set(by) == set(HOSTS)  # ranks folded
    assert by[HOT].requests == 2 * 22.0 * WINDOWS and by[HOT].unit == HOT
    assert math.isclose(by[HOT].router_share, 44 / (44 + 3 * 20))
    (f,) = [f for f in report.findings if HOT in f.units]
    assert f.root_causes[0] == "routing_weights"


def test_dp_aware_workers_join_dp_ranks() -> None:
    """At DP level each ``url@rank`` joins the DP unit of that rank, and the finding on the hot
    rank is ranked on what the router sent it."""
    inst = "10.0.0.1:8000"
    ranks = [f"{inst}/dp{r}" for r in range(4)]
    dp = make_frame(
        {u: Spec(rate=44.0) if u.endswith("dp2") else Spec() for u in ranks},
        level=Level.DP,
        source="prometheus",
    )
    per = {f"{inst}@{r}": [44.0 if r == 2 else 20.0] * WINDOWS for r in range(4)}
    gw = GatewayEvidence(
        source="sglang-router", units=_units(per), policy="consistent_hash", window_starts=STARTS
    )
    report = diagnose(Evidence(instance=dp, dp=dp, gateway=gw), level="dp")
    assert report.level == Level.DP and report.gateway is not None
    joined = {u.upstream: u.unit for u in report.gateway.units}
    assert joined == {f"{inst}@{r}": f"{inst}/dp{r}" for r in range(4)}
    (f,) = [f for f in report.findings if f"{inst}/dp2" in f.units]
    assert f.root_causes[0] == "sticky_sessions"
    assert "The gateway (sglang-router) sent" in summary(f)


def test_per_window_shares_say_when_routing_diverged() -> None:
    """The router sends the hot unit its share until window 8, then three times its peers':
    its share series shows the change and the report says when it started."""
    frame = make_frame(
        {
            h: Spec(rate=20.0, burst={w: 3.0 for w in range(8, WINDOWS)}) if h == HOT else Spec()
            for h in HOSTS
        },
        source="prometheus",
    )
    per = {h: [60.0 if h == HOT and w >= 8 else 20.0 for w in range(WINDOWS)] for h in HOSTS}
    gw = GatewayEvidence(
        source="vllm-router", units=_units(per), policy="round_robin", window_starts=STARTS
    )
    report = diagnose(Evidence(instance=frame, gateway=gw))
    assert report.gateway is not None
    hot = next(u for u in report.gateway.units if u.upstream == HOT)
    assert hot.share_series[0] == 0.25 and math.isclose(hot.share_series[-1], 0.5)
    assert hot.diverged_from == T0 + 8 * WINDOW_S
    assert all(u.diverged_from is None for u in report.gateway.units if u is not hot)
    text = "\n".join(footer_notes(report))
    assert f"{HOT} diverged from its peers' from {fmt.when(T0 + 8 * WINDOW_S)}" in text
    doc = report_document(report)
    assert doc["gateway"]["window_starts"][8] == T0 + 8 * WINDOW_S


def _epp_report(
    router_view: dict[str, tuple[float, ...]], policy: str | None = EPP_POLICY, polled: bool = True
) -> Report:
    # the hot unit: short bursts (3x for one window every 6) that queue and drain
    specs = {
        h: Spec(rate=20.0, ceiling=34.0, burst={w: 3.0 for w in range(2, WINDOWS, 6)})
        if h == HOT
        else Spec()
        for h in HOSTS
    }
    frame = make_frame(specs, source="prometheus")
    per = {h: [30.0 if h == HOT else 20.0] * WINDOWS for h in HOSTS}
    units = tuple(
        GatewayUnit(
            upstream=u.upstream,
            requests=u.requests,
            series=u.series,
            load_series=router_view.get(u.upstream, (0.0,) * WINDOWS),
        )
        for u in _units(per)
    )
    gw = GatewayEvidence(
        source="llm-d-epp", units=units, policy=policy, window_starts=STARTS, load_polled=polled
    )
    return diagnose(Evidence(instance=frame, gateway=gw))


def _engine_waiting() -> dict[str, tuple[float, ...]]:
    base = _epp_report({})
    assert base.series is not None
    return {h: base.series.values["waiting"][h] for h in HOSTS}


def test_stale_load_is_noted_when_the_router_view_lags_the_engine_queue() -> None:
    """An endpoint picker whose view of the hot unit's queue is the engine's queue two windows
    late (it polls less often than the burst lasts): the report says it decided on stale load,
    by how much and how late."""
    waiting = _engine_waiting()
    lag = 2
    late = {h: (0.0,) * lag + w[:-lag] for h, w in waiting.items()}
    report = _epp_report(late)
    assert report.gateway is not None
    (stale,) = [s for s in report.gateway.stale_load if s.unit == HOT]
    assert stale.lag_windows == lag and stale.gap >= 0.5
    assert all(s.unit == HOT for s in report.gateway.stale_load)
    text = "\n".join(footer_notes(report))
    assert f"stale load: llm-d-epp under {EPP_POLICY} saw {HOT}'s queue off by" in text
    assert f"agreed best {lag} window(s) (20 s) later" in text


def test_no_stale_load_note_when_the_router_sees_the_engine_queue() -> None:
    waiting = _engine_waiting()
    report = _epp_report(dict(waiting))
    assert report.gateway is not None and report.gateway.stale_load == ()
    assert "stale load" not in "\n".join(footer_notes(report))


def test_no_stale_load_note_for_token_blind_or_unpolled_load() -> None:
    waiting = _engine_waiting()
    late = {h: (0.0,) * 2 + w[:-2] for h, w in waiting.items()}
    for report in (_epp_report(late, policy="round_robin"), _epp_report(late, polled=False)):
        assert report.gateway is not None and report.gateway.stale_load == ()


def test_dp_aware_workers_join_the_drill_down_of_an_instance_report() -> None:
    """--level auto over several instances: the top level sees the ranks summed into their
    instance; the drill-down into the hot instance sees each rank's worker on its DP unit."""
    inst_rate = {h: 44.0 if h == HOT else 20.0 for h in HOSTS}
    rank_rate = {(h, r): (12.0, 32.0)[r] if h == HOT else 10.0 for h in HOSTS for r in (0, 1)}
    instance = make_frame({h: Spec(rate=v) for h, v in inst_rate.items()}, source="prometheus")
    dp = make_frame(
        {f"{h}/dp{r}": Spec(rate=v) for (h, r), v in rank_rate.items()},
        level=Level.DP,
        source="prometheus",
    )
    per = {f"{h}@{r}": [v] * WINDOWS for (h, r), v in rank_rate.items()}
    gw = GatewayEvidence(
        source="sglang-router", units=_units(per), policy="round_robin", window_starts=STARTS
    )
    report = diagnose(Evidence(instance=instance, dp=dp, gateway=gw), level="auto")
    assert report.level == Level.INSTANCE and report.gateway is not None
    assert {u.upstream for u in report.gateway.units} == set(HOSTS)
    (drill,) = [d for d in report.drilldown if d.units and d.units[0].instance == HOT]
    assert drill.gateway is not None
    assert {u.upstream: u.unit for u in drill.gateway.units} == {
        f"{HOT}@{r}": f"{HOT}/dp{r}" for r in (0, 1)
    }
    (f,) = [f for f in drill.findings if f"{HOT}/dp1" in f.units]
    assert f.evidence["gateway"]["router_share"] == 32 / 44
