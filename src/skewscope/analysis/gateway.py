"""Method step 3 at the gateway: join what the router decided with how each engine was loaded,
and rank the root causes of an instance-level finding on it.

Engine metrics alone cannot tell wrong weights from stickiness (both are "more requests"); the
gateway's per-upstream counts, health view, policy and per-key counts can:
- the router sent the hot unit more than its peers -> routing; under a sticky policy, or when a
  few keys carry most of its excess -> ``sticky_sessions``; under a cache-aware/prefix policy ->
  ``prefix_affinity``; else ``routing_weights``;
- the router sent an even share but the unit's requests are heavier -> ``long_requests``, with
  the policy named (it counts requests, not tokens);
- a starved unit the router marked unhealthy / circuit-open while its engine reported metrics,
  or that is missing from the router's list -> ``health_check``.
Pure functions over the Report and the GatewayEvidence; no source is read here.
"""

from __future__ import annotations

import math
from dataclasses import replace
from statistics import median
from typing import NamedTuple

import numpy as np

from skewscope.analysis.causes import rank
from skewscope.analysis.gateway_series import (
    at_level,
    diverged_from,
    engine_key,
    share_series,
    stale_load,
)
from skewscope.catalogue import (
    POLICY_CLASS,
    POLLED_LOAD_CLASSES,
    Cause,
    Kind,
    Level,
    PolicyClass,
)
from skewscope.config import DEFAULT_THRESHOLDS, Thresholds
from skewscope.frame import GatewayEvidence, GatewayUnit, split_rank
from skewscope.report.facts import Note, NoteCode, StarvedFacts
from skewscope.report.model import (
    Finding,
    GatewayFacts,
    GatewayUnitFacts,
    Report,
)

NO_GATEWAY_NOTE = Note(NoteCode.NO_GATEWAY)


def missing_gateway_note(report: Report) -> Report:
    """Without gateway evidence the report says which evidence would settle a count finding."""
    if report.level != Level.INSTANCE or not any(
        f.kind in (Kind.COUNT, Kind.WEIGHT, Kind.UNKNOWN) for f in report.findings
    ):
        return report
    return replace(report, notes=(*report.notes, NO_GATEWAY_NOTE))


def _has_ranks(gw: GatewayEvidence) -> bool:
    return any(split_rank(u.upstream)[1] is not None for u in gw.units)


def join_gateway(
    report: Report, gw: GatewayEvidence, th: Thresholds = DEFAULT_THRESHOLDS
) -> Report:
    """The report with its gateway facts and the findings re-ranked at instance level, and at
    DP level when the router picks ranks (``url@rank`` workers, also joined into each DP
    drill-down)."""
    ranked = _has_ranks(gw)
    if ranked and report.drilldown:
        report = replace(report, drilldown=tuple(_join_ranks(d, gw, th) for d in report.drilldown))
    gw = at_level(gw, report.level)
    facts = gateway_facts(report, gw, th)
    notes = [Note.text(n) for n in gw.notes]
    unjoined = [u.upstream for u in facts.units if u.unit is None]
    if unjoined:
        notes.append(Note(NoteCode.GATEWAY_UNJOINED, {"upstreams": unjoined}))
    if report.level != Level.INSTANCE and not ranked:
        return replace(report, gateway=facts, notes=(*report.notes, *notes))
    findings = tuple(_rank(f, facts, th) for f in report.findings)
    starved = {u for f in findings if isinstance(f.facts, StarvedFacts) for u in f.units}
    for u in facts.units:
        down = _down(u, th)
        if u.unit is not None and u.unit not in starved and down:
            notes.append(Note(NoteCode.GATEWAY_DOWN, {"unit": u.unit, "down": down}))
    return replace(report, gateway=facts, findings=findings, notes=(*report.notes, *notes))


def _join_ranks(dp: Report, gw: GatewayEvidence, th: Thresholds) -> Report:
    """A DP drill-down with the router's workers of its instance (``url@rank``) joined."""
    inst = {split_rank(engine_key(u))[0] for u in dp.units}
    mine = tuple(
        u
        for u in gw.units
        if split_rank(u.upstream)[0] in inst and split_rank(u.upstream)[1] is not None
    )
    if not mine:
        return dp
    return join_gateway(dp, replace(gw, units=mine, notes=()), th)


def _down(u: GatewayUnitFacts, th: Thresholds) -> list[tuple[str, float]]:
    """(what, share) for each way the gateway kept ``u`` out of rotation long enough to say."""
    return [
        (what, s)
        for what, s in (("unhealthy", u.unhealthy_share), ("circuit-open", u.breaker_open_share))
        if math.isfinite(s) and s >= th.gateway_down_share
    ]


