"""Run the plans, check the current replay against the evidence, pick the recommendation."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

import numpy as np

from skewscope.config import WHATIF, WhatIfSettings
from skewscope.frame import dp_unit_id
from skewscope.notes import Note
from skewscope.notes import WhatifNoteCode as W
from skewscope.report.whatif_model import (
    METRIC_KEYS,
    CalibrationRow,
    FixSetting,
    Metrics,
    PolicyResult,
    Spread,
    UnitModel,
    WhatIfReport,
)
from skewscope.sources.workload import RequestLog
from skewscope.whatif.calibrate import ServiceModel, calibrate
from skewscope.whatif.correlation import Correlation, detect, tagged
from skewscope.whatif.extract import Observed, extract
from skewscope.whatif.fixes import fix_settings
from skewscope.whatif.plans import CURRENT, build_plans, not_the_fix, robustness_plans
from skewscope.whatif.rank import recommend
from skewscope.whatif.replay import Plan, in_pool, observed, replayed, run_plan

RATIO_METRICS = frozenset({"max_over_median_load", "min_over_median_load", "kv_peak"})


def calibration_rows(
    obs: Metrics, rep: Metrics, s: WhatIfSettings, step_ms: float
) -> list[CalibrationRow]:
    """Per metric: the relative error, ok within ``calibration_max_error`` or the floor (a
    latency within ``calibration_floor_steps`` engine steps of ``step_ms``)."""
    rows = []
    for key in METRIC_KEYS:
        o, r = obs.get(key), rep.get(key)
        if o is None or r is None:
            rows.append(CalibrationRow(key, o, r, None, True))
            continue
        err = (r - o) / o if o != 0 else None
        floor = (
            s.calibration_floor_ratio
            if key in RATIO_METRICS
            else s.calibration_floor_steps * step_ms
        )
        if key == "throughput_rps":
            floor = 0.0
        ok = abs(r - o) <= floor or (err is not None and abs(err) <= s.calibration_max_error)
        rows.append(CalibrationRow(key, o, r, err, ok))
    return rows


def _shares(load: np.ndarray, units: list[str]) -> tuple[tuple[str, float], ...]:
    total = float(load.sum())
    return tuple(
        (u, float(v) / total if total > 0 else 0.0) for u, v in zip(units, load, strict=True)
    )


Replay = tuple[Metrics, np.ndarray, Metrics | None, Spread]


def replay_one(plan: Plan, obs: Observed, model: ServiceModel) -> Replay:
    """One candidate's replay and its metrics (a process-pool task: module level, picklable)."""
    pool = in_pool(plan.availability, obs.layout, obs.duration_s)
    result, kv, window_kv = run_plan(plan, obs, model)
    return replayed(result, kv, obs, pool, window_kv)


def _replay_all(
    plans: list[Plan],
    obs: Observed,
    model: ServiceModel,
    jobs: int,
    progress: Callable[[str], None] | None,
) -> list[Replay]:
    """Replays are independent: with ``jobs`` > 1 they run in worker processes (the simulator
    is pure Python, so threads would not help)."""
    if jobs <= 1 or len(plans) == 1:
        out = []
        for plan in plans:
            if progress is not None:
                progress(plan.name)
            out.append(replay_one(plan, obs, model))
        return out
    from skewscope.workers import process_pool

    # on SIGTERM/SIGHUP (cli.streams.Terminated) or Ctrl-C the workers are terminated, not
    # left replaying after the parent is gone
    with process_pool(min(jobs, len(plans))) as ex:
        futures = [ex.submit(replay_one, plan, obs, model) for plan in plans]
        done = []
        for plan, fut in zip(plans, futures, strict=True):
            done.append(fut.result())
            if progress is not None:
                progress(plan.name)
        return done


def whatif(
    log: RequestLog,
    source: str,
    policies: tuple[str, ...],
    dp_policies: tuple[str, ...],
    s: WhatIfSettings = WHATIF,
    progress: Callable[[str], None] | None = None,
    jobs: int = 1,
) -> WhatIfReport:
    """What-if from profiler evidence (request by request)."""
    obs = extract(log, s)
    model = calibrate(log, obs.layout, s)
    seen, _ = observed(log, obs, in_pool(obs.availability, obs.layout, obs.duration_s))
    return predict(
        obs, model, seen, source, policies, dp_policies, s, progress, jobs, engine="profiler"
    )


def prepare(
    obs: Observed,
    model: ServiceModel,
    policies: tuple[str, ...],
    dp_policies: tuple[str, ...],
    s: WhatIfSettings = WHATIF,
) -> tuple[Observed, list[Plan], list[Note], Correlation | None]:
    """The plans to replay: the candidates, and with a correlated placement (request weight
    tied to the unit) its heavy requests tagged and the load-aware candidates' pinned
    robustness replays (``robust_of``) after them."""
    corr = detect(obs, s)
    if corr is not None:
        units = correlated_units(corr, obs)
        inferred = tuple(
            (lvl, Note(n.code, {**n.values, "correlated": units}) if lvl == corr.level else n)
            for lvl, n in obs.inferred
        )
        obs = dataclasses.replace(obs, workload=tagged(obs.workload, corr), inferred=inferred)
    plans, notes = build_plans(obs, model, policies, dp_policies)
    if corr is not None:
        plans += robustness_plans(plans, corr)
    return obs, plans, notes, corr


