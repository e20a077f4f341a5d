"""Grafana panel builders both dashboards share (``monitor.dashboard`` and its prefill/decode
pools, ``monitor.pd_dashboard``), so that neither imports the other for them."""

from __future__ import annotations

from typing import Any

DS_VAR = "datasource"


def datasource() -> Any:
    """The panels' data source: the dashboard's datasource variable."""
    from grafana_foundation_sdk.models.dashboard import DataSourceRef

    return DataSourceRef(type_val="prometheus", uid=f"${{{DS_VAR}}}")


def timeseries_panel(
    title: str, unit: str, description: str, targets: list[tuple[str, str]]
) -> Any:
    """A time-series panel of ``targets`` (PromQL, legend format), legend as a table."""
    from grafana_foundation_sdk.builders import common, prometheus, timeseries
    from grafana_foundation_sdk.models.common import LegendDisplayMode, LegendPlacement

    legend_table = (
        common.VizLegendOptions()
        .display_mode(LegendDisplayMode.TABLE)
        .placement(LegendPlacement.BOTTOM)
        .show_legend(True)
        .calcs(["mean", "max"])
        .sort_by("Mean")
        .sort_desc(True)
    )
    panel = (
        timeseries.Panel()
        .title(title)
        .description(description)
        .unit(unit)
        .datasource(datasource())
        .legend(legend_table)
        .height(8)
        .span(8)
    )
    for ref, (expr, legend_format) in zip("ABCDEFGHIJ", targets, strict=False):
        panel = panel.with_target(
            prometheus.Dataquery().expr(expr).legend_format(legend_format).ref_id(ref)
        )
    return panel
