"""The dashboard's prefill/decode row: each pool's mean running and waiting requests per
instance, side by side (what SkewscopePDImbalance and the pd_imbalance finding compare).

A pool comes from the label its stack exports (``sources.pools.ROLE_LABELS``), joined to the
per-unit expressions the other rows draw; a dialect whose stack names no pool adds nothing, and
the row is left out when no chosen dialect names one.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

from skewscope.frame import Level
from skewscope.monitor.dashboard_options import variable_matchers
from skewscope.monitor.panels import timeseries_panel
from skewscope.monitor.pd_alerts import POOL_LABEL, join_labels, pool_map
from skewscope.monitor.signals import Scope, levels, unit_expr
from skewscope.sources.dialects import DIALECTS
from skewscope.sources.pools import ROLE_LABELS

if TYPE_CHECKING:
    from skewscope.monitor.dashboard_options import DashboardOptions

ROW_TITLE = "Prefill / decode pools"
PD_PANELS: tuple[tuple[str, str, str], ...] = (
    (
        "Waiting requests per instance, by pool",
        "waiting",
        "Mean waiting requests per instance of each pool: one pool's queue well above the other's "
        "is SkewscopePDImbalance (the P:D ratio does not fit the traffic).",
    ),
    (
        "Running requests per instance, by pool",
        "running",
        "Mean running requests per instance of each pool; prefill over decode above "
        "pd_running_ratio is llm-d's LLMDPrefillDecodeImbalance.",
    ),
)


def pool_query(opts: DashboardOptions, signal: str, window: str) -> str | None:
    """``signal`` averaged per instance of each pool, over every chosen dialect that names
    pools (``or``); None when none does."""
    sel = variable_matchers(opts)
    by = ", ".join((*opts.group_by, POOL_LABEL))
    parts = []
    for d in opts.dialects:
        dialect, roles = DIALECTS[d], ROLE_LABELS.get(d, ())
        if not roles or Level.INSTANCE not in levels(dialect):
            continue
        e = unit_expr(Scope(dialect, Level.INSTANCE, opts.group_by, sel), signal, window)
        if e is None:
            continue
        pools = " or ".join(f"({pool_map(r, sel, opts.group_by)})" for r in roles)
        on = ", ".join(join_labels(opts.group_by))
        parts.append(f"avg by ({by}) (({e}) * on ({on}) group_left ({POOL_LABEL}) ({pools}))")
    if not parts:
        return None
    return parts[0] if len(parts) == 1 else " or ".join(f"({p})" for p in parts)


def pd_panels(opts: DashboardOptions, window: str) -> Iterable[Any]:
    leg = " ".join(f"{{{{{lab}}}}}" for lab in (*opts.group_by, POOL_LABEL))
    for title, signal, description in PD_PANELS:
        q = pool_query(opts, signal, window)
        if q is not None:
            yield timeseries_panel(title, "short", description, [(q, leg)])
