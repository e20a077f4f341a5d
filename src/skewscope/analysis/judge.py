"""The method's steps over one UnitFrame: detect the hot and starved units, classify them,
weigh the impact and the resources, and find what the Report of it holds (``assembly`` puts it
together).

``analysis.diagnose`` decides which frames (levels, DP drill-downs) are judged; this module
judges one.
"""

from __future__ import annotations

import math
from dataclasses import replace

import numpy as np

from skewscope.analysis.assembly import (
    FrameFacts,
    insufficient_report,
    judged_report,
    stalled_report,
    unit_identity,
    unit_report,
)
from skewscope.analysis.classify import Classification, classify
from skewscope.analysis.detect import UnitHeat, detect, without_starved
from skewscope.analysis.findings import (
    HotResult,
    chance_note,
    counts_finished,
    hot_finding,
    kv_finding,
    lost_finding,
    stale_load_finding,
    stall_findings,
    starved_finding,
)
from skewscope.analysis.impact import gap_trend, impact
from skewscope.analysis.matrix import Flags, SignalMatrix, build_matrix
from skewscope.analysis.pools import pd_findings
from skewscope.analysis.presence import presence
from skewscope.analysis.price import price_note, skew_price
from skewscope.analysis.resource import cost_ratio, device_state, kv_shortage
from skewscope.analysis.saturation import saturation, unplaced_link
from skewscope.analysis.seen import requests_seen
from skewscope.analysis.significance import weight_p_value
from skewscope.analysis.spread import fleet_summary
from skewscope.analysis.stale import StaleLoad, find_stale_load
from skewscope.analysis.stall import find_stalls, no_progress_note
from skewscope.analysis.summary import (
    reference_bounds,
    reference_summary,
    unit_bounds,
    unit_summary,
    with_measured_weight,
)
from skewscope.analysis.timeline import episodes, peer_bands, series, timeline
from skewscope.catalogue import KV_SERIES, SERIES_BY_KEY, Kind, Role
from skewscope.config import DEFAULT_THRESHOLDS, Thresholds
from skewscope.frame import Level, UnitFrame
from skewscope.report.facts import Note, NoteCode
from skewscope.report.model import Finding, Report


