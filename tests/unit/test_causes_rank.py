"""The one root-cause ranking (analysis/causes.rank): each rule of its order on constructed votes,
each cause once over every combination of votes, and a finding's causes, joined with gateway
evidence or not, always the rank of its own votes."""

from __future__ import annotations

import itertools

import polars as pl
from test_resource import saturated

from helpers.frame_builder import Spec, make_frame
from skewscope.analysis.causes import fixed, kind_causes, rank
from skewscope.analysis.diagnose import diagnose_frame
from skewscope.analysis.gateway import join_gateway
from skewscope.catalogue import Cause, Kind, KvRole, Level
from skewscope.frame import GatewayEvidence, GatewayUnit, UnitFrame, upstream_key
from skewscope.report.model import CauseVotes, Report

C = Cause


def test_kv_exhaustion_blocking_admission_comes_first_even_before_the_gateway() -> None:
    v = CauseVotes(
        kind=Kind.COUNT,
        kv=KvRole.ADMISSION,
        gateway_lead=C.STICKY_SESSIONS,
        device_first=(C.SCHEDULER_BOUND,),
    )
    assert rank(v) == (C.KV_EXHAUSTION, C.STICKY_SESSIONS, C.SCHEDULER_BOUND, C.ROUTING_WEIGHTS)


def test_kv_exhaustion_as_a_consequence_comes_last() -> None:
    v = CauseVotes(
        kind=Kind.WEIGHT,
        secondary_kind=Kind.COUNT,
        kv=KvRole.CONSEQUENCE,
        gateway_lead=C.LONG_REQUESTS,
    )
    assert rank(v) == (C.LONG_REQUESTS, C.ROUTING_WEIGHTS, C.STICKY_SESSIONS, C.KV_EXHAUSTION)
    assert C.KV_EXHAUSTION not in rank(CauseVotes(kind=Kind.WEIGHT))


def test_the_gateway_lead_goes_before_the_device_and_is_named_once() -> None:
    v = CauseVotes(kind=Kind.CAPABILITY, device_first=(C.DEVICE_OR_PROCESS,))
    assert rank(v) == (C.DEVICE_OR_PROCESS, C.CAPABILITY_MISMATCH)
    led = CauseVotes(
        kind=Kind.CAPABILITY, device_first=(C.DEVICE_OR_PROCESS,), gateway_lead=C.ROUTING_WEIGHTS
    )
    assert rank(led) == (C.ROUTING_WEIGHTS, C.DEVICE_OR_PROCESS, C.CAPABILITY_MISMATCH)
    # a lead the engine evidence also named moves to the front, and is there once
    sticky = CauseVotes(kind=Kind.COUNT, gateway_lead=C.STICKY_SESSIONS)
    assert rank(sticky) == (C.STICKY_SESSIONS, C.ROUTING_WEIGHTS)


def test_the_secondary_kind_follows_the_kind_and_the_level_picks_the_candidates() -> None:
    mixed = CauseVotes(kind=Kind.COUNT, secondary_kind=Kind.WEIGHT)
    assert rank(mixed) == (C.ROUTING_WEIGHTS, C.STICKY_SESSIONS, C.LONG_REQUESTS)
    assert rank(CauseVotes(kind=Kind.WEIGHT, secondary_kind=Kind.COUNT, level=Level.DP)) == (
        C.LONG_REQUESTS,
        C.DP_DISPATCH,
    )
    unknown = CauseVotes(kind=Kind.UNKNOWN, level=Level.DP)
    assert rank(unknown) == (C.DP_DISPATCH, C.LONG_REQUESTS, C.CAPABILITY_MISMATCH)


def test_fixed_causes_follow_the_gateway_lead() -> None:
    assert rank(fixed(C.HEALTH_CHECK)) == (C.HEALTH_CHECK,)
    starved = CauseVotes(fixed=(C.HEALTH_CHECK,), gateway_lead=C.STALE_LOAD)
    assert rank(starved) == (C.STALE_LOAD, C.HEALTH_CHECK)


