"""``skewscope rules``: write the Prometheus rule file (recording rules + Skewscope* alerts)."""

from __future__ import annotations

import argparse
import sys
from typing import TYPE_CHECKING, Any

from skewscope.cli import common

if TYPE_CHECKING:
    from skewscope.monitor.rules import RuleOptions

FORMATS: tuple[str, ...] = ("prometheus", "prometheus-operator")


def add_shared_args(p: argparse.ArgumentParser, dialect_help: str) -> None:
    """The options ``rules`` and ``dashboard`` share: what to read, the peer groups, output."""
    p.add_argument("--dialect", choices=common.DIALECT_CHOICES, help=dialect_help)
    p.add_argument("--selector", default="", help='extra label matchers, e.g. {namespace="llm"}')
    p.add_argument(
        "--group-by",
        default="job,model_name",
        metavar="LABELS",
        help="labels that make a peer group (default job,model_name)",
    )
    p.add_argument("-o", "--output", metavar="FILE", help="write to FILE (default: stdout)")
    p.add_argument("--force", action="store_true", help="overwrite an existing -o FILE")
    # the same file diagnose and watch read, so the alerts follow the thresholds they judge by
    common.add_config_arg(p)


def dialects(args: argparse.Namespace) -> tuple[str, ...]:
    """--dialect, or every dialect of the alias table."""
    from skewscope.sources.dialects import DIALECTS

    return (args.dialect,) if args.dialect else tuple(DIALECTS)


def emit(args: argparse.Namespace, text: str) -> None:
    """Write to -o FILE atomically (refusing to overwrite without --force), else to stdout."""
    if args.output:
        common.write_output(args.output, text, args.force)
    else:
        sys.stdout.write(text)


def register(sub: Any) -> None:
    p: argparse.ArgumentParser = sub.add_parser(
        "rules",
        help="write Prometheus recording and alerting rules for load skew",
        description="One rule file: per-unit rates and ratios against the peer median, and the "
        "SkewscopeHotUnit, SkewscopeStarvedUnit and SkewscopeDPGapWidening alerts "
        "(docs/monitoring.md).",
    )
    add_shared_args(p, "one engine dialect (default: all, each keyed on its own metric names)")
    add_rule_args(p)
    p.add_argument(
        "--format",
        choices=FORMATS,
        default="prometheus",
        help="prometheus: a rule file (default); prometheus-operator: a "
        "PrometheusRule object (monitoring.coreos.com/v1)",
    )
    p.set_defaults(run=run)


def add_rule_args(p: argparse.ArgumentParser) -> None:
    """The options ``rules`` and ``mixin`` share: the window, ``for`` and the runbooks."""
    from skewscope.monitor.rules import DEFAULT_RUNBOOK_URL_BASE

    p.add_argument(
        "--window",
        default="5m",
        metavar="DURATION",
        help="rate window of the per-unit signals (default 5m)",
    )
    p.add_argument(
        "--for",
        dest="for_",
        metavar="DURATION",
        help="how long the alert condition (hot in persist_share of the last "
        "alert_windows windows) must hold before it fires "
        "(default: alert_for_windows windows, 5m with the 5m window)",
    )
    p.add_argument(
        "--runbook-url-base",
        default=DEFAULT_RUNBOOK_URL_BASE,
        metavar="URL",
        help="where the alerts' runbook_url points: URL/<alert>.md "
        "(default: the repository's docs/runbooks)",
    )


def rule_options(args: argparse.Namespace) -> RuleOptions:
    from skewscope.monitor.rules import RuleOptions
    from skewscope.monitor.signals import parse_group_by

    return RuleOptions(
        dialects=dialects(args),
        group_by=parse_group_by(args.group_by),
        selector=args.selector,
        window_s=common.parse_duration(args.window, "--window"),
        for_s=common.parse_duration(args.for_, "--for") if args.for_ else None,
        thresholds=common.thresholds_from_args(args),
        runbook_url_base=args.runbook_url_base,
    )


def run(args: argparse.Namespace) -> int:
    from skewscope.monitor.rules import render_rules

    emit(args, render_rules(rule_options(args), args.format))
    return 0
