"""``skewscope backtest``: what the alerts would have done over a past range of the user's
Prometheus (monitor.backtest evaluates, monitor.backtest_score scores, report.backtest renders)."""

from __future__ import annotations

import argparse
from typing import Any

from skewscope.cli import common, readers

FORMATS = ("text", "json", "markdown", "html")
DEFAULT_STEP = "1m"  # Prometheus' usual evaluation_interval


def register(sub: Any) -> None:
    from skewscope.cli.rules import add_rule_args

    p: argparse.ArgumentParser = sub.add_parser(
        "backtest",
        help="evaluate the alert rules over a past range and list their episodes",
        description="Evaluate the Skewscope* alerts (generated with --window/--for/--config, "
        "or --rules FILE) over a past range of a Prometheus, at explicit evaluation instants, "
        "with for: applied; list the would-be alert episodes and, with --episodes FILE, score "
        "them (docs/monitoring.md, Backtest). Nothing is deployed.",
    )
    p.add_argument(
        "--prometheus", metavar="URL", required=True, help="Prometheus-compatible query API base"
    )
    p.add_argument("--last", metavar="DURATION", help="range ending now, e.g. 7d")
    p.add_argument("--start", metavar="T", help="range start: epoch seconds or ISO 8601")
    p.add_argument("--end", metavar="T", help="range end: epoch seconds or ISO 8601")
    p.add_argument(
        "--step",
        default=DEFAULT_STEP,
        metavar="DURATION",
        help=f"evaluation interval of the rules (default {DEFAULT_STEP})",
    )
    p.add_argument(
        "--rules",
        metavar="FILE",
        help="a Prometheus rule file (or PrometheusRule) to backtest instead of the "
        "generated rules",
    )
    p.add_argument(
        "--dialect",
        choices=common.DIALECT_CHOICES,
        help="generated rules: one engine dialect (default: all)",
    )
    p.add_argument("--selector", default="", help="generated rules: extra label matchers")
    p.add_argument(
        "--group-by",
        default="job,model_name",
        metavar="LABELS",
        help="generated rules: labels that make a peer group (default job,model_name)",
    )
    add_rule_args(p)
    common.add_config_arg(p)
    p.add_argument(
        "--episodes",
        metavar="FILE",
        help="known incidents (truth.json of `simulate day`): precision, recall, delay",
    )
    p.add_argument(
        "--grace",
        metavar="DURATION",
        help="an alert still counts for an incident this long after its end "
        "(default: alert_windows + 2 windows of --window)",
    )
    p.add_argument("--level", choices=("instance", "dp"), help="only alerts at this level")
    p.add_argument("--format", choices=FORMATS, default="text", help="output format")
    p.add_argument("-o", "--output", metavar="FILE", help="write to FILE (default: stdout)")
    p.add_argument("--force", action="store_true", help="overwrite an existing -o FILE")
    common.add_auth_args(p)
    p.set_defaults(run=run)


def _refuse_generated_options(args: argparse.Namespace) -> None:
    from skewscope.errors import UsageError

    given = [
        opt
        for opt, on in (
            ("--dialect", args.dialect),
            ("--selector", args.selector),
            ("--group-by", args.group_by != "job,model_name"),
            ("--for", args.for_),
            ("--config", args.config),
        )
        if on
    ]
    if given:
        raise UsageError(
            f"backtest: {given[0]} shapes the generated rules; --rules FILE is "
            "backtested as written"
        )


def run(args: argparse.Namespace) -> int:
    from skewscope.cli.rules import emit, rule_options
    from skewscope.monitor.backtest import evaluate, load_rules, parse_rules
    from skewscope.monitor.backtest_score import alerts_per_day, load_truth, score
    from skewscope.monitor.backtest_tsdb import scratch
    from skewscope.monitor.rules import build_rules
    from skewscope.report.backtest import RENDERERS
    from skewscope.report.backtest_model import Backtest
    from skewscope.sources.prom_client import PromClient

    start, end = readers.online_range(args)
    step = common.parse_duration(args.step, "--step")
    window = common.parse_duration(args.window, "--window")
    thresholds = common.thresholds_from_args(args)
    if args.rules:
        _refuse_generated_options(args)
        rules, where = load_rules(args.rules), f"file {args.rules}"
    else:
        opts = rule_options(args)
        rules = parse_rules(build_rules(opts), "generated rules")
        where = (
            f"generated (--window {args.window}, for {opts.params['for']}, horizon "
            f"{opts.params['horizon']})"
        )
    grace = (
        common.parse_duration(args.grace, "--grace")
        if args.grace
        else (thresholds.alert_windows + 2) * window
    )
    truth = load_truth(args.episodes) if args.episodes else None
    if truth is not None and args.level:
        truth = [t for t in truth if t.level == args.level]
    if args.output:
        common.refuse_overwrite(args.output, "-o", args.force)
    client = PromClient(
        args.prometheus,
        auth=readers.auth_from_args(args),
        timeout_s=common.parse_duration(args.timeout, "--timeout"),
    )
    try:
        episodes = evaluate(
            client.query_range_series,
            rules,
            start,
            end,
            step,
            level=args.level,
            tsdb=lambda: scratch(step),
        )
    finally:
        client.close()
    span = end - start
    result = Backtest(
        start=start,
        end=end,
        step_s=step,
        source=client.shown_url,
        rules=where,
        episodes=tuple(episodes),
        per_day=alerts_per_day(episodes, span),
        score=score(episodes, truth, span, grace) if truth is not None else None,
        notes=tuple(client.warnings),
    )
    emit(args, RENDERERS[args.format](result))
    return 0
