"""Step 1: which units run hot (or starve), window by window, and is it persistent?

Every score is a dimensionless ratio of a unit against the median of its *peers* in the same
window (leave-one-out: the unit itself is not part of its reference). Peers are the other units
of the same group: all instances at instance level, the ranks of the same instance at DP level.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from skewscope.analysis.chance import beyond_chance
from skewscope.analysis.matrix import Array, Flags, SignalMatrix
from skewscope.analysis.peers import peer_reference
from skewscope.analysis.seen import held
from skewscope.catalogue import HEAT_SIGNALS, LOAD_SIGNALS, HeldBack
from skewscope.config import Thresholds

# Load and pressure signals that make a unit "hot", with the floor under the peer reference
# (in the signal's own unit, per window) so near-idle noise never yields a large ratio.
# Requests and tokens are load; busy time and running sequences are pressure (Little's law: a
# slower unit at the same load holds more requests in flight and stays busy longer). Waiting
# requests and queue wait catch a saturated unit whose source exports no per-unit load
# counters (an older SGLang, a router's queue); their floors keep ordinary queueing out.
# (The signal lists themselves live in the catalogue: the report's load_ratios use them as keys.)


@dataclass(frozen=True)
class UnitHeat:
    unit: str
    index: int
    present: Flags  # windows where the unit reported anything
    active: Flags  # present windows in which its peer group carried load
    score: Array  # (W,) max heat ratio over the heat signals, NaN where unknown
    hot: Flags  # (W,) score >= hot_ratio in an active window
    starved: Flags  # (W,) request ratio below starved_ratio in an active window
    hot_share: float
    hot_run: int
    starved_share: float
    starved_run: int
    persistent_hot: bool
    transient_hot: bool
    persistent_starved: bool
    persistent_cold: bool  # carries persistently less load than its peers (not starved)
    driver: str  # heat signal that was highest most often in hot windows
    ratios: dict[str, Array]  # heat signal -> (W,) smoothed value / floored peer median
    held_back: HeldBack = HeldBack.NONE  # why a unit hot often and long enough is not persistent


def smooth(values: Array, width: int) -> Array:
    """Centred rolling mean over ``width`` windows per unit, ignoring missing values."""
    if width <= 1:
        return values
    half = width // 2
    finite = np.isfinite(values)
    filled = np.where(finite, values, 0.0)
    pad = ((half, width - 1 - half), (0, 0))  # output keeps the input's length for any width
    if width < 8:  # shifted slices added in order: the same sums as below, a fraction of the calls
        w = values.shape[0]
        padded = np.zeros((w + width - 1, *values.shape[1:]))
        counted = np.zeros_like(padded)
        padded[half : half + w], counted[half : half + w] = filled, finite
        sums, counts = padded[:w].copy(), counted[:w].copy()
        for o in range(1, width):
            sums += padded[o : o + w]
            counts += counted[o : o + w]
    else:  # numpy sums 8 or more terms pairwise
        sums = np.lib.stride_tricks.sliding_window_view(np.pad(filled, pad), width, axis=0).sum(-1)
        counts = np.lib.stride_tricks.sliding_window_view(
            np.pad(finite.astype(np.float64), pad), width, axis=0
        ).sum(-1)
    with np.errstate(all="ignore"):
        out = np.where(counts > 0, sums / counts, np.nan)
    out[~finite] = np.nan
    return out


def longest_run(flags: Flags) -> int:
    """Longest stretch of consecutive True values."""
    best = run = 0
    for f in flags.tolist():
        run = run + 1 if f else 0
        best = max(best, run)
    return best


def persists(share: float, run: int, th: Thresholds) -> bool:
    """The persistence rule, one place for every finding that has one: set in at least
    ``persist_share`` of the judged windows and in a run of ``min_consecutive``."""
    return share >= th.persist_share and run >= th.min_consecutive


def floors(
    m: SignalMatrix, window_s: float, th: Thresholds, *, per_group: bool = False
) -> dict[str, float | Array]:
    """Absolute floors under the peer reference, per heat signal.

    ``per_group``: the tokens-per-request scale of each unit's own group (a (U,) array), as
    judging that group's matrix alone gives it (``quiet_groups``)."""
    req, tok = m.get("requests"), m.get("total_tokens")
    tokens_per_request: float | Array
    if per_group:
        tokens_per_request = np.empty(len(m.units))
        group_arr = np.array(m.groups)
        for g in dict.fromkeys(m.groups):
            cols = np.flatnonzero(group_arr == g)
            tokens_per_request[cols] = _service_tokens_per_request(req[:, cols], tok[:, cols])
    else:
        tokens_per_request = _service_tokens_per_request(req, tok)
    return {
        "requests": th.min_requests_per_window,
        "total_tokens": th.min_requests_per_window * tokens_per_request,
        "busy_ms": th.floor_busy_share * window_s * 1000.0,
        "running": th.floor_running,
        "waiting": th.floor_waiting,
        "queue_wait_mean_ms": th.floor_queue_wait_ms,
    }


