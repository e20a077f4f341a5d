"""The candidates: the current routing (observed placement), the balancing policies real systems
ship at instance and DP level, and the two fixes that are not a policy — give the units their
fair weights, take the slow unit out (and put a unit that left the pool back).
"""

from __future__ import annotations

import dataclasses
import math

import numpy as np

from skewscope.config import DEFAULT_THRESHOLDS, Thresholds
from skewscope.errors import UsageError
from skewscope.notes import Note
from skewscope.notes import WhatifNoteCode as W
from skewscope.sim.policies import (
    OBSERVED,
    POLICIES,
    SESSION_POLICIES,
    RoutingSpec,
    reads_load,
)
from skewscope.whatif.calibrate import ServiceModel
from skewscope.whatif.correlation import HEAVY, Correlation
from skewscope.whatif.extract import Observed
from skewscope.whatif.replay import Plan

CURRENT = "current"
DEFAULT_POLICIES: tuple[str, ...] = (
    "round_robin",
    "least_requests",
    "least_tokens",
    "power_of_two",
    "consistent_hash",
    "cache_aware",
)
DEFAULT_DP_POLICIES: tuple[str, ...] = (
    "round_robin",
    "vllm_dp",
    "shortest_queue",
    "minimum_tokens",
)
CANDIDATES: tuple[str, ...] = tuple(p for p in POLICIES if p not in ("weighted", "sticky"))
# Policies that count requests: what a correlated placement's router already looks like.
COUNT_BASED: frozenset[str] = frozenset({"round_robin", "weighted"})
POOL_FIXES: frozenset[str] = frozenset({"restore_pool", "remove_slow_unit"})


def parse_policies(text: str | None, default: tuple[str, ...], what: str) -> tuple[str, ...]:
    if text is None:
        return default
    names = tuple(n.strip() for n in text.split(",") if n.strip())
    bad = [n for n in names if n not in CANDIDATES]
    if bad or not names:
        raise UsageError(
            f"{what}: unknown policy {bad[0] if bad else text!r}; "
            f"expected a comma list of {', '.join(CANDIDATES)}"
        )
    return names


def _weighted(share: tuple[float, ...] | list[float], equal: bool) -> RoutingSpec:
    if equal:
        return RoutingSpec("round_robin")
    return RoutingSpec("weighted", tuple(max(float(w), 1e-6) for w in share))


def _observed(share: tuple[float, ...]) -> RoutingSpec:
    # requests the evidence did not place fall back to the observed shares
    return RoutingSpec(OBSERVED, tuple(max(float(w), 1e-6) for w in share))


def instance_capacity(obs: Observed, model: ServiceModel) -> list[float]:
    """Relative capacity per instance: the sum of its ranks' 1/speed."""
    lay = obs.layout
    d = lay.dp_ranks
    return [
        sum(1.0 / model.ranks[i * d + k].speed for k in range(lay.size(i)))
        for i in range(len(lay.instances))
    ]


def slow_instances(obs: Observed, model: ServiceModel, th: Thresholds) -> list[int]:
    cap = np.array(instance_capacity(obs, model))
    med = float(np.median(cap))
    return [i for i, c in enumerate(cap) if c > 0 and med / c >= th.capability_ratio]


