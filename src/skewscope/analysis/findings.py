"""Findings of one judged unit: the hot, KV-shortage, starved and stalled findings, their
severity, root causes and the facts that explain them (split from judge.py, which runs the
steps over one frame; report/phrases.py says the facts in words)."""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from skewscope.analysis.causes import fixed, rank
from skewscope.analysis.classify import Classification
from skewscope.analysis.detect import UnitHeat
from skewscope.analysis.impact import Impact, Trend
from skewscope.analysis.matrix import SignalMatrix, load_ratio
from skewscope.analysis.presence import LostUnit
from skewscope.analysis.resource import (
    DeviceState,
    KvShortage,
    device_causes,
)
from skewscope.analysis.saturation import Saturation
from skewscope.analysis.stale import StaleLoad
from skewscope.analysis.stall import Stall, stall_evidence
from skewscope.analysis.summary import (
    reference_summary,
    unit_summary,
)
from skewscope.catalogue import METRIC_BY_KEY, Cause, Kind, KvRole, Severity
from skewscope.config import Thresholds
from skewscope.frame import Level, UnitFrame
from skewscope.report.facts import (
    Compared,
    HotFacts,
    KvShortageFacts,
    LostFacts,
    Note,
    NoteCode,
    SaturationFacts,
    StaleLoadFacts,
    StallFacts,
    StarvedFacts,
)
from skewscope.report.model import CauseVotes, Finding, SideBySide

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
# The KV block shortage finding's rows: its symptoms' figures against the peers.
KV_SIDE_BY_SIDE = (
    "running",
    "waiting",
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
    keys: tuple[str, ...] = SIDE_BY_SIDE,
) -> tuple[SideBySide, ...]:
    """Hot against reference per metric; no ratio where either side is a bucket bound."""
    hb, rb = hot_bounds or {}, ref_bounds or {}
    rows = []
    for k in keys:
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
    stalled = {s.index for s in stalls}
    votes = fixed(Cause.ENGINE_STALLED)
    every = np.ones(len(m.windows), dtype=bool)
    out = []
    for s in stalls:
        peers = [
            k for k in range(len(m.units)) if k not in stalled and m.groups[k] == m.groups[s.index]
        ]
        hot = unit_summary(m, s.index, every)
        ref = reference_summary([unit_summary(m, k, every) for k in peers])
        out.append(
            Finding(
                kind=Kind.STALLED,
                units=(s.unit,),
                reference_units=tuple(m.units[k] for k in peers),
                severity=Severity.HIGH,
                facts=StallFacts(
                    s.unit,
                    s.in_flight,
                    s.progress,
                    s.progress_signal,
                    s.stalled_share,
                    int(np.isfinite(m.get("running")[:, s.index]).sum()),
                    s.stalled_run,
                ),
                evidence=stall_evidence(s),
                root_causes=rank(votes),
                votes=votes,
                side_by_side=side_by_side(hot, ref),
            )
        )
    return out


def chance_note(r: HotResult) -> Note:
    """Heavier requests that a permutation of the window cells reproduces by chance."""
    return Note(
        NoteCode.WEIGHT_BY_CHANCE,
        {
            "unit": r.heat.unit,
            "input_ratio": r.cls.input_ratio,
            "output_ratio": r.cls.output_ratio,
            "p_value": r.weight_p,
        },
    )


def counts_finished(frame: UnitFrame) -> bool:
    """Online sources count finished requests, the profiler counts arrivals (frame.SIGNALS)."""
    return frame.source != "profiler"


def _votes(r: HotResult, level: Level) -> CauseVotes:
    """What a hot unit's engine evidence votes for (``causes.rank`` orders it)."""
    return CauseVotes(
        kind=r.cls.kind or Kind.UNKNOWN,
        secondary_kind=r.cls.secondary_kind,
        level=level,
        device_first=tuple(device_causes(r.cls.kind, r.dev, r.imp)[0]),
        kv=_kv_role(r),
    )


def _kv_role(r: HotResult) -> KvRole:
    """A slower unit's queue fills its KV: its slowness comes first, so a capability finding's
    KV exhaustion is a consequence even when it blocks admission."""
    if not r.imp.kv_exhausted:
        return KvRole.NONE
    if kv_blocks_admission(r) and r.cls.kind != Kind.CAPABILITY:
        return KvRole.ADMISSION
    return KvRole.CONSEQUENCE


