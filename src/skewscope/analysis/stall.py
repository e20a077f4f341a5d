"""Stalled engines: a unit that holds requests (running + waiting) but makes no progress.

A hung engine finishes nothing, so by finished requests it looks idle or starved, and a service
whose only busy unit is hung looks near-idle. It is the worst kind of hot unit: every request
routed to it waits forever. Progress is the number of scheduling steps executed where the
source measures them (offline, `request.csv` counts arrivals, not completions), else finished
requests (online). The rule is independent of the peers and of the volume gate, with one
exception: a window in which no unit progresses while more than one holds requests is the whole
service stopping (or its metrics freezing: the end of a simulated run, a scrape that keeps
returning the same counters), not one hung engine. Such windows are ``frozen_windows``: no
unit is judged stalled in them, and the report says "no progress anywhere" instead.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from skewscope.analysis.detect import longest_run, persists
from skewscope.analysis.matrix import Array, Flags, SignalMatrix, nanmean
from skewscope.config import Thresholds
from skewscope.report.facts import Note, NoteCode


@dataclass(frozen=True)
class Stall:
    index: int
    unit: str
    stalled_share: float  # share of the unit's measured windows in which it was stalled
    stalled_run: int
    in_flight: float  # mean running + waiting over its stalled windows
    progress: float  # mean progress per stalled window (steps or finished requests)
    progress_signal: str  # "steps" or "requests"
    first_stalled_s: float


def _in_flight(m: SignalMatrix) -> Array:
    run, wait = m.get("running"), m.get("waiting")
    both_missing = np.isnan(run) & np.isnan(wait)
    out = np.nan_to_num(run) + np.nan_to_num(wait)
    out[both_missing] = np.nan
    return out


def _signal(m: SignalMatrix, j: int) -> str:
    return "steps" if np.isfinite(m.get("steps")[:, j]).any() else "requests"


def frozen_windows(m: SignalMatrix, th: Thresholds) -> Flags:
    """Windows in which no unit made progress while more than one held requests: the fleet
    stopped as a whole, or its counters froze. Not a stall of any one unit."""
    in_flight = _in_flight(m)
    progress = np.column_stack([m.get(_signal(m, j))[:, j] for j in range(len(m.units))])
    with np.errstate(invalid="ignore"):
        moving = (np.isfinite(progress) & (progress >= th.stalled_max_progress)).any(axis=1)
        holding = (np.isfinite(in_flight) & (in_flight >= th.stalled_min_in_flight)).sum(axis=1)
    return np.asarray(~moving & (holding > 1), dtype=bool)


def no_progress_note(m: SignalMatrix, th: Thresholds) -> Note | None:
    """ "No progress anywhere" when the frozen windows are persistent (as a stall would be)."""
    frozen = frozen_windows(m, th)
    if longest_run(frozen) < th.min_consecutive:
        return None
    return Note(NoteCode.NO_PROGRESS, {"windows": int(frozen.sum()), "of": len(m.windows)})


def find_stalls(m: SignalMatrix, th: Thresholds) -> list[Stall]:
    """Units stalled persistently over the windows in which their in-flight load is known,
    outside the windows in which the whole fleet stood still (``frozen_windows``)."""
    in_flight = _in_flight(m)
    frozen = frozen_windows(m, th)
    out = []
    for j, unit in enumerate(m.units):
        signal = _signal(m, j)
        progress = m.get(signal)[:, j]
        known = np.isfinite(in_flight[:, j]) & np.isfinite(progress) & ~frozen
        n_known = int(known.sum())
        if n_known < th.min_consecutive:
            continue
        with np.errstate(invalid="ignore"):
            stalled = (
                known
                & (in_flight[:, j] >= th.stalled_min_in_flight)
                & (progress < th.stalled_max_progress)
            )
        share = float(stalled.sum()) / n_known
        run = longest_run(stalled[known])
        if not persists(share, run, th):
            continue
        out.append(
            Stall(
                index=j,
                unit=unit,
                stalled_share=share,
                stalled_run=run,
                in_flight=nanmean(in_flight[stalled, j]),
                progress=nanmean(progress[stalled]),
                progress_signal=signal,
                first_stalled_s=float(m.windows[np.flatnonzero(stalled)[0]]),
            )
        )
    return out


def stall_evidence(s: Stall) -> dict[str, object]:
    return {
        "stalled_share": s.stalled_share,
        "longest_stalled_run_windows": s.stalled_run,
        "in_flight": s.in_flight,
        "progress_per_window": s.progress if math.isfinite(s.progress) else math.nan,
        "progress_signal": s.progress_signal,
        "first_stalled_s": s.first_stalled_s,
    }
