"""What a dashboard is drawn for (dialects, peer groups, selector, thresholds) and the panel
filter they give: shared by the unit panels (``monitor.dashboard``) and the pool panels
(``monitor.pd_dashboard``), which the former includes — so neither imports the other for it."""

from __future__ import annotations

from dataclasses import dataclass, field

from skewscope.config import DEFAULT_THRESHOLDS, Thresholds
from skewscope.monitor.signals import UNIT_LABEL
from skewscope.sources.dialects import DIALECTS
from skewscope.sources.promql import normalise_selector


@dataclass(frozen=True)
class DashboardOptions:
    dialects: tuple[str, ...] = tuple(DIALECTS)
    group_by: tuple[str, ...] = ("job", "model_name")
    selector: str = ""
    title: str = "skewscope: load skew"
    thresholds: Thresholds = field(default_factory=lambda: DEFAULT_THRESHOLDS)  # --config


def variable_matchers(opts: DashboardOptions) -> str:
    """The panel filter: every peer-group label and the instance from the variables."""
    parts = [f'{lab}=~"${lab}"' for lab in (*opts.group_by, UNIT_LABEL)]
    extra = normalise_selector(opts.selector)
    return ", ".join([*parts, extra] if extra else parts)