def kv_blocks_admission(r: HotResult) -> bool:
    """KV exhaustion is the cause to act on first ("throttle traffic first") only when the unit
    cannot admit its work: its queue grows (``queue_growth_per_window``), its batch sits at a
    ceiling while requests wait, or waiting grows over flat running. A full KV pool whose queue
    stays flat is what the heavier or extra requests do to it, preemptions included (they are
    its impact; the simulator's long-input and dp-weight runs preempt that way): a consequence
    of the weight or dispatch cause, ranked after it."""
    admission = {"batch_at_ceiling", "waiting_grows_running_flat"}
    return r.imp.kv_exhausted and bool(r.imp.queue_growing or admission & set(r.kv.keys))


def _severity(r: HotResult, th: Thresholds) -> Severity:
    """High when tails double, KV runs out, or the peers got nothing at all (every request of
    the group lands here and the rest of its capacity is wasted)."""
    tail = [r.imp.ratios.get(k, math.nan) for k in TAIL_METRICS]
    if r.imp.kv_exhausted or any(math.isfinite(t) and t >= th.severe_tail_ratio for t in tail):
        return Severity.HIGH
    if r.cls.count_ratio == math.inf:
        return Severity.HIGH
    return Severity.MEDIUM if r.imp.hurting else Severity.LOW


def hot_finding(r: HotResult, level: Level, th: Thresholds) -> Finding:
    votes = _votes(r, level)
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
        kind=r.cls.kind or Kind.UNKNOWN,  # a hot result always has one (judge._hot_result)
        weight_side=r.cls.weight_side,
        units=(r.heat.unit,),
        reference_units=r.ref_units,
        severity=_severity(r, th),
        facts=hot_facts(r, th),
        evidence=evidence,
        root_causes=rank(votes),
        votes=votes,
        side_by_side=side_by_side(r.hot, r.ref, r.hot_bounds, r.ref_bounds),
    )


def _with_unplaced(r: HotResult) -> float:
    """The request ratio if the linked unplaced requests are counted on the hot rank."""
    n_h, n_r = r.hot["requests_per_s"], r.ref["requests_per_s"]
    linked = r.unplaced / r.window_s
    return load_ratio(n_h + linked, n_r) if math.isfinite(r.unplaced) else math.nan


def _compared(r: HotResult, key: str) -> Compared:
    return Compared(
        key,
        r.hot.get(key, math.nan),
        r.ref.get(key, math.nan),
        r.hot_bounds.get(key, ""),
        r.ref_bounds.get(key, ""),
    )


def _saturation(r: HotResult) -> SaturationFacts | None:
    if not r.sat.saturated:
        return None
    return SaturationFacts(
        r.sat.ceiling,
        r.sat.share,
        r.imp.queue_growing,
        r.lower_bound,
        r.unplaced,
        _with_unplaced(r),
    )


def hot_facts(r: HotResult, th: Thresholds) -> HotFacts:
    """What a hot unit's summary says: how hot, why, what it costs, what else holds."""
    c = r.cls
    decomposed = math.isfinite(c.count_share) and c.kind in (Kind.COUNT, Kind.WEIGHT)
    return HotFacts(
        unit=r.heat.unit,
        kind=c.kind or Kind.UNKNOWN,
        secondary_kind=c.secondary_kind,
        weight_side=c.weight_side,
        hot_share=r.heat.hot_share,
        judged_windows=int(r.heat.active.sum()),
        hot_run=r.heat.hot_run,
        driver=r.heat.driver,
        count_ratio=c.count_ratio,
        weight_ratio=c.weight_ratio,
        input_ratio=c.input_ratio,
        output_ratio=c.output_ratio,
        capability_ratio=c.capability_ratio,
        capability_basis=c.capability_basis,
        more_requests=c.count_ratio >= th.count_ratio,
        weight_p_value=r.weight_p if Kind.WEIGHT in (c.kind, c.secondary_kind) else math.nan,
        count_share=c.count_share if decomposed else math.nan,
        weight_share=c.weight_share if decomposed else math.nan,
        hurting=tuple(_compared(r, k) for k in r.imp.hurting if k in METRIC_BY_KEY),
        bounded=tuple(
            _compared(r, k) for k in TAIL_METRICS if k in r.hot_bounds or k in r.ref_bounds
        ),
        kv_exhausted=r.imp.kv_exhausted,
        kv_consequence=r.imp.kv_exhausted and not kv_blocks_admission(r),
        saturation=_saturation(r),
        widening=r.trend.widening,
        device=device_causes(c.kind, r.dev, r.imp)[1],
        kv_shortage=r.kv.found,
        resource=r.imp.resource_notes,
        overloaded=c.capability_not_judged == "overloaded",
    )