def _service_tokens_per_request(req: Array, tok: Array) -> float:
    ok = np.isfinite(req) & np.isfinite(tok)
    total_req = float(req[ok].sum())
    return float(tok[ok].sum()) / total_req if total_req > 0 else 1.0


def group_activity(m: SignalMatrix, th: Thresholds) -> Array:
    """(W, U) True where the unit's peer group carried enough load to judge that window.

    Load is the requests seen in the window (``seen.py``): those finished plus those held
    (running + waiting) by units that progress, so a group whose one busy rank decodes long
    generations, finishing few, is not taken for idle."""
    req = m.get("requests")
    run = m.get("running")
    wait = m.get("waiting")
    in_flight = held(m, th)
    group_arr = np.array(m.groups)
    active = np.zeros(req.shape, dtype=bool)
    for g in set(m.groups):
        cols = np.flatnonzero(group_arr == g)
        if np.isfinite(req[:, cols]).any():
            seen = np.nansum(req[:, cols], axis=1) + np.nansum(in_flight[:, cols], axis=1)
            per_unit = seen / cols.size
            ok = per_unit >= th.min_requests_per_window
        elif np.isfinite(run[:, cols]).any():
            ok = np.nansum(run[:, cols], axis=1) / cols.size >= th.floor_running
        else:  # a router's per-endpoint queue is all there is (llm-d, engines not scraped)
            ok = np.nansum(wait[:, cols], axis=1) / cols.size >= 1.0
        active[:, cols] = ok[:, None]
    return active


def outlasts_burst(m: SignalMatrix, s: _Scored, j: int, window_s: float, th: Thresholds) -> bool:
    """Whether unit ``j`` is still persistently hot with any ``burst_s`` of its windows set to
    its own median over the range (per signal, before smoothing; its peers' reference is
    unchanged: it leaves the unit out already). A skew holds wherever the cut falls, as its
    median is its skewed level; a rank hot for half of a range only through one burst's extra
    requests, the queue they leave and the smoothing that spreads both, is not. A range
    no longer than the cut is not tested."""
    width = max(1, math.ceil(th.burst_s / window_s))
    act = s.act[:, j]
    if not s.ratios or act.size <= width:
        return True
    raws: dict[str, tuple[Array, float]] = {}
    for sig in s.ratios:
        raw = m.get(sig)[:, j].astype(np.float64)
        ok = act & np.isfinite(raw)
        raws[sig] = (raw, float(np.median(raw[ok])) if ok.any() else math.nan)
    n = int(act.sum())
    for a in range(act.size - width + 1):
        if not act[a : a + width].any():
            continue
        score = np.full(act.size, -np.inf)
        for sig, (raw, typical) in raws.items():
            cut = raw.copy()
            cut[a : a + width] = np.where(np.isfinite(cut[a : a + width]), typical, np.nan)
            with np.errstate(all="ignore"):
                r = smooth(cut[:, None], th.smooth_windows)[:, 0] / s.refs[sig][:, j]
            score = np.fmax(score, np.where(np.isfinite(r), r, -np.inf))
        hot = act & (score >= th.hot_ratio)
        if not persists(float(hot.sum()) / n, longest_run(hot[act]), th):
            return False
    return True


