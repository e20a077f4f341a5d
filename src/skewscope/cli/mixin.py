"""``skewscope mixin``: write the rules and the dashboard as a monitoring mixin (jsonnet)."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from skewscope.cli import common
from skewscope.cli.rules import add_rule_args, dialects, rule_options
from skewscope.errors import UsageError


def register(sub: Any) -> None:
    p: argparse.ArgumentParser = sub.add_parser(
        "mixin",
        help="write the rules and dashboard as a jsonnet monitoring mixin",
        description="A monitoring mixin folder (mixin.libsonnet, config.libsonnet, alerts/, "
        "rules/, dashboards/) whose jsonnet renders the same rules as `skewscope rules` and "
        "the same dashboard as `skewscope dashboard` (docs/monitoring.md).",
    )
    p.add_argument(
        "--dialect", choices=common.DIALECT_CHOICES, help="one engine dialect (default: all)"
    )
    p.add_argument("--selector", default="", help='extra label matchers, e.g. {namespace="llm"}')
    p.add_argument(
        "--group-by",
        default="job,model_name",
        metavar="LABELS",
        help="labels that make a peer group (default job,model_name)",
    )
    add_rule_args(p)
    common.add_config_arg(p)
    p.add_argument("--title", default="skewscope: load skew", help="dashboard title")
    p.add_argument("-o", "--output", metavar="DIR", required=True, help="the mixin folder")
    p.add_argument("--force", action="store_true", help="overwrite the files of an existing DIR")
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    from skewscope.monitor.dashboard_options import DashboardOptions
    from skewscope.monitor.mixin import mixin_files, write_mixin

    out = Path(args.output)
    if out.exists() and not out.is_dir():
        raise UsageError(f"-o {out}: not a folder")
    if out.is_dir() and any(out.iterdir()) and not args.force:
        raise UsageError(f"-o {out}: folder is not empty (use --force to overwrite its files)")
    opts = rule_options(args)
    dash = DashboardOptions(
        dialects=dialects(args),
        group_by=opts.group_by,
        selector=opts.selector,
        title=args.title,
        thresholds=opts.thresholds,
    )
    files = mixin_files(opts, dash)
    try:
        write_mixin(out, files)
    except OSError as e:
        raise UsageError(f"-o {out}: cannot write ({e.strerror})") from None
    return 0
