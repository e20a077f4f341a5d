"""Findings of one judged unit: the hot, KV-shortage, starved and stalled findings, their
severity, root causes and the sentences that explain them (split from diagnose.py, which runs
the steps and the levels)."""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from skewscope.analysis.classify import Classification
from skewscope.analysis.detect import UnitHeat
from skewscope.analysis.impact import Impact, Trend
from skewscope.analysis.matrix import SignalMatrix, load_ratio
from skewscope.analysis.resource import (
    DeviceState,
    KvShortage,
    device_causes,
)
from skewscope.analysis.saturation import Saturation
from skewscope.analysis.stall import Stall, stall_evidence, stall_summary
from skewscope.analysis.summary import (
    reference_summary,
    unit_summary,
)
from skewscope.catalogue import BOUND_PREFIX, METRIC_BY_KEY, Kind, metric_text
from skewscope.config import ROOT_CAUSES, Thresholds
from skewscope.frame import Level, UnitFrame
from skewscope.report.model import Finding, RootCauseRef, SideBySide

TAIL_METRICS = ("queue_wait_p95_ms", "ttft_p99_ms", "e2e_p99_ms")
SIDE_BY_SIDE = (
    "requests_per_s",
    "prompt_tokens_per_request",
    "generation_tokens_per_request",
    "tokens_per_s",
    "batch_size",
    "step_time_ms",
    "cost_us_per_token",
    "running",
    "waiting",
    "queue_wait_p95_ms",
    "ttft_p99_ms",
    "e2e_p99_ms",
    "kv_usage",
    "kv_usage_max",
    "free_blocks_min",
    "preemptions",
)


def side_by_side(
    hot: dict[str, float],
    ref: dict[str, float],
    hot_bounds: dict[str, str] | None = None,
    ref_bounds: dict[str, str] | None = None,
) -> tuple[SideBySide, ...]:
    """Hot against reference per metric; no ratio where either side is a bucket bound."""
    hb, rb = hot_bounds or {}, ref_bounds or {}
    rows = []
    for k in SIDE_BY_SIDE:
        h, r = hot.get(k, math.nan), ref.get(k, math.nan)
        ratio = math.nan if k in hb or k in rb else load_ratio(h, r)
        rows.append(SideBySide(k, h, r, ratio, hb.get(k, ""), rb.get(k, "")))
    return tuple(rows)


@dataclass(frozen=True)
class HotResult:
    heat: UnitHeat
    cls: Classification
    imp: Impact
    trend: Trend
    hot: dict[str, float]
    ref: dict[str, float]
    ref_units: tuple[str, ...]
    sat: Saturation
    lower_bound: str  # why the request ratio understates its traffic: "finished", "unplaced", ""
    unplaced: float  # unplaced requests per window of its instance linked to it (NaN: none)
    window_s: float  # window length (rates are per second, ``unplaced`` is per window)
    weight_p: float  # permutation p-value of its heavier requests (NaN: not tested)
    hot_bounds: dict[str, str]  # percentile metrics resting on bucket bounds (summary.unit_bounds)
    ref_bounds: dict[str, str]
    dev: DeviceState  # is the device full?
    kv: KvShortage  # KV block shortage symptoms




def stall_findings(m: SignalMatrix, stalls: list[Stall]) -> list[Finding]:
    cause = ROOT_CAUSES["engine_stalled"]
    stalled = {s.index for s in stalls}
    every = np.ones(len(m.windows), dtype=bool)
    out = []
    for s in stalls:
        peers = [k for k in range(len(m.units))
                 if k not in stalled and m.groups[k] == m.groups[s.index]]
        hot = unit_summary(m, s.index, every)
        ref = reference_summary([unit_summary(m, k, every) for k in peers])
        out.append(
            Finding(
                kind="stalled",
                units=(s.unit,),
                reference_units=tuple(m.units[k] for k in peers),
                severity="high",
                summary=stall_summary(s, int(np.isfinite(m.get("running")[:, s.index]).sum())),
                evidence=stall_evidence(s),
                actions=cause.actions,
                root_causes=(RootCauseRef(cause.key, cause.title),),
                side_by_side=side_by_side(hot, ref),
            )
        )
    return out




