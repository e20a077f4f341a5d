"""Runs the method's steps over a UnitFrame and returns a Report.

Level handling (``auto``): one instance with several DP ranks is judged at DP level; several
instances are judged at instance level first, then the DP ranks of every multi-rank instance
are drilled into (hot instances always kept, others when their ranks are imbalanced). When the
instances are balanced but DP data exists, the ranks of every instance are judged against their
own siblings. The same rank hot in most instances is reported once as a fleet-wide pattern.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

import numpy as np

from skewscope.analysis.classify import Classification, classify
from skewscope.analysis.detect import UnitHeat, detect
from skewscope.analysis.fleet import fleet_dp_patterns
from skewscope.analysis.gateway import join_gateway, missing_gateway_note
from skewscope.analysis.impact import Impact, Trend, gap_trend, impact
from skewscope.analysis.matrix import Flags, SignalMatrix, build_matrix, load_ratio
from skewscope.analysis.price import price_note, skew_price
from skewscope.analysis.resource import (
    DeviceState,
    KvShortage,
    device_causes,
    device_state,
    kv_shortage,
)
from skewscope.analysis.saturation import Saturation, saturation, unplaced_link
from skewscope.analysis.significance import weight_p_value
from skewscope.analysis.spread import fleet_summary
from skewscope.analysis.stall import Stall, find_stalls, stall_evidence, stall_summary
from skewscope.analysis.summary import (
    reference_bounds,
    reference_summary,
    unit_bounds,
    unit_summary,
)
from skewscope.analysis.timeline import episodes, peer_bands, series, timeline
from skewscope.catalogue import BOUND_PREFIX, METRIC_BY_KEY, Kind, metric_text
from skewscope.config import DEFAULT_THRESHOLDS, ROOT_CAUSES, Thresholds
from skewscope.errors import UsageError
from skewscope.frame import Evidence, Level, UnitFrame
from skewscope.report.model import Finding, Report, RootCauseRef, SideBySide, UnitReport

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


def diagnose(
    evidence: Evidence, level: str = "auto", th: Thresholds = DEFAULT_THRESHOLDS
) -> Report:
    """The method over the evidence; gateway evidence, when read, is joined to the top level."""
    report = _diagnose(evidence, level, th)
    if evidence.gateway is None:
        return missing_gateway_note(report)
    return join_gateway(report, evidence.gateway, th)


def _diagnose(evidence: Evidence, level: str, th: Thresholds) -> Report:
    notes = (*evidence.notes, *_dp_size_note(evidence))
    if level == Level.INSTANCE:
        return diagnose_frame(evidence.instance, th, extra_notes=notes)
    if level == Level.DP:
        if evidence.dp is None:
            raise UsageError("--level dp: the input has no DP ranks (one rank per instance)")
        return diagnose_frame(evidence.dp, th, extra_notes=notes, unplaced=_unplaced(evidence))
    if level != "auto":
        raise UsageError(f"--level: expected instance, dp or auto, got {level!r}")
    n_instances = evidence.instance.df["instance"].n_unique()
    if evidence.dp is not None and n_instances == 1:
        return diagnose_frame(evidence.dp, th, extra_notes=notes, unplaced=_unplaced(evidence))
    top = diagnose_frame(evidence.instance, th, extra_notes=notes)
    if evidence.dp is None:
        return top
    multi = [i for i in sorted(evidence.dp.df["instance"].unique().to_list())
             if _ranks(evidence.dp, i) >= 2]
    if top.verdict == "balanced":
        inside = diagnose_frame(
            evidence.dp,
            th,
            extra_notes=(*notes, "instances are balanced; DP ranks judged within each instance"),
            unplaced=_unplaced(evidence),
        )
        if inside.verdict == "imbalanced":
            patterns = fleet_dp_patterns(inside.findings, inside.units, len(multi), th)
            return replace(inside, findings=(*patterns, *inside.findings))
        return top
    if top.verdict != "imbalanced":
        return top
    # Every multi-rank instance is drilled into, not only the hot ones: a DP skew inside a
    # normal instance, or the same rank hot everywhere, is invisible at instance level.
    unplaced = _unplaced(evidence)
    drills = [(i, diagnose_frame(_only_instance(evidence.dp, i), th, unplaced=unplaced))
              for i in multi]
    kept = tuple(d for i, d in drills if i in top.hot_units or d.verdict == "imbalanced")
    patterns = fleet_dp_patterns(
        [f for _, d in drills for f in d.findings],
        [u for _, d in drills for u in d.units],
        len(multi),
        th,
    )
    return replace(top, drilldown=kept, findings=(*top.findings, *patterns))


def _dp_size_note(evidence: Evidence) -> tuple[str, ...]:
    """Instances with different DP sizes are not expected to carry equal load: say so."""
    sizes = dict.fromkeys(evidence.instance.df["instance"].unique().to_list(), 1)
    if evidence.dp is not None:
        import polars as pl

        counts = evidence.dp.df.group_by("instance").agg(n=pl.col("unit").n_unique())
        sizes.update(zip(counts["instance"].to_list(), counts["n"].to_list(), strict=True))
    if len(set(sizes.values())) <= 1:
        return ()
    listing = ", ".join(f"{k}: {v}" for k, v in sorted(sizes.items()))
    return (
        f"instances have different DP sizes ({listing}); instance-level loads are not "
        "normalised per rank, so a larger instance is expected to carry more",
    )


def _unplaced(evidence: Evidence) -> dict[str, float]:
    """Per instance, mean requests per window the source could not put on a DP rank (the
    instance frame counts them, the DP frame does not): where they are evident, the report
    links them to a saturated rank."""
    if evidence.dp is None:
        return {}
    import polars as pl

    def per_window(df: pl.DataFrame) -> pl.DataFrame:
        return df.group_by("window_start_s", "instance").agg(
            pl.col("requests").sum().alias("n"), pl.col("requests").is_not_null().any().alias("ok")
        )

    joined = per_window(evidence.instance.df).join(
        per_window(evidence.dp.df), on=("window_start_s", "instance"), suffix="_dp"
    ).filter(pl.col("ok") & pl.col("ok_dp"))
    gap = joined.group_by("instance").agg((pl.col("n") - pl.col("n_dp")).clip(0).mean())
    return dict(zip(gap["instance"].to_list(), gap["n"].to_list(), strict=True))


def _ranks(frame: UnitFrame, instance: str) -> int:
    return int(frame.df.filter(frame.df["instance"] == instance)["unit"].n_unique())


def _only_instance(frame: UnitFrame, instance: str) -> UnitFrame:
    return replace(frame, df=frame.df.filter(frame.df["instance"] == instance), notes=())


@dataclass(frozen=True)
class _HotResult:
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


def diagnose_frame(
    frame: UnitFrame,
    th: Thresholds = DEFAULT_THRESHOLDS,
    extra_notes: tuple[str, ...] = (),
    unplaced: dict[str, float] | None = None,
) -> Report:
    """Steps 1-4 on one frame; DP frames compare ranks only with ranks of the same instance.

    ``unplaced``: per instance, requests per window not placed on a DP rank (DP frames)."""
    notes = tuple(dict.fromkeys((*extra_notes, *frame.notes)))  # same note from two layers
    base = {
        "level": str(frame.level),
        "source": frame.source,
        "window_s": frame.window_s,
        "missing": frame.missing,
        "placed_share": frame.placed_share,
        "aliases": dict(frame.aliases),
        "thresholds": th.as_dict(),
        "thresholds_overridden": th.overridden(),
    }
    if frame.df.height == 0:
        return _insufficient(base, notes, "the input holds no data in the analysed range")
    m = build_matrix(frame.df, group_by_instance=frame.level == Level.DP, window_s=frame.window_s)
    span = (float(m.windows[0]), float(m.windows[-1] + frame.window_s))
    base.update(windows=len(m.windows), start_s=span[0], end_s=span[1])
    reason = _gate(m, th)
    stalls = find_stalls(m, th) if len(m.windows) >= th.min_windows else []
    stalled = {s.index for s in stalls}
    if reason:
        if stalls:
            return _stalled_only(m, base, notes, reason, stalls)
        units = tuple(_unit_report(m, j, None, "normal", np.ones(len(m.windows), bool))
                      for j in range(len(m.units)))
        return _insufficient(base, notes, reason, units)

    heats = detect(m, frame.window_s, th)
    judged = int(np.any(np.stack([h.active for h in heats]), axis=0).sum())
    if judged < th.min_windows:
        reason = (
            f"only {judged} of {len(m.windows)} windows carried enough load to judge (at least "
            f"{th.min_requests_per_window:g} requests per unit); use a longer --window"
        )
        if stalls:
            return _stalled_only(m, base, notes, reason, stalls)
        units = tuple(_unit_report(m, h.index, h, "normal", h.active) for h in heats)
        return _insufficient(base, notes, reason, units)
    hot_idx = [h.index for h in heats if h.persistent_hot and h.index not in stalled]
    against = _cold_minorities(m, heats, th) if not hot_idx else {}
    if against:
        # Most of a group runs hot, so the leave-one-out median is hot too: judge the group
        # against its under-loaded minority instead.
        heats = detect(m, frame.window_s, th, against=against)
        hot_idx = [h.index for h in heats if h.persistent_hot and h.index not in stalled]
        cold_units = sorted(m.units[j] for cols in against.values() for j in cols)
        notes = (
            *notes,
            f"most units run hot together; judged against the under-loaded {', '.join(cold_units)}",
        )
    starved_idx = [h.index for h in heats if h.persistent_starved and h.index not in stalled]
    results = [
        r
        for r in (
            _judge_hot(m, heats, j, [*hot_idx, *stalled], starved_idx, th,
                       _counts_finished(frame), (unplaced or {}).get(m.groups[j], math.nan))
            for j in hot_idx
        )
        if r
    ]
    chance = [r for r in results if r.cls.kind is None]
    results = [r for r in results if r.cls.kind is not None]
    notes = (*notes, *(_chance_note(r) for r in chance))
    hot_units = tuple(r.heat.unit for r in results)
    findings = [
        *_stall_findings(m, stalls),
        *(_when(m, _hot_finding(r, frame.level, th), r.heat.hot, r.heat.active) for r in results),
        *(_when(m, _kv_finding(r), r.heat.hot, r.heat.active) for r in results if r.kv.found),
    ]
    hot_units = (*(s.unit for s in stalls), *hot_units)
    if starved_idx:
        starved_when = np.any(np.stack([heats[j].starved for j in starved_idx]), axis=0)
        judged = np.any(np.stack([heats[j].active for j in starved_idx]), axis=0)
        findings.append(
            _when(m, _starved_finding(m, heats, starved_idx, frame.level), starved_when, judged)
        )
    transient = tuple(_transient_note(m, h, frame.window_s, th) for h in heats if h.transient_hot
                      and h.index not in hot_idx and h.index not in stalled)
    lucky = {r.heat.unit for r in chance}
    unexplained = [heats[j].unit for j in hot_idx
                   if heats[j].unit not in hot_units and heats[j].unit not in lucky]
    if unexplained:
        notes = (*notes, "ran hotter on pressure signals but no load or capability difference "
                 f"explains it: {', '.join(unexplained)}")
    units = tuple(
        _unit_report(
            m,
            h.index,
            h,
            _role(h, hot_units, stalled, starved_idx),
            h.active,
        )
        for h in heats
    )
    prices = tuple(skew_price(m)) if frame.level == Level.DP else ()
    hot_instances = {m.groups[j] for j in hot_idx}
    notes = (*notes, *(price_note(p) for p in prices if p.instance in hot_instances))
    return Report(
        verdict="imbalanced" if findings else "balanced",
        skew_price=prices,
        hot_units=hot_units,
        starved_units=tuple(m.units[j] for j in starved_idx),
        units=units,
        findings=tuple(findings),
        transient=transient,
        episodes=episodes(m, heats, set(hot_idx), th),
        series=series(m, heats),
        notes=notes,
        fleet=fleet_summary(units, th),
        **base,  # type: ignore[arg-type]
    )


def _role(h: UnitHeat, hot_units: tuple[str, ...], stalled: set[int], starved: list[int]) -> str:
    if h.index in stalled:
        return "stalled"
    if h.unit in hot_units:
        return "hot"
    return "starved" if h.index in starved else "normal"


def _stalled_only(
    m: SignalMatrix,
    base: dict[str, object],
    notes: tuple[str, ...],
    reason: str,
    stalls: list[Stall],
) -> Report:
    """Too little finished traffic to judge skew, but a unit is hung: that is the finding."""
    stalled = {s.index for s in stalls}
    every = np.ones(len(m.windows), dtype=bool)
    units = tuple(
        _unit_report(m, j, None, "stalled" if j in stalled else "normal", every)
        for j in range(len(m.units))
    )
    return Report(
        verdict="imbalanced",
        hot_units=tuple(s.unit for s in stalls),
        starved_units=(),
        units=units,
        findings=tuple(_stall_findings(m, stalls)),
        notes=(*notes, f"skew between the other units not judged: {reason}"),
        **base,  # type: ignore[arg-type]
    )


def _stall_findings(m: SignalMatrix, stalls: list[Stall]) -> list[Finding]:
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
                side_by_side=_side_by_side(hot, ref),
            )
        )
    return out


def _side_by_side(
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


def _when(m: SignalMatrix, f: Finding, flags: Flags, judged: Flags) -> Finding:
    """The finding's timeline and its peers' per-window band for each series signal."""
    peers = [m.units.index(u) for u in f.reference_units]
    return replace(f, timeline=timeline(m, flags, judged), peer_bands=peer_bands(m, peers))


def _cold_minorities(
    m: SignalMatrix, heats: list[UnitHeat], th: Thresholds
) -> dict[str, list[int]]:
    """Per group, the persistently under-loaded units when they are a strict minority."""
    out: dict[str, list[int]] = {}
    for g in set(m.groups):
        members = [h for h in heats if m.groups[h.index] == g]
        cold = [h.index for h in members if h.persistent_cold]
        if cold and len(cold) < th.cold_minority_share * len(members):
            out[g] = cold
    return out


def _insufficient(
    base: dict[str, object],
    notes: tuple[str, ...],
    reason: str,
    units: tuple[UnitReport, ...] = (),
) -> Report:
    return Report(
        verdict="insufficient_data",
        hot_units=(),
        starved_units=(),
        units=units,
        findings=(),
        notes=(reason, *notes),
        **{"windows": 0, "start_s": math.nan, "end_s": math.nan, **base},  # type: ignore[arg-type]
    )


def _gate(m: SignalMatrix, th: Thresholds) -> str:
    """Minimum-volume and minimum-shape gates; a reason string when the data cannot be judged."""
    sizes = {g: m.groups.count(g) for g in set(m.groups)}
    if max(sizes.values()) < th.min_units:
        return (
            f"only one unit ({m.units[0]}): skew needs at least {th.min_units} units to compare"
        )
    if len(m.windows) < th.min_windows:
        return (
            f"only {len(m.windows)} time windows; at least {th.min_windows} are needed to tell "
            "a persistent hot unit from jitter (use a shorter --window or a longer range)"
        )
    if m.has("requests"):
        total = float(np.nansum(m.get("requests")))
        if total < th.min_requests_total:
            return (
                f"near-idle service: {total:.0f} requests in the range, fewer than the "
                f"{th.min_requests_total} needed to call it imbalanced"
            )
    elif not any(m.groups):  # instance level: request counters are what the method stands on
        return (
            "no request counts in the range, so the volume gate cannot be checked (online: "
            "each window must hold at least two samples of the counters; try a larger --step "
            "or --window)"
        )
    return ""


def _reference(heats: list[UnitHeat], m: SignalMatrix, j: int, exclude: set[int]) -> list[int]:
    peers = [h.index for h in heats if h.index != j and m.groups[h.index] == m.groups[j]]
    calm = [p for p in peers if p not in exclude]
    return calm or peers


def _judge_hot(
    m: SignalMatrix,
    heats: list[UnitHeat],
    j: int,
    hot_idx: list[int],
    starved_idx: list[int],
    th: Thresholds,
    counts_finished: bool = False,
    unplaced: float = math.nan,
) -> _HotResult | None:
    heat = heats[j]
    ref_cols = _reference(heats, m, j, set(hot_idx) | set(starved_idx))
    if not ref_cols:
        return None
    mask = heat.active
    hot = unit_summary(m, j, mask)
    ref = reference_summary([unit_summary(m, k, mask) for k in ref_cols])
    cls = classify(hot, ref, th)
    if cls.kind is None:
        return None
    p_value = math.nan
    if "weight" in (cls.kind, cls.secondary_kind):
        signal = "prompt_tokens" if cls.weight_side == "input" else "generation_tokens"
        p_value = weight_p_value(m, j, ref_cols, mask, signal, th)
        if p_value >= th.weight_p_value:
            cls = _without_weight(cls)
    hot_bounds = unit_bounds(m, j, mask)
    ref_bounds = reference_bounds([unit_bounds(m, k, mask) for k in ref_cols])
    imp = impact(m, j, hot, ref, mask, th, frozenset({*hot_bounds, *ref_bounds}),
                 tuple(ref_cols))
    trend = gap_trend(m, j, ref_cols, mask, th)
    sat = saturation(m, j, mask, th)
    linked = unplaced if sat.saturated and unplaced_link(m, j, mask, unplaced, th) else math.nan
    lower = "" if not sat.saturated else "finished" if counts_finished else (
        "unplaced" if math.isfinite(unplaced) and unplaced > 0 else "")
    return _HotResult(heat, cls, imp, trend, hot, ref, tuple(m.units[k] for k in ref_cols),
                      sat, lower, linked, m.window_s, p_value, hot_bounds, ref_bounds,
                      device_state(hot, ref, th), kv_shortage(m, j, mask, hot, imp, sat, th))


def _without_weight(cls: Classification) -> Classification:
    """Heavier requests consistent with chance: keep the count part, else no kind (noted)."""
    if cls.kind == "weight" and cls.secondary_kind == "count":
        return replace(cls, kind="count", secondary_kind=None, weight_side=None)
    if cls.kind == "weight":
        return replace(cls, kind=None, secondary_kind=None, weight_side=None)
    return replace(cls, secondary_kind=None, weight_side=None)


def _chance_note(r: _HotResult) -> str:
    return (
        f"{r.heat.unit} ran hotter with heavier requests ({_x(r.cls.input_ratio)} the input, "
        f"{_x(r.cls.output_ratio)} the output tokens per request of its peers), but that is "
        f"consistent with chance (p = {r.weight_p:.2f}, permutation of per-window token loads "
        "across the units): heavy-tailed request sizes, not weight skew"
    )


def _counts_finished(frame: UnitFrame) -> bool:
    """Online sources count finished requests, the profiler counts arrivals (frame.SIGNALS)."""
    return frame.source != "profiler"


def _causes(r: _HotResult, level: Level) -> list[str]:
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


def _severity(r: _HotResult, th: Thresholds) -> str:
    """High when tails double, KV runs out, or the peers got nothing at all (every request of
    the group lands here and the rest of its capacity is wasted)."""
    tail = [r.imp.ratios.get(k, math.nan) for k in TAIL_METRICS]
    if r.imp.kv_exhausted or any(math.isfinite(t) and t >= th.severe_tail_ratio for t in tail):
        return "high"
    if r.cls.count_ratio == math.inf:
        return "high"
    return "medium" if r.imp.hurting else "low"


def _hot_finding(r: _HotResult, level: Level, th: Thresholds) -> Finding:
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
        side_by_side=_side_by_side(r.hot, r.ref, r.hot_bounds, r.ref_bounds),
    )


def _with_unplaced(r: _HotResult) -> float:
    """The request ratio if the linked unplaced requests are counted on the hot rank."""
    n_h, n_r = r.hot["requests_per_s"], r.ref["requests_per_s"]
    linked = r.unplaced / r.window_s
    return load_ratio(n_h + linked, n_r) if math.isfinite(r.unplaced) else math.nan


def _saturation_sentence(r: _HotResult) -> str:
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


def _summary(r: _HotResult, th: Thresholds) -> str:
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


def _kv_finding(r: _HotResult) -> Finding:
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


def _starved_finding(
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
        side_by_side=_side_by_side(starved, ref),
    )


def _transient_note(m: SignalMatrix, h: UnitHeat, window_s: float, th: Thresholds) -> str:
    idx = np.flatnonzero(h.hot)
    first, last = float(m.windows[idx[0]]), float(m.windows[idx[-1]] + window_s)
    head = (
        f"{h.unit} ran hot in {idx.size} window(s) ({h.hot_share:.0%}, at most {h.hot_run} in a "
        f"row, {last - first:.0f} s span)"
    )
    if h.hot_share >= th.persist_share:
        return (
            f"{head}: often, but never {th.min_consecutive} windows in a row — not yet a "
            "persistent hot spot; watch it over a longer range"
        )
    return f"{head} and then returned to its peers: jitter, not a persistent hot spot"


def _unit_report(
    m: SignalMatrix, j: int, heat: UnitHeat | None, role: str, mask: Flags
) -> UnitReport:
    return UnitReport(
        unit=m.units[j],
        instance=m.instances[j],
        dp_rank=m.dp_ranks[j],
        role=role,
        hot_share=heat.hot_share if heat else math.nan,
        longest_hot_run=heat.hot_run if heat else 0,
        metrics=unit_summary(m, j, mask),
        load_ratios=_load_ratios(heat) if heat else {},
        heat_by_window=tuple(np.where(heat.active, heat.score, np.nan).tolist()) if heat else (),
        bounds=unit_bounds(m, j, mask),
    )


def _load_ratios(heat: UnitHeat) -> dict[str, float]:
    """Unit / peers per heat signal: the median of the scored ratio over the judged windows."""
    out: dict[str, float] = {}
    for sig, ratio in heat.ratios.items():
        vals = ratio[heat.active & np.isfinite(ratio)]
        out[sig] = float(np.median(vals)) if vals.size else math.nan
    return out