def gateway_facts(report: Report, gw: GatewayEvidence, th: Thresholds) -> GatewayFacts:
    engine_rates = {
        engine_key(u): (u.unit, u.metrics.get("requests_per_s", math.nan)) for u in report.units
    }
    shares = share_series(gw.units)
    diverged = diverged_from(gw.units, gw.window_starts, th) if gw.window_starts else {}
    finite = [r for _, r in engine_rates.values() if math.isfinite(r)]
    engine_total = sum(finite)
    router_total = sum(u.requests for u in gw.units)
    peers_median = _median_requests(gw.units)
    out = []
    for g in gw.units:
        unit, rate = engine_rates.get(g.upstream, (None, math.nan))
        excess = g.requests - peers_median.get(g.upstream, math.nan)
        top = g.keys[: th.gateway_top_keys]
        carried = sum(n for _, n in top)
        out.append(
            GatewayUnitFacts(
                upstream=g.upstream,
                unit=unit,
                requests=g.requests,
                router_share=g.requests / router_total if router_total else math.nan,
                engine_share=rate / engine_total
                if engine_total and math.isfinite(rate)
                else math.nan,
                in_pool=g.in_pool,
                unhealthy_share=g.unhealthy_share,
                breaker_open_share=g.breaker_open_share,
                request_bytes=g.request_bytes,
                top_keys=top,
                top_keys_excess_share=min(1.0, carried / excess)
                if top and excess > 0
                else math.nan,
                share_series=shares.get(g.upstream, ()),
                diverged_from=diverged.get(g.upstream),
                router_load=float(np.nanmean(g.load_series))
                if any(math.isfinite(v) for v in g.load_series)
                else math.nan,
            )
        )
    # listed and used (a worker list alone has no counts: listed is enough)
    listed = {
        g.upstream for g in gw.units if g.in_pool and (g.requests > 0 or math.isnan(g.requests))
    }
    missing = tuple(u for k, (u, _) in sorted(engine_rates.items()) if k not in listed)
    policy = gw.policy
    pclass = POLICY_CLASS.get(policy) if policy else None
    joined = {u.upstream: u.unit for u in out if u.unit is not None}
    stale = stale_load(report, gw, joined, th) if pclass in POLLED_LOAD_CLASSES else ()
    return GatewayFacts(
        gw.source,
        policy,
        str(pclass) if pclass else None,
        gw.key_name,
        tuple(out),
        missing,
        window_starts=gw.window_starts,
        load_polled=gw.load_polled,
        stale_load=stale,
        pool=gw.pool,
    )


def _median_requests(units: tuple[GatewayUnit, ...]) -> dict[str, float]:
    """Per upstream, the median requests of its peers (leave-one-out, as step 1 judges)."""
    out = {}
    for g in units:
        peers = [p.requests for p in units if p.upstream != g.upstream and p.in_pool]
        out[g.upstream] = float(median(peers)) if peers else math.nan
    return out


class Said(NamedTuple):
    """What the gateway's evidence says of one finding: the cause it leads with (None: it
    changes nothing), the sentences it adds, the figures beside them."""

    lead: Cause | None
    notes: tuple[Note, ...]
    evidence: dict[str, object]


def _rank(f: Finding, facts: GatewayFacts, th: Thresholds) -> Finding:
    said = _said(f, facts, th)
    return f if said is None else _with(f, said)


def _said(f: Finding, facts: GatewayFacts, th: Thresholds) -> Said | None:
    by_unit = {u.unit: u for u in facts.units if u.unit is not None}
    starved = isinstance(f.facts, StarvedFacts)
    if not starved and any(math.isnan(u.requests) for u in facts.units):
        return None  # a worker list without request counts cannot weigh routing shares
    if f.kind in (Kind.COUNT, Kind.UNKNOWN) and f.units and f.units[0] in by_unit and not starved:
        return _count(by_unit[f.units[0]], facts, th)
    if f.kind == Kind.WEIGHT and f.units and f.units[0] in by_unit:
        return _weight(by_unit[f.units[0]], facts, th)
    if starved:
        return _starved(f, by_unit, facts, th)
    return None


def _router_ratio(u: GatewayUnitFacts, facts: GatewayFacts) -> float:
    peers = [p.requests for p in facts.units if p.upstream != u.upstream and p.in_pool]
    ref = float(median(peers)) if peers else math.nan
    if not ref > 0:
        return math.inf if u.requests > 0 else math.nan
    return u.requests / ref


def _routed(
    u: GatewayUnitFacts,
    facts: GatewayFacts,
    ratio: float,
    verdict: str,
    lead: Cause | None,
    bytes_ratio: float = math.nan,
) -> Note:
    """What the gateway did with a hot unit's requests: sent it ``more`` than its peers,
    ``not_more`` (its extra came another way), or an ``even`` share of heavier requests."""
    return Note(
        NoteCode.GATEWAY_ROUTED,
        {
            "source": facts.source,
            "policy": facts.policy,
            "policy_class": facts.policy_class,
            "upstream": u.upstream,
            "router_share": u.router_share,
            "engine_share": u.engine_share,
            "router_ratio": ratio,
            "verdict": verdict,
            "key_name": facts.key_name,
            "top_keys": [k for k, _ in u.top_keys],
            "top_keys_excess_share": u.top_keys_excess_share,
            "request_bytes_ratio": bytes_ratio,
            "lead_cause": lead,
        },
    )


