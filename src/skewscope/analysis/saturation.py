"""A hot unit at its batch ceiling: its request count understates what was sent to it.

A saturated unit serves at its capacity and queues the rest. Online, ``requests`` counts
*finished* requests, so a saturated unit's request ratio is a lower bound on the traffic routed
to it. Offline at DP level, requests are put on a rank by their first scheduling row: requests
still queued on a saturated rank are unplaced, and its count is understated the same way. The
ceiling is read from the unit itself (its configured batch limit is not in the evidence): mean
running stays within ``saturated_running_share`` of its own peak while requests wait.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from skewscope.analysis.matrix import Flags, SignalMatrix
from skewscope.config import Thresholds


@dataclass(frozen=True)
class Saturation:
    saturated: bool
    share: float  # share of the judged windows at the ceiling with a queue
    ceiling: float  # the unit's peak mean running requests per window


def saturation(m: SignalMatrix, j: int, mask: Flags, th: Thresholds) -> Saturation:
    running, waiting = m.get("running")[mask, j], m.get("waiting")[mask, j]
    ok = np.isfinite(running) & np.isfinite(waiting)
    if ok.sum() < th.min_consecutive:
        return Saturation(False, math.nan, math.nan)
    ceiling = float(running[ok].max())
    at_ceiling = (
        ok
        & (running >= th.saturated_running_share * ceiling)
        & (waiting >= th.saturated_min_waiting)
    )
    share = float(at_ceiling.sum()) / float(ok.sum())
    return Saturation(share >= th.persist_share and ceiling > 0, share, ceiling)


def unplaced_link(m: SignalMatrix, j: int, mask: Flags, unplaced: float, th: Thresholds) -> bool:
    """True when this rank is the only saturated rank of its instance: requests of the instance
    that could not be placed on a rank are then evidently queued here."""
    if not (math.isfinite(unplaced) and unplaced > 0):
        return False
    siblings = [k for k in range(len(m.units)) if m.groups[k] == m.groups[j] and k != j]
    return not any(saturation(m, k, mask, th).saturated for k in siblings)