def diagnose_frame(
    frame: UnitFrame,
    th: Thresholds = DEFAULT_THRESHOLDS,
    extra_notes: tuple[Note, ...] = (),
    unplaced: dict[str, float] | None = None,
    detail: bool = True,
    matrix: SignalMatrix | None = None,
) -> Report:
    """Steps 1-4 on one frame; DP frames compare ranks only with ranks of the same instance.

    ``unplaced``: per instance, requests per window not placed on a DP rank (DP frames).
    ``detail=False`` gives the same verdict and findings without what only a shown report
    needs (unit summaries, series, episodes, fleet summary): for drills that may be dropped.
    ``matrix``: the frame's matrix when already built (a drill's slice of the fleet's)."""
    notes = _unique((*extra_notes, *map(Note.text, frame.notes)))  # same note from two layers
    facts = FrameFacts.of(frame, th)
    if frame.df.height == 0:
        return insufficient_report(facts, notes, Note(NoteCode.EMPTY_RANGE))
    if matrix is None:
        matrix = build_matrix(
            frame.df, group_by_instance=frame.level == Level.DP, window_s=frame.window_s
        )
    m = matrix
    facts = facts.spanning(m)
    reason = _gate(m, th, request_source="requests" in frame.aliases)
    if reason is None and not m.has("requests") and "requests" not in frame.aliases:
        notes = (*notes, QUEUE_ONLY_NOTE)
    stalls = find_stalls(m, th) if len(m.windows) >= th.min_windows else []
    frozen = no_progress_note(m, th)
    if frozen is not None:
        notes = (*notes, frozen)
    stalled = {s.index for s in stalls}
    if reason is not None:
        if stalls:
            return stalled_report(m, facts, notes, reason, stalls)
        units = tuple(
            unit_report(m, j, None, Role.NORMAL, np.ones(len(m.windows), bool))
            for j in range(len(m.units))
        )
        return insufficient_report(facts, notes, reason, units)

    heats = detect(m, frame.window_s, th)
    stale = find_stale_load(m, heats, th, finished=counts_finished(frame))
    heats = _rotating_calm(heats, stale)
    judged = int(np.any(np.stack([h.active for h in heats]), axis=0).sum())
    if judged < th.min_windows:
        reason = Note(
            NoteCode.FEW_JUDGED_WINDOWS,
            {
                "judged": judged,
                "windows": len(m.windows),
                "min_requests_per_window": th.min_requests_per_window,
            },
        )
        if stalls:
            return stalled_report(m, facts, notes, reason, stalls)
        units = tuple(unit_report(m, h.index, h, Role.NORMAL, h.active) for h in heats)
        return insufficient_report(facts, notes, reason, units)
    fed = without_starved(m, heats, th)
    if fed:
        # Starved units' zeros would drag their peers' median down: judge against the rest.
        heats = _rotating_calm(detect(m, frame.window_s, th, against=fed), stale)
        starved_out = sorted(
            m.units[h.index]
            for h in heats
            if m.groups[h.index] in fed and h.index not in fed[m.groups[h.index]]
        )
        notes = (*notes, Note(NoteCode.STARVED_LEFT_OUT, {"units": starved_out}))
    hot_idx = [h.index for h in heats if h.persistent_hot and h.index not in stalled]
    cold = _cold_minorities(m, heats, th) if not hot_idx else {}
    if cold:
        # Most of a group runs hot, so the leave-one-out median is hot too: judge the group
        # against its under-loaded minority instead (never starved: persistent_cold says so).
        heats = _rotating_calm(detect(m, frame.window_s, th, against={**fed, **cold}), stale)
        hot_idx = [h.index for h in heats if h.persistent_hot and h.index not in stalled]
        cold_units = sorted(m.units[j] for cols in cold.values() for j in cols)
        notes = (*notes, Note(NoteCode.COLD_MINORITY, {"units": cold_units}))
    starved_idx = [h.index for h in heats if h.persistent_starved and h.index not in stalled]
    results = [
        r
        for r in (
            _judge_hot(
                m,
                heats,
                j,
                [*hot_idx, *stalled],
                starved_idx,
                th,
                counts_finished(frame),
                (unplaced or {}).get(m.groups[j], math.nan),
            )
            for j in hot_idx
        )
        if r
    ]
    chance = [r for r in results if r.cls.kind is None]
    results = [r for r in results if r.cls.kind is not None]
    notes = (*notes, *(chance_note(r) for r in chance))
    hot_units = tuple(r.heat.unit for r in results)
    findings = [
        *stall_findings(m, stalls),
        *(
            _when(
                m,
                hot_finding(r, frame.level, th),
                r.heat.hot,
                r.heat.active,
                tuple(k for k in SERIES_BY_KEY if k not in KV_SERIES) if r.kv.found else None,
            )
            for r in results
        ),
        *(
            _when(m, kv_finding(r), r.heat.hot, r.heat.active, KV_SERIES)
            for r in results
            if r.kv.found
        ),
    ]
    findings.extend(_when(m, stale_load_finding(m, s), s.swing, s.judged) for s in stale)
    came_went, lost = presence(m, heats)
    notes = (*notes, *came_went)
    lost = [u for u in lost if u.unit not in hot_units and u.index not in stalled]
    findings.extend(
        _when(m, lost_finding(m, u), heats[u.index].hot, heats[u.index].present) for u in lost
    )
    hot_units = (*(s.unit for s in stalls), *hot_units, *(u.unit for u in lost))
    findings.extend(pd_findings(m, th) if frame.level == Level.INSTANCE else ())
    if starved_idx:
        starved_when = np.any(np.stack([heats[j].starved for j in starved_idx]), axis=0)
        judged = np.any(np.stack([heats[j].active for j in starved_idx]), axis=0)
        findings.append(
            _when(m, starved_finding(m, heats, starved_idx, frame.level), starved_when, judged)
        )
    transient = tuple(
        _transient_note(m, h, frame.window_s, th)
        for h in heats
        if h.transient_hot
        and h.index not in hot_idx
        and h.index not in stalled
        and h.unit not in {u.unit for u in lost}
    )
    lucky = {r.heat.unit for r in chance}
    unexplained = [
        heats[j].unit
        for j in hot_idx
        if heats[j].unit not in hot_units and heats[j].unit not in lucky
    ]
    if unexplained:
        notes = (*notes, Note(NoteCode.UNEXPLAINED_PRESSURE, {"units": unexplained}))
    report = unit_report if detail else unit_identity
    units = tuple(
        report(
            m,
            h.index,
            h,
            _role(h, hot_units, stalled, starved_idx),
            h.active,
        )
        for h in heats
    )
    dp_detail = frame.level == Level.DP and detail  # a brief drill's notes are dropped
    prices = tuple(skew_price(m, frame.step_loads, lockstep=frame.lockstep)) if dp_detail else ()
    hot_instances = {m.groups[j] for j in hot_idx}
    notes = (*notes, *(price_note(p) for p in prices if p.instance in hot_instances))
    return judged_report(
        facts,
        findings=tuple(findings),
        hot_units=hot_units,
        starved_units=tuple(m.units[j] for j in starved_idx),
        units=units,
        notes=notes,
        transient=transient,
        episodes=episodes(m, heats, set(hot_idx), th) if detail else (),
        series=series(m, heats) if detail else None,
        fleet=fleet_summary(units, th) if detail else None,
        skew_price=prices,
    )