def test_every_combination_names_each_cause_once_in_the_order_of_its_rules() -> None:
    leads = (
        None,
        C.ROUTING_WEIGHTS,
        C.STICKY_SESSIONS,
        C.PREFIX_AFFINITY,
        C.LONG_REQUESTS,
        C.HEALTH_CHECK,
        C.STALE_LOAD,
    )
    devices = (
        (),
        (C.DEVICE_OR_PROCESS,),
        (C.SCHEDULER_BOUND,),
        (C.DEVICE_OR_PROCESS, C.SCHEDULER_BOUND),
    )
    hot = (None, Kind.COUNT, Kind.WEIGHT, Kind.CAPABILITY, Kind.UNKNOWN)
    n = 0
    for kind, second, level, dev, kv, lead, fix in itertools.product(
        hot, (None, Kind.COUNT, Kind.WEIGHT), Level, devices, KvRole, leads, ((), (C.HEALTH_CHECK,))
    ):
        v = CauseVotes(
            fixed=fix,
            kind=kind,
            secondary_kind=second,
            level=level,
            device_first=dev,
            kv=kv,
            gateway_lead=lead,
        )
        r = rank(v)
        n += 1
        named = {
            *fix,
            *dev,
            *([lead] if lead else []),
            *(kind_causes(kind, level) if kind else ()),
            *(kind_causes(second, level) if second else ()),
            *([C.KV_EXHAUSTION] if kv != KvRole.NONE else []),
        }
        assert len(r) == len(set(r)) and set(r) == named, v
        head = [C.KV_EXHAUSTION] if kv == KvRole.ADMISSION else []
        head += [lead] if lead else []
        head += [c for c in (*dev, *fix) if c not in head]
        assert list(r[: len(head)]) == head, v
        if kv == KvRole.CONSEQUENCE:
            assert r[-1] == C.KV_EXHAUSTION, v
        if kind is not None:  # the kind's candidates before the secondary kind's
            first = [c for c in kind_causes(kind, level) if c not in head]
            assert list(r[len(head) : len(head) + len(first)]) == first, v
    assert n == 5 * 3 * 2 * 4 * 3 * 7 * 2


def _ranked_from_votes(r: Report) -> None:
    for f in (*r.findings, *(g for d in r.drilldown for g in d.findings)):
        assert f.root_causes == rank(f.votes), f.kind


def test_a_finding_joined_with_the_gateway_is_ranked_from_its_own_votes() -> None:
    """d is sent twice its peers' requests and cannot admit them (its queue grows, its KV is
    full): throttling still comes first, the sticky policy's cause next, then the rest."""
    report = diagnose_frame(saturated(util=0.4, kv_peak=0.99, preempt=3.0))
    hot, kv = report.findings
    assert hot.votes.kv == KvRole.ADMISSION and hot.votes.gateway_lead is None
    assert hot.root_causes == (C.KV_EXHAUSTION, C.ROUTING_WEIGHTS, C.STICKY_SESSIONS)
    _ranked_from_votes(report)
    gw = GatewayEvidence(
        source="sglang-router",
        policy="consistent_hash",
        units=tuple(
            GatewayUnit(upstream=upstream_key(u), requests=400.0 if u == "d" else 200.0)
            for u in "abcd"
        ),
    )
    joined = join_gateway(report, gw)
    hot, kv = joined.findings
    assert hot.votes.gateway_lead == C.STICKY_SESSIONS
    assert hot.evidence["gateway"]["lead_cause"] == C.STICKY_SESSIONS
    assert hot.root_causes == (C.KV_EXHAUSTION, C.STICKY_SESSIONS, C.ROUTING_WEIGHTS)
    assert kv.root_causes == (C.KV_SHORTAGE,)  # the gateway ranks no KV shortage finding
    _ranked_from_votes(joined)


def test_kv_exhaustion_as_a_consequence_stays_behind_the_cause_the_gateway_confirms() -> None:
    """c's prompts are 3x its peers' and fill its KV while nothing queues: the long requests
    come first and KV exhaustion after them, before and after an access log that saw an even
    share of bigger requests (the former list surgery put KV exhaustion first here)."""
    frame = make_frame(
        {u: Spec(prompt=3000.0) if u == "c" else Spec() for u in "abcd"}, source="prometheus"
    )
    df = frame.df.with_columns(
        pl.when(pl.col("unit") == "c").then(0.97).otherwise(0.5).alias("kv_usage_max")
    )
    report = diagnose_frame(
        UnitFrame(df=df, level=frame.level, window_s=frame.window_s, source=frame.source)
    )
    (f,) = report.findings
    assert f.kind == Kind.WEIGHT and f.votes.kv == KvRole.CONSEQUENCE
    assert f.root_causes == (C.LONG_REQUESTS, C.KV_EXHAUSTION)
    gw = GatewayEvidence(
        source="nginx",
        units=tuple(
            GatewayUnit(
                upstream=upstream_key(u),
                requests=200.0,
                request_bytes=12000.0 if u == "c" else 4000.0,
            )
            for u in "abcd"
        ),
    )
    (g,) = join_gateway(report, gw).findings
    assert g.evidence["gateway"]["lead_cause"] == C.LONG_REQUESTS
    assert g.root_causes == (C.LONG_REQUESTS, C.KV_EXHAUSTION)