def _count(u: GatewayUnitFacts, facts: GatewayFacts, th: Thresholds) -> Said:
    ratio = _router_ratio(u, facts)
    evidence = {"router_ratio": ratio, **_facts_evidence(u, facts)}
    if not ratio >= th.count_ratio:
        return Said(None, (_routed(u, facts, ratio, "not_more", None),), evidence)
    dominated = math.isfinite(u.top_keys_excess_share) and (
        u.top_keys_excess_share >= th.gateway_key_share
    )
    if facts.policy_class == PolicyClass.STICKY or dominated:
        lead = Cause.STICKY_SESSIONS
    elif facts.policy_class == PolicyClass.PREFIX:
        lead = Cause.PREFIX_AFFINITY
    else:
        lead = Cause.ROUTING_WEIGHTS
    return Said(lead, (_routed(u, facts, ratio, "more", lead),), evidence)


def _weight(u: GatewayUnitFacts, facts: GatewayFacts, th: Thresholds) -> Said:
    ratio = _router_ratio(u, facts)
    if ratio >= th.count_ratio:
        return _count(u, facts, th)
    peers = [
        p.request_bytes
        for p in facts.units
        if p.upstream != u.upstream and math.isfinite(p.request_bytes)
    ]
    size = math.nan
    if math.isfinite(u.request_bytes) and peers and median(peers) > 0:
        size = u.request_bytes / float(median(peers))
    return Said(
        Cause.LONG_REQUESTS,
        (_routed(u, facts, ratio, "even", Cause.LONG_REQUESTS, size),),
        {"router_ratio": ratio, **_facts_evidence(u, facts)},
    )


# The cause of a starved unit the router lists healthy and in its pool, by what its policy looks
# at: a hash or sticky policy keeps its keys on other units, a prefix policy their cached
# prefixes; a load-aware router that never picks it sees a load it does not have (stale, or not
# yet received: Dynamo's KV router scored unregistered workers as busy, issue 7836); a
# token-blind one (round robin, random) only skips a unit by its weight.
UNUSED_CAUSE: dict[PolicyClass, Cause] = {
    PolicyClass.STICKY: Cause.STICKY_SESSIONS,
    PolicyClass.PREFIX: Cause.PREFIX_AFFINITY,
    PolicyClass.LOAD_AWARE: Cause.STALE_LOAD,
    PolicyClass.TOKEN_BLIND: Cause.ROUTING_WEIGHTS,
}


def _starved(
    f: Finding, by_unit: dict[str, GatewayUnitFacts], facts: GatewayFacts, th: Thresholds
) -> Said | None:
    """A starved finding ranked on the router's view of each unit: marked down or not in the
    pool is a health check; listed healthy and in the pool, yet not chosen, is its policy's
    doing (``UNUSED_CAUSE``), and the text says the router lists it."""
    parts: list[Note] = []
    leads: list[Cause] = []
    for unit in f.units:
        u = by_unit.get(unit)
        down = [] if u is None else _down(u, th)
        if u is not None and down:
            parts.append(Note(NoteCode.GATEWAY_MARKED_DOWN, {"unit": unit, "down": down}))
            leads.append(Cause.HEALTH_CHECK)
        elif u is None or not u.in_pool:
            parts.append(Note(NoteCode.GATEWAY_NOT_LISTED, {"unit": unit, "source": facts.source}))
            leads.append(Cause.HEALTH_CHECK)
        else:  # listed, healthy and in the pool, yet (almost) never chosen
            pclass = PolicyClass(facts.policy_class) if facts.policy_class else None
            lead = UNUSED_CAUSE.get(pclass) if pclass else None
            parts.append(
                Note(
                    NoteCode.GATEWAY_LISTED_UNUSED,
                    {
                        "unit": unit,
                        "source": facts.source,
                        "policy": facts.policy,
                        "policy_class": facts.policy_class,
                        "requests": u.requests,
                        "router_share": u.router_share,
                        "lead": lead,
                    },
                )
            )
            if lead:
                leads.append(lead)
    if not parts:
        return None
    # the cause most of the starved units point to (the first such on a tie)
    lead = max(dict.fromkeys(leads), key=leads.count) if leads else None
    return Said(lead, tuple(parts), {})


def _facts_evidence(u: GatewayUnitFacts, facts: GatewayFacts) -> dict[str, object]:
    return {
        "source": facts.source,
        "policy": facts.policy,
        "router_share": u.router_share,
        "engine_share": u.engine_share,
        "top_keys_excess_share": u.top_keys_excess_share,
        "router_share_diverged_from": u.diverged_from,
    }


def _with(f: Finding, said: Said) -> Finding:
    """The finding with what the gateway says, its evidence, and its causes ranked again from
    the same votes with the gateway's lead (``causes.rank``: after KV exhaustion, which says
    to throttle first whatever the cause)."""
    votes = replace(f.votes, gateway_lead=said.lead)
    return replace(
        f,
        context=(*f.context, *said.notes),
        root_causes=rank(votes),
        votes=votes,
        evidence={**f.evidence, "gateway": {**said.evidence, "lead_cause": votes.gateway_lead}},
    )