def _rotating_calm(heats: list[UnitHeat], stale: list[StaleLoad]) -> list[UnitHeat]:
    """The units of a stale-load group are neither hot, starved nor cold on their own: each
    takes its turn at the bursts (the group's finding says so), none is hot over the range."""
    rotating = {j for s in stale for j in s.units}
    if not rotating:
        return heats
    return [
        replace(
            h,
            persistent_hot=False,
            transient_hot=False,
            persistent_starved=False,
            persistent_cold=False,
        )
        if h.index in rotating
        else h
        for h in heats
    ]


def _role(h: UnitHeat, hot_units: tuple[str, ...], stalled: set[int], starved: list[int]) -> Role:
    if h.index in stalled:
        return Role.STALLED
    if h.unit in hot_units:
        return Role.HOT
    return Role.STARVED if h.index in starved else Role.NORMAL


def _when(
    m: SignalMatrix, f: Finding, flags: Flags, judged: Flags, charts: tuple[str, ...] | None = None
) -> Finding:
    """The finding's timeline and its peers' per-window band for each series signal it charts
    (``charts``, default all: a KV shortage finding charts the KV signals, its unit's hot
    finding the rest)."""
    peers = [m.units.index(u) for u in f.reference_units]
    return replace(f, timeline=timeline(m, flags, judged), peer_bands=peer_bands(m, peers, charts))


def _cold_minorities(
    m: SignalMatrix, heats: list[UnitHeat], th: Thresholds
) -> dict[str, list[int]]:
    """Per group, the persistently under-loaded units when they are a strict minority.

    Only a unit that reported in every window its group did can be that reference: one that
    joined or came back inside the range is cold because it is warming up (a balancer's slow
    start, an empty prefix cache), and judged against it a whole fleet would look hot through
    every rolling restart and scale-out."""
    out: dict[str, list[int]] = {}
    for g in set(m.groups):
        members = [h for h in heats if m.groups[h.index] == g]
        reported = np.any(np.stack([h.present for h in members]), axis=0)
        cold = [h.index for h in members if h.persistent_cold and h.present[reported].all()]
        if cold and len(cold) < th.cold_minority_share * len(members):
            out[g] = cold
    return out


QUEUE_ONLY_NOTE = Note(NoteCode.QUEUE_ONLY)


def _gate(m: SignalMatrix, th: Thresholds, *, request_source: bool = True) -> Note | None:
    """Minimum-volume and minimum-shape gates; the reason when the data cannot be judged.

    ``request_source``: the frame names a request counter (its alias). Without one (a router's
    per-endpoint queue, llm-d) both levels are judged by their queues, as DP ranks always are;
    with one whose windows came back empty the instance level stays unjudged."""
    sizes = {g: m.groups.count(g) for g in set(m.groups)}
    if max(sizes.values()) < th.min_units:
        return Note(NoteCode.ONE_UNIT, {"unit": m.units[0], "min_units": th.min_units})
    if len(m.windows) < th.min_windows:
        return Note(
            NoteCode.FEW_WINDOWS, {"windows": len(m.windows), "min_windows": th.min_windows}
        )
    if m.has("requests"):
        total = requests_seen(m, th)
        if total < th.min_requests_total:
            return Note(
                NoteCode.NEAR_IDLE, {"requests": total, "min_requests": th.min_requests_total}
            )
    elif request_source and all(r is None for r in m.dp_ranks):  # instance level: request
        # counters are what the method stands on; the counter exists but its windows came back
        # empty
        return Note(NoteCode.NO_REQUEST_COUNTS)
    return None


