"""How gateway facts read: the sentences under the gateway table (when routing diverged, stale
load, the router's pool). The analysis computes the figures (``GatewayFacts``); the words are
the report's, shared by the terminal, Markdown and HTML forms, every number through ``fmt``.

A module of its own: ``fmt`` formats the gateway table, ``document.footer_notes`` reads these
sentences under it, and ``phrases`` (the findings' and notes' words) stays about those."""

from __future__ import annotations

import math

from skewscope.report import fmt
from skewscope.report.model import GatewayFacts, StaleLoad


def divergence_lines(g: GatewayFacts) -> list[str]:
    """When the gateway started sending a unit more than its peers, per unit."""
    return [
        f"the gateway's share of requests to {fmt.name(u.unit or u.upstream)} diverged "
        f"from its peers' from {fmt.when(u.diverged_from)}"
        for u in g.units
        if u.diverged_from is not None
    ]


def stale_line(g: GatewayFacts, s: StaleLoad) -> str:
    """Why a load-aware router sent a unit more than it should: it decided on a stale queue."""
    lag = (
        f"; its view agreed best {s.lag_windows} window(s) "
        f"({fmt.seconds(s.lag_windows * s.window_s)}) "
        "later"
        if s.lag_windows and math.isfinite(s.window_s)
        else ""
    )
    policy = f" under {g.policy}" if g.policy else ""
    return (
        f"stale load: {g.source}{policy} saw {fmt.name(s.unit)}'s queue off by "
        f"{fmt.decimal(s.off_by)} request(s) a window on average ({fmt.pct(s.gap)} of the "
        f"{fmt.decimal(s.engine_mean)} its engine measured; the router's mean "
        f"{fmt.decimal(s.router_mean)})"
        f"{lag}: the router polls load less often than the bursts last, so a load-aware pick "
        "acts on load that is gone — poll more often, or weigh the polled queue less "
        "against the router's own in-flight count"
    )


def pool_line(g: GatewayFacts) -> str:
    """The router's pool-wide figures, one line ("" when it exports none)."""
    if not g.pool:
        return ""
    parts = [
        f"{what} {fmt.pct(v)}" if "KV" in what else f"{what} {fmt.plain(v)}" for what, v in g.pool
    ]
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
