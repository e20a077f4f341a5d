"""Gateway evidence joined to engine evidence: the root-cause ranking on frames with known truth.

Engine units are named like Prometheus instance labels (host:port); the gateway evidence says
what a router decided for the same units.
"""

from __future__ import annotations

import math

import pytest

from helpers.frame_builder import Spec, make_frame
from skewscope.analysis.diagnose import diagnose
from skewscope.analysis.gateway import NO_GATEWAY_NOTE
from skewscope.frame import Evidence, GatewayEvidence, GatewayUnit
from skewscope.report import jsonout
from skewscope.report.document import lines, summary

UNITS = ("10.0.0.1:8000", "10.0.0.2:8000", "10.0.0.3:8000", "10.0.0.4:8000")
HOT = UNITS[2]


def engines(**over: Spec) -> Evidence:
    specs = {u: over.get(u.split(".")[3].split(":")[0], Spec()) for u in UNITS}
    return Evidence(instance=make_frame(specs, source="prometheus"))


def gateway(requests: dict[str, float], policy: str | None = None, **kw: object) -> GatewayEvidence:
    units = tuple(
        GatewayUnit(upstream=f"http://{u}", requests=requests.get(u, 100.0), **kw.get(u, {}))  # type: ignore[arg-type]
        for u in UNITS
        if u in requests or u not in kw.get("absent", ())
    )  # type: ignore[operator]
    return GatewayEvidence(source="sglang-router", units=_norm(units), policy=policy)


def _norm(units: tuple[GatewayUnit, ...]) -> tuple[GatewayUnit, ...]:
    from dataclasses import replace

    from skewscope.frame import upstream_key

    return tuple(replace(u, upstream=upstream_key(u.upstream)) for u in units)


def _causes(ev: Evidence) -> tuple[list[str], str]:
    report = diagnose(ev)
    (f,) = [f for f in report.findings if HOT in f.units or f.evidence.get("starved_share")]
    return list(f.root_causes), summary(f)


COUNT = {"3": Spec(rate=44.0)}


def test_without_gateway_the_report_says_what_would_settle_it() -> None:
    report = diagnose(engines(**COUNT))
    keys = list(report.findings[0].root_causes)
    assert keys[:2] == ["routing_weights", "sticky_sessions"]
    assert NO_GATEWAY_NOTE in report.notes and report.gateway is None


@pytest.mark.parametrize(
    ("policy", "lead"),
    [
        ("round_robin", "routing_weights"),
        ("consistent_hash", "sticky_sessions"),
        ("manual", "sticky_sessions"),
        ("cache_aware", "prefix_affinity"),
        (None, "routing_weights"),
    ],
)
def test_router_sending_more_ranks_by_policy(policy: str | None, lead: str) -> None:
    sent = {u: 200.0 for u in UNITS} | {HOT: 440.0}
    ev = Evidence(instance=engines(**COUNT).instance, gateway=gateway(sent, policy))
    keys, summary = _causes(ev)
    assert keys[0] == lead
    assert f"sent {440 / 1040:.0%} of its requests to {HOT}" in summary
    assert (f"under {policy}" if policy else "policy not exported") in summary


def test_few_keys_carrying_the_excess_is_stickiness_whatever_the_policy() -> None:
    sent = {u: 200.0 for u in UNITS} | {HOT: 440.0}
    gw = gateway(sent, "round_robin")
    keyed = tuple(
        GatewayUnit(
            u.upstream,
            u.requests,
            keys=(("s1", 120.0), ("s2", 60.0), ("s3", 20.0), ("x", 1.0))
            if u.upstream == HOT
            else (),
        )
        for u in gw.units
    )
    from dataclasses import replace

    ev = Evidence(
        instance=engines(**COUNT).instance,
        gateway=replace(gw, units=keyed, key_name="http_x_session_id"),
    )
    report = diagnose(ev)
    f = report.findings[0]
    assert f.root_causes[0] == "sticky_sessions"
    # excess over the peers' median (200): 240; the top 3 keys carried 200 of it
    assert "3 key(s) (http_x_session_id) carried 83% of its excess" in summary(f)
    row = next(u for u in report.gateway.units if u.upstream == HOT)  # type: ignore[union-attr]
    assert row.top_keys_excess_share == pytest.approx(200 / 240)
    doc = jsonout.render_text(report)
    assert '"top_keys_excess_share": 0.833333' in doc


def test_even_routing_with_count_skew_says_traffic_came_another_way() -> None:
    ev = Evidence(
        instance=engines(**COUNT).instance,
        gateway=gateway({u: 200.0 for u in UNITS}, "round_robin"),
    )
    keys, summary = _causes(ev)
    assert keys[:2] == ["routing_weights", "sticky_sessions"]  # unchanged
    assert "came another way" in summary


def test_weight_skew_under_even_routing_is_a_token_blind_policy() -> None:
    ev = Evidence(
        instance=engines(**{"3": Spec(prompt=3000.0)}).instance,
        gateway=gateway({u: 200.0 for u in UNITS}, "round_robin"),
    )
    keys, summary = _causes(ev)
    assert keys[0] == "long_requests"
    assert "under round_robin, which counts requests, not tokens" in summary