def chance_note(r: HotResult) -> str:
    return (
        f"{r.heat.unit} ran hotter with heavier requests ({_x(r.cls.input_ratio)} the input, "
        f"{_x(r.cls.output_ratio)} the output tokens per request of its peers), but that is "
        f"consistent with chance (p = {r.weight_p:.2f}, permutation of per-window token loads "
        "across the units): heavy-tailed request sizes, not weight skew"
    )


def counts_finished(frame: UnitFrame) -> bool:
    """Online sources count finished requests, the profiler counts arrivals (frame.SIGNALS)."""
    return frame.source != "profiler"


def _causes(r: HotResult, level: Level) -> list[str]:
    """Candidate causes, most likely first. Load metrics cannot tell wrong routing weights
    from sticky connections, so a count finding at instance level names both."""
    causes = _kind_causes(r.cls.kind, level)
    if r.cls.secondary_kind:
        causes += [c for c in _kind_causes(r.cls.secondary_kind, level) if c not in causes]
    first, _ = device_causes(r.cls.kind, r.dev, r.imp)
    causes = [*first, *(c for c in causes if c not in first)]
    if r.imp.kv_exhausted:
        causes.insert(0, "kv_exhaustion")
    return causes


def _kind_causes(kind: str | None, level: Level) -> list[str]:
    if kind == "count":
        causes = ["dp_dispatch"] if level == Level.DP else ["routing_weights", "sticky_sessions"]
    elif kind == "weight":
        causes = ["long_requests"]
    elif kind == "capability":
        causes = ["capability_mismatch"]
    elif level == Level.DP:
        causes = ["dp_dispatch", "long_requests", "capability_mismatch"]
    else:
        causes = ["routing_weights", "long_requests", "capability_mismatch"]
    return causes


def _severity(r: HotResult, th: Thresholds) -> str:
    """High when tails double, KV runs out, or the peers got nothing at all (every request of
    the group lands here and the rest of its capacity is wasted)."""
    tail = [r.imp.ratios.get(k, math.nan) for k in TAIL_METRICS]
    if r.imp.kv_exhausted or any(math.isfinite(t) and t >= th.severe_tail_ratio for t in tail):
        return "high"
    if r.cls.count_ratio == math.inf:
        return "high"
    return "medium" if r.imp.hurting else "low"


def hot_finding(r: HotResult, level: Level, th: Thresholds) -> Finding:
    causes = _causes(r, level)
    actions: list[str] = []
    for key in causes:
        actions.extend(a for a in ROOT_CAUSES[key].actions if a not in actions)
    evidence: dict[str, object] = {
        "hot_share": r.heat.hot_share,
        "longest_hot_run_windows": r.heat.hot_run,
        "driver": r.heat.driver,
        **r.cls.as_evidence(),
        "impact_ratios": r.imp.ratios,
        "hurting": list(r.imp.hurting),
        "kv_exhausted": r.imp.kv_exhausted,
        "kv_filling": r.imp.kv_filling,
        "queue_growing": r.imp.queue_growing,
        "resource": list(r.imp.resource_notes),
        "weight_p_value": r.weight_p,
        "saturated": r.sat.saturated,
        "saturated_share": r.sat.share,
        "batch_ceiling": r.sat.ceiling,
        "count_ratio_is_lower_bound": bool(r.lower_bound),
        "unplaced_requests_per_window": r.unplaced,
        "count_ratio_with_unplaced": _with_unplaced(r),
        "gap_widening_while_tail_rises": r.trend.widening,
        "gap_slope_share": r.trend.gap_slope_share,
        "tail_slope_share": r.trend.tail_slope_share,
        **r.dev.as_evidence(),
        "kv_shortage": list(r.kv.keys),
    }
    return Finding(
        kind=str(r.cls.kind),
        weight_side=r.cls.weight_side,
        units=(r.heat.unit,),
        reference_units=r.ref_units,
        severity=_severity(r, th),
        summary=_summary(r, th),
        evidence=evidence,
        actions=tuple(actions),
        root_causes=tuple(RootCauseRef(k, ROOT_CAUSES[k].title) for k in causes),
        side_by_side=side_by_side(r.hot, r.ref, r.hot_bounds, r.ref_bounds),
    )


def _with_unplaced(r: HotResult) -> float:
    """The request ratio if the linked unplaced requests are counted on the hot rank."""
    n_h, n_r = r.hot["requests_per_s"], r.ref["requests_per_s"]
    linked = r.unplaced / r.window_s
    return load_ratio(n_h + linked, n_r) if math.isfinite(r.unplaced) else math.nan