def kv_finding(r: HotResult) -> Finding:
    """The KV block shortage case on a hot unit, with the fixes in the order to apply them."""
    severe = {"preemptions", "waiting_grows_running_flat"} & set(r.kv.keys)
    votes = fixed(Cause.KV_SHORTAGE)
    return Finding(
        kind=Kind.KV_SHORTAGE,
        units=(r.heat.unit,),
        reference_units=r.ref_units,
        severity=Severity.HIGH if severe or r.imp.kv_exhausted else Severity.MEDIUM,
        facts=KvShortageFacts(
            unit=r.heat.unit,
            symptoms=r.kv.keys,
            kv_peak=r.hot.get("kv_usage_max", math.nan),
            free_blocks_min=r.hot.get("free_blocks_min", math.nan),
            free_blocks_capacity=r.kv.free_capacity,
            batch_ceiling=r.sat.ceiling,
            saturated_share=r.sat.share,
            alloc_free_ratio=r.hot.get("alloc_free_ratio", math.nan),
            preemptions=r.hot.get("preemptions", math.nan),
            waiting_growth_per_window=r.imp.waiting_growth_per_window,
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
        root_causes=rank(votes),
        votes=votes,
        side_by_side=side_by_side(r.hot, r.ref, r.hot_bounds, r.ref_bounds, KV_SIDE_BY_SIDE),
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
    votes = fixed(Cause.HEALTH_CHECK if level == Level.INSTANCE else Cause.DP_DISPATCH)
    return Finding(
        kind=Kind.COUNT,
        units=units,
        reference_units=tuple(m.units[k] for k in ref_cols),
        severity=Severity.HIGH,
        facts=StarvedFacts(tuple(shares.items())),
        evidence={"starved_share": shares},
        root_causes=rank(votes),
        votes=votes,
        side_by_side=side_by_side(starved, ref),
    )


def stale_load_finding(m: SignalMatrix, s: StaleLoad) -> Finding:
    """A group whose units take turns carrying its load: one finding for the group, its units
    compared with one another (none of them is a hot spot or a reference)."""
    units = tuple(m.units[j] for j in s.units)
    votes = fixed(Cause.STALE_LOAD)
    return Finding(
        kind=Kind.STALE_LOAD,
        units=units,
        reference_units=(),
        severity=Severity.MEDIUM,
        facts=StaleLoadFacts(
            group=s.group,
            signal=s.signal,
            swing_share=s.swing_share,
            judged_windows=int(s.judged.sum()),
            anticorrelation=s.anticorrelation,
            switch_every_s=s.switch_every_s,
            window_s=m.window_s,
            turns=tuple(zip(units, s.turns, strict=True)),
            range_ratio=s.range_ratio,
        ),
        evidence={
            "signal": s.signal,
            "swing_share": s.swing_share,
            "anticorrelation": s.anticorrelation,
            "switch_every_s": s.switch_every_s,
            "busiest_windows": dict(zip(units, s.turns, strict=True)),
            "range_ratio": s.range_ratio,
        },
        root_causes=rank(votes),
        votes=votes,
    )


def lost_finding(m: SignalMatrix, lost: LostUnit) -> Finding:
    """A unit that stopped reporting while hot: the worst end of a hot unit, never balanced."""
    peers = tuple(
        u for k, u in enumerate(m.units) if k != lost.index and m.groups[k] == m.groups[lost.index]
    )
    votes = fixed(Cause.UNIT_LOST)
    return Finding(
        kind=Kind.LOST,
        units=(lost.unit,),
        reference_units=peers,
        severity=Severity.HIGH,
        facts=LostFacts(lost.unit, lost.lost_at_s, lost.hot_windows, lost.absent_windows),
        evidence={
            "lost_at_s": lost.lost_at_s,
            "hot_windows_before": lost.hot_windows,
            "absent_windows": lost.absent_windows,
        },
        root_causes=rank(votes),
        votes=votes,
    )