def test_starved_unit_marked_unhealthy_and_circuit_open_is_a_health_check() -> None:
    d = UNITS[3]
    gw = gateway(
        {u: 200.0 for u in UNITS} | {d: 10.0},
        "round_robin",
        **{d: {"unhealthy_share": 0.4, "breaker_open_share": 0.8}},
    )
    ev = Evidence(instance=engines(**{"4": Spec(until=4)}).instance, gateway=gw)
    keys, summary = _causes(ev)
    assert keys[0] == "health_check"
    assert f"marked {d} unhealthy 40% of the range and circuit-open 80% of the range" in summary
    assert "whole cool-down" in summary


def test_starved_unit_missing_from_the_router_is_not_in_the_pool() -> None:
    d = UNITS[3]
    sent = {u: 200.0 for u in UNITS[:3]}
    ev = Evidence(
        instance=engines(**{"4": Spec(until=4)}).instance,
        gateway=gateway(sent, "round_robin", absent=(d,)),
    )
    report = diagnose(ev)
    f = next(f for f in report.findings if d in f.units)
    assert "it is not in the pool" in summary(f) and f.root_causes[0] == "health_check"
    assert report.gateway is not None and report.gateway.not_in_gateway == (d,)


def test_facts_carry_both_shares_and_unjoined_upstreams_are_noted() -> None:
    sent = {u: 200.0 for u in UNITS}
    gw = gateway(sent, "random")
    from dataclasses import replace

    gw = replace(gw, units=(*gw.units, GatewayUnit("10.9.9.9:1", 5.0)))
    report = diagnose(Evidence(instance=engines().instance, gateway=gw))
    assert report.verdict == "balanced"
    assert report.gateway is not None
    rows = {u.upstream: u for u in report.gateway.units}
    assert rows["10.9.9.9:1"].unit is None and math.isnan(rows["10.9.9.9:1"].engine_share)
    assert sum(r.engine_share for r in rows.values() if r.unit) == pytest.approx(1.0)
    assert rows[HOT].router_share == pytest.approx(200 / 805)
    assert any("10.9.9.9:1 match no engine unit" in n for n in lines(report.notes))
    assert report.gateway.policy_class == "token_blind"


def test_renderers_show_the_gateway_table() -> None:
    from skewscope.report import markdown, terminal

    sent = {u: 200.0 for u in UNITS} | {HOT: 440.0}
    report = diagnose(
        Evidence(instance=engines(**COUNT).instance, gateway=gateway(sent, "cache_aware"))
    )
    md = markdown.render(report)
    assert "## Gateway: sglang-router, policy cache\\_aware (prefix)" in md
    assert f"| {HOT} | {HOT} | 42% | " in md
    text = terminal.render_text(report, width=120)
    assert "Gateway: sglang-router, policy cache_aware (prefix)" in text
    assert "Cache-aware or prefix routing" in text


def test_a_unit_kept_out_of_rotation_without_starving_is_noted() -> None:
    b = UNITS[1]
    gw = gateway(
        {u: 200.0 for u in UNITS},
        "round_robin",
        **{b: {"unhealthy_share": 0.02, "breaker_open_share": 0.2}},
    )
    report = diagnose(Evidence(instance=engines().instance, gateway=gw))
    assert report.verdict == "balanced"
    (note,) = [n for n in lines(report.notes) if n.startswith("the gateway marked")]
    assert note.startswith(f"the gateway marked {b} circuit-open 20% of the range while")
    # below gateway_down_share: nothing said
    quiet = gateway({u: 200.0 for u in UNITS}, "round_robin", **{b: {"unhealthy_share": 0.04}})
    assert not any(
        "gateway marked" in n
        for n in lines(diagnose(Evidence(instance=engines().instance, gateway=quiet)).notes)
    )


@pytest.mark.parametrize(
    ("policy", "lead", "says"),
    [
        ("consistent_hash", "sticky_sessions", "stickiness, not a health check"),
        ("cache_aware", "prefix_affinity", "prefix affinity, not a health check"),
        ("round_robin", "routing_weights", "check the routing weights"),
    ],
)
def test_starved_unit_listed_healthy_in_the_pool_follows_the_routers_policy(
    policy: str, lead: str, says: str
) -> None:
    """The router lists the starved unit in its pool (in_pool, unhealthy_share 0) and never
    picks it: under a hash policy that is stickiness; the report must not say the router does
    not list it nor blame the health check first (it did, before)."""
    d = UNITS[3]
    gw = gateway(
        {u: 200.0 for u in UNITS} | {d: 0.0},
        policy,
        **{d: {"unhealthy_share": 0.0, "breaker_open_share": 0.0}},
    )
    ev = Evidence(instance=engines(**{"4": Spec(until=4)}).instance, gateway=gw)
    report = diagnose(ev)
    f = next(f for f in report.findings if d in f.units)
    keys = list(f.root_causes)
    assert keys[0] == lead and "health_check" in keys[1:], keys
    assert f"lists {d} healthy and in its pool, yet sent it 0 requests (under {policy})" in (
        summary(f)
    )
    assert says in summary(f)
    assert "does not list" not in summary(f) and "not in the pool" not in summary(f)
    row = next(u for u in report.gateway.units if u.unit == d)  # type: ignore[union-attr]
    assert row.in_pool and row.unhealthy_share == 0.0
