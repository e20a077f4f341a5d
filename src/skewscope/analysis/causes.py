"""The root-cause ranking, once: ``rank`` orders what a finding's evidence votes for
(``report.model.CauseVotes``). findings.py collects the engine's votes (the kind's candidates,
the device state, KV exhaustion), gateway.py adds the cause the router's evidence leads with;
neither edits a ranked list. The analysis ranks causes, it never words them (report/causes.py).
"""

from __future__ import annotations

from skewscope.catalogue import Cause, Kind, KvRole, Level
from skewscope.report.model import CauseVotes


def kind_causes(kind: Kind | None, level: Level) -> tuple[Cause, ...]:
    """A hot finding's candidate causes by its kind, most likely first. Load metrics cannot
    tell wrong routing weights from sticky connections, so a count finding at instance level
    names both; an unknown kind names every candidate of its level."""
    if kind == Kind.COUNT:
        return (
            (Cause.DP_DISPATCH,)
            if level == Level.DP
            else (Cause.ROUTING_WEIGHTS, Cause.STICKY_SESSIONS)
        )
    if kind == Kind.WEIGHT:
        return (Cause.LONG_REQUESTS,)
    if kind == Kind.CAPABILITY:
        return (Cause.CAPABILITY_MISMATCH,)
    first = Cause.DP_DISPATCH if level == Level.DP else Cause.ROUTING_WEIGHTS
    return (first, Cause.LONG_REQUESTS, Cause.CAPABILITY_MISMATCH)


def rank(v: CauseVotes) -> tuple[Cause, ...]:
    """Root causes, most likely first, each once where it first ranks: KV exhaustion when the
    unit cannot admit its work (throttle first, whatever the cause); the gateway's lead (what
    the router decided settles what engine metrics cannot); what the device state names; the
    fixed causes; the kind's candidates, then the secondary kind's; KV exhaustion last when it
    is only what the other causes did to the unit."""
    order = (
        *((Cause.KV_EXHAUSTION,) if v.kv == KvRole.ADMISSION else ()),
        *((v.gateway_lead,) if v.gateway_lead is not None else ()),
        *v.device_first,
        *v.fixed,
        *(kind_causes(v.kind, v.level) if v.kind is not None else ()),
        *(kind_causes(v.secondary_kind, v.level) if v.secondary_kind is not None else ()),
        *((Cause.KV_EXHAUSTION,) if v.kv == KvRole.CONSEQUENCE else ()),
    )
    return tuple(dict.fromkeys(order))


def fixed(*causes: Cause) -> CauseVotes:
    """The votes of a finding whose causes follow from it alone (stalled, starved, a pattern)."""
    return CauseVotes(fixed=causes)
