"""``skewscope dashboard``: write a Grafana 10/11 (or Perses) dashboard of the method's signals."""

from __future__ import annotations

import argparse
from typing import Any

from skewscope.cli import common
from skewscope.cli.rules import add_shared_args, dialects, emit


def register(sub: Any) -> None:
    p: argparse.ArgumentParser = sub.add_parser(
        "dashboard",
        help="write a Grafana dashboard of per-unit skew signals",
        description="Grafana 10/11 dashboard JSON: instance and DP rows with per-unit panels, "
        "max/median ratios and the skewscope alerts as annotations (docs/monitoring.md).",
    )
    add_shared_args(p, "one engine dialect (default: all, joined per panel)")
    p.add_argument("--title", default="skewscope: load skew", help="dashboard title")
    p.add_argument(
        "--format",
        choices=("grafana", "perses"),
        default="grafana",
        help="grafana: Grafana 10/11 dashboard JSON (default); perses: a Perses "
        "dashboard (kind Dashboard) of the same panels",
    )
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    from skewscope.monitor.dashboard import render_dashboard
    from skewscope.monitor.dashboard_options import DashboardOptions
    from skewscope.monitor.signals import parse_group_by

    opts = DashboardOptions(
        dialects=dialects(args),
        group_by=parse_group_by(args.group_by),
        selector=args.selector,
        title=args.title,
        thresholds=common.thresholds_from_args(args),
    )
    if args.format == "perses":
        from skewscope.monitor.perses import render_perses

        emit(args, render_perses(opts))
    else:
        emit(args, render_dashboard(opts))
    return 0