def _saturation_sentence(r: HotResult) -> str:
    if not r.sat.saturated:
        return ""
    queue = "a growing queue" if r.imp.queue_growing else "a standing queue"
    text = (
        f"It sits at its batch ceiling (about {r.sat.ceiling:.0f} running) with {queue} in "
        f"{r.sat.share:.0%} of the judged windows"
    )
    if math.isfinite(r.unplaced):
        return (
            f"{text}; {r.unplaced:.1f} requests per window of its instance could not be placed "
            "on a DP rank and, as it is the only saturated rank, most likely wait here: counting "
            f"them, it gets {_x(_with_unplaced(r))} the requests of its peers."
        )
    if r.lower_bound:
        why = (
            "requests are counted when they finish"
            if r.lower_bound == "finished"
            else "some requests of its instance could not be placed on a DP rank"
        )
        return (
            f"{text}: {why}, so its request ratio ({_x(r.cls.count_ratio)}) is a lower bound "
            "and the skew may be understated."
        )
    return f"{text}."


def _x(v: float) -> str:
    if v == math.inf:
        return "∞x"  # the reference did none of it
    return f"{v:.2f}x" if math.isfinite(v) else "n/a"


def _num(key: str, v: float) -> str:
    """A value with its unit, as the summary sentence shows it."""
    if not math.isfinite(v):
        return "n/a"
    text = metric_text(key, v)
    return f"{text} ms" if METRIC_BY_KEY[key].unit == "ms" else text


def _bounded_num(key: str, v: float, bound: str) -> str:
    return BOUND_PREFIX.get(bound, "") + _num(key, v)


def _split_sentence(count_share: float, weight_share: float) -> str:
    """The excess decomposition in words; a negative part means fewer or lighter requests."""
    if count_share < 0:
        return (
            "All of its excess token load comes from heavier requests "
            "(it even receives slightly fewer requests than its peers)."
        )
    if weight_share < 0:
        return (
            "All of its excess token load comes from more requests "
            "(its requests are even slightly lighter than its peers')."
        )
    return (
        f"Of its excess token load, {count_share:.0%} comes from more requests and "
        f"{weight_share:.0%} from heavier requests."
    )


def _summary(r: HotResult, th: Thresholds) -> str:
    c = r.cls
    judged = int(r.heat.active.sum())
    head = (
        f"{r.heat.unit} is a persistent hot spot (hot in {r.heat.hot_share:.0%} of "
        f"{judged} judged windows, {r.heat.hot_run} in a row)"
    )
    side_ratio = c.input_ratio if c.weight_side == "input" else c.output_ratio
    if c.kind == "count":
        body = (
            f"{_x(c.count_ratio)} the requests of its peers at {_x(c.weight_ratio)} tokens per "
            "request: count skew"
        )
        if c.secondary_kind == "weight":
            body += f", mixed with heavier ({c.weight_side}-heavy) requests"
    elif c.kind == "weight":
        requests = (
            f"about the same request count ({_x(c.count_ratio)})"
            if not c.count_ratio >= th.count_ratio
            else f"{_x(c.count_ratio)} the requests"
        )
        body = (
            f"{requests} but {_x(side_ratio)} the {c.weight_side} tokens per request: weight "
            f"skew ({c.weight_side}-heavy)"
        )
        if c.secondary_kind == "count":
            body += ", mixed with more requests"
    elif c.kind == "unknown":
        body = (
            f"it runs hotter than its peers on {r.heat.driver.replace('_', ' ')}, but the "
            "source exports no per-unit request or token counts at this level (e.g. SGLang "
            "without its schedulers' per-rank counters), so count, weight and capability skew "
            "cannot be told apart; "
            "compare per-rank request logs or an offline profile"
        )
    else:
        body = (
            f"similar requests ({_x(c.count_ratio)}) and tokens per request "
            f"({_x(c.weight_ratio)}) but {_x(c.capability_ratio)} the {c.capability_basis}: "
            "capability skew"
        )
    if "weight" in (c.kind, c.secondary_kind) and math.isfinite(r.weight_p):
        body += f" (beyond chance: permutation p = {r.weight_p:.3f})"
    parts = [f"{head}: {body}."]
    if math.isfinite(c.count_share) and c.kind in ("count", "weight"):
        parts.append(_split_sentence(c.count_share, c.weight_share))
    hurts = [
        f"{METRIC_BY_KEY[k].label} {_num(k, r.hot[k])} vs {_num(k, r.ref[k])}"
        for k in r.imp.hurting
        if k in METRIC_BY_KEY
    ]
    if hurts:
        parts.append("Impact against its peers: " + ", ".join(hurts) + ".")
    bounded = [k for k in TAIL_METRICS if k in r.hot_bounds or k in r.ref_bounds]
    if bounded:
        shown = ", ".join(
            f"{METRIC_BY_KEY[k].label} {_bounded_num(k, r.hot[k], r.hot_bounds.get(k, ''))} vs "
            f"{_bounded_num(k, r.ref[k], r.ref_bounds.get(k, ''))}"
            for k in bounded
        )
        parts.append(
            f"Histogram bucket bounds only, so no ratio is formed from them: {shown}."
        )
    elif not hurts:
        parts.append("No measurable queueing or latency impact yet.")
    if r.imp.kv_exhausted:
        parts.append("Its KV cache is near exhaustion.")
    if r.sat.saturated:
        parts.append(_saturation_sentence(r))
    if r.trend.widening:
        parts.append("The gap keeps widening while the service's P99 rises.")
    parts += device_causes(r.cls.kind, r.dev, r.imp)[1]
    if r.kv.found:
        parts.append("It is short of KV blocks (see the kv_shortage finding).")
    return " ".join(parts)


