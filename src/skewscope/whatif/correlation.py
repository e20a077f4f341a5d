"""A placement no modelled policy explains: request weight correlated with the unit.

Round robin, weighted and the load-aware policies all place a request without looking at its
length, so under them every unit's requests come from the same length distribution. When one
unit's requests are persistently longer (a client pins its long requests, a key hash or a
length-based dispatch), a fresh replay of "round robin" would not reproduce the skew: it is the
correlation, not the policy, that makes it. Then the current routing is replayed as observed,
the count-based policies (what the current routing already is) are not offered as the fix, and
the load-aware candidates are also replayed with those heavy requests still pinned, so they are
ranked on their robustness to the correlation (issue 22).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import numpy as np

from skewscope.config import WHATIF, WhatIfSettings
from skewscope.sim.workload import NO_TAG, Workload
from skewscope.whatif.extract import Observed

HEAVY = "heavy"  # the workload tag of the pinned heavy requests in a robustness replay


@dataclass(frozen=True)
class Correlation:
    """Units whose requests are heavier than their peers' beyond chance."""

    level: str  # "instance" (gateway placement) or "dp" (DP dispatch inside an instance)
    units: tuple[int, ...]  # instance indices, or DP rank indices (level "dp")
    instance: int  # level "dp": the instance whose ranks differ; -1 at instance level
    ratio: float  # mean tokens per request on the units / on their peers
    z: float  # the largest z score of the mean log tokens against the peers'
    heavy_tokens: float  # heavy = a request on those units at least this long (peers' p90)
    heavy: np.ndarray  # per request: pinned in the robustness replays


def _z(x: np.ndarray, rest: np.ndarray) -> float:
    if x.shape[0] < 2 or rest.shape[0] < 2:
        return 0.0
    se = np.sqrt(x.var(ddof=1) / x.shape[0] + rest.var(ddof=1) / rest.shape[0])
    return float((x.mean() - rest.mean()) / se) if se > 0 else 0.0


def _scan(
    weight: np.ndarray, unit: np.ndarray, among: np.ndarray, n: int, s: WhatIfSettings
) -> tuple[list[int], float]:
    """Units (of ``n``, requests ``among``) heavier than the others by ``weight_correlation_z``."""
    lw = np.log(np.maximum(weight, 1.0))
    zs = [_z(lw[among & (unit == u)], lw[among & (unit != u)]) for u in range(n)]
    hot = [u for u, z in enumerate(zs) if z >= s.weight_correlation_z]
    return hot, max(zs) if zs else 0.0


def detect(obs: Observed, s: WhatIfSettings = WHATIF) -> Correlation | None:
    """The instance level first (the gateway's placement), then DP ranks inside each instance."""
    wl, lay = obs.workload, obs.layout
    if wl.instance_hint is None or wl.rank_hint is None:
        return None
    weight = (wl.input_tokens + wl.output_tokens).astype(np.float64)
    inst, rank = wl.instance_hint, wl.rank_hint
    everyone = np.ones(weight.shape[0], dtype=bool)
    found: tuple[str, list[int], int, np.ndarray, np.ndarray, float] | None = None
    if len(lay.instances) >= 2:
        hot, z = _scan(weight, inst, everyone, len(lay.instances), s)
        if hot:
            found = ("instance", hot, -1, np.isin(inst, hot), everyone, z)
    if found is None and lay.dp_ranks >= 2:
        for i in range(len(lay.instances)):
            mine = inst == i
            hot, z = _scan(weight, rank, mine, lay.size(i), s)
            if hot:
                found = ("dp", hot, i, mine & np.isin(rank, hot), mine, z)
                break
    if found is None:
        return None
    level, hot, i, on_hot, scope, z = found
    peers = weight[scope & ~on_hot]
    cut = float(np.quantile(peers, 0.9)) if peers.shape[0] else 0.0
    ratio = float(weight[on_hot].mean() / peers.mean()) if peers.shape[0] else 1.0
    return Correlation(level, tuple(hot), i, ratio, z, cut, on_hot & (weight >= cut))


def tagged(wl: Workload, c: Correlation) -> Workload:
    """The workload with its heavy requests tagged, for the pin of a robustness replay."""
    return dataclasses.replace(
        wl, tag=np.where(c.heavy, 1, 0).astype(np.int64), tags=(NO_TAG, HEAVY)
    )
