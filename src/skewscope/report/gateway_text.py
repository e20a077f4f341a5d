"""How gateway facts read: the sentences under the gateway table (when routing diverged, stale
load, the router's pool). The analysis computes the figures (``GatewayFacts``); the words are
the report's, shared by the terminal, Markdown and HTML forms."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # model -> phrases -> fmt -> here: the model is not loaded yet at import
    from skewscope.report.model import GatewayFacts, StaleLoad


def _when(epoch_s: float) -> str:
    from skewscope.report.fmt import when

    return when(epoch_s)


def _name(text: str) -> str:
    from skewscope.report.fmt import name

    return name(text)


def divergence_lines(g: GatewayFacts) -> list[str]:
    """When the gateway started sending a unit more than its peers, per unit."""
    return [f"the gateway's share of requests to {_name(u.unit or u.upstream)} diverged from "
            f"its peers' from {_when(u.diverged_from)}"
            for u in g.units if u.diverged_from is not None]


def stale_line(g: GatewayFacts, s: StaleLoad) -> str:
    """Why a load-aware router sent a unit more than it should: it decided on a stale queue."""
    lag = (f"; its view agreed best {s.lag_windows} window(s) ({s.lag_windows * s.window_s:g} s) "
           "later" if s.lag_windows and math.isfinite(s.window_s) else "")
    policy = f" under {g.policy}" if g.policy else ""
    return (f"stale load: {g.source}{policy} saw {_name(s.unit)}'s queue off by "
            f"{s.off_by:.1f} request(s) a window on average ({s.gap:.0%} of the "
            f"{s.engine_mean:.1f} its engine measured; the router's mean {s.router_mean:.1f})"
            f"{lag}: the router polls load less often than the bursts last, so a load-aware pick "
            "acts on load that is gone — poll more often, or weigh the polled queue less "
            "against the router's own in-flight count")


def pool_line(g: GatewayFacts) -> str:
    """The router's pool-wide figures, one line ("" when it exports none)."""
    if not g.pool:
        return ""
    parts = [f"{what} {v:.0%}" if "KV" in what else f"{what} {v:g}" for what, v in g.pool]
    return f"{g.source} pool (mean over the range): " + ", ".join(parts)


def gateway_notes(g: GatewayFacts | None) -> list[str]:
    """Every gateway sentence under a report, in order."""
    if g is None:
        return []
    out = [stale_line(g, s) for s in g.stale_load]
    out.extend(divergence_lines(g))
    if line := pool_line(g):
        out.append(line)
    return out