def kv_finding(r: HotResult) -> Finding:
    """The KV block shortage case on a hot unit, with the fixes in the order to apply them."""
    cause = ROOT_CAUSES["kv_shortage"]
    severe = {"preemptions", "waiting_grows_running_flat"} & set(r.kv.keys)
    return Finding(
        kind=str(Kind.KV_SHORTAGE),
        units=(r.heat.unit,),
        reference_units=r.ref_units,
        severity="high" if severe or r.imp.kv_exhausted else "medium",
        summary=(
            f"{r.heat.unit} is short of KV blocks: " + "; ".join(r.kv.symptoms) + ". Queueing "
            "with a full KV cache means it cannot admit more work: move traffic off it first, "
            "then lower concurrency or length limits, add KV capacity or enable prefix caching."
        ),
        evidence={
            "symptoms": list(r.kv.keys),
            "kv_usage_max": r.hot.get("kv_usage_max", math.nan),
            "free_blocks_min": r.hot.get("free_blocks_min", math.nan),
            "alloc_free_ratio": r.hot.get("alloc_free_ratio", math.nan),
            "preemptions": r.hot.get("preemptions", math.nan),
            "waiting_growth_per_window": r.imp.waiting_growth_per_window,
            "running_slope_share": r.kv.running_slope_share,
            "batch_ceiling": r.sat.ceiling,
            "saturated_share": r.sat.share,
            **r.dev.as_evidence(),
        },
        actions=cause.actions,
        root_causes=(RootCauseRef(cause.key, cause.title),),
    )


def starved_finding(
    m: SignalMatrix, heats: list[UnitHeat], starved_idx: list[int], level: Level
) -> Finding:
    units = tuple(m.units[j] for j in starved_idx)
    ref_cols = [h.index for h in heats if h.index not in starved_idx]
    shares = {heats[j].unit: heats[j].starved_share for j in starved_idx}
    mask = np.ones(len(m.windows), dtype=bool)
    ref = reference_summary([unit_summary(m, k, mask) for k in ref_cols])
    starved = reference_summary([unit_summary(m, j, mask) for j in starved_idx])
    key = "health_check" if level == Level.INSTANCE else "dp_dispatch"
    cause = ROOT_CAUSES[key]
    listing = ", ".join(f"{u} ({s:.0%} of windows)" for u, s in shares.items())
    return Finding(
        kind="count",
        units=units,
        reference_units=tuple(m.units[k] for k in ref_cols),
        severity="high",
        summary=(
            f"{listing} received almost no traffic while their peers carried the load: "
            "count skew from a unit missing from the routing pool."
        ),
        evidence={"starved_share": shares},
        actions=cause.actions,
        root_causes=(RootCauseRef(key, cause.title),),
        side_by_side=side_by_side(starved, ref),
    )