def _unique(notes: tuple[Note, ...]) -> tuple[Note, ...]:
    """In order, each note once (a source note can reach a frame from two layers)."""
    out: list[Note] = []
    for n in notes:
        if n not in out:
            out.append(n)
    return tuple(out)


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
) -> HotResult | None:
    heat = heats[j]
    ref_cols = _reference(heats, m, j, set(hot_idx) | set(starved_idx))
    if not ref_cols:
        return None
    mask = heat.active
    hot = unit_summary(m, j, mask)
    ref_units = [unit_summary(m, k, mask) for k in ref_cols]
    served = [float(np.nansum(m.get("requests")[mask, k])) for k in ref_cols]
    ref = with_measured_weight(
        reference_summary(ref_units), ref_units, served, th.weight_min_requests
    )
    cls = classify(hot, ref, th)
    unexplained = cls.kind is None
    p_value = math.nan
    if Kind.WEIGHT in (cls.kind, cls.secondary_kind):
        signal = "prompt_tokens" if cls.weight_side == "input" else "generation_tokens"
        p_value = weight_p_value(m, j, ref_cols, mask, signal, th)
        if p_value >= th.weight_p_value:
            cls = _without_weight(cls, th)
    hot_bounds = unit_bounds(m, j, mask)
    ref_bounds = reference_bounds([unit_bounds(m, k, mask) for k in ref_cols])
    imp = impact(m, j, hot, ref, mask, th, frozenset({*hot_bounds, *ref_bounds}), tuple(ref_cols))
    trend = gap_trend(m, j, ref_cols, mask, th)
    sat = saturation(m, j, mask, th)
    linked = unplaced if sat.saturated and unplaced_link(m, j, mask, unplaced, th) else math.nan
    lower = (
        ""
        if not sat.saturated
        else "finished"
        if counts_finished
        else ("unplaced" if math.isfinite(unplaced) and unplaced > 0 else "")
    )
    kv = kv_shortage(m, j, mask, hot, imp, sat, th)
    if unexplained:
        # No load or capability difference explains it; a hot unit that is short of KV
        # blocks, or overloaded (its latency not read as capability), is still a finding, of
        # unknown kind, not a note: a rank with 117 requests waiting at 100 % KV beside peers
        # with none queued is not balanced (issue 21, vllm#36748). Pressure alone stays a note.
        if not (kv.found or cls.capability_not_judged):
            return None
        cls = replace(cls, kind=Kind.UNKNOWN)
    return HotResult(
        heat=heat,
        cls=cls,
        imp=imp,
        trend=trend,
        hot=hot,
        ref=ref,
        ref_units=tuple(m.units[k] for k in ref_cols),
        sat=sat,
        lower_bound=lower,
        unplaced=linked,
        window_s=m.window_s,
        weight_p=p_value,
        hot_bounds=hot_bounds,
        ref_bounds=ref_bounds,
        dev=device_state(
            hot,
            ref,
            th,
            (
                cost_ratio(m, j, ref_cols, mask, "device_util", th),
                cost_ratio(m, j, ref_cols, mask, "busy_ms", th),
            ),
        ),
        kv=kv,
    )


def _without_weight(cls: Classification, th: Thresholds) -> Classification:
    """Heavier requests consistent with chance: keep the count part (named as secondary, or
    more requests on their own past ``count_ratio``), else no kind (noted)."""
    more = cls.secondary_kind == Kind.COUNT or cls.count_ratio >= th.count_ratio  # NaN: False
    if cls.kind == Kind.WEIGHT and more:
        return replace(cls, kind=Kind.COUNT, secondary_kind=None, weight_side=None)
    if cls.kind == Kind.WEIGHT:
        return replace(cls, kind=None, secondary_kind=None, weight_side=None)
    return replace(cls, secondary_kind=None, weight_side=None)


def _transient_note(m: SignalMatrix, h: UnitHeat, window_s: float, th: Thresholds) -> Note:
    """A unit hot for a while but never persistently: often (not yet a hot spot) or jitter."""
    idx = np.flatnonzero(h.hot)
    first, last = float(m.windows[idx[0]]), float(m.windows[idx[-1]] + window_s)
    return Note(
        NoteCode.TRANSIENT,
        {
            "unit": h.unit,
            "windows": int(idx.size),
            "hot_share": h.hot_share,
            "hot_run": h.hot_run,
            "span_s": last - first,
            "often": h.hot_share >= th.persist_share,
            "min_consecutive": th.min_consecutive,
            "held_back": h.held_back,
            "burst_s": th.burst_s,
            "sigmas": th.hot_noise_sigmas,
        },
    )
