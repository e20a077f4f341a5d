"""Whether a persistent excess is more than chance: counts judged as the Poisson draws they
are, against a reference that is itself a median of such draws."""

from __future__ import annotations

import math

import numpy as np

from skewscope.analysis.matrix import Array, Flags, SignalMatrix
from skewscope.analysis.peers import peer_reference
from skewscope.catalogue import COUNTED_SIGNALS
from skewscope.config import Thresholds


def beyond_chance(
    m: SignalMatrix,
    j: int,
    sig: str,
    act: Flags,
    th: Thresholds,
    raw_refs: dict[str, Array],
    against: dict[str, list[int]] | None,
    floor: float | Array,
) -> bool:
    """Whether unit ``j``'s excess on counted signal ``sig`` over its judged windows is more
    than chance: its raw count summed over them exceeds its peers' reference by at least
    ``hot_noise_sigmas`` Poisson sigmas of the difference (tokens as the requests they are, at
    the service's tokens per request, with the spread of the length mix on top). The difference is
    two-sample: the reference is a median of draws as noisy as the unit, so beside one sibling
    rank the variance doubles, beside fifteen peers it grows by a tenth. Persistence alone does
    not rule chance out when a fleet of near-idle ranks is judged every 30 s all night: some
    rank somewhere draws 1.3x for half of its windows. Other signals are not counts.
    ``raw_refs`` keeps each signal's unsmoothed peer reference for the next unit tested."""
    if sig not in COUNTED_SIGNALS and sig != "total_tokens":
        return True
    at = float(floor if np.ndim(floor) == 0 else np.asarray(floor)[j])
    raw = m.get(sig)
    if sig not in raw_refs:
        raw_refs[sig] = peer_reference(raw, m.groups, against)
    ref = np.maximum(raw_refs[sig][:, j], at)
    ok = act & np.isfinite(raw[:, j]) & np.isfinite(ref)
    tokens = sig == "total_tokens"
    scale = at / th.min_requests_per_window if tokens else 1.0
    count, mine = float(ref[ok].sum()) / scale, float(raw[ok, j].sum()) / scale
    per_window = count / max(int(ok.sum()), 1)
    members = [k for k, g in enumerate(m.groups) if g == m.groups[j]]
    fixed = against.get(m.groups[j]) if against else None  # peer_reference's reference units
    peers = sum(1 for k in (members if fixed is None else fixed) if k != j)
    noise = count * (1.0 + median_noise(peers, per_window))
    if tokens:
        noise *= 1.0 + length_spread(m, members)
    return mine - count >= th.hot_noise_sigmas * math.sqrt(noise)


def length_spread(m: SignalMatrix, cols: list[int]) -> float:
    """The squared coefficient of variation of tokens per request, read from the windows of
    units ``cols``: a window's mean over n requests strays from its unit's overall mean by
    cv/sqrt(n), so n times its squared relative deviation estimates cv^2. A token count is
    that much noisier than the count of its requests; drift of the mix over the range only
    adds to the estimate (on the side of chance)."""
    req, tok = m.get("requests")[:, cols], m.get("total_tokens")[:, cols]
    ok = np.isfinite(req) & np.isfinite(tok) & (req >= 1.0)
    if not ok.any():
        return 0.0
    n, t = np.where(ok, req, 0.0), np.where(ok, tok, 0.0)
    mean = t.sum(axis=0) / np.maximum(n.sum(axis=0), 1.0)  # each unit's tokens per request
    dev = np.where(ok & (mean > 0), t / np.maximum(n, 1.0) / np.where(mean > 0, mean, 1.0) - 1, 0.0)
    return float((n * dev**2)[ok].mean())


def median_noise(n: int, per_draw: float) -> float:
    """Variance of the median of ``n`` equally noisy Poisson draws of mean ``per_draw``,
    relative to one draw's: 1 for one draw, 1/2 for the mean of two, and from three on the
    large-sample pi/(2n) plus the rounding of a median that is itself a count (1/12 of a
    request, a term that matters below a few requests per window). Above the exact value for
    small n: on the side of calling an excess chance."""
    if n <= 2:
        return 1.0 / max(n, 1)
    return math.pi / (2.0 * n) + 1.0 / (12.0 * max(per_draw, 1.0))
