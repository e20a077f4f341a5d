"""A fleet too large for one table row per unit: which units the table lists, and the spread of
every table column over all units (so a 1,024-unit report stays readable, with its numbers
computed here, not in the renderers)."""

from __future__ import annotations

import math

import numpy as np

from skewscope.catalogue import UNIT_COLUMNS, Role
from skewscope.config import Thresholds
from skewscope.report.model import FleetSummary, UnitReport

_ROLE_ORDER = {Role.STALLED: 0, Role.HOT: 1, Role.STARVED: 2}


def _heat(u: UnitReport) -> float:
    finite = [v for v in u.load_ratios.values() if math.isfinite(v)]
    return max(finite, default=0.0)


def fleet_summary(units: tuple[UnitReport, ...], th: Thresholds) -> FleetSummary | None:
    """None when every unit fits the table (``th.table_units_max``)."""
    if len(units) <= th.table_units_max:
        return None
    order = sorted(units, key=lambda u: (_ROLE_ORDER.get(u.role, 3), -_heat(u), u.unit))
    roles: dict[Role, int] = {}
    for u in units:
        roles[u.role] = roles.get(u.role, 0) + 1
    spread: dict[str, tuple[float, float, float, float]] = {}
    for key in UNIT_COLUMNS:
        vals = np.array(
            [
                v
                for u in units
                if key not in u.bounds
                and (v := u.metrics.get(key)) is not None
                and math.isfinite(v)
            ]
        )
        if vals.size:
            lo, med, p90, hi = np.quantile(vals, (0.0, 0.5, 0.9, 1.0))
            spread[key] = (float(lo), float(med), float(p90), float(hi))
    return FleetSummary(
        units=len(units),
        roles=dict(sorted(roles.items(), key=lambda kv: _ROLE_ORDER.get(kv[0], 3))),
        shown=tuple(u.unit for u in order[: th.table_units_max]),
        spread=spread,
    )
