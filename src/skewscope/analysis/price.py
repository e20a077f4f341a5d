"""The price of DP skew: ranks that step in lockstep idle while the slowest finishes.

With DP attention or expert parallelism every rank of an instance joins each step's collective,
so a step lasts as long as its busiest rank and the others wait: the idle share of the ranks'
time is ``1 − mean/max`` of the per-step load (vLLM's expert-balance "balancedness" is the same
``mean/max``). The evidence holds per-window, not per-step, loads, so the share is taken per
window (busy time, else scheduled tokens, else tokens), averaged over the windows, and turned
into device-hours over the range. Ranks that do not step together (plain DP of a dense model)
do not wait for each other: there the same figure is the capacity the fleet keeps idle by
being sized for its busiest rank.
"""

from __future__ import annotations

import numpy as np

from skewscope.analysis.matrix import SignalMatrix
from skewscope.report.model import SkewPrice

BASES = ("busy_ms", "scheduled_tokens", "total_tokens")


def skew_price(m: SignalMatrix, devices_per_rank: float = 1.0) -> list[SkewPrice]:
    """One price per instance with at least two ranks (DP matrices: groups are instances)."""
    basis = next((b for b in BASES if m.has(b)), "")
    if not basis:
        return []
    load = m.get(basis)
    groups = np.array(m.groups)
    out = []
    for inst in sorted(set(m.groups)):
        cols = np.flatnonzero(groups == inst)
        if cols.size < 2:
            continue
        block = load[:, cols]
        ok = np.isfinite(block).all(axis=1) & (np.nanmax(block, axis=1, initial=0.0) > 0)
        if not ok.any():
            continue
        share = 1.0 - block[ok].mean(axis=1) / block[ok].max(axis=1)
        hours = float(share.sum()) * cols.size * m.window_s / 3600.0 * devices_per_rank
        out.append(
            SkewPrice(
                instance=inst,
                ranks=int(cols.size),
                basis=basis,
                idle_share=float(share.mean()),
                worst_window_idle_share=float(share.max()),
                windows=int(ok.sum()),
                device_hours=hours,
                devices_per_rank=devices_per_rank,
            )
        )
    return out


def price_note(p: SkewPrice) -> str:
    """One line for every renderer's notes."""
    what = {"busy_ms": "busy time", "scheduled_tokens": "scheduled tokens",
            "total_tokens": "tokens"}[p.basis]
    return (
        f"price of DP skew on {p.instance}: its {p.ranks} ranks idle {p.idle_share:.0%} of "
        f"their time waiting for the busiest when they step in lockstep (1 − mean/max of {what} "
        f"per window; worst window {p.worst_window_idle_share:.0%}), about "
        f"{p.device_hours:.2f} device-hours over {p.windows} windows "
        f"({p.devices_per_rank:g} device per rank assumed)"
    )