def build_plans(
    obs: Observed,
    model: ServiceModel,
    policies: tuple[str, ...],
    dp_policies: tuple[str, ...],
    th: Thresholds = DEFAULT_THRESHOLDS,
) -> tuple[list[Plan], list[Note]]:
    """The current plan first, then every applicable candidate; notes say what was left out."""
    lay = obs.layout
    n = len(lay.instances)
    notes: list[Note] = []
    cur_dp = _weighted(obs.rank_share, obs.equal_ranks)
    cur_gw = _weighted(obs.instance_share, obs.equal_instances)
    avail = obs.availability
    plans = [
        Plan(
            CURRENT,
            "observed",
            Note(W.PLAN_CURRENT, {"inferred": obs.inferred}),
            _observed(obs.instance_share),
            _observed(obs.rank_share),
            avail,
        )
    ]
    for p in policies:
        if p in SESSION_POLICIES and not obs.has_sessions:
            continue
        if n < 2:
            notes.append(Note(W.ONE_INSTANCE, {"policy": p}))
            break
        plans.append(
            Plan(p, "instance", Note(W.PLAN_GATEWAY, {"policy": p}), RoutingSpec(p), cur_dp, avail)
        )
    for p in dp_policies if lay.dp_ranks > 1 else ():
        if p in SESSION_POLICIES and not obs.has_sessions:
            continue
        plans.append(
            Plan(
                f"dp:{p}",
                "dp",
                Note(W.PLAN_DP, {"policy": p}),
                _observed(obs.instance_share),
                RoutingSpec(p),
                avail,
            )
        )
    cap = instance_capacity(obs, model)
    fair = [c / sum(cap) for c in cap]
    if n >= 2 and (not obs.equal_instances or max(fair) / min(fair) >= th.capability_ratio):
        plans.append(
            Plan(
                "fix_weights",
                "instance",
                Note(W.PLAN_FIX_WEIGHTS, {"weights": fair}),
                RoutingSpec("weighted", tuple(fair)),
                cur_dp,
                avail,
            )
        )
    if lay.dp_ranks > 1 and not obs.equal_ranks:
        plans.append(
            Plan(
                "dp:fix_weights",
                "dp",
                Note(W.PLAN_DP_EQUAL),
                _observed(obs.instance_share),
                RoutingSpec("round_robin"),
                avail,
            )
        )
    slow = slow_instances(obs, model, th)
    if slow and len(slow) < n:
        names = [lay.instances[i] for i in slow]
        pool = tuple((obs.duration_s, math.inf) if i in slow else a for i, a in enumerate(avail))
        share = [0.0 if i in slow else s for i, s in enumerate(obs.instance_share)]
        plans.append(
            Plan(
                "remove_slow_unit",
                "instance",
                Note(W.PLAN_REMOVE_SLOW, {"units": names}),
                _weighted(share, obs.equal_instances)
                if not obs.equal_instances
                else RoutingSpec("round_robin"),
                cur_dp,
                pool,
            )
        )
    if any(lo > 0 or math.isfinite(hi) for lo, hi in avail):
        full = tuple((0.0, math.inf) for _ in avail)
        plans.append(
            Plan("restore_pool", "instance", Note(W.PLAN_RESTORE_POOL), cur_gw, cur_dp, full)
        )
    return plans, notes


def _at(plan: Plan, level: str) -> RoutingSpec:
    return plan.gateway if level == "instance" else plan.dispatcher


def not_the_fix(plans: list[Plan], c: Correlation | None) -> frozenset[str]:
    """Candidates that count requests at the correlated level: the current router already
    does, so they are no fix for a correlation they cannot see (never recommended)."""
    if c is None:
        return frozenset()
    return frozenset(
        p.name
        for p in plans
        if p.level == c.level and p.name not in POOL_FIXES and _at(p, c.level).policy in COUNT_BASED
    )


def robustness_plans(plans: list[Plan], c: Correlation) -> list[Plan]:
    """Each load-aware candidate at the correlated level once more, with the heavy requests
    still pinned to the units they were on (a client that keeps pinning them): how well the
    policy balances the rest around them."""
    out = []
    for p in plans:
        spec = _at(p, c.level)
        if p.level != c.level or p.robust_of or not reads_load(spec):
            continue
        pinned = dataclasses.replace(spec, pin_tag=HEAVY, pin_units=c.units, pin_counted=True)
        inst = c.level == "instance"
        out.append(
            dataclasses.replace(
                p,
                name=f"{p.name}+pinned",
                robust_of=p.name,
                gateway=pinned if inst else p.gateway,
                dispatcher=p.dispatcher if inst else pinned,
            )
        )
    return out