@dataclass(frozen=True)
class _Scored:
    """Every unit's scores and per-window flags, (W, U) each: what the persistence rule reads."""

    ratios: dict[str, Array]  # heat signal -> smoothed value / floored peer median
    refs: dict[str, Array]  # heat signal -> the floored peer median ratios divide by
    floor: dict[str, float | Array]  # heat signal -> the floor under its peer reference
    score: Array  # max heat ratio, NaN where unknown
    driver: Array  # index into ``ratios`` of the highest ratio
    present: Flags
    act: Flags  # present, and its peer group carried load
    hot: Flags
    starved: Flags
    cold: Flags


def _score(
    m: SignalMatrix,
    window_s: float,
    th: Thresholds,
    against: dict[str, list[int]] | None,
    floor_per_group: bool,
) -> _Scored:
    floor = floors(m, window_s, th, per_group=floor_per_group)
    active_group = group_activity(m, th)
    ratios: dict[str, Array] = {}
    refs: dict[str, Array] = {}
    for sig in HEAT_SIGNALS:
        if not m.has(sig):
            continue
        vals = smooth(m.get(sig), th.smooth_windows)
        refs[sig] = np.maximum(peer_reference(vals, m.groups, against), floor[sig])
        with np.errstate(all="ignore"):
            ratios[sig] = vals / refs[sig]
    load = [ratios[s] for s in LOAD_SIGNALS if s in ratios]
    with np.errstate(all="ignore"):
        load_score = (
            np.nanmax(np.where(np.isfinite(np.stack(load)), np.stack(load), -np.inf), axis=0)
            if load
            else np.full(m.get("requests").shape, np.inf)
        )
    req_ratio = _starve_ratio(m, th)
    present = np.zeros(m.get("requests").shape, dtype=bool)
    for v in m.values.values():
        present |= np.isfinite(v)
    names = list(ratios)
    stack = np.stack([ratios[s] for s in names]) if names else np.full((1, *present.shape), np.nan)
    with np.errstate(all="ignore"):
        score = np.nanmax(np.where(np.isfinite(stack), stack, -np.inf), axis=0)
    score[~np.isfinite(score)] = np.nan
    driver = np.argmax(np.where(np.isfinite(stack), stack, -np.inf), axis=0)
    act = present & active_group
    hot = act & (np.nan_to_num(score) >= th.hot_ratio)
    starved = act & np.isfinite(req_ratio) & (req_ratio < th.starved_ratio)
    cold = act & ~starved & (load_score <= 1.0 / th.hot_ratio)
    return _Scored(ratios, refs, floor, score, driver, present, act, hot, starved, cold)


def detect(
    m: SignalMatrix,
    window_s: float,
    th: Thresholds,
    against: dict[str, list[int]] | None = None,
    *,
    floor_per_group: bool = False,
) -> list[UnitHeat]:
    """Score every unit in every window and apply the persistence rule.

    ``floor_per_group``: floors scaled per group (``floors``), so every group is scored as
    when its own matrix is judged alone."""
    s = _score(m, window_s, th, against, floor_per_group)
    names = list(s.ratios)
    raw_refs: dict[str, Array] = {}  # computed once per signal, for the units that need it
    out = []
    for j, unit in enumerate(m.units):
        act, hot, starved, cold = s.act[:, j], s.hot[:, j], s.starved[:, j], s.cold[:, j]
        n_act = int(act.sum())
        hot_share = float(hot.sum()) / n_act if n_act else 0.0
        starved_share = float(starved.sum()) / n_act if n_act else 0.0
        hot_run, starved_run = longest_run(hot[act]), longest_run(starved[act])
        # A unit seen in fewer windows than a range needs (one that joined or came back a few
        # windows ago) is held to the same standard: a burst on a cold new rank is no hot spot.
        judged = n_act >= th.min_windows
        drivers = s.driver[hot, j] if names else np.array([], dtype=np.int64)
        driver = names[int(np.bincount(drivers).argmax())] if drivers.size else ""
        often = judged and persists(hot_share, hot_run, th)
        held_back = HeldBack.NONE
        if often and not beyond_chance(
            m, j, driver, act, th, raw_refs, against, s.floor.get(driver, 0)
        ):
            held_back = HeldBack.CHANCE
        elif often and not outlasts_burst(m, s, j, window_s, th):
            held_back = HeldBack.BURST
        persistent = often and not held_back
        persistent_starved = judged and persists(starved_share, starved_run, th)
        cold_share = float(cold.sum()) / n_act if n_act else 0.0
        persistent_cold = judged and persists(cold_share, longest_run(cold[act]), th)
        out.append(
            UnitHeat(
                unit=unit,
                index=j,
                present=s.present[:, j],
                active=act,
                score=s.score[:, j],
                hot=hot,
                starved=starved,
                hot_share=hot_share,
                hot_run=hot_run,
                starved_share=starved_share,
                starved_run=starved_run,
                persistent_hot=persistent and not persistent_starved,
                transient_hot=(not persistent) and hot_run > 0,
                persistent_starved=persistent_starved,
                persistent_cold=persistent_cold and not persistent_starved,
                driver=driver,
                ratios={sig: r[:, j] for sig, r in s.ratios.items()},
                held_back=held_back,
            )
        )
    return out