def correlated_units(c: Correlation, obs: Observed) -> list[str]:
    lay = obs.layout
    if c.level == "instance":
        return [lay.instances[u] for u in c.units]
    return [dp_unit_id(lay.instances[c.instance], d) for d in c.units]


def correlation_note(c: Correlation, obs: Observed, excluded: frozenset[str]) -> Note:
    units = correlated_units(c, obs)
    return Note(
        W.CORRELATED,
        {
            "level": c.level,
            "units": units,
            "ratio": c.ratio,
            "z": c.z,
            "heavy_tokens": c.heavy_tokens,
            "heavy": int(c.heavy.sum()),
            "excluded": sorted(excluded),
        },
    )


def predict(
    obs: Observed,
    model: ServiceModel,
    seen: Metrics,
    source: str,
    policies: tuple[str, ...],
    dp_policies: tuple[str, ...],
    s: WhatIfSettings = WHATIF,
    progress: Callable[[str], None] | None = None,
    jobs: int = 1,
    engine: str = "",
) -> WhatIfReport:
    """Replay every plan, check the current replay against ``seen`` (the evidence's own
    metrics), rank the candidates. Shared by the offline and online sources."""
    obs, plans, plan_notes, corr = prepare(obs, model, policies, dp_policies, s)
    units = obs.layout.rank_units()
    present = np.array(obs.layout.present())
    results: list[PolicyResult] = []
    rep_current: Metrics | None = None
    replays = _replay_all(plans, obs, model, jobs, progress)
    robust = {
        plan.robust_of: m for plan, (m, *_) in zip(plans, replays, strict=True) if plan.robust_of
    }
    for plan, (m, load, read, spread) in zip(plans, replays, strict=True):
        if plan.robust_of:
            continue
        if plan.name == CURRENT:
            rep_current = m if read is None else read  # as the evidence's buckets read it
        results.append(
            PolicyResult(
                plan.name,
                plan.level,
                plan.description,
                m,
                _shares(load[present], units),
                spread,
                robust.get(plan.name),
            )
        )
    assert rep_current is not None
    rows = calibration_rows(seen, rep_current, s, model.base.fixed_ms)
    trusted = model.calibrated and all(r.ok for r in rows)
    notes = list(obs.notes) + list(model.notes) + plan_notes
    if not trusted:
        bad = [r.metric for r in rows if not r.ok]
        notes.insert(0, Note(W.NOT_REPRODUCED, {"metrics": bad}))
    excluded = not_the_fix(plans, corr)
    if corr is not None:
        notes.insert(0, correlation_note(corr, obs, excluded))
    recommended, gain, ranking = recommend(results, s, excluded=excluded)
    fix = _fix(next(p for p in plans if p.name == recommended), obs, engine, corr)
    wl = obs.workload
    grid = len(present)
    requests = (
        np.bincount(
            wl.instance_hint * obs.layout.dp_ranks
            + np.maximum(wl.rank_hint if wl.rank_hint is not None else 0, 0),
            minlength=grid,
        )[:grid]
        if wl.instance_hint is not None
        else np.zeros(grid, dtype=np.int64)
    )
    specs = [spec for spec, ok in zip(model.ranks, present, strict=True) if ok]
    unit_models = tuple(
        UnitModel(u, spec.speed, spec.total_blocks, int(n))
        for u, spec, n in zip(units, specs, requests[present], strict=True)
    )
    b = model.base
    return WhatIfReport(
        source=source,
        duration_s=obs.duration_s,
        n_requests=len(obs.workload),
        instances=len(obs.layout.instances),
        dp_ranks=obs.layout.dp_ranks,
        current_policy=CURRENT,
        inferred=obs.inferred,
        step_model={
            "fixed_ms": b.fixed_ms,
            "per_prefill_token_ms": b.per_prefill_token_ms,
            "per_decode_seq_ms": b.per_decode_seq_ms,
            "max_running": b.max_running,
            "token_budget": b.token_budget,
            "block_size": b.block_size,
        },
        units=unit_models,
        calibration=tuple(rows),
        trusted=trusted,
        policies=tuple(results),
        recommended=recommended,
        gain=gain,
        ranking=ranking,
        notes=tuple(notes),
        dp_sizes=tuple((name, obs.layout.size(i)) for i, name in enumerate(obs.layout.instances)),
        engine=engine,
        fix=fix,
        light_load=model.light_load,
    )


def _fix(
    plan: Plan, obs: Observed, engine: str, corr: Correlation | None
) -> tuple[FixSetting, ...]:
    """The recommended plan as each stack's setting (``whatif.fixes``)."""
    lay = obs.layout
    weights = plan.gateway.weights or () if plan.name == "fix_weights" else ()
    changed = tuple(
        lay.instances[i]
        for i, (a, b) in enumerate(zip(plan.availability, obs.availability, strict=True))
        if a != b
    )
    return fix_settings(
        plan.name,
        plan.level,
        engine,
        lay.instances,
        tuple(weights),
        changed,
        corr is not None and corr.level == plan.level,
    )