def without_starved(m: SignalMatrix, heats: list[UnitHeat], th: Thresholds) -> dict[str, list[int]]:
    """Per group with persistently starved units, its other units: the reference to judge the
    group against (``detect``'s ``against``). A starved unit's zeros are no load a peer is
    hot against: with two of four ranks idle the leave-one-out median of a rank at its fair
    share is 0 and the floor alone stands in for its peers. A group keeps its full reference
    when fewer than ``min_units`` are left (a unit serving everything beside one starved peer
    is judged against the floor, as before). Starvation is read against the whole group
    (``_starve_ratio``), so leaving these units out changes no starved finding."""
    out: dict[str, list[int]] = {}
    for g in dict.fromkeys(m.groups):
        members = [h for h in heats if m.groups[h.index] == g]
        kept = [h.index for h in members if not h.persistent_starved]
        if len(kept) < len(members) and len(kept) >= th.min_units:
            out[g] = kept
    return out


def quiet_groups(m: SignalMatrix, window_s: float, th: Thresholds) -> set[str]:
    """Groups in which no unit can be persistently hot, starved or cold, each group scored as
    when its own matrix is judged alone (every step above is per group or per unit): judging
    such a group finds no hot or starved unit (nor a cold minority to judge against), so it
    can be skipped when only its findings matter (the ``auto`` drill-downs). The persistence
    rule needs a share of the active windows, checked here for every unit at once; a unit
    that reaches it without the run still marks its group (judged, found quiet). Stalls are
    not detect's: the caller checks them. A group whose own matrix would have fewer windows
    than ``m`` is not scored alike (smoothing): the caller leaves those out."""
    s = _score(m, window_s, th, None, True)
    n_act = s.act.sum(axis=0)
    with np.errstate(all="ignore"):
        near = [
            np.where(n_act > 0, flags.sum(axis=0) / n_act, 0.0) >= th.persist_share
            for flags in (s.hot, s.starved, s.cold)
        ]
    busy = np.logical_or.reduce(near)
    return set(m.groups) - {m.groups[j] for j in np.flatnonzero(busy)}


def _starve_ratio(m: SignalMatrix, th: Thresholds) -> Array:
    """Request share against peers, without a floor: 0 traffic must read as 0, and an
    unmeasured window stays unknown. Where the unit's running requests are known they must be
    low too: a unit that serves a normal batch is not starved, whatever its request log says."""
    req = m.get("requests")
    ref = peer_reference(req, m.groups)
    with np.errstate(all="ignore"):
        ratio = np.where(ref > 0, req / ref, np.nan)
        running = m.get("running")
        run_ratio = running / np.maximum(peer_reference(running, m.groups), th.floor_running)
    busy_anyway = np.isfinite(run_ratio) & (run_ratio >= th.starved_busy_ratio)
    ratio[busy_anyway] = np.nan
    return ratio
